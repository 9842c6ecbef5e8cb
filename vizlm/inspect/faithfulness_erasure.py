"""The faithfulness tests that drop memory slots by a ranking (:mod:`vizlm.inspect.faithfulness`'s units and reading):
Serrano & Smith's erasure curves (:func:`erasure_curves`) and ERASER's comprehensiveness and sufficiency
(DeYoung et al. 2020, :func:`aopc`), each ranking a row's word slots by attention, by the gradient of
``log P(target)`` with respect to each weight, at random or by an attribution method.

Masking (erasure, AOPC): a dropped slot's weight is set to zero and the row's remaining weights renormalised
to sum to one (:func:`vizlm.models.effects.drop_slots`, the slot effect's rule: the prediction the model makes
when the slot is masked out of its memory, as its softmax would renormalise); the held-fixed slots keep their
weight in the renormalisation. A row with no weight left reads nothing (its read effect).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from vizlm.inspect.analysis import SentenceAnalysis
from vizlm.inspect.attribution import METHODS, TEXT_METHODS, attribute
from vizlm.inspect.faithfulness import FaithfulnessError, _features, _outputs, _Piece, _read
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.models.effects import drop_slots

ERASE_K = (1, 2, 3, 4, 5)
FRACTIONS = (0.01, 0.05, 0.1, 0.2, 0.5)
RANKINGS = ("attention", "gradient", "random")  # slot rankings of any attention model; METHODS rank too
MASKING = ("a dropped slot's weight is set to zero and the row's other weights renormalised to sum to 1 "
           "(the slot effect's rule); only word slots are ranked and dropped, the start slot (where the model has "
           "one) and the <s> slot are held fixed")


# --------------------------------------------------------------------------- rankings of word slots
def _check_rankings(ckpt: Checkpoint, rankings: Sequence[str]) -> None:
    for r in rankings:
        if r not in RANKINGS and r not in METHODS:
            raise FaithfulnessError(f"unknown ranking {r!r}; valid: {', '.join([*RANKINGS, *METHODS])}")


def _slot_scores(ckpt: Checkpoint, sa: SentenceAnalysis, piece: _Piece, ranking: str, rng: np.random.Generator,
                 attributions: dict) -> np.ndarray:
    """(Tb, Tb) how important each slot is to each row of ``piece`` by ``ranking``, larger first (word slots only
    are ranked): the weight, the gradient of log P(target) with respect to the weight (Serrano & Smith's
    ranking), a random number, or ``|attribution|`` of the position the slot holds (a method of
    :data:`~vizlm.inspect.attribution.METHODS`)."""
    Tb, f = len(piece.inputs), piece.first
    if ranking == "attention":
        return piece.attention.double().cpu().numpy()
    if ranking == "random":
        return rng.random((Tb, Tb))
    if ranking == "gradient":
        ro = piece.out.readout
        with torch.enable_grad():
            w = piece.attention.detach().clone()[None].requires_grad_()  # (1, Tb, Tb)
            logp = F.linear(_features(ckpt.model, piece, w), ro.weight, ro.bias).log_softmax(-1)  # (1, Tb, V)
            total = logp[0].gather(1, piece.targets[:, None]).sum()  # rows are independent: one backward
            (grad,) = torch.autograd.grad(total, [w])
        return grad[0].double().cpu().numpy()
    if ranking not in attributions:
        attributions[ranking] = attribute(ckpt, sa, ranking)
    scores = np.abs(attributions[ranking].scores)  # (T, T) by position
    if piece.view is not None:  # self-attention: slot j is position j
        return scores[f : f + Tb, f : f + Tb].copy()
    out = np.zeros((Tb, Tb))
    out[:, 1:] = scores[f : f + Tb, f : f + Tb - 1]  # slot j holds position j - 1
    return out


def _ranks(scores: np.ndarray, words: np.ndarray) -> np.ndarray:
    """(Tb, Tb) each word slot's place in its row's ranking (0: the most important; ties: the newer slot first);
    the other slots last."""
    Tb, S = scores.shape
    key = np.where(words, scores, -np.inf)
    order = np.lexsort((-np.broadcast_to(np.arange(S), (Tb, S)), -key), axis=-1)  # (Tb, S)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(S), (Tb, S)), axis=-1)
    return ranks


# --------------------------------------------------------------------------- (e) erasure curves
@torch.no_grad()
def erasure_curves(ckpt: Checkpoint, sa: SentenceAnalysis, ks: Sequence[int] = ERASE_K,
                   rankings: Sequence[str] = RANKINGS, seed: int = 0, attributions: dict | None = None) -> pd.DataFrame:
    """Serrano & Smith's erasure: per row, ranking and ``k``, the ``k`` most important word slots dropped
    (module docstring: masking). Long frame: ``row, target, ranking, k, dlogp`` (log P(target) as read minus
    with them dropped) and ``flip`` (1.0 where the most likely next word changed); NaN where the row has fewer
    than ``k`` word slots."""
    _check_rankings(ckpt, rankings)
    ks = [int(k) for k in ks]
    if any(k < 1 for k in ks):
        raise FaithfulnessError("k must be >= 1")
    attributions = dict(attributions or {})
    rng = np.random.default_rng(seed)
    T = len(sa.targets)
    dlogp = np.full((len(rankings), len(ks), T), math.nan)
    flip = np.full((len(rankings), len(ks), T), math.nan)
    for piece in _read(ckpt, sa):
        Tb, f = len(piece.inputs), piece.first
        words = piece.words.cpu().numpy()
        count = words.sum(1)
        masks = []
        for ranking in rankings:
            ranks = _ranks(_slot_scores(ckpt, sa, piece, ranking, rng, attributions), words)
            masks += [words & (ranks < k) for k in ks]
        dropped = torch.from_numpy(np.stack(masks)).to(piece.h.device)  # (R * K, Tb, Tb)
        res = _outputs(ckpt.model, piece, drop_slots(piece.attention.expand(len(masks), -1, -1), dropped))
        d = (piece.base - res["logp"]).double().cpu().numpy().reshape(len(rankings), len(ks), Tb)
        top = (res["top1"] != piece.logp.argmax(-1)).double().cpu().numpy().reshape(len(rankings), len(ks), Tb)
        enough = count[None, None, :] >= np.asarray(ks)[None, :, None]
        dlogp[:, :, f : f + Tb] = np.where(enough, d, math.nan)
        flip[:, :, f : f + Tb] = np.where(enough, top, math.nan)
    return _long(sa, rankings, "k", ks, {"dlogp": dlogp, "flip": flip})


def _long(sa: SentenceAnalysis, rankings: Sequence[str], name: str, values: Sequence, cols: dict) -> pd.DataFrame:
    R, K, T = len(rankings), len(values), len(sa.targets)
    return pd.DataFrame({
        "row": np.tile(np.arange(T), R * K), "target": list(sa.targets) * (R * K),
        "ranking": np.repeat(list(rankings), K * T), name: np.tile(np.repeat(list(values), T), R),
        **{k: v.reshape(-1) for k, v in cols.items()},
    })


# --------------------------------------------------------------------------- (f) comprehensiveness, sufficiency
@torch.no_grad()
def aopc(ckpt: Checkpoint, sa: SentenceAnalysis, rankings: Sequence[str] = ("attention", *TEXT_METHODS, "random"),
         fractions: Sequence[float] = FRACTIONS, seed: int = 0, attributions: dict | None = None) -> pd.DataFrame:
    """ERASER's comprehensiveness and sufficiency (DeYoung et al. 2020) of each ranking, per row and fraction
    ``f`` of the row's word slots (``k = ceil(f n)``, at least 1): ``comprehensiveness`` = log P(target) as read
    minus with the top ``k`` word slots dropped (large: the ranking found what mattered), ``sufficiency`` = the
    same with every other word slot dropped (small: those ``k`` suffice). Masking: the module docstring (the
    start slot and the ``<s>`` slot always kept). Long frame ``row, target, ranking, fraction, slots`` (``k``);
    NaN for a row without word slots. The AOPC of a ranking is the mean over the fractions
    (:func:`aopc_summary`)."""
    _check_rankings(ckpt, rankings)
    if not fractions or any(not 0 < x <= 1 for x in fractions):
        raise FaithfulnessError("fractions must be in (0, 1]")
    attributions = dict(attributions or {})
    rng = np.random.default_rng(seed)
    T, R, K = len(sa.targets), len(rankings), len(fractions)
    comp, suff = np.full((R, K, T), math.nan), np.full((R, K, T), math.nan)
    slots = np.zeros((R, K, T))
    for piece in _read(ckpt, sa):
        Tb, f = len(piece.inputs), piece.first
        words = piece.words.cpu().numpy()
        count = words.sum(1)  # (Tb,)
        ks = np.stack([np.clip(np.ceil(x * count - 1e-9), 1, None).astype(int) for x in fractions])  # (K, Tb)
        masks = []
        for ranking in rankings:
            ranks = _ranks(_slot_scores(ckpt, sa, piece, ranking, rng, attributions), words)
            top = [words & (ranks < k[:, None]) for k in ks]
            masks += top + [words & ~t for t in top]  # comprehensiveness: drop the top; sufficiency: keep only it
        dropped = torch.from_numpy(np.stack(masks)).to(piece.h.device)  # (R * 2K, Tb, Tb)
        res = _outputs(ckpt.model, piece, drop_slots(piece.attention.expand(len(masks), -1, -1), dropped))
        d = (piece.base - res["logp"]).double().cpu().numpy().reshape(R, 2, K, Tb)
        has = count[None, None, :] > 0
        comp[:, :, f : f + Tb] = np.where(has, d[:, 0], math.nan)
        suff[:, :, f : f + Tb] = np.where(has, d[:, 1], math.nan)
        slots[:, :, f : f + Tb] = np.where(has, ks[None], 0)
    return _long(sa, rankings, "fraction", list(fractions),
                 {"slots": slots.astype(int), "comprehensiveness": comp, "sufficiency": suff})


def aopc_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per ranking, the AOPC of comprehensiveness and of sufficiency: the mean over rows of each row's mean over
    the fractions (rows without word slots left out)."""
    per_row = frame.groupby(["ranking", "row"], sort=False)[["comprehensiveness", "sufficiency"]].mean()
    return per_row.groupby("ranking", sort=False).mean()

