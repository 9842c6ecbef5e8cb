"""The report of the reproduction (docs/RESULTS.md's generated part), from the runs' evidence alone: no weights, no
model evaluation (:func:`report`, :func:`write_report`).

Each comparison is against the run's *control* (same start, same training) on the test split: the corpus perplexity
ratio with a 95% interval over the test documents (the unit the splits sample, for every model) and the training
seeds (:class:`Spreads`, :mod:`vizlm.reproduce.verdicts`); each claim gets a three-part verdict, with Holm's
adjustment over the claims tested (:func:`decide`, :func:`decide_all`). Then per paper its runs, its sweeps and its
seeds, and the sections of the manifest's corpus tables (:mod:`vizlm.reproduce.corpus_runs`).
"""

from __future__ import annotations

import functools
import math
import statistics
from pathlib import Path

import numpy as np

from vizlm.core import files
from vizlm.modeling.checkpoint import size_label
from vizlm.reproduce import evidence, experiments, verdicts
from vizlm.reproduce.corpus_runs import (
    AttributionPlan,
    CasesPlan,
    FaithfulnessPlan,
    attribution_report,
    cases_report,
    faithfulness_report,
)
from vizlm.reproduce.experiments import Claim, Locations, Run

REPORT_BEGIN, REPORT_END = "<!-- vizlm reproduce --report: begin -->", "<!-- vizlm reproduce --report: end -->"


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
    seeds' moderated toward its protocol's prior, fitted to the protocol's setups with two or more seeds; the prior
    alone for a setup with one seed (:func:`vizlm.reproduce.verdicts.moderated`)."""

    def __init__(self, runs: dict[str, Run]):
        self.runs = runs
        self.own: dict[str, verdicts.SeedSpread] = {}
        self.groups: dict[tuple[str, str], list[tuple[str, verdicts.SeedSpread]]] = {}
        for group in experiments.seed_groups(runs):
            done = [r for r in group if r.done()]
            spread = verdicts.seed_variance([math.log(experiments.run_metrics(r)["test_perplexity"]) for r in done])
            if spread is not None:
                self.own |= dict.fromkeys((r.name for r in group), spread)
                self.groups.setdefault(protocol(group[0]), []).append((group[0].name, spread))
        self.prior = {key: verdicts.fit_prior([s for _, s in g]) for key, g in self.groups.items()}

    def of(self, run: Run) -> verdicts.SeedSpread:
        return verdicts.moderated(self.own.get(run.name), self.prior.get(protocol(run), verdicts.NO_PRIOR))

    def arms(self, run: Run, against: Run) -> list[verdicts.SeedSpread]:
        """The seed spreads of a claim's two arms: one seed pair's log ratio varies by their sum (independent seeds)."""
        return [self.of(run), self.of(against)]

    @functools.cached_property
    def devices(self) -> dict[str, tuple[list[Run], list[verdicts.DeviceCheck]]]:
        """:func:`device_checks` of the runs, made once for a report."""
        return device_checks(self.runs, self)

    def describe(self, key: tuple[str, str]) -> str:
        if key not in self.groups:
            return "no setup of this protocol has two or more seeds: seed noise is not included"
        prior, groups = self.prior[key], self.groups[key]
        own = ", ".join(f"{name} {100 * s.sd:.2f}% ({s.df + 1:.0f} seeds)" for name, s in groups)
        if prior.setups == 0:
            return f"{own}: their seeds scored alike, so seed noise is not included"
        if prior.setups < 2:
            (only,) = (name for name, s in groups if s.var > 0)
            return f"{own}; a setup with one seed takes {only}'s"
        fitted = (f"{own}; moderated toward their common spread by empirical Bayes, as limma does (the prior "
                  f"{prior.describe()})")
        if math.isinf(prior.df):
            return (f"{fitted}: they differ no more than their seeds allow, so every setup takes "
                    f"{100 * math.sqrt(prior.var):.2f}% on their {prior.total_df} df")
        each = ", ".join(f"{name} {100 * verdicts.moderated(s, prior).sd:.2f}%" for name, s in groups)
        return f"{fitted}: {each}; a setup with one seed {100 * math.sqrt(prior.var):.2f}%"


def comparison(run: Run, runs: dict[str, Run], spreads: Spreads | None = None) -> dict | None:
    """The run against its control (test split): ratio and 95% interval over documents, widened by
    the seed spread of its protocol (:mod:`vizlm.reproduce.verdicts`); None until both have evidence."""
    control = runs.get(run.control) if run.control else None
    if control is None or not run.done() or not control.done():
        return None
    spreads = spreads if spreads is not None else Spreads(runs)
    iv = verdicts.claim_interval([seed_pair(run, control)], spreads.arms(run, control))
    return {"control": control.name, "ratio": iv.ratio, "low": iv.low, "high": iv.high, "resampled": iv.resampled}


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
    run = experiments.pick(claim.run, runs)
    against = experiments.pick(claim.against, runs) if claim.against else None
    if run is None or (claim.against and against is None):
        waits = [claim.run] if run is None else []
        waits += [claim.against] if claim.against and against is None else []
        names = [n for w in waits for n in ([w] if isinstance(w, str) else w)]
        return {"verdict": "not tested", "ours": _waiting(names, runs)}
    used = run.name + (f" vs {against.name}" if against else "")
    if claim.kind == "mass":
        return _decide_mass(claim, run, runs)
    spreads = spreads if spreads is not None else Spreads(runs)
    pairs = seed_pairs(run, against, runs)
    iv = verdicts.claim_interval([seed_pair(r, a) for r, a in pairs], spreads.arms(run, against))
    parts = verdicts.verdict(claim.kind, iv.low, iv.high, claim.paper_ratio, claim.tolerance)
    # the seeds' mean test perplexities, as the ratio is their mean (one seed: the runs' own)
    ppl = statistics.mean(experiments.run_metrics(r)["test_perplexity"] for r, _ in pairs)
    ppl_against = statistics.mean(experiments.run_metrics(a)["test_perplexity"] for _, a in pairs)
    seeds = (f"{iv.seeds} seed{'s' if iv.seeds > 1 else ''}"
             + (f": {', '.join(f'{x:.3f}' for x in iv.per_seed)}" if iv.seeds > 1 else ""))
    ours = (f"{ppl:.1f} vs {ppl_against:.1f}: {verdicts.pct(iv.ratio)} (95% CI {verdicts.pct(iv.low)} to {verdicts.pct(iv.high)}; "
            f"{iv.resampled} resampled, {seeds})")
    stale = sorted({x.name for pair in pairs for x in pair if x.stale})
    summary = (parts["summary"] + (f" (rests on stale evidence: {', '.join(stale)})" if stale else "")
               + _devices_note(pairs, runs, spreads))
    return {"verdict": summary, "ours": ours, "runs": used, "interval": iv, **parts}


def _decide_mass(claim: Claim, run: Run, runs: dict[str, Run]) -> dict:
    """A "mass" claim: the weight on the run's most recent positions (their Fig. 3), averaged over its finished
    seeds, held against the claim's share. The interval resamples the test documents and the seeds
    (:func:`~vizlm.reproduce.verdicts.mass_interval`) from the seeds whose evidence keeps per-document sums; a seed
    whose evidence predates them is left out and named (none has them: the run's own means, no interval)."""
    found = [(r, r.evidence().positions) for r in seeds_of(run, runs)]
    found = [(r, pos) for r, pos in found if pos is not None]
    if not found:
        return {"verdict": "not tested", "ours": f"{run.name}'s evidence has no attention by position"}
    summed = [(r, pos) for r, pos in found if "unit_total" in pos]
    used = summed or found[:1]
    left_out = [r.name for r, pos in found if "unit_total" not in pos] if summed else []
    window = used[0][1]["window"]
    if not summed:  # one seed's means: the share, no interval
        pos, note = used[0][1], ""
        share = float(sum(m for _, m in sorted(zip(pos["offset"], pos["mean"]))[: claim.positions]))
        verdict = "reproduced" if share >= claim.share else "not reproduced"
    else:
        iv = verdicts.mass_interval([np.asarray(pos["unit_total"]) for _, pos in used],
                                    [np.asarray(pos["unit_count"]) for _, pos in used], claim.positions)
        share = iv.value
        if math.isfinite(iv.low):
            verdict = ("reproduced" if iv.low >= claim.share else "not reproduced" if iv.high < claim.share
                       else "inconclusive: the interval holds the paper's share")
        else:  # one unit: nothing to resample
            verdict = "reproduced" if share >= claim.share else "not reproduced"
        seeds = (f"{iv.seeds} seeds: " + ", ".join(f"{x:.0%}" for x in iv.per_seed) if iv.seeds > 1
                 else "1 seed, so no seed noise")
        note = (f" (95% CI {iv.low:.0%} to {iv.high:.0%}; {used[0][1]['resampled']} resampled, {seeds}"
                + (f"; left out, their evidence predates the per-document sums: {', '.join(left_out)}" if left_out
                   else "") + ")")
    # a flat average by position comes from flat rows or from sharp rows that pick different positions
    largest = statistics.mean(pos["largest_weight"] for _, pos in used)
    entropy = statistics.mean(pos["entropy"] for _, pos in used)
    return {"verdict": verdict, "runs": ", ".join(r.name for r, _ in used),
            "ours": f"{share:.0%} of the weight on the {claim.positions} most recent of {window} positions{note} "
                    f"(equal weights: {claim.positions / window:.0%}); a row's largest weight "
                    f"{largest:.2f} on average (equal weights: {1 / window:.2f}), its entropy "
                    f"{entropy:.2f} nats ({math.log(window):.2f})"
                    + ("" if summed else "; no interval: its evidence predates the per-document sums")}


def device_checks(runs: dict[str, Run], spreads: Spreads) -> dict[str, tuple[list[Run], list[verdicts.DeviceCheck]]]:
    """Per setup whose finished seeds trained on two or more kinds of device (by its first run's name): its runs
    and :func:`~vizlm.reproduce.verdicts.device_check` of their test log perplexities (the seed spread within
    the devices, moderated with the protocol's prior)."""
    checks = {}
    for group in experiments.seed_groups(runs):
        by_device: dict[str, list[float]] = {}
        for r in group:
            if r.done() and (device := experiments.run_device(r)) is not None:
                by_device.setdefault(device, []).append(math.log(experiments.run_metrics(r)["test_perplexity"]))
        if len(by_device) > 1:
            prior = spreads.prior.get(protocol(group[0]), verdicts.NO_PRIOR)
            checks[group[0].name] = (group, verdicts.device_check(by_device, prior))
    return checks


def _devices_note(pairs: list[tuple[Run, Run]], runs: dict[str, Run], spreads: Spreads) -> str:
    """For a claim whose runs trained on more than one kind of device: whether that was checked (its arms' setups
    with seeds on both agree within the seed spread), else that it was not; "" when one device trained them all."""
    devices = sorted({d for pair in pairs for r in pair if (d := experiments.run_device(r)) is not None})
    if len(devices) < 2:
        return ""
    checks = spreads.devices
    mine = [c for name in dict.fromkeys(_seed_group(r, runs)[0].name for pair in pairs for r in pair)
            if name in checks for c in checks[name][1]]
    trained = f" (trained on {' and '.join(devices)}: "
    if not mine or any(c.agree is None for c in mine):
        return trained + "unchecked, no arm has seeds on each device with a known seed spread)"
    if all(c.agree for c in mine):
        return trained + "their seeds agree within the seed spread)"
    return trained + "the devices disagree beyond the seed spread: keep them apart)"


def _devices(runs: dict[str, Run], spreads: Spreads) -> list[str]:
    """Which kind of device trained the finished runs, as their evidence records it, and for every setup with
    seeds on more than one kind whether they agree (:func:`device_checks`)."""
    done = [r for r in runs.values() if r.done()]
    if not done:
        return []
    counts: dict[str, int] = {}
    for r in done:
        key = experiments.run_device(r) or "not recorded"
        counts[key] = counts.get(key, 0) + 1
    said = "; ".join(f"{k} {n} run{'s' if n != 1 else ''}" for k, n in sorted(counts.items(), key=lambda kv: kv[0] == "not recorded"))
    lines = ["### Devices", "",
             (f"The kind of device that trained each finished run, as its evidence records it: {said}"
              + (" (evidence written before the device was recorded)" if "not recorded" in counts else "") + ".")]
    checks = spreads.devices
    if checks:
        lines += ["", ("Setups with seeds on more than one kind of device: the difference of the devices' mean test "
                       "log perplexity against what seed noise alone allows (95%). Where it lies beyond, the devices' "
                       "runs do not belong in one claim."), "",
                  "| setup | the check |", "|---|---|"]
        lines += [f"| {', '.join(r.name for r in group)} | {'; '.join(c.describe() for c in cs)} |"
                  for group, cs in checks.values()]
    else:
        lines += ["", "No setup has seeds on more than one kind of device."]
    return lines + [""]


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


def _seed_group(run: Run, runs: dict[str, Run]) -> list[Run]:
    """``run``'s seed group (:func:`~vizlm.reproduce.experiments.seed_groups`), or ``run`` alone."""
    return experiments.seed_index(runs).get(run.name, [run])


def seeds_of(run: Run, runs: dict[str, Run]) -> list[Run]:
    """The finished members of ``run``'s seed group, in manifest order."""
    return [r for r in _seed_group(run, runs) if r.done()]


def seed_pairs(run: Run, against: Run, runs: dict[str, Run]) -> list[tuple[Run, Run]]:
    """(run, against) seed by seed: finished members of their seed groups with equal seeds."""
    return [(r, a) for r in seeds_of(run, runs) for a in seeds_of(against, runs) if r.seed == a.seed]


def _bracketed(key: str, group: list[Run], best: Run) -> str:
    """Whether the values a tuning sweep tried bracket its ``best``
    (:func:`~vizlm.reproduce.experiments.unbracketed`)."""
    if end := experiments.unbracketed(key, group):
        return (f"is the {end} value swept: the sweep does not bracket it, the optimum may lie "
                f"{'above' if end == 'largest' else 'below'}.")
    if best.options[key] > min(r.options[key] for r in group):
        return "is bracketed: values on both sides of it were tried."
    return f"is bracketed: it is the least {key} can take."


def _sweep_table(key: str, sweeps_: list[list[Run]], runs: dict[str, Run]) -> list[str]:
    values = sorted({r.options[key] for g in sweeps_ for r in g})
    lines = [f"| model | {' | '.join(f'{key} = {v}' for v in values)} |", "|---|" + "---:|" * len(values)]
    # the rows' labels name the size and the seed where the table holds more than one of them (or it tunes a value)
    sizes, seeds = {run_size(g[0]) for g in sweeps_}, {g[0].seed for g in sweeps_}
    models = list(dict.fromkeys(g[0].model for g in sweeps_))  # each model's seeds together, by size, in manifest order
    sweeps_ = sorted(sweeps_, key=lambda g: (g[0].hidden_dim, g[0].emb_dim, models.index(g[0].model)))
    tuned = key in experiments.TUNED  # a value we chose: its rows name size and seed, and say if it is bracketed
    said = []
    for group in sweeps_:
        best = experiments.pick([r.name for r in group], runs)  # the run a claim over the sweep stands on
        by_value = {r.options[key]: r for r in group}
        cells = []
        for v in values:
            run = by_value.get(v)
            if run is not None and run.done():
                m = experiments.run_metrics(run)
                cell = f"{m['test_perplexity']:.2f} ({m['valid_perplexity']:.2f})"
                cells.append(f"**{cell}**" if run is best else cell)
            else:
                cells.append(_report_state(run) if run else "")
        first = group[0]
        label = first.model + "".join(f" {k}={v}" for k, v in first.options.items() if k != key)
        label += (f" · {run_size(first)}" * (len(sizes) > 1 or tuned)
                  + f" · seed {first.seed}" * (len(seeds) > 1 or tuned))
        lines.append(f"| {label} | {' | '.join(cells)} |")
        if tuned and best is not None:
            said.append(f"{best.model}'s best {key} on valid ({best.options[key]}) {_bracketed(key, group, best)}")
    return lines + ([""] + said if said else [])


def _spread(values: list[float], spec: str = ".2f") -> str:
    if len(values) < 2:
        return "—"
    return f"{statistics.mean(values):{spec}} ± {statistics.stdev(values):{spec}}"


def _seed_rows(group: list[Run], runs: dict[str, Run], spreads: Spreads) -> str:
    done = [r for r in group if r.done()]
    tests = [experiments.run_metrics(r)["test_perplexity"] for r in done]
    cs = [c for r in done if (c := comparison(r, runs, spreads))]
    ratios = ", ".join(f"{c['ratio']:.3f} ({c['low']:.3f}–{c['high']:.3f})" for c in cs) or "—"
    better, worse = sum(c["high"] < 1 for c in cs), sum(c["low"] > 1 for c in cs)
    agree = f"better in {better}, worse in {worse}, unclear in {len(cs) - better - worse} of {len(cs)}" if cs else "—"
    return (f"| {', '.join(r.name for r in group)} | {len(done)} of {len(group)} | "
            f"{', '.join(f'{t:.2f}' for t in tests) or '—'} | {_spread(tests)} | {ratios} | "
            f"{_spread([c['ratio'] for c in cs], '.3f')} | {agree} |")


def _report_state(run: Run) -> str:
    """The run's state as its evidence alone says it (the report reads nothing else): finished
    (with its cap note), not run, or blocked."""
    if run.blocked:
        return f"blocked: {run.blocked}"
    if not run.done():
        return "not run"
    note = experiments.state_note(run, "finished", experiments.evidence_meta(run))
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
    return (f"p {_p(p)}, adjusted {_p(h['p_adjusted'])}; {verdicts.pct(h['low'])} to {verdicts.pct(h['high'])} "
            f"at {100 * h['level']:.2f}%")


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


EXPLORATORY = "extension"  # a manifest's claims beyond the papers: reported apart from the papers' (headline) claims


def _summary_row(c: Claim, d: dict) -> str:
    ours = d["ours"] if "interval" not in d else (
        f"{verdicts.pct(d['interval'].ratio)} ({verdicts.pct(d['interval'].low)} to {verdicts.pct(d['interval'].high)}), "
        f"{d['interval'].seeds} seed{'s' if d['interval'].seeds > 1 else ''}")
    return f"| {c.paper} | {c.claim} | {c.paper_says} | {ours} | **{d['verdict']}** |"


def _summary(claims: dict[str, Claim], decided: dict[str, dict]) -> list[str]:
    """The findings first: one row a claim (paper, claim, ours, verdict), and how many were tested; the papers'
    claims (the headline) apart from the manifest's own beyond them (exploratory)."""
    tested = [n for n, d in decided.items() if "interval" in d]
    shown = [n for n, c in claims.items() if not c.variant_of]  # a claim at another size is in the table of sizes
    papers = [n for n in shown if claims[n].paper != EXPLORATORY]
    beyond = [n for n in shown if claims[n].paper == EXPLORATORY]
    tested_beyond = sum(claims[n].paper == EXPLORATORY for n in tested)  # at every size
    counted = f"{len(tested)} ratio claims tested" + (
        f", {len(tested) - tested_beyond} of the papers' and {tested_beyond} beyond them" * bool(beyond))
    head = ["| paper | claim | the paper | ours (test) | verdict |", "|---|---|---|---|---|"]
    lines = ["### Summary: the papers' claims", "",
             (f"Each claim's ratio of test perplexities (run / against) with a 95% interval over the test documents "
              f"and the training seeds; {counted} (Holm's adjustment over them in each "
              "paper's table below). The verdict has three parts there: the direction, where the paper's own effect "
              "lies against the interval, and equivalence within the claim's margin where equality is the claim; "
              "*inconclusive* means the interval holds both no difference and the paper's effect."), "",
             *head, *(_summary_row(claims[n], decided[n]) for n in papers), ""]
    if beyond:
        lines += ["#### Beyond the papers (exploratory)", "",
                  ("Questions the papers did not ask, not counted as the papers' claims: the runs are named in "
                   "the table *Beyond the papers: the claims* below. Where a setup has one seed, its interval's "
                   "seed part is not its own spread but the one measured for the setups of its context and corpus "
                   "with seeds (the prior under each table): a lead for more seeds, not a finding."), "",
                  *head, *(_summary_row(claims[n], decided[n]) for n in beyond), ""]
    return lines


def run_size(run: Run) -> str:
    """A run's size (:func:`vizlm.modeling.checkpoint.size_label`): ``k = 300``."""
    return size_label(run.emb_dim, run.hidden_dim)


def model_size(claim: Claim, runs: dict[str, Run]) -> str:
    """The size of the models a claim compares, as its first run's size says (:func:`run_size`)."""
    return run_size(runs[claim.candidates()[0]])


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
                row.append(f"{verdicts.pct(iv.ratio)} ({verdicts.pct(iv.low)} to {verdicts.pct(iv.high)}), {iv.seeds} seed"
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
    ``where`` (:func:`vizlm.reproduce.experiments.locations`) of a manifest of yours: the head names it, its evidence and its corpus, and
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
        lines += _summary(claims, decided) + _sizes(claims, decided, runs) + _devices(runs, spreads)
    for paper, title in experiments.PAPERS.items():
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
            m = experiments.run_metrics(run) if run.done() else {}
            c = comparison(run, runs, spreads)
            vs = "—" if c is None else (f"{c['ratio']:.3f} ({c['low']:.3f}–{c['high']:.3f}) vs {c['control']} "
                                        f"over {c['resampled']}; " + verdicts.direction(c["low"], c["high"]))
            state = _report_state(run)
            lines.append(f"| {run.name} | {run.model}{''.join(f' {k}={v}' for k, v in run.options.items())}"
                         f"{' (init frozen)' if run.freeze else ''}{' dropout chosen on valid' if run.dropout_from else ''} | "
                         f"{run.context} | {_fmt(m.get('parameters'), ',')} | {_fmt(m.get('valid_perplexity'))} | "
                         f"{_fmt(m.get('test_perplexity'))} | {vs} | {state} |")
        lines.append("")
        if swept := [(k, g) for k, g in experiments.sweeps(runs) if g[0].paper == paper]:
            lines += [f"### {title}: sweeps", "",
                      ("Test perplexity (valid in brackets) of one setup at each value of the swept option; "
                       "bold: the best on valid, the one a claim about the model's best setting uses (of a value "
                       "we tune, such as dropout, the one the runs that take it from the sweep use)."), ""]
            for key in dict.fromkeys(k for k, _ in swept):
                lines += _sweep_table(key, [g for k, g in swept if k == key], runs) + [""]
        if groups := [g for g in experiments.seed_groups(runs) if g[0].paper == paper]:
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


__all__ = ["REPORT_BEGIN", "REPORT_END", "Spreads", "comparison", "decide", "decide_all", "model_size", "protocol",
           "report", "seed_pair", "seed_pairs", "versus", "write_report"]
