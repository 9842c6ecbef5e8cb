"""The reproduction as data: the runs of ``experiments.toml``, their state, training what is
missing, and the result tables written from the checkpoints' stored metrics.

A run is *finished* when its checkpoint holds a test perplexity (``vizlm train`` stores it
last), *partial* when only its resume state exists (a session ended mid-training: it is
resumed, never restarted), *missing*, or *blocked* (the manifest says why). A finished
run is never trained again. Runs live in :func:`vizlm.paths.runs_dir` (``runs/``), except
those bundled in ``checkpoints/``.

Each comparison is against the run's *control* (same start, same training) on the test
split: the corpus perplexity ratio with a paired bootstrap 95% interval over sentences
(:func:`vizlm.corpus.compare_corpus`, cached like every corpus statistic).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vizlm import paths
from vizlm.checkpoint import CheckpointError, load_checkpoint, read_meta
from vizlm.corpus import compare_corpus
from vizlm.models import REGISTRY
from vizlm.train import TrainConfig, train

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MANIFEST = "experiments.toml"
PAPERS = {  # manifest key -> title, in report order
    "liu-lee": "Liu & Lee (AMSRN): sentence level, AMSRN started from a trained LSTM",
    "daniluk": "Daniluk et al.: running text within documents, from scratch, equal parameter counts",
    "salton": "Salton et al.: running text, against the document LSTM",
    "extension": "Beyond the papers",
    "chinese": "Chinese (Sinica treebank, characters)",
}
REPORT_BEGIN, REPORT_END = "<!-- vizlm reproduce --report: begin -->", "<!-- vizlm reproduce --report: end -->"
_FIELDS = {"paper", "model", "context", "corpus", "init", "control", "options", "match", "seed", "epochs", "bundled",
           "blocked", "note", "emb_dim", "hidden_dim", "freeze"}


@dataclass
class Run:
    name: str
    paper: str
    model: str
    context: str = "sentence"
    corpus: str = "brown"
    init: str | None = None
    control: str | None = None
    options: dict = field(default_factory=dict)
    match: str | None = None
    seed: int = 1234
    epochs: int = 30
    emb_dim: int = 50
    hidden_dim: int = 50
    bundled: str | None = None
    blocked: str | None = None
    note: str | None = None
    freeze: bool = False  # train only what `init` did not copy (vizlm train --freeze)

    @property
    def folder(self) -> Path:
        return paths.checkpoints_dir() / self.bundled if self.bundled else paths.runs_dir() / self.name

    def status(self) -> str:
        if self.blocked:
            return "blocked"
        try:
            metrics = read_meta(self.folder).get("metrics", {})
        except (CheckpointError, OSError):
            metrics = {}
        if "test_perplexity" in metrics:
            return "finished"
        return "partial" if (self.folder / "resume" / "state.json").is_file() else "missing"

    def model_kwargs(self) -> dict:
        return {"emb_dim": self.emb_dim, "hidden_dim": self.hidden_dim, "context": self.context, **self.options}

    def command(self) -> str:
        return f"vizlm reproduce --only {self.name}"


def load_manifest(path: Path | None = None) -> dict[str, Run]:
    """The runs of ``experiments.toml`` (default: the one in the vizlm home), checked."""
    path = Path(path) if path else paths.home() / MANIFEST
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    defaults = doc.get("defaults", {})
    runs = {}
    for name, spec in doc.get("run", {}).items():
        unknown = set(spec) - _FIELDS
        if unknown:
            raise ValueError(f"{path}: run {name!r} has unknown field(s) {sorted(unknown)}")
        values = {k: v for k, v in {**defaults, **spec}.items() if k in _FIELDS}
        run = Run(name=name, **values)
        if run.paper not in PAPERS:
            raise ValueError(f"{path}: run {name!r}: unknown paper {run.paper!r}; valid: {', '.join(PAPERS)}")
        if run.model not in REGISTRY and not run.blocked:
            raise ValueError(f"{path}: run {name!r}: unknown model {run.model!r}")
        if type(run.freeze) is not bool or (run.freeze and not run.init):
            raise ValueError(f"{path}: run {name!r}: freeze must be true or false, and true needs an init run")
        runs[name] = run
    for run in runs.values():
        for ref in (run.init, run.control):
            if ref is not None and ref not in runs:
                raise ValueError(f"{path}: run {run.name!r} refers to {ref!r}, which is not in the manifest")
    return runs


def _metrics(run: Run) -> dict:
    try:
        meta = read_meta(run.folder)
    except (CheckpointError, OSError):
        return {}
    return {**meta.get("metrics", {}), "parameters": meta.get("parameters")}


def table(runs: dict[str, Run]) -> list[dict]:
    """One row per run: state and stored metrics (for ``--list``)."""
    rows = []
    for run in runs.values():
        m = _metrics(run) if run.status() == "finished" else {}
        rows.append({"run": run.name, "paper": run.paper, "model": run.model, "context": run.context,
                     "status": run.status(), "parameters": m.get("parameters"), "valid": m.get("valid_perplexity"),
                     "test": m.get("test_perplexity"), "why": run.blocked})
    return rows


def order(runs: dict[str, Run], names: list[str]) -> list[Run]:
    """``names`` and the runs they start from (``init``), starting points first."""
    out: list[Run] = []

    def visit(name: str) -> None:
        run = runs[name]
        if run.init:
            visit(run.init)
        if run not in out:
            out.append(run)

    for name in names:
        if name not in runs:
            raise ValueError(f"no run {name!r} in the manifest; see `vizlm reproduce --list`")
        visit(name)
    return out


def run_one(run: Run, runs: dict[str, Run], threads: int | None = None, dry_run: bool = False, log=sys.stderr) -> str:
    """Train ``run`` if it is missing, resume it if partial; returns its (new) status.

    ``dry_run``: a few batches of one epoch (to check the pipeline; the result is not a run).
    """
    status = run.status()
    if status in ("finished", "blocked"):
        return status
    if run.bundled:
        raise ValueError(f"{run.name} is bundled in checkpoints/{run.bundled} but has no test perplexity; "
                         "retrain it by its own command (config.json), not by reproduce")
    if run.init and runs[run.init].status() != "finished":
        raise ValueError(f"{run.name} starts from {run.init}, which is not finished")
    if threads:
        import torch

        torch.set_num_threads(threads)
    print(f"reproduce: {'resuming' if status == 'partial' else 'training'} {run.name} -> {run.folder}", file=log)
    tc = TrainConfig(epochs=1 if dry_run else run.epochs, seed=run.seed, max_batches=3 if dry_run else None,
                     eval_batches=1 if dry_run else None, freeze=run.freeze,
                     extra={"command": run.command(), "run": run.name})
    train(run.model, run.model_kwargs(), run.corpus, run.folder, tc,
          init=str(runs[run.init].folder) if run.init else None, resume=status == "partial", match=run.match)
    return run.status()


def comparison(run: Run, runs: dict[str, Run]) -> dict | None:
    """Test perplexity of ``run`` against its control, with the paired bootstrap 95% interval."""
    control = runs.get(run.control) if run.control else None
    if control is None or run.status() != "finished" or control.status() != "finished":
        return None
    a, b = load_checkpoint(control.folder), load_checkpoint(run.folder)
    s = compare_corpus(a, b, run.corpus, "test").summary
    return {"control": control.name, "ratio": s["ratio"], "low": s["ratio_ci_low"], "high": s["ratio_ci_high"],
            "sentences": s["sentences"]}


def _fmt(v, spec: str = ".1f") -> str:
    return "—" if v is None else format(v, spec)


def report(runs: dict[str, Run]) -> str:
    """The result tables (markdown), from the checkpoints' stored metrics and paired comparisons."""
    lines = [REPORT_BEGIN, "",
             "_Generated by `vizlm reproduce --report` from the checkpoints' stored metrics; do not edit by hand._", ""]
    for paper, title in PAPERS.items():
        members = [r for r in runs.values() if r.paper == paper]
        if not members:
            continue
        lines += [f"### {title}", "",
                  "| run | model | context | parameters | valid | test | vs control (95% CI) | state |",
                  "|---|---|---|---:|---:|---:|---|---|"]
        for run in members:
            m = _metrics(run) if run.status() == "finished" else {}
            c = comparison(run, runs)
            vs = "—" if c is None else (f"{c['ratio']:.3f} ({c['low']:.3f}–{c['high']:.3f}) vs {c['control']}; "
                                        + ("better" if c["high"] < 1 else "worse" if c["low"] > 1 else "no clear difference"))
            state = run.status() + (f": {run.blocked}" if run.blocked else "")
            lines.append(f"| {run.name} | {run.model}{''.join(f' {k}={v}' for k, v in run.options.items())}"
                         f"{' (init frozen)' if run.freeze else ''} | "
                         f"{run.context} | {_fmt(m.get('parameters'), ',')} | {_fmt(m.get('valid_perplexity'))} | "
                         f"{_fmt(m.get('test_perplexity'))} | {vs} | {state} |")
        lines.append("")
    lines.append(REPORT_END)
    return "\n".join(lines) + "\n"


def write_report(runs: dict[str, Run], path: Path) -> Path:
    """Replace the generated part of ``path`` (between the markers), or append it."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    new = report(runs)
    if REPORT_BEGIN in text and REPORT_END in text:
        head, rest = text.split(REPORT_BEGIN, 1)
        text = head + new.rstrip("\n") + rest.split(REPORT_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Reproduction (generated)\n\n" + new
    path.write_text(text, encoding="utf-8")
    return path


def as_json(runs: dict[str, Run]) -> str:
    return json.dumps(table(runs), indent=1)


__all__ = ["MANIFEST", "Run", "load_manifest", "table", "order", "run_one", "report", "write_report"]
