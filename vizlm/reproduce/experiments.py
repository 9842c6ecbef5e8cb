"""The manifest ``experiments.toml`` read and checked: its runs, the papers' claims, and where a manifest's runs,
evidence and report go.

A run (:class:`Run`) is *finished* when its evidence is in the repository (:mod:`vizlm.reproduce.evidence`:
``evidence/RUN/``, written when its training ends), *partial* when its resume state exists (its training was cut
short: it is resumed, never restarted), *not run*, or *blocked* (the manifest says why). A run whose checkpoint is
finished but whose evidence is not yet written is finished too (``vizlm reproduce --evidence RUN`` writes it). A
finished run is never trained again, with one exception: a run its epoch cap stopped while it was still improving
goes on from its resume state when the manifest raises the cap (the cap is a bound, early stopping on valid is the
rule). Checkpoints live in :func:`vizlm.core.paths.runs_dir` (``runs/``, not kept in the repository), except those
bundled in ``checkpoints/``.

Here too what the manifest says of its runs taken together: the claims a run serves (:func:`needs`), the runs that
differ only in their seed (:func:`seed_groups`) or in one swept option (:func:`sweeps`), the best of a list on valid
(:func:`pick`). Training them is :mod:`vizlm.reproduce.runner`'s, the report from their evidence
:mod:`vizlm.reproduce.report`'s, the manifest's corpus tables ([attribution], [faithfulness], [cases])
:mod:`vizlm.reproduce.corpus_runs`'.

Your own manifest (``vizlm reproduce --manifest my.toml``, e.g. the papers' protocols on a corpus of
yours, ``examples/my-corpus.toml``) keeps everything it makes in a folder named after it, beside it
(``my/runs``, ``my/evidence``, ``my/RESULTS.md``; :func:`locations`), never in the repository's
``runs/``, ``evidence/`` or ``docs/RESULTS.md``, unless ``$VIZLM_RUNS`` / ``$VIZLM_EVIDENCE`` or the
command's ``--runs`` / ``--evidence-dir`` / ``--report-out`` say otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from vizlm.core import files, paths
from vizlm.data.registry import DataError, check_folder_name
from vizlm.modeling.checkpoint import CheckpointError, read_meta
from vizlm.modeling.config import TrainConfig
from vizlm.models import REGISTRY
from vizlm.reproduce import corpus_evidence, evidence

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
_FIELDS = {"paper", "model", "context", "corpus", "init", "control", "options", "match", "seed", "epochs", "bundled",
           "blocked", "note", "emb_dim", "hidden_dim", "freeze", "stale", "dropout_from", "external"}


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
    # trained outside vizlm and imported (vizlm import): the commands that trained and imported it; reproduce
    # writes its evidence from the imported checkpoint and never trains it
    external: str | None = None
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
            return evidence_meta(self)
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
        if self.external and meta.get("imported"):  # trained elsewhere: finished when imported
            return "finished"
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


def read_toml(path: Path | None) -> tuple[Path, dict]:
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
    path, doc = read_toml(path)
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


def load_manifest(path: Path | None = None) -> dict[str, Run]:
    """The runs of ``experiments.toml`` (default: the one in the vizlm home), checked."""
    path, doc = read_toml(path)
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
        if name in (corpus_evidence.ATTRIBUTION, corpus_evidence.FAITHFULNESS, corpus_evidence.CASES):
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
    try:  # a run that starts from itself could never train
        start_order(runs, list(runs))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return runs


def start_order(runs: dict[str, Run], names: list[str]) -> list[Run]:
    """``names`` and the runs they start from (``init``, ``dropout_from``), those first, each once; a run that
    starts from itself, directly or through others, is a ValueError naming the loop. Depth first without
    recursion: linear in the manifest's size, however long a chain of starts."""
    out: list[Run] = []
    placed: set[str] = set()
    for name in names:
        if name not in runs:
            raise ValueError(f"no run {name!r} in the manifest; see `vizlm reproduce --list`")
        stack = [(name, iter(runs[name].first()))]
        walking = {name}
        while stack:
            current, starts = stack[-1]
            first = next(starts, None)
            if first is None:
                stack.pop()
                walking.discard(current)
                if current not in placed:
                    placed.add(current)
                    out.append(runs[current])
            elif first in walking:
                path = [n for n, _ in stack]
                loop = " -> ".join([*path[path.index(first):], first])
                raise ValueError(f"run {first!r} starts from itself: {loop} (init / dropout_from)")
            elif first not in placed:
                walking.add(first)
                stack.append((first, iter(runs[first].first())))
    return out


def run_metrics(run: Run, meta: dict | None = None) -> dict:
    """The run's stored metrics and parameter count: from ``meta``, else its evidence when it has
    some (what the report uses), else its checkpoint."""
    if meta is None:
        meta = evidence_meta(run) or run.meta()
    return {**meta.get("metrics", {}), "parameters": meta.get("parameters")} if meta else {}


def pick(ref: str | list[str], runs: dict[str, Run]) -> Run | None:
    """The run standing for ``ref``: that run, or of a list the one with the lowest *valid*
    perplexity (a model's best window); None until every run of ``ref`` has its evidence (the
    best of a sweep is never picked from part of it)."""
    members = [runs[n] for n in ([ref] if isinstance(ref, str) else ref)]
    if not all(r.done() for r in members):
        return None
    return members[0] if len(members) == 1 else min(members, key=lambda r: run_metrics(r)["valid_perplexity"])


def serves(run: Run, claims: dict[str, Claim], runs: dict[str, Run] | None = None) -> list[str]:
    """The claims that ``run`` is one of the runs of (as ``run`` or ``against``), or (given
    ``runs``) another seed of one that a claim compares seed by seed (:func:`vizlm.reproduce.report.seed_pairs`)."""
    return [name for name, names in claim_runs(claims, runs or {}).items() if run.name in names]


def claim_runs(claims: dict[str, Claim], runs: dict[str, Run]) -> dict[str, set[str]]:
    """Each claim's runs: its candidates and (given ``runs``) the seed pairs :func:`vizlm.reproduce.report.decide`
    checks. The seed groups are found once for all claims."""
    index = seed_index(runs) if runs else {}
    return {c.name: _claim_runs(c, runs, index) for c in claims.values()}


def _claim_runs(claim: Claim, runs: dict[str, Run], index: dict[str, list[Run]]) -> set[str]:
    """The runs ``claim`` reads, ``index`` the runs' :func:`seed_index`."""
    names = set(claim.candidates())
    if claim.against is None or not runs:
        return names
    refs = [[ref] if isinstance(ref, str) else ref for ref in (claim.run, claim.against)]
    for x in refs[0]:
        for y in refs[1]:
            names |= {n for r in index.get(x, [runs[x]]) for a in index.get(y, [runs[y]]) if r.seed == a.seed
                      for n in (r.name, a.name)}
    return names


def needs(run: Run, runs: dict[str, Run], claims: dict[str, Claim],
          served: dict[str, set[str]] | None = None) -> list[str]:
    """The claims that need ``run``: those it serves, and those of the runs that start from it. ``served``:
    :func:`claim_runs` of these claims and runs, when the caller asks for many runs (found once)."""
    served = claim_runs(claims, runs) if served is None else served
    out = [name for name, names in served.items() if run.name in names]
    for other in runs.values():
        if other.init == run.name and other is not run:
            out += [c for c in needs(other, runs, claims, served) if c not in out]
    return out


_NOT_SETUP = {"name", "seed", "control", "bundled", "note", "stale"}  # what may differ between seeds of one setup


def _setup_key(run: Run, ignore: set[str], options: dict | None = None, init: int | None = None) -> str:
    """The run's fields but ``ignore`` (``options`` and ``init`` replaced when given), as a key: equal keys, one
    setup."""
    setup = {k: v for k, v in vars(run).items() if k not in ignore}
    if options is not None:
        setup["options"] = options
    if init is not None:
        setup["init"] = init
    return json.dumps(setup, sort_keys=True)


def _seed_keys(runs: dict[str, Run]) -> dict[str, str]:
    """Each run's :func:`_setup_key` but its seed, its starting run (``init``) by that run's own key: a run
    started from another seed of the same start (``amsrn-doc-s2`` from ``lstm-doc-s2``) is a seed of the setup.
    A starting run's key enters as its number among the distinct keys (a long chain stays linear in size);
    ``load_manifest`` refuses a run that starts from itself."""
    keys: dict[str, str] = {}
    number: dict[str, int] = {}
    for start in runs:
        chain, name = [], start  # the run, then its starts until one already has a key
        while name not in keys:
            chain.append(name)
            name = runs[name].init
            if name not in runs:
                break
        for n in reversed(chain):
            init = runs[n].init
            keys[n] = _setup_key(runs[n], _NOT_SETUP, init=number[keys[init]] if init in runs else None)
            number.setdefault(keys[n], len(number))
    return keys


def seed_groups(runs: dict[str, Run]) -> list[list[Run]]:
    """Runs that differ only in their seed (and so in their control's and their starting run's seed), two or
    more to a group, in manifest order: the spread a single comparison cannot show."""
    groups: dict[str, list[Run]] = {}
    keys = _seed_keys(runs)
    for run in runs.values():
        if run.blocked:
            continue
        groups.setdefault(keys[run.name], []).append(run)
    # runs alike in every field but sharing a seed are two setups the manifest cannot tell apart
    # (e.g. one started from a checkpoint outside it), not seeds of one
    return [g for g in groups.values() if len(g) > 1 and len({r.seed for r in g}) == len(g)]


def seed_index(runs: dict[str, Run]) -> dict[str, list[Run]]:
    """Each run of a seed group (:func:`seed_groups`) by name, to its group."""
    return {r.name: g for g in seed_groups(runs) for r in g}


SWEPT = ("window", "n", "entropy_weight")  # options the papers sweep (Daniluk et al., Fig. 2a / 2b; Liu & Lee's lambda)
# options we tune on valid (a sweep chooses the value other runs use, `dropout_from`), each with the least value it
# can take: a best at the largest value swept, or at a smallest one above that least, leaves the optimum unbracketed
TUNED = {"dropout": 0.0}


def unbracketed(key: str, group: list[Run]) -> str | None:
    """For a sweep of a :data:`TUNED` option whose best on valid (:func:`pick`) lies at an end of the values swept
    that is not the option's least: ``"largest"`` or ``"smallest"``; None when the sweep brackets its best, is not
    whole yet, or sweeps the papers' values (:data:`SWEPT`: their figures' ranges, not a choice of ours)."""
    best = pick([r.name for r in group], {r.name: r for r in group}) if key in TUNED else None
    if best is None:
        return None
    values = sorted(r.options[key] for r in group)
    if best.options[key] == values[-1]:
        return "largest"
    return "smallest" if best.options[key] == values[0] > TUNED[key] else None


def sweeps(runs: dict[str, Run]) -> list[tuple[str, list[Run]]]:
    """(option, runs) for runs that differ only in one swept option (name, control, bundled copy
    and note aside), two or more to a sweep, in manifest order: a paper's figure (:data:`SWEPT`) or a value we
    tune on valid (:data:`TUNED`) as a table row. Seeds are kept apart (a seed is another sweep)."""
    found: dict[tuple[str, str], list[Run]] = {}
    for key in (*SWEPT, *TUNED):
        for run in runs.values():
            if run.blocked or key not in run.options:
                continue
            others = {k: v for k, v in run.options.items() if k != key}
            found.setdefault((key, _setup_key(run, _NOT_SETUP - {"seed"}, others)), []).append(run)
    return [(key, g) for (key, _), g in found.items() if len(g) > 1]


def trained_on(meta: dict) -> str | None:
    """The kind of device a checkpoint's or evidence's config says trained it (``cpu``, ``cuda``; ``cuda:1``
    counts as ``cuda``); None where it predates the record."""
    device = (meta.get("train") or {}).get("device")
    return str(device).split(":")[0] if device else None


def run_device(run: Run) -> str | None:
    """:func:`trained_on` of the run's evidence; None without evidence."""
    return trained_on(evidence_meta(run))


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
                 f"stale: {run.stale}; train it again: {run.command()} --force" if run.stale else ""]
        if any(notes):
            return "; ".join(n for n in notes if n)
    if status in ("not run", "partial") and files.training_now(run.folder):
        return "training now: another process holds its folder"
    return ""


def evidence_meta(run: Run) -> dict:
    """The run's evidence as a checkpoint's config.json would hold it ({} without evidence)."""
    ev = run.evidence() if run.done() else None
    return {**ev.config, "metrics": ev.metrics} if ev else {}


__all__ = ["CLAIM_KINDS", "MANIFEST", "PAPERS", "SWEPT", "TUNED", "Claim", "Locations", "Run", "evidence_meta", "is_own",
           "load_claims", "load_manifest", "locations", "needs", "pick", "read_toml", "run_device", "run_metrics", "seed_groups",
           "serves", "start_order", "state_note", "sweeps", "trained_on", "unbracketed"]
