"""Which positions of a row of scores are highlighted: one setting, one rule, for every kind of score.

A highlight setting is one value, made once where the user's input enters (the API's ``threshold`` /
``top_k`` arguments, a URL, a CLI flag, the Explorer's sliders) and passed down whole:

* :class:`Share` ``(x)``: the positions holding at least ``x`` of the row's scale, largest first;
* :class:`TopK` ``(k)``: the ``k`` largest (each still with at least the scores' ``least`` share);
* :data:`NONE`: nothing highlighted (a heat map without outlines).

:data:`DEFAULT` is ``Share(0.2)`` for every kind of score. What a share is depends on the scores
(:class:`Scores`, one :class:`ScoreRow` per predicted word)::

    scores                         size of a position          scale (share = size / scale)    least (TopK)
    attention weights              its weight                  1 (a row's weights sum to 1)    MIN_TOP_K_WEIGHT
    attributions                   its |attribution|           the row's largest |attribution| 0

Relative to the largest for attributions, not to the row's total: the total spreads over every word read, so a
share of it shrinks with the length of the reading (in a 100-word passage no word holds a fifth of it), while a
share of the largest means the same on a short sentence and a long passage and always shows the word the
prediction depended on most. Slot effects are coloured, not highlighted: a heat map of them outlines the
attention's highlights.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from vizlm.core.errors import InputError

MAX_TOP_K = 50  # more highlights than this per word are no longer a highlight (the API's and the CLI's limit)


@dataclass(frozen=True)
class Share:
    """Highlight the positions with at least ``share`` (0 to 1; 0: every position that can be) of the row's scale."""

    share: float

    def __post_init__(self):
        value = self.share
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= float(value) <= 1:
            raise InputError(f"the threshold must be a number from 0 to 1, not {value!r}")
        object.__setattr__(self, "share", float(value))


@dataclass(frozen=True)
class TopK:
    """Highlight the ``k`` largest positions of a row (1 to :data:`MAX_TOP_K`)."""

    k: int

    def __post_init__(self):
        value = self.k
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= int(value) <= MAX_TOP_K:
            raise InputError(f"top_k must be a whole number from 1 to {MAX_TOP_K}, not {value!r}")
        object.__setattr__(self, "k", int(value))


@dataclass(frozen=True)
class NoOutline:
    """Highlight nothing."""


Setting = Share | TopK | NoOutline
NONE = NoOutline()
DEFAULT = Share(0.2)


def setting(threshold=None, top_k=None, default: Setting = DEFAULT) -> Setting:
    """The setting a user's two loose arguments ask for: ``top_k`` when given, else ``threshold``, else
    ``default``. Raises :class:`vizlm.core.errors.InputError` for both, or for a value out of range."""
    if threshold is not None and top_k is not None:
        raise InputError("give a threshold or a top_k, not both")
    if top_k is not None:
        return TopK(top_k)
    if threshold is not None:
        return Share(threshold)
    return default


def fields(value: Setting) -> tuple[float | None, int | None]:
    """``(threshold, top_k)`` of a setting, as the JSON documents and the caches write it."""
    if isinstance(value, Share):
        return value.share, None
    if isinstance(value, TopK):
        return None, value.k
    return None, None


def describe(value: Setting, share_of: str = "weight ≥ {share:g}") -> str:
    """The setting for people: ``"top 3"``, or ``share_of`` filled in (the scores' own words); "" for :data:`NONE`."""
    if isinstance(value, TopK):
        return f"top {value.k}"
    if isinstance(value, Share):
        return share_of.format(share=value.share)
    return ""


@dataclass(frozen=True)
class ScoreRow:
    """One row of scores as the rule reads it: ``size`` [S] >= 0 per position (NaN: cannot be highlighted); a
    position's share is ``size / scale`` (0 to 1); a top-k pick keeps at least ``least`` of the scale."""

    size: np.ndarray
    scale: float = 1.0
    least: float = 0.0

    @property
    def shares(self) -> np.ndarray:
        """[S] each position's share of the scale, in [0, 1] (NaN: cannot be highlighted)."""
        return self.size / self.scale if self.scale > 0 else np.zeros_like(self.size)


class Scores(Protocol):
    """Scores with highlights: attention weights (:class:`vizlm.inspect.analysis.SentenceAnalysis`) and
    attributions (:class:`vizlm.inspect.attribution.Attribution`)."""

    def score_row(self, row: int) -> ScoreRow:
        """Row ``row``'s scores as :func:`chosen` reads them."""
        ...


def chosen(row: ScoreRow, value: Setting) -> list[int]:
    """The positions of ``row`` that ``value`` highlights, largest first (ties: the earlier position first)."""
    if isinstance(value, NoOutline):
        return []
    size = row.size
    eligible = np.flatnonzero(~np.isnan(size))  # (n,) ascending
    order = eligible[np.argsort(-size[eligible], kind="stable")]
    if isinstance(value, TopK):
        order = order[: value.k]
        order = order[size[order] >= row.least * row.scale]
    else:
        order = order[size[order] >= value.share * row.scale]
    return [int(p) for p in order]
