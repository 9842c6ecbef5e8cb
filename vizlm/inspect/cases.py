"""Why did the model look there? The cases of one analysis: its highlights, labelled by the rules.

:func:`label_cases` takes every highlighted (target row, memory slot) pair of a
:class:`~vizlm.inspect.analysis.SentenceAnalysis` (``sa.highlighted(setting)``; the two ``<s>``
slots are skipped) and returns one :class:`Case` per pair, **labelled or not**: ``labels`` may be
empty, so the share of highlights the rules explain is visible. Each label comes with an evidence
string saying which rule fired and on what.

The rules, their notation and what each label means: :mod:`vizlm.inspect.case_rules`; each label's
rate against chance: :mod:`vizlm.inspect.case_chance`; the labels over a corpus split and the Cases
gallery: :mod:`vizlm.inspect.case_gallery`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vizlm.data.resources import Collocations, load_collocations
from vizlm.data.tagger import simplify_tag
from vizlm.inspect.analysis import SentenceAnalysis
from vizlm.inspect.case_rules import TaggedWords, apply_rules
from vizlm.inspect.highlight import DEFAULT, Setting
from vizlm.inspect.reading import BOUNDARY, split_at_boundaries, tag_passage

__all__ = ["Case", "case_pairs", "label_cases", "rule_tags"]


@dataclass
class Case:
    """One highlighted (target, attended word) pair and the labels the rules gave it."""

    target: int  # row index: predicts ``sa.targets[target]``
    word: str  # the target word (normalised; "</s>" for the last row)
    slot: int  # memory slot (>= 2)
    token: int  # index into ``sa.tokens`` of the attended word (slot - 2)
    attended: str  # the attended word (normalised)
    weight: float  # attention weight
    labels: list[str] = field(default_factory=list)  # subset of case_rules.LABELS, in that order
    evidence: dict[str, str] = field(default_factory=dict)  # label -> why
    effect: float | None = None  # slot effect in bits: log2 P(word) minus the same without this slot (None: not computed)
    slots: int = 1  # slots the row could attend to (its start slot included): uniform attention gives each 1 / slots
    attribution_bits: float | None = None  # gradient x input of log2 P(word) to the attended word, in bits: > 0
    # it raised P(word) (None: not computed; corpus_cases computes it for rank="attribution")

    @property
    def above_uniform(self) -> float:
        """The weight minus what an even spread over the row's slots gives: how much the attention chose
        this slot (0 for a model with a window of 1, whose only slot always gets weight 1)."""
        return self.weight - 1.0 / self.slots

    def to_dict(self) -> dict:
        return {
            "target": int(self.target),
            "word": self.word,
            "slot": int(self.slot),
            "token": int(self.token),
            "attended": self.attended,
            "weight": float(self.weight),
            "labels": list(self.labels),
            "evidence": dict(self.evidence),
            "effect": None if self.effect is None else float(self.effect),
            "slots": int(self.slots),
            "above_uniform": float(self.above_uniform),
            "attribution_bits": None if self.attribution_bits is None else float(self.attribution_bits),
        }


def label_cases(
    sa: SentenceAnalysis,
    setting: Setting = DEFAULT,
    collocations: Collocations | None = None,
) -> list[Case]:
    """Every highlighted pair of ``sa`` (``<s>`` slots skipped) as a :class:`Case`; labels may be empty.

    ``collocations`` defaults to the shipped table (:func:`vizlm.data.resources.load_collocations`;
    no phrase labels if it is missing).
    """
    s = TaggedWords(sa.norms, rule_tags(sa), collocations if collocations is not None else load_collocations())
    n = len(s.words)
    slots = sa.allowed().sum(1) if sa.attention is not None else None  # [T] slots each row could attend to
    cases = []
    for t, h in case_pairs(sa, setting):
        evidence = apply_rules(s, t, h.token)
        word = s.words[t] if t < n else sa.targets[t]
        cases.append(Case(t, word, h.slot, h.token, s.words[h.token], h.weight, list(evidence), evidence,
                          h.effect_bits, int(slots[t])))
    return cases


def case_pairs(sa: SentenceAnalysis, setting: Setting):
    """``(row, highlight)`` of every pair that is a case: the highlights of word slots (not a start slot, not a
    boundary)."""
    for t, row in enumerate(sa.highlighted(setting)):
        for h in row:
            if h.token >= 0 and sa.norms[h.token] != BOUNDARY:
                yield t, h


def rule_tags(sa: SentenceAnalysis) -> list[str] | None:
    """Simplified Brown tags for the rules: the gold tags if they are Brown tags, else the tagger's (kept
    with the analysis: its cases and its chance baseline read them)."""
    memo = sa.__dict__.get("_rule_tags")
    if memo is None or memo[0] is not sa.norms:
        memo = sa.__dict__["_rule_tags"] = (sa.norms, _compute_rule_tags(sa))
    return memo[1]


def _compute_rule_tags(sa: SentenceAnalysis) -> list[str] | None:
    tags = sa.tags
    if tags and len(tags) == len(sa.norms):
        if set(tags) == {"-"}:  # Sinica: characters, no tags
            return None
        if all(t == t.lower() for t in tags):
            return [simplify_tag(t) for t in tags]
    return tag_passage(split_at_boundaries(sa.norms))  # Penn Treebank tags (WSJ) or none: tag like typed text

