"""Each label's rate among the highlighted pairs against its distance-matched chance rate.

A rule fires on some pairs whatever the attention does, and more often at
some distances than others (a determiner sits a word or two before its noun). So
each label's rate among the highlighted pairs is set against its **distance-matched
chance rate** (:func:`label_rates_vs_chance`): the same rule applied to all pairs
``(t, t - d)`` of the same readings at the distance ``d`` of each highlighted pair,
the pairs attention did not choose included. Enrichment is the ratio of the two
(about 1: attention picks such pairs no more often than their distances alone
predict), and the interval of observed minus chance is a bootstrap over documents
(the unit the corpus splits sample; sentences when there are no documents).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import asdict, dataclass

import numpy as np

from vizlm.data.resources import Collocations, load_collocations
from vizlm.inspect.analysis import SentenceAnalysis
from vizlm.inspect.case_rules import RULES, TaggedWords, apply_rules
from vizlm.inspect.cases import case_pairs, rule_tags
from vizlm.inspect.highlight import DEFAULT, Setting
from vizlm.inspect.reading import BOUNDARY

__all__ = ["LabelChance", "LabelReading", "label_rates_vs_chance"]

CHANCE_MIN_PAIRS = 5000  # pairs at a distance the chance rate is computed over, at least (all when there are fewer)
CHANCE_PAIRS_PER_HIGHLIGHT = 50  # ... and per highlighted pair at that distance: linear in the highlights
CHANCE_RESAMPLES = 1000  # bootstrap resamples of the interval


@dataclass(frozen=True)
class LabelReading:
    """One reading as the chance baseline needs it: a stretch of text a model read without restarting (a sentence,
    or a document read as running text) and its highlighted pairs.

    ``words`` [n]: the normalised tokens (:data:`~vizlm.inspect.reading.BOUNDARY` between two sentences); ``tags`` [n]:
    simplified Brown tags, or None (untagged: the rules that need tags are skipped); ``pairs``: the highlighted
    ``(row t, attended token a)``, ``0 <= a < t <= n`` (row ``t`` predicts ``words[t]``, row ``n`` the end; the
    attended word is not a boundary); ``unit``: what the bootstrap resamples it with (its document; its own
    sentence where there are no documents)."""

    words: tuple[str, ...]
    tags: tuple[str, ...] | None
    pairs: tuple[tuple[int, int], ...]
    unit: Hashable = 0

    def __post_init__(self):
        n = len(self.words)
        if self.tags is not None and len(self.tags) != n:
            raise ValueError(f"a reading has {n} words but {len(self.tags)} tags")
        for t, a in self.pairs:
            if not (0 <= a < t <= n) or self.words[a] == BOUNDARY:
                raise ValueError(f"pair (row {t}, token {a}) is not a pair of a reading of {n} words: it needs "
                                 "0 <= token < row <= words, and a word (not a boundary) at the token")

    @classmethod
    def of(cls, sa: SentenceAnalysis, setting: Setting = DEFAULT, unit: Hashable = 0) -> LabelReading:
        """The reading of ``sa`` with the pairs :func:`~vizlm.inspect.cases.label_cases` labels at this highlight
        setting (``sa`` read without restarting: a sentence, or a document as running text)."""
        if sa.restarts:
            raise ValueError("an analysis read in several pieces (sentence by sentence): give each piece alone")
        tags = rule_tags(sa)
        return cls(tuple(sa.norms), None if tags is None else tuple(tags),
                   tuple((t, h.token) for t, h in case_pairs(sa, setting)), unit)


@dataclass(frozen=True)
class LabelChance:
    """How often one label's rule fires on the highlighted pairs, against how often it fires on pairs at the same
    distances that attention did not choose (:func:`label_rates_vs_chance`)."""

    label: str
    pairs: int  # highlighted pairs
    count: int  # of them with the label
    observed: float  # count / pairs
    chance: float  # the distance-matched rate: the rule's rate over all pairs at each highlighted pair's distance
    enrichment: float | None  # observed / chance (None: chance 0)
    low: float | None  # the interval (``confidence``, bootstrap over ``unit``) of observed - chance (None: one unit)
    high: float | None
    units: int  # units resampled
    unit: str  # what they are: "documents" or "sentences"
    chance_pairs: int  # pairs the chance rates were computed over
    by_distance: tuple[tuple[int, int, float], ...]  # (d, highlighted pairs at d, the rule's rate over pairs at d)

    def to_dict(self) -> dict:
        doc = asdict(self)
        doc["by_distance"] = [list(x) for x in self.by_distance]
        return doc

    @classmethod
    def from_dict(cls, doc: dict) -> LabelChance:
        return cls(**{**doc, "by_distance": tuple((int(d), int(k), float(r)) for d, k, r in doc["by_distance"])})


def _float(x) -> float | None:
    return None if x is None else float(x)


def label_rates_vs_chance(
    readings: Iterable[LabelReading],
    *,
    collocations: Collocations | None = None,
    unit: str = "documents",
    confidence: float = 0.95,
    resamples: int = CHANCE_RESAMPLES,
    seed: int = 0,
    rules: dict | None = None,
) -> dict[str, LabelChance]:
    """Each label's rate among the highlighted pairs of ``readings`` against chance: label -> :class:`LabelChance`
    (empty when there are no highlighted pairs).

    A rule fires more often on some distances than others whatever the attention does (the determiner of a noun
    sits a word or two before it, a repeated word far back), so the chance rate is **distance-matched**: the
    rule applied to every pair ``(t, t - d)`` of the same readings at the distance ``d`` of each highlighted pair,
    i.e. the all-pairs rate at ``d`` weighted by how many highlighted pairs lie at ``d``:
    ``chance = sum_d n_d * r_d / sum_d n_d``, ``r_d`` = labelled pairs / pairs at distance ``d`` (pairs whose
    attended token is a boundary are none, as for the highlights). Enrichment = observed / chance: about 1
    when attention picks pairs the rule labels no more often than their distance alone predicts.

    The interval of observed - chance is a percentile bootstrap (``resamples`` draws, ``seed``) over the readings'
    ``unit``s (documents: the unit the corpus split samples; sentences where there are none), both rates
    recomputed in each draw; none with a single unit. Cost: the rules run on every highlighted pair and, per distance, on all pairs at
    that distance or on an evenly spaced sample of at least :data:`CHANCE_MIN_PAIRS` and
    :data:`CHANCE_PAIRS_PER_HIGHLIGHT` per highlighted pair there (every k-th pair at ``d``, the readings taken in
    order): linear in the highlights. ``rules``: label -> rule (default the four of :mod:`vizlm.inspect.case_rules`;
    a test passes its own).
    ``collocations``: as :func:`~vizlm.inspect.cases.label_cases`.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie between 0 and 1, not {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples}")
    rules = RULES if rules is None else rules
    labels = tuple(rules)
    readings = list(readings)
    collocations = collocations if collocations is not None else load_collocations()
    sentences = [TaggedWords(list(r.words), None if r.tags is None else list(r.tags), collocations) for r in readings]
    units = {u: k for k, u in enumerate(dict.fromkeys(r.unit for r in readings))}
    distances = sorted({t - a for r in readings for t, a in r.pairs})
    if not distances:
        return {}
    col = {d: j for j, d in enumerate(distances)}
    shape = (len(units), len(distances))
    highlighted, pairs = np.zeros(shape), np.zeros(shape)  # [U, D]
    labelled = np.zeros((len(labels), *shape))  # [L, U, D] pairs at d the rule labels
    observed = np.zeros((len(labels), len(units)))  # [L, U] highlighted pairs the rule labels
    for r, s in zip(readings, sentences, strict=True):
        u = units[r.unit]
        for t, a in r.pairs:
            highlighted[u, col[t - a]] += 1
            for label in apply_rules(s, t, a, rules):
                observed[labels.index(label), u] += 1
    per_distance = highlighted.sum(0)  # [D]
    for j, d in enumerate(distances):
        total = sum(max(0, len(r.words) + 1 - d) for r in readings)
        stride = max(1, math.ceil(total / max(CHANCE_MIN_PAIRS, CHANCE_PAIRS_PER_HIGHLIGHT * per_distance[j])))
        seen = 0  # pairs at d enumerated so far, over the readings in order: every stride-th is evaluated
        for r, s in zip(readings, sentences, strict=True):
            u = units[r.unit]
            for t in range(d + (-seen) % stride, len(r.words) + 1, stride):
                if r.words[t - d] == BOUNDARY:
                    continue
                pairs[u, j] += 1
                for label in apply_rules(s, t, t - d, rules):
                    labelled[labels.index(label), u, j] += 1
            seen += max(0, len(r.words) + 1 - d)
    all_rates = labelled.sum(1) / np.maximum(pairs.sum(0), 1)  # [L, D] the rule's rate at each distance

    def rates(h, m, p, o):  # h, m [..., D]; p [L, ..., D]; o [L, ...] -> observed, chance [L, ...]
        n = h.sum(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            # a draw without a sampled pair at d (but a highlight there): the rate of all draws
            rate = np.where(m > 0, p / np.where(m > 0, m, 1), all_rates.reshape(len(labels), *[1] * (m.ndim - 1), -1))
            return o / n, (rate * h).sum(-1) / n

    obs, chance = rates(per_distance, pairs.sum(0), labelled.sum(1), observed.sum(1))  # [L]
    draws = np.random.default_rng(seed).multinomial(len(units), np.full(len(units), 1 / len(units)), size=resamples)
    obs_b, chance_b = rates(draws @ highlighted, draws @ pairs, np.einsum("bu,lud->lbd", draws, labelled),
                            observed @ draws.T)  # [L, B]
    lows, highs = np.nanquantile(obs_b - chance_b, [(1 - confidence) / 2, (1 + confidence) / 2], axis=1)  # [L]
    if len(units) < 2:  # resampling one unit draws it every time: no interval
        lows = highs = [None] * len(labels)
    n = int(per_distance.sum())
    return {label: LabelChance(
        label, n, int(observed[k].sum()), float(obs[k]), float(chance[k]),
        float(obs[k] / chance[k]) if chance[k] > 0 else None, _float(lows[k]), _float(highs[k]), len(units), unit,
        int(pairs.sum()), tuple((d, int(per_distance[j]), float(all_rates[k, j])) for j, d in enumerate(distances)))
        for k, label in enumerate(labels)}

