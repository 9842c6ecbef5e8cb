"""Seed-aware intervals and three-part verdicts for a paper's claims.

A claim compares two arms (a run and its control, or two models) by the ratio of their corpus
test perplexities. Two sources of noise enter that ratio, and the interval carries both:

* **the test documents**: the Brown splits sample documents (document index mod 10), so the
  documents are resampled, never the sentences of a document one by one. The documents are
  drawn once per bootstrap replicate and shared by every seed: all seeds are scored on the same
  test set, so its sampling noise is common to them.
* **the training seed**: a model's test log perplexity varies with its seed (initialisation,
  the order of batches). Its between-seed variance is estimated from every setup trained with two
  or more seeds, and moderated toward its protocol's common variance by empirical Bayes as limma
  does (Smyth 2004, :func:`fit_prior`, :func:`moderated`): the setups' variances give a prior
  (``s0^2`` with ``d0`` degrees of freedom, ``d0`` infinite where they differ no more than their
  sampling allows); a setup's own ``s^2`` on ``d`` degrees of freedom becomes
  ``(d0 s0^2 + d s^2) / (d0 + d)`` on ``d0 + d`` (at most the protocol's total), and a setup with one
  seed takes ``s0^2``. Seeds of two arms are independent draws, so the log ratio of one seed pair
  varies by ``v_run + v_against``; a claim decided on ``K`` seed pairs averages their log ratios,
  whose seed noise has variance ``(v_run + v_against) / K``. Each bootstrap replicate adds a normal
  draw of that size, its variances drawn first from what their degrees of freedom leave uncertain
  (``v df / chi2_df`` each: a Student t for one arm, Behrens-Fisher's for two), so that a spread
  known from few seeds widens the interval as it should.

So the statistic of replicate ``b`` is ``mean_k logratio_k(D*_b) + e_b`` (a seed-level random
effect, bootstrapped over documents): :func:`claim_interval`. Its quantiles give the 95%
interval and its two-sided bootstrap p value (for Holm's adjustment over the claims tested,
:func:`holm`). A verdict (:func:`verdict`) has three parts: the direction (better / worse / no
clear difference at 95%), where the paper's own effect lies (inside the interval, or the
interval is wholly on one side of it), and, for a claim of equality, equivalence within its
margin. "Reproduced" needs the direction and an interval that holds the paper's effect; an
interval holding both no effect and the paper's effect is *inconclusive*, too few runs to tell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from vizlm.inspect.attribution_corpus import cluster_resamples

LEVEL = 0.95
N_BOOT = 4000


@dataclass
class SeedPair:
    """One seed's comparison on one split: per-sentence NLLs (nats) of the run and of what it is
    compared with, tokens per sentence, and sentences per document (None or one document:
    sentences are the unit)."""

    nll_run: np.ndarray  # (S,)
    nll_against: np.ndarray  # (S,)
    tokens: np.ndarray  # (S,)
    documents: list[int] | None = None

    def units(self) -> tuple[np.ndarray, np.ndarray, str]:
        """(NLL difference run - against per unit, tokens per unit, the unit's name): the unit is the
        document when the split has more than one, else the sentence."""
        diff = np.asarray(self.nll_run, float) - np.asarray(self.nll_against, float)
        tok = np.asarray(self.tokens, float)
        docs = self.documents
        if docs is not None and len(docs) > 1:
            starts = np.cumsum([0, *docs[:-1]])
            return np.add.reduceat(diff, starts), np.add.reduceat(tok, starts), "documents"
        return diff, tok, "sentences"

    def log_ratio(self) -> float:
        """log of the corpus perplexity ratio run / against."""
        return float((np.sum(self.nll_run, dtype=float) - np.sum(self.nll_against, dtype=float))
                     / np.sum(self.tokens, dtype=float))


@dataclass
class SeedSpread:
    """The between-seed variance of a setup's test log perplexity, and where it comes from."""

    var: float
    df: float  # its degrees of freedom: seeds - 1 (own), more once moderated, inf where the prior is exact
    how: str  # "own seeds", "moderated", "the protocol's prior"

    @property
    def sd(self) -> float:
        return math.sqrt(self.var)


def _df(df: float) -> str:
    return "∞" if math.isinf(df) else f"{df:.0f}" if abs(df - round(df)) < 0.05 else f"{df:.1f}"


def seed_variance(log_perplexities: list[float]) -> SeedSpread | None:
    """A setup's between-seed variance of its test log perplexity; None below two seeds."""
    if len(log_perplexities) < 2:
        return None
    x = np.asarray(log_perplexities, float)
    return SeedSpread(float(x.var(ddof=1)), len(x) - 1, "own seeds")


@dataclass
class Prior:
    """A protocol's prior for its setups' seed variances: ``var`` (s0^2) on ``df`` (d0) degrees of freedom, fitted
    to ``setups`` variances on ``total_df`` degrees of freedom together (:func:`fit_prior`)."""

    var: float
    df: float
    setups: int
    total_df: int

    def describe(self) -> str:
        return f"{100 * math.sqrt(self.var):.2f}% on {_df(self.df)} df"


NO_PRIOR = Prior(0.0, 0.0, 0, 0)


def _digamma(x):
    return torch.special.digamma(torch.as_tensor(x, dtype=torch.float64)).numpy()


def _polygamma(n: int, x):
    return torch.special.polygamma(n, torch.as_tensor(x, dtype=torch.float64)).numpy()


def trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x (x > 0), by Newton's method from limma's start (Smyth 2004, trigammaInverse)."""
    if x > 1e7:
        return 1 / math.sqrt(x)
    if x < 1e-6:
        return 1 / x
    y = 0.5 + 1 / x
    for _ in range(50):
        tri = float(_polygamma(1, y))
        step = tri * (1 - tri / x) / float(_polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


def fit_prior(spreads: list[SeedSpread]) -> Prior:
    """The prior of a protocol's setup variances, fitted as limma's ``fitFDist`` does (Smyth 2004, Sec. 6.2): the
    setups' ``s^2`` taken as scaled F draws, ``s0^2`` and ``d0`` from the mean and variance of their logs beyond
    what their own degrees of freedom explain; ``d0`` infinite where that excess is not positive (the setups share
    one variance as far as their seeds can tell), and ``s0^2`` then their pooled variance, that one variance's
    unbiased estimate. One setup is its own prior; none, :data:`NO_PRIOR`."""
    own = [s for s in spreads if s.df > 0 and s.var > 0]
    if not own:
        return NO_PRIOR
    d = np.array([s.df for s in own], float)
    s2 = np.array([s.var for s in own], float)
    total = int(d.sum())
    if len(own) == 1:
        return Prior(float(s2[0]), float(d[0]), 1, total)
    e = np.log(s2) - _digamma(d / 2) + np.log(d / 2)
    excess = float(e.var(ddof=1) - _polygamma(1, d / 2).mean())
    if excess <= 0:  # one variance for all: its unbiased estimate is the pooled one (limma takes exp(mean e))
        return Prior(float((d * s2).sum() / d.sum()), math.inf, len(own), total)
    d0 = 2 * trigamma_inverse(excess)
    return Prior(float(np.exp(e.mean() + _digamma(d0 / 2) - math.log(d0 / 2))), d0, len(own), total)


def moderated(own: SeedSpread | None, prior: Prior) -> SeedSpread:
    """The seed spread a setup is given (:func:`fit_prior`'s ``prior`` of its protocol): its own ``s^2`` on ``d`` df
    moderated to ``(d0 s0^2 + d s^2) / (d0 + d)`` on ``d0 + d`` df, ``s0^2`` where ``d0`` is infinite; the prior
    alone for a setup with one seed. Degrees of freedom are capped at the protocol's total: no spread is known
    better than from all its seeds. A protocol whose only setup with seeds is this one: its own, unmoderated."""
    if prior.setups == 0:
        return own if own is not None else SeedSpread(0.0, 0, "none")
    cap = prior.total_df
    if own is None:
        return SeedSpread(prior.var, min(prior.df, cap), "the protocol's prior")
    if prior.setups == 1 and own.var == prior.var and own.df == prior.df:
        return own
    if math.isinf(prior.df):
        return SeedSpread(prior.var, cap, "moderated")
    return SeedSpread((prior.df * prior.var + own.df * own.var) / (prior.df + own.df), min(prior.df + own.df, cap),
                      "moderated")


def seed_noise(rng: np.random.Generator, spreads: list[SeedSpread], n: int) -> np.ndarray:
    """(n,) draws of the summed variance of ``spreads`` (the arms of a seed pair), each drawn as ``v df / chi2_df``
    from what its degrees of freedom leave uncertain (infinite df: ``v`` itself)."""
    total = np.zeros(n)
    for s in spreads:
        if s.var <= 0 or s.df <= 0:
            continue
        total += s.var if math.isinf(s.df) else s.var * s.df / rng.chisquare(s.df, n)
    return total


def seed_effects(rng: np.random.Generator, spreads: list[SeedSpread], n: int, k: int = 1) -> np.ndarray:
    """(n,) draws of the seed effect on a mean over ``k`` seeds: normal, its variance the sum of ``spreads``
    over ``k``, that variance drawn first from its degrees of freedom (:func:`seed_noise`)."""
    return rng.standard_normal(n) * np.sqrt(seed_noise(rng, spreads, n) / k)


@dataclass
class Interval:
    """A claim's ratio (run / against) with its seed-aware interval."""

    ratio: float  # exp(mean over seeds of the log ratio)
    low: float
    high: float
    p: float  # two-sided bootstrap p value of "no difference" (ratio 1), floored at 1 / (N_BOOT + 1)
    seeds: int
    resampled: str  # "documents" or "sentences"
    seed_sd: float  # sd of one seed pair's log ratio: sqrt(v_run + v_against)
    per_seed: list[float] = field(default_factory=list)  # each seed pair's ratio
    replicates: np.ndarray | None = field(default=None, repr=False)  # the bootstrap log ratios

    def at(self, level: float) -> tuple[float, float]:
        """The interval at another confidence level (e.g. Holm's adjusted one)."""
        a = (1 - level) / 2
        lo, hi = np.quantile(self.replicates, [a, 1 - a])
        return math.exp(lo), math.exp(hi)


def claim_interval(pairs: list[SeedPair], arms: list[SeedSpread], n_boot: int = N_BOOT, seed: int = 0,
                   level: float = LEVEL) -> Interval:
    """The seed-aware bootstrap interval of the ratio of ``pairs`` (module docstring); ``arms``: the seed spreads
    of the run and of what it is compared with (one pair's log ratio varies by their sum). Every pair must score
    the same sentences (same tokens, same documents)."""
    if not pairs:
        raise ValueError("a claim needs at least one seed pair")
    units = [p.units() for p in pairs]
    tok, kind = units[0][1], units[0][2]
    for _, t, k in units[1:]:
        if k != kind or not np.array_equal(t, tok):
            raise ValueError("the seed pairs of a claim must score the same sentences")
    diffs = np.stack([d for d, _, _ in units])  # (K, U)
    K, U = diffs.shape
    rng = np.random.default_rng(seed)
    boot = np.empty(n_boot)
    rows = max(1, 2**22 // max(U, 1))  # replicates drawn at a time: bounded memory for any corpus size
    for r0 in range(0, n_boot, rows):
        idx = rng.integers(0, U, size=(min(rows, n_boot - r0), U))  # documents once per replicate, shared by the seeds
        drawn = np.bincount((np.arange(len(idx))[:, None] * U + idx).ravel(), minlength=len(idx) * U)
        drawn = drawn.reshape(len(idx), U).astype(float)  # how often each replicate drew each unit
        boot[r0 : r0 + len(idx)] = (drawn @ diffs.T).mean(1) / (drawn @ tok)  # mean over seeds of the log ratio
    seed_var = sum(a.var for a in arms)
    if seed_var > 0:
        boot += seed_effects(rng, arms, n_boot, K)
    a = (1 - level) / 2
    lo, hi = np.quantile(boot, [a, 1 - a])
    per_seed = [p.log_ratio() for p in pairs]
    tail = min(float((boot <= 0).mean()), float((boot >= 0).mean()))
    p = max(min(1.0, 2 * tail), 1 / (n_boot + 1))
    return Interval(math.exp(float(np.mean(per_seed))), math.exp(lo), math.exp(hi), p, K, kind, math.sqrt(seed_var),
                    [math.exp(x) for x in per_seed], boot)


@dataclass
class MassInterval:
    """The share of attention on a model's most recent slots (Daniluk et al.'s Fig. 3 reading), the mean over
    its seeds, with a seed-aware interval."""

    value: float
    low: float  # NaN when there is nothing to resample (one unit)
    high: float
    seeds: int
    units: int  # the test units resampled (documents, or sentences for a split of one document)
    seed_sd: float  # sd of one seed's share across seeds (0 with one seed: no seed noise known)
    per_seed: list[float] = field(default_factory=list)


def mass_interval(totals: list[np.ndarray], counts: list[np.ndarray], k: int, n_boot: int = N_BOOT, seed: int = 0,
                  level: float = LEVEL) -> MassInterval:
    """The weight on the ``k`` most recent slots (the mean weight at offsets 1..k, summed) averaged over seeds,
    from each seed's per-unit sums of the weight and its count at offsets 1..L (``totals[s]``, ``counts[s]``:
    (units, L) each, every seed scored on the same units). Its interval has the two sources of noise of
    :func:`claim_interval`: the units drawn once per replicate and shared by the seeds, and with two or more seeds
    a normal seed effect of variance ``var(per-seed shares) / K``, that variance drawn from its ``K - 1`` degrees of
    freedom as there (:func:`seed_noise`; the seeds' own spread: no other setup's applies to a share of attention).
    One seed: the units only, and ``seed_sd`` 0."""
    if not totals or len(totals) != len(counts):
        raise ValueError("a share needs the per-unit sums of at least one seed")
    parts = [np.asarray(a, float)[:, :k] for a in (*totals, *counts)]
    if len({p.shape for p in parts}) != 1:
        raise ValueError("the seeds of a share must score the same test units")
    K, (units, cols) = len(totals), parts[0].shape
    # every seed's offsets side by side, (units, K * cols): one draw of the units serves all seeds
    value, boot = cluster_resamples(np.concatenate(parts[:K], 1), np.concatenate(parts[K:], 1), n_boot, seed)
    per = value.reshape(K, cols).sum(1).tolist()
    boot = boot.reshape(n_boot, K, cols).sum(2).mean(1)
    seed_sd = float(np.std(per, ddof=1)) if K > 1 else 0.0
    if seed_sd > 0:
        spread = [SeedSpread(seed_sd**2, K - 1, "own seeds")]
        boot = boot + seed_effects(np.random.default_rng(seed + 1), spread, n_boot, K)
    boot = boot[np.isfinite(boot)]
    a = (1 - level) / 2
    lo, hi = np.quantile(boot, [a, 1 - a]) if len(boot) and units >= 2 else (math.nan, math.nan)
    return MassInterval(float(np.mean(per)), float(lo), float(hi), K, units, seed_sd, per)


@dataclass
class DeviceCheck:
    """Whether one setup's seeds trained on two kinds of device agree within its seed spread."""

    means: dict[str, float]  # device -> the mean test log perplexity of its seeds
    seeds: dict[str, int]  # device -> how many seeds it trained
    diff: float  # the second device's mean minus the first's (log perplexity)
    bound: float  # what seed noise alone allows at 95%: 1.96 sd sqrt(1/n1 + 1/n2); NaN: no seed spread known
    agree: bool | None  # None: unchecked (no seed spread known)

    def describe(self) -> str:
        (a, b) = self.means
        na, nb = self.seeds[a], self.seeds[b]
        said = f"{b} against {a}: {100 * self.diff:+.2f}% ({nb} seed{'s' if nb != 1 else ''} against {na})"
        if self.agree is None:
            return f"{said}; no seed spread known, so unchecked"
        return f"{said}, {'within' if self.agree else 'beyond'} the ±{100 * self.bound:.2f}% that seed noise allows"


def device_check(by_device: dict[str, list[float]], prior: Prior) -> list[DeviceCheck]:
    """Seeds of one setup trained on different kinds of device (device -> their test log perplexities): each other
    device against the one with the most seeds. Seeds are independent draws whichever device trained them, so if
    the device does not matter the difference of two devices' means is normal with variance
    ``v (1/n1 + 1/n2)``; beyond its 95% bound they disagree, and their runs do not belong in one claim. ``v`` is
    the seeds' variance within the devices (pooled; a variance over all of them would hold the very difference
    tested), moderated with the protocol's ``prior`` (:func:`moderated`; the prior alone with one seed a device),
    and the bound is the 97.5% quantile of that normal with ``v`` drawn from its degrees of freedom
    (:func:`seed_noise`, as the claims' intervals draw it; 1.96 sd where ``v`` is known exactly)."""
    values = {d: np.asarray(v, float) for d, v in by_device.items()}
    df = sum(len(v) - 1 for v in values.values())
    own = sum(float(((v - v.mean()) ** 2).sum()) for v in values.values()) / df if df else math.nan
    spread = moderated(SeedSpread(own, df, "within the devices") if df else None, prior)
    known = spread.df > 0 and spread.var > 0
    devices = sorted(values, key=lambda d: (-len(values[d]), d))
    first, checks = devices[0], []
    for other in devices[1:]:
        n1, n2 = len(values[first]), len(values[other])
        diff = float(values[other].mean() - values[first].mean())
        bound = _bound(spread) * math.sqrt(1 / n1 + 1 / n2) if known else math.nan
        checks.append(DeviceCheck({first: float(values[first].mean()), other: float(values[other].mean())},
                                  {first: n1, other: n2}, diff, bound, abs(diff) <= bound if known else None))
    return checks


BOUND_DRAWS = 200_000  # draws for a bound's quantile: its relative error about 0.5%


def _bound(spread: SeedSpread) -> float:
    """The 97.5% quantile of a normal whose variance is ``spread`` with its uncertainty (:func:`seed_noise`)."""
    if math.isinf(spread.df):
        return 1.959964 * spread.sd
    draws = seed_effects(np.random.default_rng(0), [spread], BOUND_DRAWS)
    return float(np.quantile(draws, 0.975))


def holm(pvalues: dict[str, float], alpha: float = 1 - LEVEL) -> dict[str, dict]:
    """Holm's step-down adjustment of ``pvalues`` (name -> p): per name the adjusted p value and the
    confidence level of its step (``1 - alpha / (m - rank)``, rank from 0 in increasing p), at which
    its adjusted interval is drawn."""
    m = len(pvalues)
    out, running = {}, 0.0
    for rank, (name, p) in enumerate(sorted(pvalues.items(), key=lambda kv: kv[1])):
        running = max(running, min(1.0, (m - rank) * p))
        out[name] = {"p_adjusted": running, "level": 1 - alpha / (m - rank), "rank": rank + 1, "tested": m}
    return out


def pct(ratio: float) -> str:
    """A ratio as a signed change in percent, one decimal ("+1.4%"); a change that rounds to zero there keeps
    two ("-0.04%"), so an interval's end shows on which side of no difference it lies."""
    change = 100 * (ratio - 1)
    return f"{change:+.2f}%" if change and round(change, 1) == 0 else f"{change:+.1f}%"


def direction(low: float, high: float) -> str:
    """better (the run's perplexity lower) / worse / no clear difference, from an interval of the ratio."""
    return "better" if high < 1 else "worse" if low > 1 else "no clear difference"


def verdict(kind: str, low: float, high: float, paper_ratio: float | None, tolerance: float = 0.02) -> dict:
    """The three parts of a verdict and its summary, from an interval (``low``, ``high``) of the ratio
    run / against: ``direction``, ``size`` (the paper's effect against the interval), ``equivalence``
    (kind "equal": within 1 +- tolerance), ``summary``."""
    d = direction(low, high)
    if paper_ratio is None:
        size = "the paper gives no number"
    elif low <= paper_ratio <= high:
        size = f"the paper's {pct(paper_ratio)} lies inside the interval"
    elif paper_ratio < low:
        size = f"smaller than the paper's {pct(paper_ratio)}" if paper_ratio < 1 else f"beyond the paper's {pct(paper_ratio)}"
    else:
        size = f"smaller than the paper's {pct(paper_ratio)}" if paper_ratio > 1 else f"beyond the paper's {pct(paper_ratio)}"
    equivalence = None
    if kind == "equal":
        if 1 - tolerance <= low and high <= 1 + tolerance:
            equivalence = f"equivalent within ±{tolerance:.0%}"
        elif low > 1 + tolerance or high < 1 - tolerance:
            equivalence = f"differs by more than ±{tolerance:.0%}"
        else:
            equivalence = f"undecided at ±{tolerance:.0%}"
    if kind == "equal":
        summary = ("reproduced" if equivalence.startswith("equivalent") else
                   "not reproduced" if equivalence.startswith("differs") else "inconclusive: too few runs to tell")
    elif d == "better":
        holds = paper_ratio is None or low <= paper_ratio <= high
        summary = "reproduced" if holds else (
            "reproduced in direction; " + ("a smaller effect" if paper_ratio < low else "a larger effect"))
    elif d == "worse":
        summary = "not reproduced: the opposite"
    elif paper_ratio is not None and low <= paper_ratio:
        summary = "inconclusive: too few runs to tell (no difference and the paper's effect both inside)"
    else:
        summary = "not reproduced: no difference" + ("" if paper_ratio is None else ", the paper's effect ruled out")
    return {"direction": d, "size": size, "equivalence": equivalence, "summary": summary}
