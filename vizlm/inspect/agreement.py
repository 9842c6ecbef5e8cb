"""How far one target's attention and attribution agree (Jain & Wallace 2019, Sec. 3; Wiegreffe & Pinter 2019):
Kendall's tau-b between attention weight and ``|attribution|`` (by default: a word that lowers the prediction
matters as much as one that raises it), whether the most attended position is among the most important ones,
and the overlap of the :data:`TOP_K` heaviest of each. Pure functions over arrays: what
:class:`vizlm.inspect.attribution.Attribution`, the corpus statistics (:mod:`vizlm.inspect.attribution_corpus`)
and the faithfulness tests (:mod:`vizlm.inspect.faithfulness`) compare with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

TOP_K = 3


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b (ties in either ranking corrected, as ``scipy.stats.kendalltau``'s default):
    ``(concordant - discordant) / sqrt((n0 - ties_x) (n0 - ties_y))`` over the ``n0`` pairs; NaN below two
    values or when either is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    if n < 2:
        return math.nan
    i, j = np.triu_indices(n, 1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])  # (pairs,)
    n0 = len(i)
    denom = math.sqrt(float(n0 - (dx == 0).sum()) * float(n0 - (dy == 0).sum()))
    return float((dx * dy).sum() / denom) if denom > 0 else math.nan


def _top(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values, ties broken by position (the later one, the nearer word, first)."""
    order = np.lexsort((-np.arange(len(values)), -values))
    return order[:k]


def agreement(attention_row: Sequence[float], attribution_row: Sequence[float], positions: Sequence[int],
              absolute: bool = True, k: int = TOP_K) -> dict:
    """How one target's attention and attribution agree over ``positions`` (the positions both cover):

    * ``kendall_tau``: tau-b of weight and importance (``|attribution|`` when ``absolute``), NaN below two
      positions or when either is constant;
    * ``top1``: 1.0 when a most attended position is a most important one (exact ties all count), else 0.0;
    * ``top_k_overlap``: the share of the ``k`` heaviest positions of each that are in both (of
      ``min(k, positions)``; ties broken by position, the nearer word first);
    * ``positions``: how many positions were compared (NaN metrics with none).
    """
    pos = np.asarray(positions, dtype=int)
    a = np.asarray(attention_row, dtype=float)[pos]
    b = np.asarray(attribution_row, dtype=float)[pos]
    if absolute:
        b = np.abs(b)
    n = len(pos)
    if n == 0:
        return {"positions": 0, "kendall_tau": math.nan, "top1": math.nan, "top_k_overlap": math.nan}
    top1 = float(bool(((a == a.max()) & (b == b.max())).any()))
    m = min(k, n)
    overlap = len(set(_top(a, m).tolist()) & set(_top(b, m).tolist())) / m
    return {"positions": n, "kendall_tau": kendall_tau(a, b), "top1": top1, "top_k_overlap": overlap}



def nanmean(x: np.ndarray) -> float:
    """The mean of the finite values of ``x``; NaN when there are none."""
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else math.nan


__all__ = ["TOP_K", "agreement", "kendall_tau", "nanmean"]
