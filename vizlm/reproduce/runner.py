"""The reproduction as data: the runs of ``experiments.toml``, their state, training what is
not run, and the result tables written from the runs' evidence.

A run is *finished* when its evidence is in the repository (:mod:`vizlm.reproduce.evidence`:
``evidence/RUN/``, written when its training ends), *partial* when its resume state exists
(its training was cut short: it is resumed, never restarted), *not run*, or *blocked* (the
manifest says why). A run whose checkpoint is finished but whose evidence is not yet written is
finished too (``vizlm reproduce --evidence RUN`` writes it). A finished run is never trained
again, with one exception: a run its epoch cap stopped while it was still improving goes on from
its resume state when the manifest raises the cap (the cap is a bound, early stopping on valid is
the rule). Checkpoints live in :func:`vizlm.core.paths.runs_dir` (``runs/``, not kept in the
repository), except those bundled in ``checkpoints/``.

The report (:func:`report`) reads the evidence alone: no weights, no model evaluation. Each
comparison is against the run's *control* (same start, same training) on the test split: the
corpus perplexity ratio with a 95% interval over the test documents (the unit the splits sample,
for every model) and the training seeds (:mod:`vizlm.reproduce.verdicts`); each claim gets a three-part
verdict, with Holm's adjustment over the claims tested (:func:`decide_all`).

Your own manifest (``vizlm reproduce --manifest my.toml``, e.g. the papers' protocols on a corpus of
yours, ``examples/my-corpus.toml``) keeps everything it makes in a folder named after it, beside it
(``my/runs``, ``my/evidence``, ``my/RESULTS.md``; :func:`locations`), never in the repository's
``runs/``, ``evidence/`` or ``docs/RESULTS.md``, unless ``$VIZLM_RUNS`` / ``$VIZLM_EVIDENCE`` or the
command's ``--runs`` / ``--evidence-dir`` / ``--report-out`` say otherwise.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vizlm.reproduce import evidence, verdicts
from vizlm.core import files, paths
from vizlm.modeling.checkpoint import CheckpointError, load_checkpoint, read_meta
from vizlm.data.registry import DataError, check_folder_name, corpus_splits
from vizlm.core.distributed import Context, resolve_device
from vizlm.models import REGISTRY
from vizlm.modeling.config import TrainConfig
from vizlm.modeling.train import train

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
           "blocked", "note", "emb_dim", "hidden_dim", "freeze", "stale", "dropout_from"}


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
    # why the run's evidence no longer meets the manifest's protocol (e.g. trained before a schedule rule
    # that changes it); the report marks it and the claims that rest on it, until retrained evidence replaces it
    stale: str | None = None
    # runs of a dropout sweep: this run takes the dropout of the one with the lowest valid perplexity (chosen
    # on valid for one model, used for all, as Daniluk et al. do), so it trains after them
    dropout_from: list[str] | None = None
    freeze: bool = False  # train only what `init` did not copy (vizlm train --freeze)
    manifest: str | None = field(default=None, repr=False)  # the manifest its commands name (None: the home's default)

    @property
    def folder(self) -> Path:
        return paths.checkpoints_dir() / self.bundled if self.bundled else paths.runs_dir() / self.name

    def evidence(self) -> evidence.Evidence | None:
        """The run's evidence (:mod:`vizlm.reproduce.evidence`), None while it has none."""
        return evidence.read(self.name)

    def done(self) -> bool:
        """Whether the run's evidence is in the repository: what the report counts as finished."""
        return not self.blocked and evidence.exists(self.name)

    def meta(self) -> dict:
        """The checkpoint's config.json, else its evidence's config and metrics; {} while there is
        neither (or they cannot be read)."""
        try:
            return read_meta(self.folder)
        except (CheckpointError, OSError):
            pass
        try:
            return _evidence_meta(self)
        except evidence.EvidenceError:
            return {}

    def foreign(self, meta: dict | None = None) -> str | None:
        """What the checkpoint in the run's folder is when it is not this run (another model, corpus,
        context or seed: a run of another manifest sharing the runs folder), else None."""
        meta = self.meta() if meta is None else meta
        if not meta:
            return None
        got = {"model": meta.get("model"), "corpus": (meta.get("corpus") or {}).get("name"),
               "context": (meta.get("config") or {}).get("context") or "sentence",  # older checkpoints: sentences
               "seed": (meta.get("train") or {}).get("seed", self.seed)}
        want = {"model": self.model, "corpus": self.corpus, "context": self.context, "seed": self.seed}
        differ = [f"{k} {got[k]!r} (the manifest's: {want[k]!r})" for k in want if got[k] != want[k]]
        return f"{self.folder} holds another run: {', '.join(differ)}" if differ else None

    def status(self, meta: dict | None = None) -> str:
        if self.blocked:
            return "blocked"
        meta = self.meta() if meta is None else meta
        if self.foreign(meta):
            return "foreign"
        resumable = (self.folder / "resume" / "state.json").is_file()
        if "test_perplexity" in meta.get("metrics", {}):
            # a run cut by its epoch cap while still improving goes on when the manifest raises the cap
            cap = self.capped(meta)
            return "partial" if cap is not None and self.epochs > cap and resumable else "finished"
        return "partial" if resumable else "not run"

    def capped(self, meta: dict | None = None) -> int | None:
        """The epoch cap a finished run stopped at while still improving (fewer than ``patience``
        epochs since its best), or None when early stopping ended it (or it is not finished)."""
        meta = self.meta() if meta is None else meta
        metrics, trained = meta.get("metrics", {}), meta.get("train", {})
        cap, done, best = trained.get("epochs"), metrics.get("epochs_trained"), metrics.get("best_epoch")
        if None in (cap, done, best) or "test_perplexity" not in metrics or trained.get("max_batches"):
            return None  # not finished, or a dry run (a pipeline check, not a run)
        return cap if done >= cap and done - best < trained.get("patience", TrainConfig.patience) else None

    def model_kwargs(self, runs: dict[str, Run] | None = None) -> dict:
        """The model's options; with ``runs``, a dropout taken from its sweep (:attr:`dropout_from`)."""
        kwargs = {"emb_dim": self.emb_dim, "hidden_dim": self.hidden_dim, "context": self.context, **self.options}
        if self.dropout_from and runs is not None:
            best = pick(self.dropout_from, runs)
            if best is None:
                raise ValueError(f"{self.name} takes its dropout from {', '.join(self.dropout_from)}, which are not all "
                                 "finished")
            kwargs["dropout"] = best.options.get("dropout", 0.0)
        return kwargs

    def first(self) -> list[str]:
        """The runs that must finish before this one trains: its starting point and its dropout sweep."""
        return ([self.init] if self.init else []) + list(self.dropout_from or [])

    def command(self, action: str = "--only") -> str:
        """The command that does ``action`` for this run (trains it, by default); it names the manifest
        unless that is the default one (``experiments.toml`` of the vizlm home)."""
        where = f"--manifest {shlex.quote(self.manifest)} " if self.manifest else ""
        return f"vizlm reproduce {where}{action} {shlex.quote(self.name)}"


CLAIM_KINDS = ("better", "equal", "mass")
_CLAIM_FIELDS = {"paper", "claim", "paper_says", "paper_ratio", "kind", "run", "against", "tolerance", "positions",
                 "share", "variant_of"}


@dataclass
class Claim:
    """A claim of a paper, decided from runs (the manifest's comment says how)."""

    name: str
    paper: str
    claim: str
    kind: str
    run: str | list[str]
    against: str | list[str] | None = None
    paper_says: str = ""
    paper_ratio: float | None = None  # the paper's own effect as a ratio (run / against), where it gives numbers
    tolerance: float = 0.02  # "equal": the interval must lie within 1 +- tolerance
    positions: int = 5  # "mass": the most recent slots counted
    share: float = 0.75  # "mass": the weight they must hold
    variant_of: str | None = None  # the claim this one tests again at another model size (the report sets them side by side)

    def candidates(self) -> list[str]:
        return [n for ref in (self.run, self.against) if ref for n in ([ref] if isinstance(ref, str) else ref)]


def _read(path: Path | None) -> tuple[Path, dict]:
    """The manifest's TOML, checked: UTF-8 and TOML (else a ValueError naming the file, and the line),
    each of its tables a table."""
    path = Path(path) if path else paths.home() / MANIFEST
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(f"{path}: line {line:,} is not valid UTF-8 (byte {column:,} of the line); "
                         "save the manifest as UTF-8") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} is not TOML: {exc}") from None
    # a file's content, not an argument's type: a ValueError, as every other manifest error (the CLI says it in a line)
    for key in ("defaults", "run", "claim", "attribution", "faithfulness"):
        if not isinstance(doc.get(key, {}), dict):
            table = key if key in ("defaults", "attribution", "faithfulness") else f"{key}.NAME"
            raise ValueError(f"{path}: `{key}` must be a table ([{table}]), "  # noqa: TRY004
                             f"not {type(doc[key]).__name__} {str(doc[key])[:40]!r}")
    for key in ("run", "claim"):
        for name, spec in doc.get(key, {}).items():
            if not isinstance(spec, dict):
                raise ValueError(f"{path}: {key} {name!r} must be a table ([{key}.{name}]), not "  # noqa: TRY004
                                 f"{type(spec).__name__} {str(spec)[:40]!r}")
    return path, doc


def is_own(manifest: Path | str | None) -> bool:
    """Whether ``manifest`` is the repository's ``experiments.toml`` (None: it is)."""
    own = paths.home() / MANIFEST
    return manifest is None or Path(manifest).expanduser().resolve() == own.resolve()


_RUNS_ENV, _EVIDENCE_ENV = "VIZLM_RUNS", "VIZLM_EVIDENCE"  # vizlm.core.paths reads these


@dataclass(frozen=True)
class Locations:
    """Where a manifest's runs (checkpoints), evidence and report go (:func:`locations`)."""

    manifest: Path
    runs: Path
    evidence: Path
    report: Path
    own: bool  # the repository's experiments.toml: its runs/, evidence/ and docs/RESULTS.md

    def applied(self) -> contextlib.AbstractContextManager:
        """:func:`vizlm.core.paths.runs_dir` and :func:`vizlm.core.paths.evidence_dir` (so every run's folder and
        evidence) point here while the block runs (:func:`vizlm.core.paths.overridden`); as they were afterwards."""
        return paths.overridden(runs=self.runs, evidence=self.evidence)


def _chosen(env: str, current: Path, default: Path) -> bool:
    """Whether the user set a location: its environment variable, or an override moving it off its default."""
    return bool(os.environ.get(env)) or current != default


def locations(manifest: Path | str | None = None, runs: Path | str | None = None,
              evidence_dir: Path | str | None = None, report: Path | str | None = None) -> Locations:
    """Where the runs of ``manifest`` train, their evidence goes and ``--report`` writes.

    Each given argument wins. Otherwise, for the repository's ``experiments.toml``: :func:`vizlm.core.paths.runs_dir`
    (``runs/``), :func:`vizlm.core.paths.evidence_dir` (``evidence/``) and ``docs/RESULTS.md``, as always. For any
    other manifest ``DIR/NAME.toml``: ``$VIZLM_RUNS`` / ``$VIZLM_EVIDENCE`` when set, else ``DIR/NAME/runs``
    and ``DIR/NAME/evidence``; the report ``DIR/NAME/RESULTS.md``. A folder named after the manifest, so a
    manifest of yours never writes into the repository's results by accident (not even one beside
    ``experiments.toml``), and two manifests in one folder never share a run's name."""
    path = Path(manifest).expanduser() if manifest else paths.home() / MANIFEST
    own = is_own(path)
    repository = {"runs": paths.home() / "runs", "evidence": paths.home() / "evidence",
                  "report": paths.home() / "docs" / "RESULTS.md"}
    if own:
        mine = {"runs": paths.runs_dir(), "evidence": paths.evidence_dir(), "report": repository["report"]}
    else:
        beside = path.parent / path.stem
        mine = {"runs": paths.runs_dir() if _chosen(_RUNS_ENV, paths.runs_dir(), repository["runs"]) else beside / "runs",
                "evidence": (paths.evidence_dir() if _chosen(_EVIDENCE_ENV, paths.evidence_dir(), repository["evidence"])
                             else beside / "evidence"),
                "report": beside / "RESULTS.md"}
    given = {"runs": runs, "evidence": evidence_dir, "report": report}
    for key, env, option in (("runs", _RUNS_ENV, "--runs"), ("evidence", _EVIDENCE_ENV, "--evidence-dir")):
        # a variable set for the repository's work and still set: only an option says "there, on purpose"
        if not own and given[key] is None and mine[key].resolve() == repository[key].resolve():
            raise ValueError(f"${env} is the repository's {key} folder ({repository[key]}); {path} keeps its {key} "
                             f"apart (by default in {beside / key}): unset ${env}, or pass {option} to mean it")
    chosen = {k: Path(given[k]).expanduser() if given[k] is not None else v for k, v in mine.items()}
    return Locations(manifest=path, own=own, **chosen)


def load_claims(path: Path | None = None, runs: dict[str, Run] | None = None) -> dict[str, Claim]:
    """The claims of ``experiments.toml``, checked against its runs."""
    path, doc = _read(path)
    runs = runs if runs is not None else load_manifest(path)
    claims = {}
    for name, spec in doc.get("claim", {}).items():
        unknown, absent = set(spec) - _CLAIM_FIELDS, {"paper", "claim", "kind", "run"} - set(spec)
        if unknown or absent:
            raise ValueError(f"{path}: claim {name!r} has unknown field(s) {sorted(unknown)}, lacks {sorted(absent)}")
        claim = Claim(name=name, **spec)
        if claim.paper not in PAPERS or claim.kind not in CLAIM_KINDS:
            raise ValueError(f"{path}: claim {name!r}: paper must be one of {', '.join(PAPERS)} and kind one of "
                             f"{', '.join(CLAIM_KINDS)}")
        if (claim.kind == "mass") != (claim.against is None):
            raise ValueError(f"{path}: claim {name!r}: a {claim.kind!r} claim {'has no' if claim.kind == 'mass' else 'needs an'} "
                             "`against`")
        missing = [n for n in claim.candidates() if n not in runs]
        if missing:
            raise ValueError(f"{path}: claim {name!r} refers to {missing}, which are not in the manifest")
        claims[name] = claim
    for claim in claims.values():
        if claim.variant_of is not None and (claim.variant_of not in claims or claims[claim.variant_of].variant_of):
            raise ValueError(f"{path}: claim {claim.name!r}: variant_of must name a claim that is no variant itself")
    return claims


@dataclass
class AttributionPlan:
    """The manifest's ``[attribution]``: the bundled checkpoints whose predictions are attributed over one
    split (beyond the papers: is attention an explanation?), how, and the evidence each leaves
    (:func:`vizlm.reproduce.evidence.write_attribution`)."""

    checkpoints: list[str]
    corpus: str = "brown"
    split: str = "test"
    method: str = "gradient-x-input"
    limit: int | None = None  # the split's first sentences
    note: str | None = None


def _load_plan(path: Path | None, table: str, cls: type):
    """``(the manifest's table [table] as a cls, the manifest's path)``: the checkpoints tables ([attribution],
    [faithfulness], [cases]) checked alike: known fields only, a list of checkpoints, each a folder name (a folder
    in checkpoints/ and in evidence/TABLE/). The plan is None when the manifest has no such table."""
    path, doc = _read(path)
    spec = doc.get(table)
    if spec is None:
        return None, path
    fields = set(cls.__dataclass_fields__)
    if not isinstance(spec, dict) or set(spec) - fields or not isinstance(spec.get("checkpoints"), list):
        raise ValueError(f"{path}: [{table}] needs a list of checkpoints and knows only {', '.join(sorted(fields))}"
                         + (f" (not {', '.join(sorted(set(spec) - fields))})" if isinstance(spec, dict)
                            and set(spec) - fields else ""))
    plan = cls(**spec)
    for name in plan.checkpoints:
        try:
            check_folder_name(name, f"[{table}] checkpoint")
        except DataError as exc:
            raise ValueError(f"{path}: {exc}") from None
    return plan, path


def _write_plan(plan, table: str, names: list[str] | None, force: bool, log, has: Callable[[str], bool],
                write: Callable[[str], Path]) -> list[Path]:
    """``write`` the evidence of the plan's checkpoints (``names``: these only, each one of them), one after the
    other; one that ``has`` evidence is skipped unless ``force``, saying so on ``log`` (default: standard error)."""
    log = log or sys.stderr
    names = names or plan.checkpoints
    if unknown := [n for n in names if n not in plan.checkpoints]:
        raise ValueError(f"{', '.join(unknown)}: not in the manifest's [{table}] checkpoints "
                         f"({', '.join(plan.checkpoints)})")
    written = []
    for name in names:
        if has(name) and not force:
            print(f"reproduce: {name} has {table} evidence (--force to rewrite it)", file=log)
            continue
        written.append(write(name))
    return written


def load_attribution(path: Path | None = None) -> AttributionPlan | None:
    """The ``[attribution]`` table of ``experiments.toml``, checked; None when it has none."""
    from vizlm.inspect.attribution import TEXT_METHODS

    plan, path = _load_plan(path, "attribution", AttributionPlan)
    if plan is not None and plan.method not in TEXT_METHODS:
        raise ValueError(f"{path}: [attribution]: method must be one of {', '.join(TEXT_METHODS)}")
    return plan


def write_attribution_evidence(plan: AttributionPlan, names: list[str] | None = None, force: bool = False,
                               log=None) -> list[Path]:
    """Attribute the plan's bundled checkpoints (``names``: these only) and write their evidence; a checkpoint
    with evidence is skipped unless ``force``. Progress goes to ``log`` (default: standard error)."""
    from vizlm.modeling.checkpoint import bundled_dir

    return _write_plan(plan, "attribution", names, force, log, lambda n: evidence.attribution_folder(n).exists(),
                       lambda n: evidence.write_attribution(n, bundled_dir() / n, plan.corpus, plan.split, plan.method,
                                                            plan.limit, force=force, log=log or sys.stderr))


@dataclass
class FaithfulnessPlan:
    """The manifest's ``[faithfulness]``: the bundled attention checkpoints whose attention is put through the
    literature's tests (:mod:`vizlm.inspect.faithfulness`) over one split, on how many of its sentences and with what
    budget, and the evidence each leaves (:func:`vizlm.reproduce.evidence.write_faithfulness`)."""

    checkpoints: list[str]
    corpus: str = "brown"
    split: str = "test"
    per_document: int | None = None  # the first sentences of every document of the split ...
    limit: int | None = None  # ... or the split's first sentences
    permutations: int = 100  # Jain & Wallace's shuffles per row
    n_steps: int = 32  # integrated gradients' steps
    adversary_steps: int = 200  # Adam steps of the adversarial attention
    note: str | None = None


def load_faithfulness_plan(path: Path | None = None) -> FaithfulnessPlan | None:
    """The ``[faithfulness]`` table of ``experiments.toml``, checked; None when it has none."""
    from vizlm.inspect.attribution import MAX_PERMUTATIONS, MAX_STEPS

    plan, path = _load_plan(path, "faithfulness", FaithfulnessPlan)
    if plan is None:
        return None
    for key, top in (("per_document", None), ("limit", None), ("permutations", MAX_PERMUTATIONS), ("n_steps", MAX_STEPS),
                     ("adversary_steps", None)):
        value = getattr(plan, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1
                                  or (top is not None and value > top)):
            raise ValueError(f"{path}: [faithfulness]: {key} must be a whole number from 1"
                             f"{f' to {top}' if top else ''}, not {value!r}")
    return plan


def write_faithfulness_evidence(plan: FaithfulnessPlan, names: list[str] | None = None, force: bool = False,
                                log=None) -> list[Path]:
    """Run the faithfulness tests of the plan's bundled checkpoints (``names``: these only) and write their
    evidence, one checkpoint after the other (each folder whole when it is written); a checkpoint with evidence
    is skipped unless ``force``."""
    from vizlm.modeling.checkpoint import bundled_dir

    return _write_plan(plan, "faithfulness", names, force, log, lambda n: evidence.faithfulness_folder(n).exists(),
                       lambda n: evidence.write_faithfulness(n, bundled_dir() / n, plan.corpus, plan.split, plan.limit,
                                                             plan.per_document, plan.permutations, plan.n_steps,
                                                             plan.adversary_steps, force, log or sys.stderr))


@dataclass
class CasesPlan:
    """The manifest's ``[cases]``: the bundled attention checkpoints whose highlighted pairs are labelled over one
    split and held against chance (the same rules on pairs at the same distances; :mod:`vizlm.inspect.cases`)."""

    checkpoints: list[str]
    corpus: str = "brown"
    split: str = "test"
    limit: int | None = None  # the split's first sentences
    note: str | None = None


def load_cases_plan(path: Path | None = None) -> CasesPlan | None:
    """The ``[cases]`` table of ``experiments.toml``, checked; None when it has none."""
    return _load_plan(path, "cases", CasesPlan)[0]


def write_cases_evidence(plan: CasesPlan, names: list[str] | None = None, force: bool = False, log=None) -> list[Path]:
    """Label the plan's bundled checkpoints (``names``: these only) against chance and write their evidence; a
    checkpoint with evidence is skipped unless ``force``."""
    from vizlm.modeling.checkpoint import bundled_dir

    return _write_plan(plan, "cases", names, force, log, lambda n: evidence.cases_path(n).exists(),
                       lambda n: evidence.write_cases(n, bundled_dir() / n, plan.corpus, plan.split, plan.limit, force,
                                                      log or sys.stderr))


def _points(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.2f}"


def cases_report(plan: CasesPlan) -> list[str]:
    """The case labels of the plan's checkpoints against chance, from their evidence alone."""
    lines = ["### Beyond the papers: case labels against chance", "",
             (f"Highlighted pairs (weight >= the Cases page's threshold) of each bundled attention model over "
              f"{plan.corpus} {plan.split}{f' (its first {plan.limit:,} sentences)' if plan.limit else ''}, labelled by "
              "vizlm's rules ([CASES.md](CASES.md)), beside the *distance-matched chance rate*: the same rule "
              "on every pair at the same distances, chosen by no attention. The difference, in points, with its 95% "
              "interval over documents: a label attention finds more often than its distances alone would is "
              "enriched; an interval across 0 is no evidence that it is."), "",
             "| model | label | highlighted pairs | rate | chance | rate / chance | difference, points (95% CI) |",
             "|---|---|---:|---:|---:|---:|---|"]
    missing = []
    for name in plan.checkpoints:
        doc = evidence.read_cases(name)
        if doc is None:
            missing.append(name)
            continue
        for label, c in doc["chance"].items():
            ratio = "—" if c.get("enrichment") is None else f"{c['enrichment']:.2f}"
            ci = "no interval (one unit)" if c.get("low") is None else f"{_points(c['low'])} to {_points(c['high'])}"
            lines.append(f"| {name} | {label} | {c['pairs']:,} | {100 * c['observed']:.2f}% | {100 * c['chance']:.2f}% | "
                         f"{ratio} | {_points(c['observed'] - c['chance'])} ({ci}) |")
    if missing:
        lines += ["", f"Not labelled yet: {', '.join(missing)} (`vizlm reproduce --cases`)."]
    return lines + [""]


def _interval(stat: dict | None, scale: float = 1.0, spec: str = ".2f") -> str:
    if stat is None or not stat["n"]:
        return "—"
    return f"{stat['value'] * scale:{spec}} ({stat['lo'] * scale:{spec}}–{stat['hi'] * scale:{spec}})"


def _chance(stat: dict | None) -> str:
    return "—" if stat is None or not stat["n"] else f"{100 * stat['value']:.1f}"


def attribution_report(plan: AttributionPlan) -> list[str]:
    """The tables of "Is attention an explanation?" from ``evidence/attribution/`` alone (markdown lines):
    per model, where its predictions' |attribution| lies by distance, and, for attention models, how the
    attention agrees with it and how far shuffling it moves the prediction; each a mean over the predicted
    words with a 95% bootstrap interval over the units (sentences, or a document model's passages)."""
    from vizlm.inspect.attribution import DISTANCE_BINS, LABELS, TOP_K

    shown = {n: evidence.read_attribution(n) for n in plan.checkpoints}
    what = f"{plan.corpus} {plan.split}" + (f", its first {plan.limit:,} sentences" if plan.limit else "")
    perms = next((ev.config["permutations"] for ev in shown.values() if ev is not None), "—")
    lines = ["### Beyond the papers: is attention an explanation?", "",
             (f"Each model's predictions on {what}, attributed with {LABELS[plan.method]} (captum), every word's "
              "log P(word) to every word read before it, in the model's own context (`vizlm reproduce --attribution`; "
              "evidence in `evidence/attribution/`). Means over the predicted words, 95% bootstrap intervals over "
              "sentences (sentence models) or passages of whole sentences up to 100 tokens (document models)."),
             "", "Where the dependence lies: the share of a prediction's |attribution| on the word just read, one "
             "word back, 2–5 back, further back, and beyond the model's attention window.", "",
             "| model | context | window | targets | just read (%) | 1 back (%) | 2–5 back (%) | > 5 back (%) | "
             "beyond the window (%) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, ev in shown.items():
        if ev is None:
            lines.append(f"| {name} | not run | | | | | | | |")
            continue
        c = ev.config
        bins = " | ".join(_interval(ev.statistic(b), 100, ".1f") for b in DISTANCE_BINS)
        lines.append(f"| {name} | {c['context']} | {c['window'] or '—'} | {c['targets']:,} | {bins} | "
                     f"{_interval(ev.statistic('beyond_window'), 100, '.1f')} |")
    lines += ["", (f"Agreement of the attention with the attribution (attention models; the words a prediction could "
                   f"attend to, predictions with at least two): Kendall τ-b of weight and |attribution|, whether the most "
                   f"attended word is the most important one, the overlap of the top {TOP_K} (each beside what chance "
                   f"gives: attention and attribution unrelated, 1/n and {TOP_K}/n of n positions); and Jain & Wallace's "
                   f"permutation test, each prediction's attention shuffled over its own slots "
                   f"({perms} shuffles, the median per prediction): |Δ log₂ P(word)|, the share moved by more than 1 bit, and the total "
                   "variation distance of the next-word distribution."), "",
              f"| model | targets | Kendall τ | top-1 agrees (%) | by chance | top-{TOP_K} overlap (%) | by chance | "
              "permuted: \\|Δ log₂ P\\| (bits) | moved > 1 bit (%) | TVD |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, ev in shown.items():
        if ev is None or "kendall_tau" not in ev.sums:
            continue
        tau = ev.statistic("kendall_tau")
        lines.append(f"| {name} | {tau['n']:,} | {_interval(tau, spec='+.3f')} | "
                     f"{_interval(ev.statistic('top1'), 100, '.1f')} | {_chance(ev.statistic('top1_chance'))} | "
                     f"{_interval(ev.statistic(f'top{TOP_K}_overlap'), 100, '.1f')} | "
                     f"{_chance(ev.statistic(f'top{TOP_K}_chance'))} | "
                     f"{_interval(ev.statistic('abs_dlogp'), 1 / math.log(2), '.3f')} | "
                     f"{_interval(ev.statistic('moved_1_bit'), 100, '.1f')} | {_interval(ev.statistic('tvd'), spec='.3f')} |")
    if plan.note:
        lines += ["", plan.note]
    return lines + [""]


def _apart(a: dict | None, b: dict | None) -> int:
    """+1 when ``a``'s 95% interval lies wholly above ``b``'s, -1 wholly below, 0 when they overlap (or are absent)."""
    if not a or not b or not all(math.isfinite(x) for x in (a["lo"], a["hi"], b["lo"], b["hi"])):
        return 0
    return 1 if a["lo"] > b["hi"] else -1 if a["hi"] < b["lo"] else 0


def _sign(d: dict | None) -> int:
    """+1 / -1 when a difference's 95% interval lies wholly above / below 0, else 0."""
    if not d or not d.get("n") or not (math.isfinite(d["lo"]) and math.isfinite(d["hi"])):
        return 0
    return 1 if d["lo"] > 0 else -1 if d["hi"] < 0 else 0


def _range(items: list[tuple[str, float]], spec: str, scale: float = 1.0, unit: str = "") -> str:
    """"a (model) to b (model)" of finite values (one: "a (model)"); "—" when none."""
    items = [(n, v) for n, v in items if v is not None and math.isfinite(v)]
    if not items:
        return "—"
    lo, hi = min(items, key=lambda x: x[1]), max(items, key=lambda x: x[1])
    one = f"{lo[1] * scale:{spec}}{unit} ({lo[0]})"
    return one if lo[0] == hi[0] else f"{one} to {hi[1] * scale:{spec}}{unit} ({hi[0]})"


def faithfulness_report(plan: FaithfulnessPlan) -> list[str]:
    """The tables of the faithfulness tests (:mod:`vizlm.inspect.faithfulness`) from ``evidence/faithfulness/`` alone
    (markdown lines): one row per model, each number with its 95% bootstrap interval over the split's documents
    (:meth:`vizlm.reproduce.evidence.FaithfulnessEvidence.statistics`), and a reading of each table computed from its
    numbers (which intervals lie apart, in how many models)."""
    from vizlm.inspect.attribution import LABELS

    shown = {n: evidence.read_faithfulness(n) for n in plan.checkpoints}
    have = {n: ev for n, ev in shown.items() if ev is not None}
    stats = {n: ev.statistics() for n, ev in have.items()}
    missing = [n for n, ev in shown.items() if ev is None]
    short = {"slot-effect": "slot effect", "gradient-x-input": "G×I", "integrated-gradients": "IG",
             "occlusion": "occlusion", "attention": "attention", "gradient": "gradient", "random": "random"}
    any_ev = next(iter(have.values()), None)
    c0 = any_ev.config if any_ev else {}
    sample = ("the first sentence of each of its documents" if plan.per_document == 1
              else f"the first {plan.per_document} sentences of each of its documents" if plan.per_document
              else f"its first {plan.limit:,} sentences" if plan.limit else "all its sentences")
    n_models = len(have)
    lines = ["### Beyond the papers: the faithfulness tests of attention", "",
             (f"The literature's tests of attention as an explanation (`vizlm.inspect.faithfulness`, [API.md](API.md)), "
              f"run on each bundled attention model over {plan.corpus} {plan.split}, {sample} (`vizlm reproduce "
              f"--faithfulness`; evidence in `evidence/faithfulness/`), read in the model's own context: sentence "
              f"models a sentence at a time, document models in passages of whole sentences up to 100 tokens. Each "
              f"number is a mean (or a median, where said) over the predicted words, with its 95% bootstrap interval "
              f"over the split's documents (the Brown splits sample documents; {c0.get('n_boot', '—')} resamples). "
              f"Log-probability changes are in nats, log P(word) as read minus as changed. Masking (erasure, AOPC): "
              f"{c0.get('masking', '—')}. Frozen attention from another seed (Wiegreffe & Pinter) needs a second "
              f"seed's checkpoint of the same model: none is bundled, so it is not run."
              + (" A document's first sentence is read by a document model with nothing before it, as it reads it "
                 "in running text: these tests see its attention within the sentence, none across sentences "
                 "(`per_document` above 1 in `experiments.toml`'s `[faithfulness]` adds the sentences after it)."
                 if plan.per_document == 1 else "")), ""]
    if missing:
        lines += [f"Not run yet: {', '.join(missing)} (`vizlm reproduce --faithfulness {' '.join(missing)}`).", ""]
    if not have:
        return lines
    rows = "| model | context | documents | units | words |"
    lines += [rows, "|---|---|---:|---:|---:|"]
    for n, ev in have.items():
        c = ev.config
        lines.append(f"| {n} | {c['context']} | {c['documents']} | {c['units']:,} {c['unit']} | {c['targets']:,} |")

    # (a) agreement
    methods = [m for m in ("slot-effect", *c0.get("methods", ())) if m]
    lines += ["", ("**Agreement** (Jain & Wallace, Sec. 3): Kendall τ-b per prediction between the attention and "
                   "each method's |attribution| over the words it could attend to (predictions with at least two), and, "
                   "as the **ceiling**, between the methods themselves: an explanation cannot be expected to agree with "
                   "the methods better than they agree with each other. Chance (unrelated scores): 0."), "",
              "| model | " + " | ".join(f"attention ~ {short[m]}" for m in methods)
              + " | ceiling: best method pair | weakest method pair |",
              "|---|" + "---|" * (len(methods) + 2)]
    below = 0
    best_att, ceilings = [], []
    for n, st in stats.items():
        tau = st.get("agreement", {}).get("kendall_tau", {})
        pairs = {k: v for k, v in tau.items() if not k.startswith("attention~") and v and math.isfinite(v["value"])}
        att = {m: tau.get(f"attention~{m}") for m in methods}
        hi = max(pairs.items(), key=lambda kv: kv[1]["value"]) if pairs else None
        lo = min(pairs.items(), key=lambda kv: kv[1]["value"]) if pairs else None
        lines.append(f"| {n} | " + " | ".join(_interval(att[m], spec="+.3f") for m in methods) + " | "
                     + (f"{_interval(hi[1], spec='+.3f')} {_pair(hi[0], short)} | {_interval(lo[1], spec='+.3f')} {_pair(lo[0], short)} |"
                        if hi else "— | — |"))
        words = [a for m, a in att.items() if m != "slot-effect" and a and math.isfinite(a["value"])]
        if words and hi:
            top = max(words, key=lambda a: a["value"])
            best_att.append((n, top["value"]))
            ceilings.append((n, hi[1]["value"]))
            below += _apart(top, hi[1]) < 0
    lines += ["", (f"Reading: attention's best agreement with a word-level method ranges {_range(best_att, '+.2f')}; "
                   f"the best agreement of two methods with each other ranges {_range(ceilings, '+.2f')}. In {below} of "
                   f"{n_models} models attention's best agreement lies below the methods' best agreement with each other "
                   "(the 95% intervals apart).")]

    # (b) permutations
    bins = next((st["permutations"]["bins"] for st in stats.values() if "permutations" in st), [])
    heads = [f"[{b['lo']:g}, {b['hi']:g}{']' if b['hi'] == 1 else ')'}" for b in bins]
    perms = c0.get("permutations", "—")
    lines += ["", (f"**Permutations** (Jain & Wallace, Sec. 4.1): each prediction's weights on its word slots shuffled "
                   f"among them ({perms} shuffles; the start slot and the `<s>` slot keep theirs), the median over the "
                   "shuffles of the total variation distance (TVD) and the Jensen–Shannon divergence (JSD, nats) of the "
                   "next-word distribution; per bin of the prediction's largest word-slot weight, the median over "
                   "predictions (its interval over documents). Rows: predictions per bin."), "",
              "| model | measure | " + " | ".join(heads) + " | rows per bin |", "|---|---|" + "---|" * (len(bins) + 1)]
    rises, top_tvd, low_share = 0, [], []
    for n, st in stats.items():
        p = st.get("permutations")
        if not p:
            continue
        ev = have[n]
        mw = ev.arrays["permutations.max_weight.value"]
        counts = [int(((mw >= b["lo"]) & ((mw <= b["hi"]) if b["hi"] == 1 else (mw < b["hi"]))).sum()) for b in p["bins"]]
        for key, label in (("median_tvd", "TVD"), ("median_jsd", "JSD")):
            lines.append(f"| {n} | {label} | " + " | ".join(_interval(b[key], spec=".3f") for b in p["bins"])
                         + f" | {' / '.join(f'{k:,}' for k in counts) if key == 'median_tvd' else ''} |")
        filled = [b for b, k in zip(p["bins"], counts, strict=True) if k]
        if len(filled) >= 2:
            rises += _apart(filled[-1]["median_tvd"], filled[0]["median_tvd"]) > 0
            top_tvd.append((n, filled[-1]["median_tvd"]["value"]))
        low_share.append((n, counts[0] / max(1, sum(counts))))
    lines += ["", (f"Reading: the share of predictions whose largest word-slot weight is below "
                   f"{bins[0]['hi'] if bins else '—'} ranges {_range(low_share, '.0f', 100, '%')}. Does a shuffle move the "
                   f"prediction more where the attention is peaked? The median TVD of the highest bin with predictions "
                   f"lies above the lowest bin's in {rises} of {n_models} models; in the highest bin it ranges "
                   f"{_range(top_tvd, '.3f')}.")]

    # (c) adversarial
    eps = c0.get("epsilon", "—")
    lines += ["", (f"**Adversarial attention** (Jain & Wallace, Sec. 4.2): per prediction the weights over its slots "
                   f"farthest (JSD, nats; at most ln 2 = 0.693) from its own that change log P(word) by less than "
                   f"ε = {eps} nats ({c0.get('adversary_steps', '—')} Adam steps on the weights' logits)."), "",
              "| model | predictions | mean JSD | median JSD | JSD > ½ ln 2 (%) | \\|Δ log P\\| (nats) |",
              "|---|---:|---:|---:|---:|---:|"]
    far = []
    for n, st in stats.items():
        a = st.get("adversarial")
        if not a:
            continue
        lines.append(f"| {n} | {a['mean_jsd']['n']:,} | {_interval(a['mean_jsd'], spec='.3f')} | "
                     f"{_interval(a['median_jsd'], spec='.3f')} | {_interval(a['share_over_half_ln2'], 100, '.1f')} | "
                     f"{_interval(a['mean_abs_dlogp'], spec='.4f')} |")
        far.append((n, a["share_over_half_ln2"]["value"]))
    lines += ["", (f"Reading: attention at least half the largest possible divergence from the model's own, with the "
                   f"word's probability all but unchanged, was found for {_range(far, '.0f', 100, '%')} of the predictions.")]

    # (d) uniform
    lines += ["", ("**Uniform attention** (Wiegreffe & Pinter, Sec. 3): every prediction's weights replaced by uniform "
                   "weights over its slots; perplexity (the exponential of the mean NLL, its interval likewise) and the "
                   "mean change in NLL per word."), "",
              "| model | perplexity as read | with uniform attention | Δ NLL, uniform − own (nats/word) | frozen from another seed |",
              "|---|---:|---:|---:|---|"]
    worse, better, same_ = [], [], []
    for n, st in stats.items():
        u = st.get("uniform")
        if not u:
            continue
        d = u["uniform_minus_own"]
        frozen = ("not run: no second seed bundled" if "frozen_nll" not in u
                  else _interval(_exp(u["frozen_nll"]), spec=".1f"))
        lines.append(f"| {n} | {_interval(_exp(u['nll']), spec='.1f')} | {_interval(_exp(u['uniform_nll']), spec='.1f')} | "
                     f"{_interval(d, spec='+.4f')} | {frozen} |")
        {1: worse, -1: better, 0: same_}[_sign(d)].append((n, math.expm1(d["value"])))
    said = [f"raises perplexity in {len(worse)} of {n_models} models"
            + (f" (by {_range(worse, '.1f', 100, '%')})" if worse else "")]
    if better:
        said.append(f"lowers it in {len(better)} (by {_range([(n, -v) for n, v in better], '.1f', 100, '%')})")
    if same_:
        said.append(f"in {', '.join(n for n, _ in same_)} the interval of the change includes 0")
    lines += ["", f"Reading (the intervals of the change in NLL per word): uniform attention {'; '.join(said)}."]

    # (e) erasure
    rank3 = [r for r in ("attention", "gradient", "random") if any(r in st.get("erasure", {}) for st in stats.values())]
    ks = next((st["erasure"][rank3[0]]["k"] for st in stats.values() if rank3 and "erasure" in st), [])
    lines += ["", ("**Erasure** (Serrano & Smith 2019): the k word slots ranked first dropped, by attention, by the "
                   "gradient of log P(word) with respect to each weight, or at random: the mean Δ log P(word) (nats) "
                   "and the share of predictions whose most likely next word changes (predictions with at least k word "
                   "slots)."), "",
              "| model | ranking | " + " | ".join(f"Δ log P, k={k}" for k in ks) + " | "
              + " | ".join(f"flips, k={k} (%)" for k in ks) + " |", "|---|---|" + "---:|" * (2 * len(ks))]
    beats_random, beats_gradient = 0, 0
    for n, st in stats.items():
        e = st.get("erasure", {})
        for r in rank3:
            if r not in e:
                continue
            lines.append(f"| {n} | {r} | " + " | ".join(_interval(x, spec='.3f') for x in e[r]["dlogp"]) + " | "
                         + " | ".join(_interval(x, 100, '.1f') for x in e[r]["flip"]) + " |")
        ev = have[n]
        beats_random += _sign(ev.difference("erasure.attention.k1.dlogp", "erasure.random.k1.dlogp")) > 0
        beats_gradient += _sign(ev.difference("erasure.attention.k1.dlogp", "erasure.gradient.k1.dlogp")) > 0
    lines += ["", (f"Reading (paired over the same predictions, k = 1): dropping the most attended word slot lowers "
                   f"log P(word) more than dropping a random one in {beats_random} of {n_models} models, and more than "
                   f"dropping the slot the gradient ranks first in {beats_gradient} of {n_models}.")]

    # (f) AOPC
    ranks = list(next((st["aopc"] for st in stats.values() if "aopc" in st), {}))
    fr = ", ".join(f"{100 * f:g}" for f in c0.get("fractions", ()))
    lines += ["", (f"**Comprehensiveness and sufficiency** (DeYoung et al. 2020, ERASER): the top {fr} % of a "
                   "prediction's word slots by each ranking dropped (comprehensiveness: large where the ranking found "
                   "what mattered) or alone kept (sufficiency: small where they suffice); the AOPC is the mean over "
                   "the fractions, in nats, then over predictions. Rankings: the attention weight, the gradient of "
                   f"log P(word) with respect to the weight, each attribution method ({', '.join(LABELS[m] for m in c0.get('methods', ()))}) "
                   "and random. Masking as above."), "",
              "| model | measure | " + " | ".join(short.get(r, r) for r in ranks) + " |",
              "|---|---|" + "---:|" * len(ranks)]
    comp_random, best = 0, []
    for n, st in stats.items():
        o = st.get("aopc")
        if not o:
            continue
        for c in ("comprehensiveness", "sufficiency"):
            lines.append(f"| {n} | {c} | " + " | ".join(_interval(o[r][c], spec='.3f') for r in ranks) + " |")
        comp_random += _sign(have[n].difference("aopc.attention.comprehensiveness", "aopc.random.comprehensiveness")) > 0
        top = max(ranks, key=lambda r: o[r]["comprehensiveness"]["value"]
                  if math.isfinite(o[r]["comprehensiveness"]["value"]) else -math.inf)
        best.append(f"{n}: {short.get(top, top)}")
    lines += ["", (f"Reading (paired): attention's comprehensiveness is above random's in {comp_random} of {n_models} "
                   f"models. The most comprehensive ranking per model: {'; '.join(best)}.")]

    # (g) the two paths
    groups = [("2", [2]), ("3–5", [3, 4, 5]), ("6–10", list(range(6, 11)))]
    md = c0.get("max_distance", 10)
    groups = [(g, [d for d in ds if d <= md]) for g, ds in groups] + [(f"> {md}", [md + 1])]
    lines += ["", ("**The two paths** (by distance, words back): how a prediction's dependence on an earlier word "
                   "(the word occluded by `<unk>`) splits between the attention read (the row's own state, the memory "
                   "from the occluded reading) and the recurrent state (the other way round): the read's share of "
                   "|read| + |state|, in %, summed over the pairs at those distances (distance 1, the word just read, "
                   "has no slot: no read)."), "",
              "| model | " + " | ".join(f"read share, {g} back (%)" for g, _ in groups) + " |",
              "|---|" + "---:|" * len(groups)]
    far_share = []
    for n, ev in have.items():
        if "paths.d1.read.sum" not in ev.arrays:
            continue
        cells = []
        for g, ds in groups:
            r = ev.ratio([f"paths.d{d}.read" for d in ds], [f"paths.d{d}.{c}" for d in ds for c in ("read", "state")])
            cells.append("—" if r is None else f"{100 * r['value']:.1f} ({100 * r['lo']:.1f}–{100 * r['hi']:.1f})")
            if g == groups[-1][0] and r is not None:
                far_share.append((n, r["value"]))
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += ["", f"Reading: beyond {md} words back, the read carries {_range(far_share, '.0f', 100, '%')} of the dependence."]
    if plan.note:
        lines += ["", plan.note]
    return lines + [""]


def _pair(key: str, short: dict[str, str]) -> str:
    return " ~ ".join(short.get(x, x) for x in key.split("~"))


def _exp(stat: dict | None) -> dict | None:
    """A mean NLL's statistic as a perplexity (its interval's ends exponentiated)."""
    return None if stat is None else {**stat, **{k: math.exp(stat[k]) for k in ("value", "lo", "hi")}}

def load_manifest(path: Path | None = None) -> dict[str, Run]:
    """The runs of ``experiments.toml`` (default: the one in the vizlm home), checked."""
    path, doc = _read(path)
    defaults = doc.get("defaults", {})
    # a manifest of yours: each run's command names it; one named experiments.toml is the default of the
    # vizlm home it lies in (the repository's, or VIZLM_HOME=its folder), found without naming it
    named = None if path.name == MANIFEST else str(path)
    runs = {}
    for name, spec in doc.get("run", {}).items():
        try:  # the name is the run's folder in runs/ and evidence/: one folder name, never a path
            check_folder_name(name, "run name")
        except DataError as exc:
            raise ValueError(f"{path}: {exc}") from None
        if name in (evidence.ATTRIBUTION, evidence.CASES):
            raise ValueError(f"{path}: a run may not be named {name!r}: evidence/{name}/ holds corpus-wide evidence")
        unknown = set(spec) - _FIELDS
        if unknown:
            raise ValueError(f"{path}: run {name!r} has unknown field(s) {sorted(unknown)}")
        values = {k: v for k, v in {**defaults, **spec}.items() if k in _FIELDS}
        absent = {"paper", "model"} - set(values)
        if absent:
            raise ValueError(f"{path}: run {name!r} lacks {', '.join(sorted(absent))}")
        run = Run(name=name, **values, manifest=named)
        if run.paper not in PAPERS:
            raise ValueError(f"{path}: run {name!r}: unknown paper {run.paper!r}; valid: {', '.join(PAPERS)}")
        if run.model not in REGISTRY and not run.blocked:
            raise ValueError(f"{path}: run {name!r}: unknown model {run.model!r}")
        if type(run.freeze) is not bool or (run.freeze and not run.init):
            raise ValueError(f"{path}: run {name!r}: freeze must be true or false, and true needs an init run")
        runs[name] = run
    for run in runs.values():
        if run.dropout_from is not None and (not isinstance(run.dropout_from, list) or not run.dropout_from
                                             or "dropout" in run.options):
            raise ValueError(f"{path}: run {run.name!r}: dropout_from must be a non-empty list of runs, and the run "
                             "may not set its own dropout")
        for ref in (run.init, run.control, *(run.dropout_from or [])):
            if ref is not None and ref not in runs:
                raise ValueError(f"{path}: run {run.name!r} refers to {ref!r}, which is not in the manifest")
    return runs


def _metrics(run: Run, meta: dict | None = None) -> dict:
    """The run's stored metrics and parameter count: from ``meta``, else its evidence when it has
    some (what the report uses), else its checkpoint."""
    if meta is None:
        meta = _evidence_meta(run) or run.meta()
    return {**meta.get("metrics", {}), "parameters": meta.get("parameters")} if meta else {}


def serves(run: Run, claims: dict[str, Claim], runs: dict[str, Run] | None = None) -> list[str]:
    """The claims that ``run`` is one of the runs of (as ``run`` or ``against``), or (given
    ``runs``) another seed of one that a claim compares seed by seed (:func:`seed_pairs`)."""
    return [c.name for c in claims.values() if run.name in _claim_runs(c, runs or {})]


def _claim_runs(claim: Claim, runs: dict[str, Run]) -> set[str]:
    """The runs ``claim`` reads: its candidates, and the seed pairs :func:`decide` checks."""
    names = set(claim.candidates())
    if claim.against is None or not runs:
        return names
    groups = seed_groups(runs)

    def group(name: str) -> list[Run]:
        return next((g for g in groups if runs[name] in g), [runs[name]])

    refs = [[ref] if isinstance(ref, str) else ref for ref in (claim.run, claim.against)]
    for x in refs[0]:
        for y in refs[1]:
            names |= {n for r in group(x) for a in group(y) if r.seed == a.seed for n in (r.name, a.name)}
    return names


def needs(run: Run, runs: dict[str, Run], claims: dict[str, Claim]) -> list[str]:
    """The claims that need ``run``: those it serves, and those of the runs that start from it."""
    out = serves(run, claims, runs)
    for other in runs.values():
        if other.init == run.name and other is not run:
            out += [c for c in needs(other, runs, claims) if c not in out]
    return out


def table(runs: dict[str, Run], claims: dict[str, Claim] | None = None) -> list[dict]:
    """One row per run: state, stored metrics, whether its evidence is in the repository and the
    claims that need it (for ``--list``)."""
    rows = []
    for run in runs.values():
        meta = run.meta()
        status = run.status(meta)
        m = _metrics(run, meta) if status == "finished" else {}
        rows.append({"run": run.name, "paper": run.paper, "model": run.model, "context": run.context,
                     "status": status, "evidence": run.done(), "capped": run.capped(meta),
                     "note": state_note(run, status, meta), "parameters": m.get("parameters"),
                     "valid": m.get("valid_perplexity"), "test": m.get("test_perplexity"), "why": run.blocked,
                     "claims": needs(run, runs, claims or {})})
    return rows


def order(runs: dict[str, Run], names: list[str]) -> list[Run]:
    """``names`` and the runs they start from (``init``, ``dropout_from``), those first."""
    out: list[Run] = []

    def visit(name: str) -> None:
        run = runs[name]
        for first in run.first():
            visit(first)
        if run not in out:
            out.append(run)

    for name in names:
        if name not in runs:
            raise ValueError(f"no run {name!r} in the manifest; see `vizlm reproduce --list`")
        visit(name)
    return out


TO_TRAIN = ("not run", "partial", "foreign")  # the states --only / --all act on (foreign: to say why it cannot)


def pending(runs: dict[str, Run], names: list[str]) -> list[Run]:
    """:func:`order` of ``names``, the runs in it that are not finished (nor blocked)."""
    return [r for r in order(runs, names) if r.status() in TO_TRAIN]


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
        evidence.write(run.name, run.folder, log=log)
    if status in ("finished", "blocked"):
        return status
    if run.bundled:
        raise ValueError(f"{run.name} is bundled in checkpoints/{run.bundled} but has no test perplexity; "
                         "retrain it by its own command (config.json), not by reproduce")
    if run.init and runs[run.init].status() != "finished":
        raise ValueError(f"{run.name} starts from {run.init}, which is not finished")
    if unfinished := [n for n in run.dropout_from or [] if runs[n].status() != "finished"]:
        raise ValueError(f"{run.name} takes its dropout from a sweep not finished yet: {', '.join(unfinished)}")
    if run.init and not (runs[run.init].folder / "model.safetensors").is_file():
        raise ValueError(f"{run.name} starts from {run.init}, whose weights are not here (only its evidence is kept): "
                         f"retrain it into {runs[run.init].folder} first (move {evidence.folder(run.init)} aside, "
                         f"then `{runs[run.init].command()}`)")
    check_corpus(run)
    dev = resolve_device(device)  # a clear message before anything is read or written
    if threads:
        import torch

        torch.set_num_threads(threads)
    print(f"reproduce: {'resuming' if status == 'partial' else 'training'} {run.name} -> {run.folder}", file=log)
    tc = TrainConfig(epochs=run.epochs, seed=run.seed, freeze=run.freeze,
                     extra={"command": run.command(), "run": run.name, "commit": paths.commit()})
    tc = tc.dry_run() if dry_run else tc
    train(run.model, run.model_kwargs(runs), run.corpus, run.folder, tc,
          init=str(runs[run.init].folder) if run.init else None, resume=status == "partial", match=run.match,
          ctx=Context(device=dev))  # one process: a run is not split across a torchrun group
    if not dry_run and run.status() == "finished":
        evidence.write(run.name, run.folder, force=run.done(), log=log)  # a raised cap: the run went on
    return run.status()


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
    return evidence.write(run.name, run.folder, force=force, log=log)


def versus(run: Run, against: Run) -> dict:
    """Test perplexity of ``run`` against ``against`` from their evidence, with the paired
    bootstrap 95% interval of the ratio over documents (one seed; :func:`comparison` adds the
    seed spread)."""
    return evidence.versus(run.evidence(), against.evidence(), "test")


def seed_pair(run: Run, against: Run) -> verdicts.SeedPair:
    """The test-split comparison of two finished runs, from their evidence."""
    a, b = run.evidence(), against.evidence()
    if not (a.tokens["test"].shape == b.tokens["test"].shape and (a.tokens["test"] == b.tokens["test"]).all()):
        raise evidence.EvidenceError(f"{run.name} and {against.name} scored different sentences of test: not comparable")
    return verdicts.SeedPair(a.nll["test"], b.nll["test"], a.tokens["test"], a.documents["test"].tolist())


def protocol(run: Run) -> tuple[str, str]:
    """Runs of one protocol share a seed spread: the corpus and the context they read."""
    return run.corpus, run.context


class Spreads:
    """The between-seed variance of every setup's test log perplexity (:mod:`vizlm.reproduce.verdicts`): its own
    seeds' where it has two or more finished, else the median of its protocol's."""

    def __init__(self, runs: dict[str, Run]):
        self.own: dict[str, verdicts.SeedSpread] = {}
        self.groups: dict[tuple[str, str], list[tuple[str, verdicts.SeedSpread]]] = {}
        for group in seed_groups(runs):
            done = [r for r in group if r.done()]
            spread = verdicts.seed_variance([math.log(_metrics(r)["test_perplexity"]) for r in done])
            if spread is not None:
                self.own |= dict.fromkeys((r.name for r in group), spread)
                self.groups.setdefault(protocol(group[0]), []).append((group[0].name, spread))
        self.median = {key: verdicts.protocol_median([s for _, s in g]) for key, g in self.groups.items()}

    def of(self, run: Run) -> verdicts.SeedSpread:
        return self.own.get(run.name) or self.median.get(protocol(run), verdicts.SeedSpread(0.0, 0, "none"))

    def pair_variance(self, run: Run, against: Run) -> float:
        """The variance of one seed pair's log ratio: the two arms' seeds are independent."""
        return self.of(run).var + self.of(against).var

    def describe(self, key: tuple[str, str]) -> str:
        if key not in self.groups:
            return "no setup of this protocol has two or more seeds: seed noise is not included"
        own = ", ".join(f"{name} {100 * s.sd:.2f}% ({s.df + 1} seeds)" for name, s in self.groups[key])
        return f"{own}; a setup with one seed takes their median, {100 * self.median[key].sd:.2f}%"


def comparison(run: Run, runs: dict[str, Run], spreads: Spreads | None = None) -> dict | None:
    """The run against its control (test split): ratio and 95% interval over documents, widened by
    the seed spread of its protocol (:mod:`vizlm.reproduce.verdicts`); None until both have evidence."""
    control = runs.get(run.control) if run.control else None
    if control is None or not run.done() or not control.done():
        return None
    spreads = spreads if spreads is not None else Spreads(runs)
    iv = verdicts.claim_interval([seed_pair(run, control)], spreads.pair_variance(run, control))
    return {"control": control.name, "ratio": iv.ratio, "low": iv.low, "high": iv.high, "resampled": iv.resampled}


def pick(ref: str | list[str], runs: dict[str, Run]) -> Run | None:
    """The run standing for ``ref``: that run, or of a list the one with the lowest *valid*
    perplexity (a model's best window); None until every run of ``ref`` has its evidence (the
    best of a sweep is never picked from part of it)."""
    members = [runs[n] for n in ([ref] if isinstance(ref, str) else ref)]
    if not all(r.done() for r in members):
        return None
    return members[0] if len(members) == 1 else min(members, key=lambda r: _metrics(r)["valid_perplexity"])


HALF_PRECISION_TOLERANCE = 0.001  # float16 storage may change test perplexity by less than this (relative)


def bundle(run: Run, folder_name: str | None = None, manifest: Path | None = None, log=sys.stderr) -> Path:
    """Copy the finished ``run`` into ``checkpoints/FOLDER`` (default: the run's name), as the app's
    bundled checkpoint of it, and record that in the manifest (``bundled = "FOLDER"``).

    Its weights are stored as float16 when that changes its test perplexity by less than
    :data:`HALF_PRECISION_TOLERANCE` (measured here, both numbers kept in ``storage``), else as
    they are. The training log goes with it; the resume state does not."""
    import shutil

    import torch

    from vizlm.modeling.checkpoint import save_checkpoint
    from vizlm.modeling.evaluate import score_split
    from vizlm.data.tokens import open_split

    if run.status() != "finished" or not (run.folder / "model.safetensors").is_file():
        raise ValueError(f"{run.name} is {run.status()} and has no weights in {run.folder}; only a finished run "
                         "whose weights are here can be bundled")
    if run.bundled:
        raise ValueError(f"{run.name} is already bundled in checkpoints/{run.bundled}")
    ckpt = load_checkpoint(run.folder)
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
    name = folder_name or run.name
    dest = paths.checkpoints_dir() / name
    if dest.exists():
        raise ValueError(f"checkpoints/{name} exists already; choose another name (--as)")
    save_checkpoint(dest, ckpt.model, ckpt.name, ckpt.vocab, weights_dtype=torch.float16 if use_half else None, **meta)
    if (run.folder / "train_log.jsonl").is_file():
        shutil.copyfile(run.folder / "train_log.jsonl", dest / "train_log.jsonl")
    _mark_bundled(Path(manifest) if manifest else paths.home() / MANIFEST, run.name, name)
    evidence.write(run.name, dest, force=True, log=log)  # the evidence of the weights as bundled
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


def _pct(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.1f}%"


def _waiting(ref: str | list[str], runs: dict[str, Run]) -> str:
    names = [ref] if isinstance(ref, str) else ref
    blocked = [f"{n} ({runs[n].blocked})" for n in names if runs[n].blocked]
    if blocked:
        return "blocked: " + "; ".join(blocked)
    return "not run: " + ", ".join(n for n in names if not runs[n].done())


def decide(claim: Claim, runs: dict[str, Run], spreads: Spreads | None = None) -> dict:
    """The verdict on ``claim`` from the finished runs: ``verdict`` (its summary, or "not tested"),
    ``ours`` (the effect and its interval), the runs used, and for a ratio claim the three parts
    (``direction``, ``size``, ``equivalence``), the seed-aware interval (``interval``: seeds, seed
    spread, bootstrap p value) of :mod:`vizlm.reproduce.verdicts`."""
    run = pick(claim.run, runs)
    against = pick(claim.against, runs) if claim.against else None
    if run is None or (claim.against and against is None):
        waits = [claim.run] if run is None else []
        waits += [claim.against] if claim.against and against is None else []
        names = [n for w in waits for n in ([w] if isinstance(w, str) else w)]
        return {"verdict": "not tested", "ours": _waiting(names, runs)}
    used = run.name + (f" vs {against.name}" if against else "")
    if claim.kind == "mass":
        pos = run.evidence().positions
        if pos is None:
            return {"verdict": "not tested", "ours": f"{run.name}'s evidence has no attention by position"}
        window = pos["window"]
        share = float(sum(m for _, m in sorted(zip(pos["offset"], pos["mean"]))[: claim.positions]))
        # a flat average by position comes from flat rows or from sharp rows that pick different positions
        return {"verdict": "reproduced" if share >= claim.share else "not reproduced", "runs": used,
                "ours": f"{share:.0%} of the weight on the {claim.positions} most recent of {window} positions "
                        f"(equal weights: {claim.positions / window:.0%}); a row's largest weight "
                        f"{pos['largest_weight']:.2f} on average (equal weights: {1 / window:.2f}), its entropy "
                        f"{pos['entropy']:.2f} nats ({math.log(window):.2f})"}
    spreads = spreads if spreads is not None else Spreads(runs)
    pairs = seed_pairs(run, against, runs)
    iv = verdicts.claim_interval([seed_pair(r, a) for r, a in pairs], spreads.pair_variance(run, against))
    parts = verdicts.verdict(claim.kind, iv.low, iv.high, claim.paper_ratio, claim.tolerance)
    # the seeds' mean test perplexities, as the ratio is their mean (one seed: the runs' own)
    ppl = statistics.mean(_metrics(r)["test_perplexity"] for r, _ in pairs)
    ppl_against = statistics.mean(_metrics(a)["test_perplexity"] for _, a in pairs)
    seeds = (f"{iv.seeds} seed{'s' if iv.seeds > 1 else ''}"
             + (f": {', '.join(f'{x:.3f}' for x in iv.per_seed)}" if iv.seeds > 1 else ""))
    ours = (f"{ppl:.1f} vs {ppl_against:.1f}: {_pct(iv.ratio)} (95% CI {_pct(iv.low)} to {_pct(iv.high)}; "
            f"{iv.resampled} resampled, {seeds})")
    stale = sorted({x.name for pair in pairs for x in pair if x.stale})
    summary = parts["summary"] + (f" (rests on stale evidence: {', '.join(stale)})" if stale else "")
    return {"verdict": summary, "ours": ours, "runs": used, "interval": iv, **parts}


def decide_all(claims: dict[str, Claim], runs: dict[str, Run], spreads: Spreads | None = None) -> dict[str, dict]:
    """:func:`decide` for every claim, with Holm's adjustment over the ratio claims tested
    (``holm``: adjusted p value and the interval at the step's level)."""
    spreads = spreads if spreads is not None else Spreads(runs)
    decided = {name: decide(c, runs, spreads) for name, c in claims.items()}
    tested = {name: d["interval"].p for name, d in decided.items() if "interval" in d}
    for name, h in verdicts.holm(tested).items():
        iv = decided[name]["interval"]
        low, high = iv.at(h["level"])
        decided[name]["holm"] = {**h, "low": low, "high": high}
    return decided


def seed_pairs(run: Run, against: Run, runs: dict[str, Run]) -> list[tuple[Run, Run]]:
    """(run, against) seed by seed: finished members of their seed groups with equal seeds."""
    def group(r: Run) -> list[Run]:
        return next((g for g in seed_groups(runs) if r in g), [r])

    return [(r, a) for r in group(run) for a in group(against) if r.seed == a.seed and r.done() and a.done()]


_NOT_SETUP = {"name", "seed", "control", "bundled", "note", "stale"}  # what may differ between seeds of one setup


def _setup_key(run: Run, ignore: set[str], options: dict | None = None) -> str:
    """The run's fields but ``ignore`` (``options`` replaced when given), as a key: equal keys, one setup."""
    setup = {k: v for k, v in vars(run).items() if k not in ignore}
    if options is not None:
        setup["options"] = options
    return json.dumps(setup, sort_keys=True)


def seed_groups(runs: dict[str, Run]) -> list[list[Run]]:
    """Runs that differ only in their seed (and so in their control's seed), two or more to a
    group, in manifest order: the spread a single comparison cannot show."""
    groups: dict[str, list[Run]] = {}
    for run in runs.values():
        if run.blocked:
            continue
        groups.setdefault(_setup_key(run, _NOT_SETUP), []).append(run)
    # runs alike in every field but sharing a seed are two setups the manifest cannot tell apart
    # (e.g. one started from a checkpoint outside it), not seeds of one
    return [g for g in groups.values() if len(g) > 1 and len({r.seed for r in g}) == len(g)]


SWEPT = ("window", "n", "entropy_weight")  # options the papers sweep (Daniluk et al., Fig. 2a / 2b; Liu & Lee's lambda)


def sweeps(runs: dict[str, Run]) -> list[tuple[str, list[Run]]]:
    """(option, runs) for runs that differ only in one swept option (name, control, bundled copy
    and note aside), two or more to a sweep, in manifest order: a paper's figure as a table row.
    Seeds are kept apart (a seed is another sweep)."""
    found: dict[tuple[str, str], list[Run]] = {}
    for key in SWEPT:
        for run in runs.values():
            if run.blocked or key not in run.options:
                continue
            others = {k: v for k, v in run.options.items() if k != key}
            found.setdefault((key, _setup_key(run, _NOT_SETUP - {"seed"}, others)), []).append(run)
    return [(key, g) for (key, _), g in found.items() if len(g) > 1]


def _sweep_table(key: str, sweeps_: list[list[Run]], runs: dict[str, Run]) -> list[str]:
    values = sorted({r.options[key] for g in sweeps_ for r in g})
    lines = [f"| model | {' | '.join(f'{key} = {v}' for v in values)} |", "|---|" + "---:|" * len(values)]
    for group in sweeps_:
        best = pick([r.name for r in group], runs)  # the run a claim over the sweep stands on
        by_value = {r.options[key]: r for r in group}
        cells = []
        for v in values:
            run = by_value.get(v)
            if run is not None and run.done():
                m = _metrics(run)
                cell = f"{m['test_perplexity']:.2f} ({m['valid_perplexity']:.2f})"
                cells.append(f"**{cell}**" if run is best else cell)
            else:
                cells.append(_report_state(run) if run else "")
        label = group[0].model + "".join(f" {k}={v}" for k, v in group[0].options.items() if k != key)
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return lines


def _spread(values: list[float], spec: str = ".2f") -> str:
    if len(values) < 2:
        return "—"
    return f"{statistics.mean(values):{spec}} ± {statistics.stdev(values):{spec}}"


def _seed_rows(group: list[Run], runs: dict[str, Run], spreads: Spreads) -> str:
    done = [r for r in group if r.done()]
    tests = [_metrics(r)["test_perplexity"] for r in done]
    cs = [c for r in done if (c := comparison(r, runs, spreads))]
    ratios = ", ".join(f"{c['ratio']:.3f} ({c['low']:.3f}–{c['high']:.3f})" for c in cs) or "—"
    better, worse = sum(c["high"] < 1 for c in cs), sum(c["low"] > 1 for c in cs)
    agree = f"better in {better}, worse in {worse}, unclear in {len(cs) - better - worse} of {len(cs)}" if cs else "—"
    return (f"| {', '.join(r.name for r in group)} | {len(done)} of {len(group)} | "
            f"{', '.join(f'{t:.2f}' for t in tests) or '—'} | {_spread(tests)} | {ratios} | "
            f"{_spread([c['ratio'] for c in cs], '.3f')} | {agree} |")


def state_note(run: Run, status: str, meta: dict) -> str:
    """What the status alone does not say: why a run cannot run, that its cap (not early
    stopping) ended it, or that a process is training it now."""
    if run.blocked:
        return run.blocked
    if status == "foreign":
        return run.foreign(meta) or ""
    if status == "finished":
        cap = run.capped(meta)
        notes = [f"stopped at its {cap}-epoch cap, still improving" if cap is not None else "",
                 f"stale: {run.stale}" if run.stale else ""]
        if any(notes):
            return "; ".join(n for n in notes if n)
    if status in ("not run", "partial") and files.training_now(run.folder):
        return "training now: another process holds its folder"
    return ""


def _evidence_meta(run: Run) -> dict:
    """The run's evidence as a checkpoint's config.json would hold it ({} without evidence)."""
    ev = run.evidence() if run.done() else None
    return {**ev.config, "metrics": ev.metrics} if ev else {}


def _report_state(run: Run) -> str:
    """The run's state as its evidence alone says it (the report reads nothing else): finished
    (with its cap note), not run, or blocked."""
    if run.blocked:
        return f"blocked: {run.blocked}"
    if not run.done():
        return "not run"
    note = state_note(run, "finished", _evidence_meta(run))
    return f"finished ({note})" if note else "finished"


def _fmt(v, spec: str = ".1f") -> str:
    return "—" if v is None else format(v, spec)


def _shown(path: Path, base: Path) -> str:
    """``path`` as a report in ``base`` names it: relative when it lies inside ``base``."""
    try:
        return path.resolve().relative_to(base.resolve()).as_posix() or "."
    except ValueError:
        return str(path)


def _corpora(runs: list[Run]) -> str:
    return ", ".join(f"`{c}`" for c in dict.fromkeys(r.corpus for r in runs))


def _yours_header(runs: dict[str, Run], where: Locations) -> list[str]:
    """The head of a report of a manifest not the repository's: what made it, on which corpus, and what
    its verdicts mean there."""
    # the manifest by its name (run from its folder), the evidence relative to the report: no user's folders in it
    return [(f"_Generated by `vizlm reproduce --manifest {where.manifest.name} --report` from the runs' evidence "
             f"(`{_shown(where.evidence, where.report.parent)}/`); do not edit by hand._"), "",
            (f"Corpus: {_corpora(list(runs.values()))}. The papers' numbers (the claims' *the paper* column) were "
             "measured on the papers' own corpora (Liu & Lee: PTB; Daniluk et al.: Wikipedia; the repository's "
             "docs/RESULTS.md: Brown) and are not expected here. Each verdict compares the models trained here with "
             "each other, under the paper's protocol: the ratio of their test perplexities with its 95% interval "
             "over the test documents and the training seeds."), ""]


def _holm_cell(d: dict) -> str:
    h = d.get("holm")
    if not h:
        return "—"
    p = d["interval"].p
    return (f"p {_p(p)}, adjusted {_p(h['p_adjusted'])}; {_pct(h['low'])} to {_pct(h['high'])} "
            f"at {100 * h['level']:.2f}%")


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _summary(claims: dict[str, Claim], decided: dict[str, dict]) -> list[str]:
    """The findings first: one row a claim (paper, claim, ours, verdict), and how many were tested."""
    tested = [n for n, d in decided.items() if "interval" in d]
    lines = ["### Summary: the papers' claims", "",
             (f"Each claim's ratio of test perplexities (run / against) with a 95% interval over the test documents "
              f"and the training seeds; {len(tested)} ratio claims tested (Holm's adjustment over them in each "
              "paper's table below). The verdict has three parts there: the direction, where the paper's own effect "
              "lies against the interval, and equivalence within the claim's margin where equality is the claim; "
              "*inconclusive* means the interval holds both no difference and the paper's effect."), "",
             "| paper | claim | the paper | ours (test) | verdict |", "|---|---|---|---|---|"]
    for name, c in claims.items():
        if c.variant_of:
            continue  # in the table of sizes
        d = decided[name]
        ours = d["ours"] if "interval" not in d else (
            f"{_pct(d['interval'].ratio)} ({_pct(d['interval'].low)} to {_pct(d['interval'].high)}), "
            f"{d['interval'].seeds} seed{'s' if d['interval'].seeds > 1 else ''}")
        lines.append(f"| {c.paper} | {c.claim} | {c.paper_says} | {ours} | **{d['verdict']}** |")
    return lines + [""]


def model_size(claim: Claim, runs: dict[str, Run]) -> str:
    """The size of the models a claim compares, as its first run's embedding / hidden size says."""
    first = runs[claim.candidates()[0]]
    return f"k = {first.hidden_dim}" if first.emb_dim == first.hidden_dim else f"{first.emb_dim} / {first.hidden_dim}"


def _sizes(claims: dict[str, Claim], decided: dict[str, dict], runs: dict[str, Run]) -> list[str]:
    """Each claim tested again at another size, beside its verdict at the first (our d = 50 grid)."""
    variants: dict[str, list[Claim]] = {}
    for c in claims.values():
        if c.variant_of:
            variants.setdefault(c.variant_of, []).append(c)
    if not variants:
        return []
    sizes = list(dict.fromkeys(model_size(v, runs) for vs in variants.values() for v in vs))
    first = {model_size(claims[b], runs) for b in variants}
    head = [*sorted(first), *sizes]
    lines = ["### Does the verdict depend on the size?", "",
             ("Each claim at our grid's size and at the paper's (k = 300), under the same protocol: the ratio with its "
              "95% interval over documents and seeds, and the verdict."), "",
             f"| claim | {' | '.join(head)} |", "|---|" + "---|" * len(head)]
    for base, vs in variants.items():
        cells = {model_size(claims[base], runs): decided[base], **{model_size(v, runs): decided[v.name] for v in vs}}
        row = []
        for size in head:
            d = cells.get(size)
            if d is None:
                row.append("—")
            elif "interval" in d:
                iv = d["interval"]
                row.append(f"{_pct(iv.ratio)} ({_pct(iv.low)} to {_pct(iv.high)}), {iv.seeds} seed"
                           f"{'s' if iv.seeds > 1 else ''}: **{d['verdict']}**")
            else:
                row.append(f"{d['ours']}: **{d['verdict']}**" if d["verdict"] != "not tested" else f"not tested ({d['ours']})")
        lines.append(f"| {claims[base].claim} | {' | '.join(row)} |")
    return lines + [""]


def report(runs: dict[str, Run], claims: dict[str, Claim] | None = None,
           attribution: AttributionPlan | None = None, where: Locations | None = None,
           cases: CasesPlan | None = None, faithfulness: FaithfulnessPlan | None = None) -> str:
    """The result tables (markdown), from the checkpoints' stored metrics and paired comparisons,
    and the verdict on each claim of the papers; with ``attribution``, the corpus attribution's tables; with
    ``faithfulness``, the faithfulness tests'; with ``cases``, the case labels against chance.
    ``where`` (:func:`locations`) of a manifest of yours: the head names it, its evidence and its corpus, and
    each section its corpus (the repository's own report is as it always was)."""
    yours = where is not None and not where.own
    lines = [REPORT_BEGIN, ""]
    if yours:
        lines += _yours_header(runs, where)
    else:
        lines += ["_Generated by `vizlm reproduce --report` from the runs' evidence (`evidence/`); do not edit by hand._", ""]
    spreads = Spreads(runs)
    decided = decide_all(claims or {}, runs, spreads)
    if claims:
        lines += _summary(claims, decided) + _sizes(claims, decided, runs)
    for paper, title in PAPERS.items():
        members = [r for r in runs.values() if r.paper == paper]
        if not members:
            continue
        if yours:
            title = f"{title}, on {_corpora(members)}"
        mine = [c for c in (claims or {}).values() if c.paper == paper]
        if mine:
            said = "the paper (on its corpus)" if yours else "the paper"
            lines += [f"### {title}: the claims", "",
                      f"| claim | {said} | ours (test) | runs | direction | the paper's effect | Holm | verdict |",
                      "|---|---|---|---|---|---|---|---|"]
            for c in mine:
                d = decided[c.name]
                size = d.get("size", "—") + (f"; {d['equivalence']}" if d.get("equivalence") else "")
                lines.append(f"| {c.claim} | {c.paper_says} | {d['ours']} | {d.get('runs', '—')} | "
                             f"{d.get('direction', '—')} | {size} | {_holm_cell(d)} | **{d['verdict']}** |")
            keys = dict.fromkeys(protocol(runs[d["runs"].split(" vs ")[0]]) for c in mine
                                 if "interval" in (d := decided[c.name]))
            for key in keys:
                lines += ["", (f"Seed sd of the test log perplexity ({key[1]} level, `{key[0]}`): "
                               f"{spreads.describe(key)}.")]
            lines.append("")
        lines += [f"### {title}", "",
                  "| run | model | context | parameters | valid | test | vs control (95% CI over documents and seeds) | state |",
                  "|---|---|---|---:|---:|---:|---|---|"]
        for run in members:
            m = _metrics(run) if run.done() else {}
            c = comparison(run, runs, spreads)
            vs = "—" if c is None else (f"{c['ratio']:.3f} ({c['low']:.3f}–{c['high']:.3f}) vs {c['control']} "
                                        f"over {c['resampled']}; " + verdicts.direction(c["low"], c["high"]))
            state = _report_state(run)
            lines.append(f"| {run.name} | {run.model}{''.join(f' {k}={v}' for k, v in run.options.items())}"
                         f"{' (init frozen)' if run.freeze else ''}{' dropout chosen on valid' if run.dropout_from else ''} | "
                         f"{run.context} | {_fmt(m.get('parameters'), ',')} | {_fmt(m.get('valid_perplexity'))} | "
                         f"{_fmt(m.get('test_perplexity'))} | {vs} | {state} |")
        lines.append("")
        if swept := [(k, g) for k, g in sweeps(runs) if g[0].paper == paper]:
            lines += [f"### {title}: sweeps", "",
                      ("Test perplexity (valid in brackets) of one setup at each value of the swept option; "
                       "bold: the best on valid, the one a claim about the model's best setting uses."), ""]
            for key in dict.fromkeys(k for k, _ in swept):
                lines += _sweep_table(key, [g for k, g in swept if k == key], runs) + [""]
        if groups := [g for g in seed_groups(runs) if g[0].paper == paper]:
            lines += [f"### {title}: seeds", "",
                      ("Each row: one setup trained with different seeds, each seed against its own control "
                       "(the control's run with the same seed); each interval over documents and the seed spread."), "",
                      ("| runs | finished | test per seed | test mean ± sd | vs control per seed (95% CI) | "
                       "ratio mean ± sd | seeds |"), "|---|---|---|---|---|---|---|"]
            lines += [_seed_rows(g, runs, spreads) for g in groups] + [""]
    if attribution is not None:
        lines += attribution_report(attribution)
    if faithfulness is not None:
        lines += faithfulness_report(faithfulness)
    if cases is not None:
        lines += cases_report(cases)
    lines.append(REPORT_END)
    return "\n".join(lines) + "\n"


def write_report(runs: dict[str, Run], path: Path, claims: dict[str, Claim] | None = None,
                 attribution: AttributionPlan | None = None, where: Locations | None = None,
                 cases: CasesPlan | None = None, faithfulness: FaithfulnessPlan | None = None) -> Path:
    """Replace the generated part of ``path`` (between the markers), or append it. ``where``: as
    :func:`report`; a report of a manifest of yours that does not exist yet starts with a title."""
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    new = report(runs, claims, attribution, where, cases, faithfulness)
    if REPORT_BEGIN in text and REPORT_END in text:
        head, rest = text.split(REPORT_BEGIN, 1)
        text = head + new.rstrip("\n") + rest.split(REPORT_END, 1)[1]
    elif not text.strip() and where is not None and not where.own:
        text = f"# Results of {where.manifest.name}\n\n" + new
    else:
        text = text.rstrip("\n") + "\n\n## Reproduction (generated)\n\n" + new
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_text(path, text, force=True)  # --report rewrites its own part: whole or not at all
    return path


__all__ = ["MANIFEST", "AttributionPlan", "Claim", "FaithfulnessPlan", "Locations", "Run", "attribution_report", "bundle",
           "check_corpus", "decide", "faithfulness_report", "is_own", "load_attribution", "load_claims",
           "load_faithfulness_plan", "load_manifest", "locations", "needs", "order", "pick",
           "report", "run_one", "seed_groups", "seed_pairs", "serves", "state_note", "sweeps", "table", "versus",
           "write_attribution_evidence", "write_evidence", "write_faithfulness_evidence", "write_report"]
