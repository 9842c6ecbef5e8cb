"""The manifest's corpus tables, beyond the papers: ``[attribution]`` (is attention an explanation?),
``[faithfulness]`` (the literature's tests of attention) and ``[cases]`` (case labels against chance), each a list
of bundled checkpoints run over one split. Per table: its plan read and checked from ``experiments.toml``, its
evidence written checkpoint by checkpoint (:mod:`vizlm.reproduce.corpus_evidence`), and its section of the report
(``*_report``: Markdown lines from that evidence alone, which :func:`vizlm.reproduce.report.report` adds)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vizlm.data.registry import DataError, check_folder_name
from vizlm.inspect.analysis import view_label
from vizlm.present.links import parse_head_code
from vizlm.reproduce import corpus_evidence, experiments


@dataclass
class AttributionPlan:
    """The manifest's ``[attribution]``: the bundled checkpoints whose predictions are attributed over one
    split (beyond the papers: is attention an explanation?), how, and the evidence each leaves
    (:func:`vizlm.reproduce.corpus_evidence.write_attribution`)."""

    checkpoints: list[str]
    corpus: str = "brown"
    split: str = "test"
    method: str = "gradient-x-input"
    also: list[str] = field(default_factory=list)  # more methods, each its own evidence (CHECKPOINT.METHOD)
    per_document: int | None = None  # the first sentences of every document of the split ...
    limit: int | None = None  # ... or the split's first sentences (neither: all of it)
    note: str | None = None

    def units(self, names: list[str] | None = None) -> list[tuple[str, str, str]]:
        """``(evidence name, checkpoint, method)`` of every evidence the plan (its checkpoints ``names``) keeps: one
        per checkpoint with ``method``, and one per checkpoint and method of ``also``
        (:func:`vizlm.reproduce.corpus_evidence.attribution_name`)."""
        return [(corpus_evidence.attribution_name(c, m, self.method), c, m) for c in names or self.checkpoints
                for m in [self.method, *self.also]]

    def differs(self, config: dict, method: str | None = None) -> list[str]:
        """How an evidence's ``config`` (of ``method``, default the plan's) departs from the plan's settings
        (:meth:`FaithfulnessPlan.differs`'s form); evidence without its units' documents (written before they were
        kept) departs too."""
        want = {"corpus": self.corpus, "split": self.split, "method": method or self.method,
                "per_document": self.per_document, "limit": self.limit}
        return ([f"{key} {config.get(key)} (the manifest: {value})" for key, value in want.items()
                 if config.get(key) != value]
                + ([] if config.get("resampled") == "documents" else ["no documents kept (resampled over units)"]))


def _check_counts(plan, path: Path, table: str, limits: dict[str, int | None]) -> None:
    """Each of the plan's ``limits`` keys is None or a whole number from 1 (up to its value, where one is given)."""
    for key, top in limits.items():
        value = getattr(plan, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1
                                  or (top is not None and value > top)):
            raise ValueError(f"{path}: [{table}]: {key} must be a whole number from 1"
                             f"{f' to {top}' if top else ''}, not {value!r}")
    if getattr(plan, "per_document", None) is not None and plan.limit is not None:
        raise ValueError(f"{path}: [{table}]: per_document and limit choose the sample two ways: give one")


def _load_plan(path: Path | None, table: str, cls: type):
    """``(the manifest's table [table] as a cls, the manifest's path)``: the checkpoints tables ([attribution],
    [faithfulness], [cases]) checked alike: known fields only, a list of checkpoints, each a folder name (a folder
    in checkpoints/ and in evidence/TABLE/). The plan is None when the manifest has no such table."""
    path, doc = experiments.read_toml(path)
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
    if plan is None:
        return None
    if plan.method not in TEXT_METHODS:
        raise ValueError(f"{path}: [attribution]: method must be one of {', '.join(TEXT_METHODS)}")
    if (not isinstance(plan.also, list) or any(m not in TEXT_METHODS for m in plan.also)
            or len({plan.method, *plan.also}) != 1 + len(plan.also)):
        raise ValueError(f"{path}: [attribution]: also lists other methods than `method`, each once, of "
                         f"{', '.join(TEXT_METHODS)} (also = [\"integrated-gradients\"]), not {plan.also!r}")
    _check_counts(plan, path, "attribution", {"per_document": None, "limit": None})
    return plan


def write_attribution_evidence(plan: AttributionPlan, names: list[str] | None = None, force: bool = False,
                               log=None, device: str = "cpu") -> list[Path]:
    """Attribute the plan's bundled checkpoints (``names``: these only) with each of its methods and write their
    evidence (:meth:`AttributionPlan.units`), one after the other, on ``device``; one with evidence is skipped unless
    ``force``. Progress goes to ``log`` (default: standard error)."""
    from vizlm.modeling.checkpoint import bundled_dir

    def has(checkpoint: str) -> bool:
        return all(corpus_evidence.attribution_folder(u[0]).exists() for u in plan.units([checkpoint]))

    def write(checkpoint: str) -> Path:
        written = None
        for name, _, method in plan.units([checkpoint]):
            if force or not corpus_evidence.attribution_folder(name).exists():
                written = corpus_evidence.write_attribution(name, bundled_dir() / checkpoint, plan.corpus, plan.split,
                                                            method, plan.limit, force=force, log=log or sys.stderr,
                                                            per_document=plan.per_document, device=device)
        return written

    return _write_plan(plan, "attribution", names, force, log, has, write)


@dataclass
class FaithfulnessPlan:
    """The manifest's ``[faithfulness]``: the bundled attention checkpoints whose attention is put through the
    literature's tests (:mod:`vizlm.inspect.faithfulness`) over one split, on how many of its sentences and with what
    budget, and the evidence each leaves (:func:`vizlm.reproduce.corpus_evidence.write_faithfulness`)."""

    checkpoints: list[str]
    corpus: str = "brown"
    split: str = "test"
    per_document: int | None = None  # the first sentences of every document of the split ...
    limit: int | None = None  # ... or the split's first sentences
    permutations: int = 100  # Jain & Wallace's shuffles per row
    n_steps: int = 32  # integrated gradients' steps
    adversary_steps: int = 200  # Adam steps of the adversarial attention
    frozen: dict[str, str] = field(default_factory=dict)  # checkpoint -> another seed's bundled checkpoint of it
    heads: dict[str, list[str]] = field(default_factory=dict)  # a Transformer -> the heads tested ("2.1": layer 2, head 1)
    note: str | None = None

    def units(self, names: list[str] | None = None) -> list[tuple[str, str, tuple[int, int] | None, str]]:
        """``(evidence name, checkpoint, head from 0 or None, label)`` of every evidence the plan (its checkpoints
        ``names``) keeps: one per checkpoint, one per head tested of a Transformer
        (:func:`vizlm.reproduce.corpus_evidence.faithfulness_name`); the label is the report's row."""
        out = []
        for c in names or self.checkpoints:
            if c not in self.heads:
                out.append((c, c, None, c))
                continue
            for code in self.heads[c]:
                head = parse_head_code(code)
                out.append((corpus_evidence.faithfulness_name(c, head), c, head, view_label(c, head, 0)))
        return out

    def differs(self, checkpoint: str, config: dict) -> list[str]:
        """How an evidence's ``config`` (of ``checkpoint``) departs from the plan's settings, one
        ``"key value (the manifest: value)"`` each; empty when it is what the plan would write now."""
        want = {"corpus": self.corpus, "split": self.split, "per_document": self.per_document, "limit": self.limit,
                "permutations": self.permutations, "n_steps": self.n_steps, "adversary_steps": self.adversary_steps,
                "frozen": self.frozen.get(checkpoint)}
        return [f"{key} {config.get(key)} (the manifest: {value})" for key, value in want.items()
                if config.get(key) != value]


def load_faithfulness_plan(path: Path | None = None) -> FaithfulnessPlan | None:
    """The ``[faithfulness]`` table of ``experiments.toml``, checked; None when it has none."""
    from vizlm.inspect.attribution import MAX_STEPS
    from vizlm.inspect.attribution_corpus import MAX_PERMUTATIONS

    plan, path = _load_plan(path, "faithfulness", FaithfulnessPlan)
    if plan is None:
        return None
    _check_counts(plan, path, "faithfulness", {"per_document": None, "limit": None, "permutations": MAX_PERMUTATIONS,
                                               "n_steps": MAX_STEPS, "adversary_steps": None})
    if not isinstance(plan.frozen, dict) or not all(isinstance(v, str) for v in plan.frozen.values()):
        raise ValueError(f"{path}: [faithfulness]: frozen maps a checkpoint to another seed's checkpoint of it "
                         '(frozen = {amsrn = "amsrn-shared-s4"}), not ' + repr(plan.frozen))
    def one_head(code) -> bool:  # "2.1": layer 2, head 1 (not "2", a layer's heads together)
        head = parse_head_code(code) if isinstance(code, str) else None
        return head is not None and head[1] is not None

    if not isinstance(plan.heads, dict) or not all(isinstance(v, list) and v and all(map(one_head, v))
                                                   for v in plan.heads.values()):
        raise ValueError(f"{path}: [faithfulness]: heads maps a Transformer to the heads tested, each \"layer.head\" "
                         '(heads = {transformer-doc = ["2.1", "2.2"]}), not ' + repr(plan.heads))
    if unknown := [c for c in plan.heads if c not in plan.checkpoints]:
        raise ValueError(f"{path}: [faithfulness]: heads: {', '.join(unknown)} not among the checkpoints")
    for name, other in plan.frozen.items():
        if name not in plan.checkpoints or other == name:
            raise ValueError(f"{path}: [faithfulness]: frozen: {name!r} -> {other!r}: the key must be one of the "
                             "checkpoints and the value another checkpoint")
        try:
            check_folder_name(other, "[faithfulness] frozen checkpoint")
        except DataError as exc:
            raise ValueError(f"{path}: {exc}") from None
    return plan


def write_faithfulness_evidence(plan: FaithfulnessPlan, names: list[str] | None = None, force: bool = False,
                                log=None, device: str = "cpu") -> list[Path]:
    """Run the faithfulness tests of the plan's bundled checkpoints (``names``: these only) on ``device`` and write
    their evidence, one checkpoint after the other (each folder whole when it is written); a checkpoint with
    evidence is skipped unless ``force``."""
    from vizlm.modeling.checkpoint import bundled_dir

    def has(checkpoint: str) -> bool:
        return all(corpus_evidence.faithfulness_folder(u[0]).exists() for u in plan.units([checkpoint]))

    def write(checkpoint: str) -> Path:
        written = None
        for name, _, head, _ in plan.units([checkpoint]):  # a Transformer's heads one after the other
            if force or not corpus_evidence.faithfulness_folder(name).exists():
                written = corpus_evidence.write_faithfulness(
                    name, bundled_dir() / checkpoint, plan.corpus, plan.split, plan.limit, plan.per_document,
                    plan.permutations, plan.n_steps, plan.adversary_steps, force, log or sys.stderr,
                    _frozen(plan.frozen.get(checkpoint)), head, device)
        return written

    return _write_plan(plan, "faithfulness", names, force, log, has, write)


def _frozen(name: str | None) -> Path | None:
    from vizlm.modeling.checkpoint import bundled_dir

    return None if name is None else bundled_dir() / name


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


def write_cases_evidence(plan: CasesPlan, names: list[str] | None = None, force: bool = False, log=None,
                         device: str = "cpu") -> list[Path]:
    """Label the plan's bundled checkpoints (``names``: these only) against chance on ``device`` and write their
    evidence; a checkpoint with evidence is skipped unless ``force``."""
    from vizlm.modeling.checkpoint import bundled_dir

    return _write_plan(plan, "cases", names, force, log, lambda n: corpus_evidence.cases_path(n).exists(),
                       lambda n: corpus_evidence.write_cases(n, bundled_dir() / n, plan.corpus, plan.split, plan.limit,
                                                             force, log or sys.stderr, device))


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
        doc = corpus_evidence.read_cases(name)
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


def _resampled(configs: list[dict]) -> str:
    """What the intervals of these evidence configs resample, in words, and how often
    (:func:`vizlm.inspect.attribution_corpus.resample_clusters`' rule): the documents, or the units read where a
    sample holds one document."""
    docs = sorted({c.get("documents") for c in configs} - {None})
    n_boot = next((c["n_boot"] for c in configs if "n_boot" in c), "—")
    if docs and docs[0] < 2:
        return (f"the units read (sentences or passages: {'a sample' if len(docs) > 1 else 'the sample'} holds "
                f"one document, so no documents to resample; {n_boot} resamples)")
    span = f"{docs[0]}–{docs[-1]}" if len(docs) > 1 else str(docs[0]) if docs else "—"
    return f"the split's documents ({span} documents, the unit a split samples; {n_boot} resamples)"


SHORT_METHODS = {"gradient-x-input": "G×I", "integrated-gradients": "IG", "occlusion": "occlusion"}  # a row's tag


def attribution_report(plan: AttributionPlan) -> list[str]:
    """The tables of "Is attention an explanation?" from ``evidence/attribution/`` alone (markdown lines):
    per model (and per method of the plan's ``also``: its rows tagged), where its predictions' |attribution| lies
    by distance, and, for attention models, how the attention agrees with it; each a mean over the predicted
    words with a 95% bootstrap interval over the split's documents
    (:meth:`vizlm.reproduce.corpus_evidence.AttributionEvidence.statistic`). Evidence written under other settings
    than the plan's is named, with the command that writes it again; evidence not written yet is listed."""
    from vizlm.inspect.agreement import TOP_K
    from vizlm.inspect.attribution import DEFAULT_STEPS, LABELS
    from vizlm.inspect.attribution_corpus import DISTANCE_BINS

    units = plan.units()
    label = {name: checkpoint if method == plan.method else f"{checkpoint} · {SHORT_METHODS[method]}"
             for name, checkpoint, method in units}
    shown = {name: corpus_evidence.read_attribution(name) for name, _, _ in units}
    departs = {name: d for name, _, method in units
               if shown[name] is not None and (d := plan.differs(shown[name].config, method))}
    current = {name: ev for name, ev in shown.items() if ev is not None and name not in departs}  # as written now
    pending = {m: [c for name, c, method in units if method == m and shown[name] is None] for m in plan.also}
    steps = f", {DEFAULT_STEPS} steps" if "integrated-gradients" in (plan.method, *plan.also) else ""
    lines = ["### Beyond the papers: is attention an explanation?", "",
             (f"Each model's predictions on {plan.corpus} {plan.split}, "
              f"{corpus_evidence.sample_words(plan.per_document, plan.limit)}, attributed with {LABELS[plan.method]}"
              + "".join(f" and, in the rows tagged {SHORT_METHODS[m]}, {LABELS[m]}" for m in plan.also)
              + f" (captum{steps}), every word's log P(word) to every word read before it, in the model's own context "
              "(`vizlm reproduce --attribution`; evidence in `evidence/attribution/`): sentence models a sentence at "
              "a time, document models in passages of whole sentences up to 100 tokens. Means over the predicted "
              f"words, with 95% bootstrap intervals over {_resampled([ev.config for ev in current.values()])}."), ""]
    if departs:
        lines += [("Written under other settings than the manifest's, and not shown (`vizlm reproduce --attribution "
                   f"{' '.join(dict.fromkeys(c for n, c, _ in units if n in departs))} --force` writes them again): "
                   + "; ".join(f"{label[n]}: {', '.join(d)}" for n, d in departs.items()) + "."), ""]
    for m, names in pending.items():
        if names:
            lines += [f"Not run yet with {LABELS[m]}: {', '.join(names)} (`vizlm reproduce --attribution "
                      f"{' '.join(names)}`).", ""]
    lines += ["Where the dependence lies: the share of a prediction's |attribution| on the word just read, one "
              "word back, 2–5 back, further back, and beyond the model's attention window.", "",
              "| model | context | window | documents | words | just read (%) | 1 back (%) | 2–5 back (%) | "
              "> 5 back (%) | beyond the window (%) |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, _, method in units:
        ev = current.get(name)
        if ev is None:
            if method == plan.method:
                lines.append(f"| {label[name]} | {'not run' if name not in departs else 'other settings (above)'} "
                             "| | | | | | | | |")
            continue
        c = ev.config
        bins = " | ".join(_interval(ev.statistic(b), 100, ".1f") for b in DISTANCE_BINS)
        lines.append(f"| {label[name]} | {c['context']} | {c['window'] or '—'} | {c['documents']} | "
                     f"{c['targets']:,} | {bins} | {_interval(ev.statistic('beyond_window'), 100, '.1f')} |")
    lines += ["", (f"Agreement of the attention with the attribution (attention models; the words a prediction could "
                   f"attend to, predictions with at least two): Kendall τ-b of weight and |attribution|, whether the most "
                   f"attended word is the most important one, the overlap of the top {TOP_K} (each beside what chance "
                   f"gives: attention and attribution unrelated, 1/n and {TOP_K}/n of n positions). Jain & Wallace's "
                   "permutation test, the ceiling of the agreement and the other tests are the faithfulness "
                   "section's, below."), "",
              f"| model | words | Kendall τ | top-1 agrees (%) | by chance | top-{TOP_K} overlap (%) | by chance |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for name, ev in current.items():
        if "kendall_tau" not in ev.sums:
            continue
        tau = ev.statistic("kendall_tau")
        lines.append(f"| {label[name]} | {tau['n']:,} | {_interval(tau, spec='+.3f')} | "
                     f"{_interval(ev.statistic('top1'), 100, '.1f')} | {_chance(ev.statistic('top1_chance'))} | "
                     f"{_interval(ev.statistic(f'top{TOP_K}_overlap'), 100, '.1f')} | "
                     f"{_chance(ev.statistic(f'top{TOP_K}_chance'))} |")
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
    (:meth:`vizlm.reproduce.corpus_evidence.FaithfulnessEvidence.statistics`), and a reading of each table computed from its
    numbers (which intervals lie apart, in how many models)."""
    from vizlm.inspect.attribution import LABELS

    units = plan.units()
    shown = {label: corpus_evidence.read_faithfulness(name) for name, _, _, label in units}
    have = {n: ev for n, ev in shown.items() if ev is not None}
    stats = {n: ev.statistics() for n, ev in have.items()}
    missing = list(dict.fromkeys(c for _, c, _, label in units if shown[label] is None))
    short = {**SHORT_METHODS, "slot-effect": "slot effect", "attention": "attention", "gradient": "gradient",
             "random": "random"}
    any_ev = next(iter(have.values()), None)
    c0 = any_ev.config if any_ev else {}
    samples = {(ev.config.get("per_document"), ev.config.get("limit")) for ev in have.values()}
    per_document, limit = next(iter(samples)) if len(samples) == 1 else (plan.per_document, plan.limit)
    sample = (corpus_evidence.sample_words(per_document, limit) if len(samples) <= 1
              else "samples that differ between the models (below)")
    checkpoint_of = {label: checkpoint for _, checkpoint, _, label in units}
    departs = {n: plan.differs(checkpoint_of[n], ev.config) for n, ev in have.items()}
    departs = {n: d for n, d in departs.items() if d}
    heads_said = "; ".join(f"{k} {', '.join(v)}" for k, v in plan.heads.items())
    heads_in = any(ev.config.get("head") is not None for ev in have.values())
    n_models = f"{len(have)} {'attentions' if heads_in else 'models'}"  # a Transformer's head is one attention tested
    lines = ["### Beyond the papers: the faithfulness tests of attention", "",
             (f"The literature's tests of attention as an explanation (`vizlm.inspect.faithfulness`, [API.md](API.md)), "
              f"run on each bundled attention model over {plan.corpus} {plan.split}, {sample} (`vizlm reproduce "
              f"--faithfulness`; evidence in `evidence/faithfulness/`), read in the model's own context: sentence "
              f"models a sentence at a time, document models in passages of whole sentences up to 100 tokens. Each "
              f"number is a mean (or a median, where said) over the predicted words, with its 95% bootstrap interval "
              f"over {_resampled([ev.config for ev in have.values()])}. "
              f"Log-probability changes are in nats, log P(word) as read minus as changed. Masking (erasure, AOPC): "
              f"{c0.get('masking', '—')}. Frozen attention from another seed (Wiegreffe & Pinter): the model reads "
              f"the attention of a second seed's checkpoint of the same setup on the same text; run where the "
              f"manifest's `frozen` names one ({', '.join(f'{k}: {v}' for k, v in plan.frozen.items()) or 'none'})."
              + (f" A Transformer's self-attention is tested one head at a time (the manifest's `heads`: "
                 f"{heads_said}, as layer.head): each "
                 f"prediction's weights of that head are changed alone, the other positions read as computed "
                 f"(slot j holds input j, the word just read included; the <s> slot is held fixed). It has no "
                 f"recurrent state, so no two paths. A reading below counts each head as one attention tested."
                 if plan.heads else "")
              + (" A document's first sentence is read by a document model with nothing before it, as it reads it "
                 "in running text: these tests see its attention within the sentence, none across sentences "
                 "(`per_document` above 1 in `experiments.toml`'s `[faithfulness]` adds the sentences after it)."
                 if per_document == 1 and len(samples) == 1 else "")), ""]
    if departs:
        lines += [("Written under other settings than the manifest's (`vizlm reproduce --faithfulness "
                   f"{' '.join(dict.fromkeys(checkpoint_of[n] for n in departs))} --force` writes them again): "
                   + "; ".join(f"{n}: {', '.join(d)}" for n, d in departs.items()) + "."), ""]
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
                   f"{n_models} the best agreement of attention with a method lies below the methods' best agreement "
                   "with each other "
                   "(the 95% intervals apart).")]

    # (b) permutations
    bins = next((st["permutations"]["bins"] for st in stats.values() if "permutations" in st), [])
    heads = [f"[{b['lo']:g}, {b['hi']:g}{']' if b['hi'] == 1 else ')'}" for b in bins]
    perms = c0.get("permutations", "—")
    lines += ["", (f"**Permutations** (Jain & Wallace, Sec. 4.1): each prediction's weights on its word slots shuffled "
                   f"among them ({perms} shuffles; the start slot, where the model has one, and the `<s>` slot keep "
                   "theirs), the median over the shuffles of the total variation distance (TVD) and the "
                   "Jensen–Shannon divergence (JSD, nats) of the next-word distribution; per bin of the prediction's "
                   "largest word-slot weight, the median over predictions (its interval over documents). Rows: predictions per bin."), "",
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
                   f"lies above the lowest bin's in {rises} of {n_models}; in the highest bin it ranges "
                   f"{_range(top_tvd, '.3f')}.")]

    # (c) adversarial
    eps = c0.get("epsilon", "—")
    lines += ["", (f"**Adversarial attention** (Jain & Wallace, Sec. 4.2): per prediction the weights over its slots "
                   f"farthest (JSD, nats; at most ln 2 = 0.693) from its own that change log P(word) by less than "
                   f"ε = {eps} nats ({c0.get('adversary_steps', '—')} Adam steps on the weights' logits)."), "",
              "| model | predictions | mean JSD | median JSD | JSD > ½ ln 2 (%) | \\|Δ log P\\| (nats) | "
              "another seed's attention: mean JSD |",
              "|---|---:|---:|---:|---:|---:|---|"]
    far, seeds = [], []
    for n, st in stats.items():
        a = st.get("adversarial")
        if not a:
            continue
        seed = (st.get("uniform") or {}).get("seed_jsd")
        between = "—" if seed is None else f"{_interval(seed, spec='.3f')} ({have[n].config.get('frozen')})"
        lines.append(f"| {n} | {a['mean_jsd']['n']:,} | {_interval(a['mean_jsd'], spec='.3f')} | "
                     f"{_interval(a['median_jsd'], spec='.3f')} | {_interval(a['share_over_half_ln2'], 100, '.1f')} | "
                     f"{_interval(a['mean_abs_dlogp'], spec='.4f')} | {between} |")
        far.append((n, a["share_over_half_ln2"]["value"]))
        if seed is not None:
            seeds.append((n, a["mean_jsd"], seed))
    lines += ["", (f"Reading: attention at least half the largest possible divergence from the model's own, with the "
                   f"word's probability all but unchanged, was found for {_range(far, '.0f', 100, '%')} of the predictions.")]
    for n, adv, seed in seeds:  # Wiegreffe & Pinter, Sec. 4: the adversary's distance beside the seeds' own
        rel = ("farther from the model's own than" if adv["lo"] > seed["hi"] else
               "closer to the model's own than" if adv["hi"] < seed["lo"] else "about as far from the model's own as")
        lines += ["", (f"Beside the variation between training seeds (Wiegreffe & Pinter, Sec. 4): in {n} the "
                       f"adversary's weights lie {rel} the attention of another seed of the same model "
                       f"({have[n].config.get('frozen')}) on the same words (mean JSD {adv['value']:.3f} vs "
                       f"{seed['value']:.3f}, intervals above).")]

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
        frozen = ("not offered for self-attention" if have[n].config.get("head") is not None
                  else "not run: no second seed bundled" if "frozen_nll" not in u
                  else f"{_interval(_exp(u['frozen_nll']), spec='.1f')} ({have[n].config.get('frozen')})")
        lines.append(f"| {n} | {_interval(_exp(u['nll']), spec='.1f')} | {_interval(_exp(u['uniform_nll']), spec='.1f')} | "
                     f"{_interval(d, spec='+.4f')} | {frozen} |")
        {1: worse, -1: better, 0: same_}[_sign(d)].append((n, math.expm1(d["value"])))
    said = [f"raises perplexity in {len(worse)} of {n_models}"
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
                   f"log P(word) more than dropping a random one in {beats_random} of {n_models}, and more than "
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
    lines += ["", (f"Reading (paired): attention's comprehensiveness is above random's in {comp_random} of {n_models}"
                   f". The most comprehensive ranking per model: {'; '.join(best)}.")]

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


__all__ = ["AttributionPlan", "CasesPlan", "FaithfulnessPlan", "attribution_report", "cases_report",
           "faithfulness_report", "load_attribution", "load_cases_plan", "load_faithfulness_plan",
           "write_attribution_evidence", "write_cases_evidence", "write_faithfulness_evidence"]
