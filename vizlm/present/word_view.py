"""One predicted word of an analysis as a view shows it: its numbers, its highlights and their cases, for a
highlight setting (:mod:`vizlm.inspect.highlight`); and the word a view opens on.

The Explorer's model panel reads one word at a time: this computes that word's row only (its case labels come
from :func:`cases_by_target`, computed once per setting for the whole text, which the JSON document
(:func:`vizlm.present.serialize.analysis_dict`) reads too), not the JSON document of every word.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vizlm.inspect.analysis import Highlight, SentenceAnalysis
from vizlm.inspect.cases import label_cases
from vizlm.inspect.highlight import DEFAULT, Setting


@dataclass(frozen=True)
class WordView:
    """Row ``row`` of an analysis (it predicts ``word``). Bits of ``log2 P(word)``; None where not computed (no
    attention, no effects, no gates)."""

    row: int
    word: str
    prob: float
    surprisal_bits: float
    read_effect_bits: float | None  # log2 P(word) with the attention read minus without it
    prob_without_read: float | None  # P(word) without the read
    start_weight: float | None  # the weight on the row's empty start slot ("attention off")
    gate_mean: float | None  # AMSRN's selection gate g1, mean over units
    top: list[tuple[str, float]]  # the most likely next words and their probabilities
    highlights: list[Highlight]  # the slots the setting highlights, heaviest first
    cases: list[dict]  # the labelled cases of those highlights (:meth:`vizlm.inspect.cases.Case.to_dict`)


def cases_by_target(sa: SentenceAnalysis, setting: Setting = DEFAULT) -> dict[int, list[dict]]:
    """Target index -> the labelled cases of its highlights (:func:`vizlm.inspect.cases.label_cases`), as
    dicts; computed once per highlight setting and kept with the analysis, like its highlights."""
    hl = sa.highlighted(setting)  # one list per setting: it keys the cases too
    memo = sa.__dict__.setdefault("_cases", {})
    hit = memo.get(id(hl))
    if hit is not None and hit[0] is hl:
        return hit[1]
    out: dict[int, list[dict]] = {}
    for c in label_cases(sa, setting):
        out.setdefault(c.target, []).append(c.to_dict())
    memo[id(hl)] = (hl, out)
    return out


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def word_view(sa: SentenceAnalysis, row: int, setting: Setting = DEFAULT, cases: dict[int, list[dict]] | None = None,
              effect_bits: np.ndarray | None = None) -> WordView:
    """The view of predicted word ``row`` of ``sa`` with the highlights of ``setting``. ``cases``: the case labels of
    every row (:func:`cases_by_target`) when the caller keeps them (default: computed);
    ``effect_bits`` [S]: the row's slot effects in bits computed for this word alone (a long text's analysis has
    none), the effect of its cases that have none."""
    T = len(sa.targets)
    if not 0 <= row < T:
        raise IndexError(f"target {row} out of range: the text has {T} predicted words (0..{T - 1})")
    read = None if sa.read_effect is None else _finite(sa.read_effect_bits[row])
    without = None
    if sa.read_effect is not None:
        with_read = float(sa.logprobs[row]) - float(sa.read_effect[row])
        without = _finite(math.exp(with_read)) if with_read < 709 else None  # exp overflows past ~709
    # the weight on the zero start slot ("attention off"); self-attention has no such slot
    start = None if sa.attention is None or sa.self_attention else float(sa.attention[row, sa.first_rows()[row]])
    return WordView(
        row=row,
        word=sa.targets[row],
        prob=float(sa.probs[row]),
        surprisal_bits=float(sa.surprisal[row]),
        read_effect_bits=read,
        prob_without_read=without,
        start_weight=start,
        gate_mean=None if sa.gates is None else float(sa.gates[row].mean()),
        top=[(w, float(p)) for w, p in zip(sa.top_words[row], sa.top_probs[row])],
        highlights=sa.highlighted(setting, rows=[row])[0],
        cases=[c if c.get("effect") is not None or effect_bits is None else {**c, "effect": float(effect_bits[c["slot"]])}
               for c in (cases_by_target(sa, setting) if cases is None else cases).get(row, [])],
    )


def default_target(sa: SentenceAnalysis, setting: Setting = DEFAULT) -> int:
    """The word a view opens on: the first with a labelled case (of ``setting``'s highlights), else the last word
    before ``</s>``."""
    for r, cases in sorted(cases_by_target(sa, setting).items()):
        if any(c.get("labels") for c in cases):
            return r
    return max(0, len(sa.targets) - 2)
