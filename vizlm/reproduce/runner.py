"""Training the runs of ``experiments.toml`` (:mod:`vizlm.reproduce.experiments`): what is not run is trained, a
partial run resumed, a finished one retrained only when asked (:func:`retrain`, ``--force``: a stale run), never
otherwise (:func:`run_one`); one after another (:func:`run_serial`) or
side by side in processes of their own (:func:`run_many`, ``--jobs``), each after the runs it starts from; a
finished run's evidence written from its checkpoint (:func:`write_evidence`); a finished run copied into
``checkpoints/`` as a bundled one (:func:`bundle`); the runs' state for ``--list`` (:func:`table`).

Which device a run trains on is its command's choice (``--device``); its evidence is scored on the CPU.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from vizlm.core import files, paths
from vizlm.core.distributed import Context, resolve_device
from vizlm.data.registry import DataError, corpus_splits
from vizlm.modeling.checkpoint import CheckpointError, load_checkpoint, read_meta
from vizlm.modeling.config import TrainConfig
from vizlm.modeling.train import train
from vizlm.reproduce import evidence
from vizlm.reproduce.experiments import (
    MANIFEST,
    Claim,
    Run,
    claim_runs,
    load_manifest,
    needs,
    run_metrics,
    start_order,
    state_note,
    trained_on,
)


def table(runs: dict[str, Run], claims: dict[str, Claim] | None = None) -> list[dict]:
    """One row per run: state, stored metrics, the device a finished run trained on (None: not recorded), whether
    its evidence is in the repository and the claims that need it (for ``--list``)."""
    rows = []
    served = claim_runs(claims or {}, runs)
    for run in runs.values():
        meta = run.meta()
        status = run.status(meta)
        m = run_metrics(run, meta) if status == "finished" else {}
        rows.append({"run": run.name, "paper": run.paper, "model": run.model, "context": run.context,
                     "status": status, "evidence": run.done(), "capped": run.capped(meta),
                     "note": state_note(run, status, meta), "parameters": m.get("parameters"),
                     "valid": m.get("valid_perplexity"), "test": m.get("test_perplexity"), "why": run.blocked,
                     "device": trained_on(meta) if status == "finished" else None,
                     "claims": needs(run, runs, claims or {}, served)})
    return rows


TO_TRAIN = ("not run", "partial", "foreign")  # the states --only / --all act on (foreign: to say why it cannot)


def pending(runs: dict[str, Run], names: list[str]) -> list[Run]:
    """:func:`~vizlm.reproduce.experiments.start_order` of ``names``, the runs in it that are not finished (nor
    blocked)."""
    return [r for r in start_order(runs, names) if r.status() in TO_TRAIN]


def run_one(run: Run, runs: dict[str, Run], threads: int | None = None, dry_run: bool = False, log=sys.stderr,
            device: str = "cpu") -> str:
    """Train ``run`` if it is not run, resume it if partial, and write its evidence; returns its
    (new) status. A finished run whose evidence is not written yet gets it.

    ``dry_run``: a few batches of one epoch (to check the pipeline; the result is not a run, and
    leaves no evidence). ``device``: what it trains on (``cpu``, ``cuda``, ``auto``); the
    repository's evidence trained on the CPU, and one seed gives the same weights only on the same
    kind of device (the checkpoint records it, ``train.device``). Evidence is scored on the CPU.
    """
    status = run.status()
    if status == "foreign":
        raise ValueError(f"{run.name}: {run.foreign()}; move it aside or train into another folder (--runs DIR)")
    if status == "finished" and not run.done() and not dry_run:
        evidence.write(run.name, run.folder, log=log, trained_by=run.external)
    if status in ("finished", "blocked"):
        return status
    if run.external:
        raise ValueError(f"{run.name} is trained outside vizlm, then imported: {run.external}")
    if run.bundled:
        raise ValueError(f"{run.name} is bundled in checkpoints/{run.bundled} but has no test perplexity; "
                         "retrain it by its own command (config.json), not by reproduce")
    _check_start(run, runs)
    _train(run, runs, run.folder, status == "partial", threads, dry_run, log, device)
    if not dry_run and run.status() == "finished":
        evidence.write(run.name, run.folder, force=run.done(), log=log)  # a raised cap: the run went on
    return run.status()


def _check_start(run: Run, runs: dict[str, Run]) -> None:
    """What training ``run`` needs of other runs, checked before anything is read or written (a training and a
    retraining alike): the run it starts from finished, with its weights here, and the sweep it takes its dropout
    from finished."""
    if run.init and runs[run.init].status() != "finished":
        raise ValueError(f"{run.name} starts from {run.init}, which is not finished")
    if unfinished := [n for n in run.dropout_from or [] if runs[n].status() != "finished"]:
        raise ValueError(f"{run.name} takes its dropout from a sweep not finished yet: {', '.join(unfinished)}")
    if run.init and not (runs[run.init].folder / "model.safetensors").is_file():
        raise ValueError(f"{run.name} starts from {run.init}, whose weights are not here (only its evidence is kept): "
                         f"retrain it into {runs[run.init].folder} first (move {evidence.folder(run.init)} aside, "
                         f"then `{runs[run.init].command()}`)")


def _train(run: Run, runs: dict[str, Run], folder: Path, resume: bool, threads: int | None, dry_run: bool, log,
           device: str) -> None:
    """Train ``run`` into ``folder`` (``resume``: from its resume state there) by the manifest's settings."""
    check_corpus(run)
    dev = resolve_device(device)  # a clear message before anything is read or written
    if threads:
        import torch

        torch.set_num_threads(threads)
    print(f"reproduce: {'resuming' if resume else 'training'} {run.name} -> {folder}", file=log)
    tc = TrainConfig(epochs=run.epochs, seed=run.seed, freeze=run.freeze,
                     extra={"command": run.command(), "run": run.name, "commit": paths.commit()})
    tc = tc.dry_run() if dry_run else tc
    train(run.model, run.model_kwargs(runs), run.corpus, folder, tc,
          init=str(runs[run.init].folder) if run.init else None, resume=resume, match=run.match,
          ctx=Context(device=dev))  # one process: a run is not split across a torchrun group


def retrain(run: Run, runs: dict[str, Run], threads: int | None = None, log=sys.stderr, device: str = "cpu") -> str:
    """Train a finished ``run`` again from scratch (``run NAME --force``: its evidence or its bundled checkpoint
    comes from an older protocol, a ``stale`` run), into ``runs/NAME`` whatever ``bundled`` says, and replace its
    evidence with the new run's; returns ``"finished"``. A retraining that was stopped resumes there; a finished
    run there (the old one, or a retraining whose evidence is written) is never trained over: move it aside. A
    bundled run's checkpoint stays until ``bundle(run, force=True)`` (``--bundle NAME --force``) bundles the new one
    in its place."""
    if run.blocked:
        raise ValueError(f"{run.name} is blocked: {run.blocked}")
    if run.external:
        raise ValueError(f"{run.name} is trained outside vizlm, then imported: {run.external}")
    _check_start(run, runs)
    folder = paths.runs_dir() / run.name
    try:
        meta = read_meta(folder)
    except (CheckpointError, OSError):
        meta = {}
    if meta and (why := run.foreign(meta)):
        raise ValueError(f"{run.name}: {folder} holds another run ({why}); move it aside first")
    if "test_perplexity" in meta.get("metrics", {}):
        raise ValueError(f"{folder} holds a finished run of {run.name}: move it aside to train it again")
    resume = (folder / "resume" / "state.json").is_file()
    if folder.exists() and any(folder.iterdir()) and not resume:
        raise ValueError(f"{folder} holds files but no run to resume; move it aside first")
    _train(run, runs, folder, resume, threads, False, log, device)
    evidence.write(run.name, folder, force=True, log=log)
    return "finished"


LOCATIONS = ("data", "checkpoints", "cache", "runs", "corpora", "evidence")  # what a job process is told


def job_log(run: Run) -> Path:
    """Where :func:`run_many` writes ``run``'s output: ``RUNS/NAME.log``, beside its folder."""
    return paths.runs_dir() / f"{run.name}.log"


def _job(name: str, manifest: str | None, where: dict[str, Path], threads: int | None, dry_run: bool,
         device: str) -> str:
    """One run in a process of its own (:func:`run_many`): the parent's locations, its output
    appended to :func:`job_log`; returns its status, or ``error: ...``."""
    paths.set_overrides(**where)
    runs = load_manifest(Path(manifest) if manifest else None)
    run = runs[name]
    job_log(run).parent.mkdir(parents=True, exist_ok=True)
    with open(job_log(run), "a", encoding="utf-8") as out, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(out):
        try:
            return run_one(run, runs, threads, dry_run, log=out, device=device)
        except (ValueError, OSError, evidence.EvidenceError) as exc:
            print(f"reproduce: {name}: {exc}", file=out)
            return f"error: {exc}"


def _skipped(run: Run, runs: dict[str, Run], result: dict[str, str]) -> str | None:
    """Why ``run`` is skipped (its starting point did not finish: ``result`` says how it ended), or None."""
    for first in run.first():
        if runs[first].status() != "finished":
            return f"skipped: {first} did not finish ({result.get(first, 'not run')})"
    return None


def run_serial(runs: dict[str, Run], names: list[str], threads: int | None = None, dry_run: bool = False,
               device: str = "cpu", log=None) -> dict[str, str]:
    """:func:`run_one` for each of ``names`` and the runs they start from, those not finished yet,
    one after another in this process (its output to ``log``). A run that cannot train says why
    and the others still train, as in :func:`run_many`; a run whose starting point did not finish
    is skipped. Returns each run's final status, or why it did not finish."""
    log = log or sys.stderr
    resolve_device(device)  # a device this machine lacks: said once, before anything trains
    result: dict[str, str] = {}
    for run in pending(runs, names):
        why = _skipped(run, runs, result)
        if why is None:
            try:
                why = run_one(run, runs, threads, dry_run, log=log, device=device)
            except (ValueError, OSError, evidence.EvidenceError) as exc:
                why = f"error: {exc}"
        result[run.name] = why
        print(f"reproduce: {run.name}: {why}", file=log)
    return result


def run_many(manifest: Path | str | None, names: list[str], jobs: int, threads: int | None = None,
             dry_run: bool = False, device: str = "cpu", log=None) -> dict[str, str]:
    """:func:`run_one` for each of ``names`` of ``manifest`` (None: the default ``experiments.toml``)
    and the runs they start from, those not finished yet,
    ``jobs`` at a time, each in a process of its own (spawned; its output in ``RUNS/NAME.log``).
    A run starts once its starting point (``init``) has finished, and is skipped if that failed.
    ``threads`` per process (default: the CPUs shared out, at least one). Returns each run's
    final status, or why it did not finish."""
    import concurrent.futures as cf
    import multiprocessing

    log = log or sys.stderr
    resolve_device(device)  # a device this machine lacks: said once, before any process starts
    runs = load_manifest(Path(manifest) if manifest else None)
    manifest = str(Path(manifest).resolve()) if manifest else None  # the same file, whatever the child's folder
    todo = pending(runs, names)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = threads or max(1, cpus // jobs)
    where = {key: getattr(paths, f"{key}_dir")() for key in LOCATIONS}
    result: dict[str, str] = {}
    running: dict[cf.Future, Run] = {}
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        while todo or running:
            waiting = {r.name for r in todo} | {r.name for r in running.values()}
            for run in list(todo):
                if len(running) >= jobs:
                    break
                if waiting & set(run.first()):
                    continue  # its starting point or dropout sweep is still to train
                todo.remove(run)
                if why := _skipped(run, runs, result):
                    result[run.name] = why
                    print(f"reproduce: {run.name}: {why}", file=log)
                    continue
                print(f"reproduce: {run.name}: started (log: {job_log(run)})", file=log)
                running[pool.submit(_job, run.name, manifest, where, threads, dry_run, device)] = run
            if not running:
                continue  # what is left waits on nothing now (its starting point was skipped)
            done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for future in done:
                run = running.pop(future)
                try:
                    result[run.name] = future.result()
                except Exception as exc:  # the process died (killed, out of memory): say so, go on with the rest
                    result[run.name] = f"error: {type(exc).__name__}: {exc}"
                print(f"reproduce: {run.name}: {result[run.name]}", file=log)
    return result


def check_corpus(run: Run) -> None:
    """A :class:`ValueError` saying how to prepare the corpus ``run`` trains on when it is not there."""
    try:
        splits = corpus_splits(run.corpus)
    except DataError as exc:
        raise ValueError(f"{run.name}: {exc}; prepare yours with `vizlm prepare --corpus {run.corpus} --from FOLDER` "
                         "(FOLDER holding train, valid and test)") from None
    if not {"train", "valid", "test"} <= set(splits):
        raise ValueError(f"{run.name}: corpus {run.corpus!r} has the splits {', '.join(splits)}; a run needs train, "
                         "valid and test")


def write_evidence(run: Run, force: bool = False, log=sys.stderr) -> Path:
    """Write ``run``'s evidence from its checkpoint (bundled or in ``runs/``)."""
    if run.blocked:
        raise ValueError(f"{run.name} is blocked: {run.blocked}")
    try:
        meta = read_meta(run.folder)
    except (CheckpointError, OSError):
        raise ValueError(f"{run.name} has no checkpoint in {run.folder} to take evidence from; "
                         f"train it with `{run.command()}`") from None
    if "test_perplexity" not in meta.get("metrics", {}):
        raise ValueError(f"{run.name} is not finished ({run.folder} has no test perplexity)")
    if why := run.foreign(meta):
        raise ValueError(f"{run.name}: {why}; its evidence would not be this run's")
    return evidence.write(run.name, run.folder, force=force, log=log, trained_by=run.external)


HALF_PRECISION_TOLERANCE = 0.001  # float16 storage may change test perplexity by less than this (relative)


def bundle(run: Run, folder_name: str | None = None, manifest: Path | None = None, log=sys.stderr,
           force: bool = False) -> Path:
    """Copy the finished ``run`` into ``checkpoints/FOLDER`` (default: the run's name), as the app's
    bundled checkpoint of it, and record that in the manifest (``bundled = "FOLDER"``).
    ``force``: a bundled run trained again (:func:`retrain`, in ``runs/NAME``) replaces its bundled checkpoint,
    which is swapped only once the new one is written whole.

    Its weights are stored as float16 when that changes its test perplexity by less than
    :data:`HALF_PRECISION_TOLERANCE` (measured here, both numbers kept in ``storage``), else as
    they are. The training log goes with it; the resume state does not."""
    import shutil

    import torch

    from vizlm.data.tokens import open_split
    from vizlm.modeling.checkpoint import save_checkpoint
    from vizlm.modeling.evaluate import score_split

    if run.bundled and not force:
        raise ValueError(f"{run.name} is already bundled in checkpoints/{run.bundled} (--force: bundle runs/{run.name}, "
                         "the run trained again, in its place)")
    source = paths.runs_dir() / run.name if run.bundled else run.folder
    try:
        meta = read_meta(source)
    except (CheckpointError, OSError):
        meta = {}
    if why := run.foreign(meta):
        raise ValueError(f"{run.name}: {source} holds another run ({why})")
    if "test_perplexity" not in meta.get("metrics", {}) or not (source / "model.safetensors").is_file():
        raise ValueError(f"{run.name} has no finished run with its weights in {source}; only such a run can be bundled"
                         + (f" in place of checkpoints/{run.bundled} (train it again: run {run.name} --force)"
                            if run.bundled else ""))
    name = run.bundled or folder_name or run.name
    dest = paths.checkpoints_dir() / name
    if dest.exists() and not run.bundled:
        raise ValueError(f"checkpoints/{name} exists already; choose another name (--as)")
    ckpt = load_checkpoint(source)
    meta = {k: v for k, v in ckpt.meta.items() if k not in ("format", "format_version", "vizlm_version", "model",
                                                             "config", "vocab")}
    test = open_split(run.corpus, "test", ckpt.vocab)
    full = score_split(ckpt.model, test).perplexity
    state = {k: v.clone() for k, v in ckpt.model.state_dict().items()}
    with torch.no_grad():
        for p in ckpt.model.parameters():
            p.copy_(p.half())  # the weights as float16 would give them back
    half = score_split(ckpt.model, test).perplexity
    ckpt.model.load_state_dict(state)
    change = half / full - 1
    use_half = abs(change) < HALF_PRECISION_TOLERANCE
    meta["storage"] = {"dtype": "float16" if use_half else "float32", "test_perplexity_float32": full,
                       "test_perplexity_float16": half, "relative_change": change}
    if use_half:
        meta["metrics"] = {**meta.get("metrics", {}), "test_perplexity": half}
    new = dest.with_name(f".{name}.new") if run.bundled else dest  # a replacement is written beside, then swapped
    if new != dest and new.exists():
        shutil.rmtree(new)  # a replacement left half-written by a stop
    save_checkpoint(new, ckpt.model, ckpt.name, ckpt.vocab, weights_dtype=torch.float16 if use_half else None, **meta)
    if (source / "train_log.jsonl").is_file():
        shutil.copyfile(source / "train_log.jsonl", new / "train_log.jsonl")
    if new != dest:
        old = dest.with_name(f".{name}.old")
        if old.exists():
            shutil.rmtree(old)
        if dest.exists():
            dest.rename(old)
        new.rename(dest)
        if old.exists():
            shutil.rmtree(old)
    else:
        _mark_bundled(Path(manifest) if manifest else paths.home() / MANIFEST, run.name, name)
    evidence.write(run.name, dest, force=True, log=log, trained_by=run.external)  # the evidence of the weights as bundled
    print(f"bundled {run.name} -> {dest} ({meta['storage']['dtype']}: test perplexity {full:.3f} -> {half:.3f}, "
          f"{100 * change:+.4f}%)", file=log)
    return dest


def _mark_bundled(manifest: Path, run: str, folder: str) -> None:
    """Add ``bundled = "folder"`` under the run's table in the manifest (its comments kept)."""
    lines = manifest.read_text(encoding="utf-8").splitlines(keepends=True)
    heads = {f"[run.{run}]", f'[run."{run}"]'}
    at = next(i for i, line in enumerate(lines) if line.strip() in heads)
    lines.insert(at + 1, f'bundled = "{folder}"\n')
    files.write_text(manifest, "".join(lines), force=True)
    load_manifest(manifest)  # still a valid manifest


__all__ = ["HALF_PRECISION_TOLERANCE", "LOCATIONS", "TO_TRAIN", "bundle", "check_corpus", "job_log", "pending",
           "retrain", "run_many", "run_one", "run_serial", "table", "write_evidence"]
