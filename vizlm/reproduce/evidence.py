"""The evidence of a run: what its result tables are computed from, kept in the repository.

A finished run of the reproduction (``experiments.toml``) leaves, in ``evidence/RUN/``
(:func:`vizlm.core.paths.evidence_dir`):

    config.json        the checkpoint's config.json without its vocabulary (model, sizes, corpus
                       and its checksums, the training settings with the command and the commit it
                       ran at, parameters, storage) and the vocabulary's checksum
    metrics.json       valid / test (/ WSJ) perplexity, best epoch, epochs trained, wall time
    train_log.jsonl    the training log, an epoch a line
    nll.safetensors    per split scored (valid, test, and WSJ for English models): ``SPLIT`` the
                       NLL of every sentence in nats (float32, in the model's own context: a
                       document model reads the documents as running text), ``SPLIT.tokens``
                       the tokens scored per sentence, ``SPLIT.documents`` the sentences per
                       document (int32)
    positions.json     for attention models: the mean attention weight by relative position on
                       the test split (Daniluk et al., Fig. 3), the mean largest weight of a row
                       and the mean entropy; ``unit_total`` and ``unit_count``: per test document
                       (``resampled``), the weight and its count at each offset (the intervals)

Everything ``vizlm reproduce --report`` writes is computed from these files alone (no weights, no
model evaluation): a fresh clone regenerates docs/RESULTS.md unchanged in seconds. The weights of
runs that are not bundled are not kept; ``vizlm reproduce --only RUN`` retrains one (seeded, so
deterministically on one machine and thread count) and writes its evidence.

The corpus evidence of the bundled checkpoints (attribution, the faithfulness tests, case labels) is
:mod:`vizlm.reproduce.corpus_evidence`'s; it is written whole as a run's is (:func:`publish`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vizlm.core import paths
from vizlm.data.folder import document_sizes
from vizlm.data.registry import split_texts
from vizlm.data.tokens import open_split
from vizlm.inspect.corpus_stats import positions_corpus, ratio_interval
from vizlm.modeling.checkpoint import load_checkpoint, meta_context, meta_corpus
from vizlm.modeling.evaluate import perplexity, sentence_nll_split

FILES = ("config.json", "metrics.json", "train_log.jsonl", "nll.safetensors")
POSITIONS = "positions.json"
POSITIONS_WINDOW = 10  # the window the positions are taken over for a model without one of its own
_NOT_CONFIG = ("vocab", "metrics")


class EvidenceError(ValueError):
    """Evidence that is absent, incomplete or unreadable."""


@dataclass
class Evidence:
    """One run's evidence, read back (:func:`read`)."""

    name: str
    config: dict
    metrics: dict
    nll: dict[str, np.ndarray] = field(repr=False)  # split -> per-sentence NLL (nats)
    tokens: dict[str, np.ndarray] = field(repr=False)  # split -> tokens scored per sentence
    documents: dict[str, np.ndarray] = field(repr=False)  # split -> sentences per document
    positions: dict | None = None

    @property
    def context(self) -> str:
        return meta_context(self.config)

    def perplexity(self, split: str) -> float:
        """The corpus perplexity of ``split`` from the per-sentence NLLs."""
        return perplexity(float(self.nll[split].astype(np.float64).sum()), int(self.tokens[split].sum()))


def folder(name: str) -> Path:
    return paths.evidence_dir() / name


def exists(name: str) -> bool:
    where = folder(name)
    return all((where / f).is_file() for f in FILES)


def read(name: str) -> Evidence | None:
    """The evidence of run ``name``, None when it has none; :class:`EvidenceError` when a file
    is missing or unreadable (a half-written folder is never taken as a result)."""
    where = folder(name)
    if not where.exists():
        return None
    check_whole(where, FILES, f"vizlm reproduce --evidence {name}")
    stamp = tuple((f, st.st_mtime_ns, st.st_size) for f in (*FILES, POSITIONS) if (st := _stat(where / f)))
    return _read(name, str(where), stamp)


def check_whole(where: Path, files: tuple[str, ...], command: str) -> None:
    """An evidence folder holds all its files (a half-written one is never taken as a result)."""
    missing = [f for f in files if not (where / f).is_file()]
    if missing:
        raise EvidenceError(f"{where} lacks {', '.join(missing)}; rewrite it with `{command}`")


def _stat(path: Path):
    try:
        return path.stat()
    except OSError:
        return None


@functools.lru_cache(maxsize=128)
def _read(name: str, where_: str, stamp: tuple) -> Evidence:
    """:func:`read`'s files, once per state of the folder (``stamp``: each file's time and size); the
    report reads each run's evidence for every table it is in. Callers never change what it returns."""
    from safetensors.numpy import load_file

    where = Path(where_)
    try:
        config = json.loads((where / "config.json").read_text(encoding="utf-8"))
        metrics = json.loads((where / "metrics.json").read_text(encoding="utf-8"))
        arrays = load_file(str(where / "nll.safetensors"))
        positions = json.loads((where / POSITIONS).read_text(encoding="utf-8")) if (where / POSITIONS).is_file() else None
    except (OSError, ValueError) as e:
        raise EvidenceError(f"{where}: cannot be read ({e})") from e
    splits = [k for k in arrays if "." not in k]
    return Evidence(name, config, metrics, {s: arrays[s] for s in splits}, {s: arrays[f"{s}.tokens"] for s in splits},
                    {s: arrays[f"{s}.documents"] for s in splits}, positions)


def versus(run: Evidence, against: Evidence, split: str = "test") -> dict:
    """``run`` against ``against`` on ``split``: corpus perplexities, their ratio and its paired
    bootstrap 95% interval over documents, the unit the splits sample (sentences for a split of one
    document). One seed: :mod:`vizlm.reproduce.verdicts` adds the seed spread."""
    for ev in (run, against):
        if split not in ev.nll:
            raise EvidenceError(f"the evidence of {ev.name} has no {split} split")
    if not np.array_equal(run.tokens[split], against.tokens[split]):
        raise EvidenceError(f"{run.name} and {against.name} scored different sentences of {split}: not comparable")
    docs = run.documents[split].tolist()
    s = ratio_interval(against.nll[split], run.nll[split], run.tokens[split], documents=docs if len(docs) > 1 else None)
    return {"control": against.name, "ratio": s["ratio"], "low": s["ratio_ci_low"], "high": s["ratio_ci_high"],
            "sentences": s["sentences"], "resampled": s["resampled"], "ppl": s["perplexity_b"],
            "ppl_against": s["perplexity_a"]}


def splits_of(corpus: str) -> list[tuple[str, str, str]]:
    """(key, corpus, split) scored for a model of ``corpus``: valid, test, and WSJ for English."""
    out = [("valid", corpus, "valid"), ("test", corpus, "test")]
    if corpus == "brown":
        out.append(("wsj", "wsj", "test"))
    return out


def write(name: str, source: Path | str, force: bool = False, log=sys.stderr, trained_by: str | None = None) -> Path:
    """Write the evidence of run ``name`` from its checkpoint folder ``source`` (weights,
    config.json, train_log.jsonl). Scores every split of :func:`splits_of`; for attention models
    also the positions. Written to a temporary folder beside the target and renamed when complete;
    existing evidence is replaced only with ``force``. ``trained_by``: the commands that trained a run outside
    vizlm and imported it (the manifest's ``external``), kept as its ``train.command``."""
    from safetensors.numpy import save_file

    dest = folder(name)
    if dest.exists() and not force:
        raise EvidenceError(f"{dest} exists already (evidence of {name}); pass --force to rewrite it")
    ckpt = load_checkpoint(source)
    meta = ckpt.meta
    if "test_perplexity" not in meta.get("metrics", {}):
        raise EvidenceError(f"{source} is not finished (its config.json has no test perplexity)")
    corpus = meta_corpus(meta)
    if corpus is None:
        raise EvidenceError(f"{source}: its config.json does not say which corpus it was trained on")
    # a dry run's metrics cover the first batches of each split (vizlm.modeling.train.finalize): so does its evidence
    head = (meta.get("train") or {}).get("eval_batches")
    head = None if head is None else head * 64
    arrays = {}
    for key, c, split in splits_of(corpus):
        print(f"evidence: {name}: scoring {c} {split}", file=log)
        sp = open_split(c, split, ckpt.vocab)
        ids, _, _ = split_texts(c, split)
        if head is not None:
            sp, ids = sp.head(head), ids[:head]
        arrays[key] = sentence_nll_split(ckpt.model, sp).astype(np.float32)
        tokens = sp.sentence_tokens()
        arrays[f"{key}.tokens"] = tokens.astype(np.uint16 if tokens.max(initial=0) < 2**16 else np.int32)
        arrays[f"{key}.documents"] = np.asarray(document_sizes(ids), dtype=np.int32)
    positions = None
    if ckpt.has_attention:
        window = getattr(ckpt.model.config, "window", None) or POSITIONS_WINDOW
        print(f"evidence: {name}: attention by position on {corpus} test (window {window})", file=log)
        stats = positions_corpus([ckpt], corpus, "test", window=window, effects=False, sentences=head)
        frame = stats.frame.sort_values("offset")
        positions = {"split": "test", **({"sentences": head} if head is not None else {}), "window": window, "offset": frame["offset"].astype(int).tolist(),
                     **{k: frame[k].astype(float).tolist() for k in ("mean", "lo", "hi")},
                     "count": frame["count"].astype(float).tolist(),
                     "largest_weight": float(stats.peak[ckpt.label]), "entropy": float(stats.entropy[ckpt.label]),
                     "beyond_window": float(stats.beyond[ckpt.label]),
                     # per unit the intervals resample (the test documents): the weight and its count at each offset
                     "resampled": stats.units[ckpt.label]["resampled"],
                     **{f"unit_{k}": np.asarray(stats.units[ckpt.label][k]).tolist() for k in ("total", "count")}}
    config = {k: v for k, v in meta.items() if k not in _NOT_CONFIG}
    if trained_by is not None:
        config["train"] = {**config.get("train", {}), "command": trained_by}
    config["vocab_sha256"] = hashlib.sha256("\n".join(ckpt.vocab.itos).encode("utf-8")).hexdigest()
    config["vocab_size"] = len(ckpt.vocab)
    config["evidence"] = {"written_by": f"vizlm reproduce --evidence {name}", "commit": paths.commit(),
                          "source": display_path(Path(source)), "weights_committed_in": committed_in(Path(ckpt.path) / "model.safetensors")}
    def fill(tmp: Path) -> None:
        dump_json(tmp / "config.json", config)
        dump_json(tmp / "metrics.json", meta["metrics"])
        log_file = Path(ckpt.path) / "train_log.jsonl"
        if log_file.is_file():
            shutil.copyfile(log_file, tmp / "train_log.jsonl")
        else:
            (tmp / "train_log.jsonl").write_text("", encoding="utf-8")
        save_file(arrays, str(tmp / "nll.safetensors"))
        if positions is not None:
            dump_json(tmp / POSITIONS, positions)

    publish(dest, fill)
    ev = read(name)
    print(f"evidence: {name} -> {dest} (test perplexity {ev.perplexity('test'):.2f} from the NLLs, "
          f"{meta['metrics']['test_perplexity']:.2f} stored)", file=log)
    return dest


def publish(dest: Path, fill) -> None:
    """Write a folder whole: ``fill(tmp)`` writes its files into a temporary folder beside ``dest``, which
    then takes ``dest``'s place (an existing one goes only once the new one is complete)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        fill(tmp)
        for f in tmp.iterdir():
            f.chmod(0o644)
        tmp.chmod(0o755)
        if dest.exists():  # --force: the old folder goes only once the new one is whole
            old = dest.with_name(f".{dest.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def committed_in(path: Path) -> str | None:
    """The last commit that wrote ``path`` in the vizlm checkout (a bundled checkpoint's weights:
    the provenance of runs trained before their config recorded a commit); None when it is not
    tracked."""
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(paths.home()), "log", "-1", "--format=%H", "--", str(path.resolve())],
                             capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def display_path(path: Path) -> str:
    """``path`` relative to the vizlm home where it lies inside it (no user's folders in the repository)."""
    try:
        return str(path.resolve().relative_to(paths.home().resolve()))
    except ValueError:
        return path.name


def dump_json(path: Path, doc: dict) -> None:
    """``doc`` as the evidence's JSON files hold it: indented, keys sorted, UTF-8."""
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


__all__ = ["FILES", "POSITIONS", "Evidence", "EvidenceError", "check_whole", "committed_in", "display_path",
           "dump_json", "exists", "folder", "publish", "read", "splits_of", "versus", "write"]
