"""Attention effects of an analysis, on demand: the slot effects :func:`vizlm.inspect.analysis.analyze` skips
for a long text (more than :data:`~vizlm.inspect.analysis.EFFECT_PAIRS` pairs), for some rows or for all
(what the effects are: :mod:`vizlm.inspect.analysis`).

The maths is :mod:`vizlm.models.effects`'s; this module reads a text's pieces again (:mod:`vizlm.inspect.reading`)
and lays the effects out as the analysis's rows and slots.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from vizlm.inspect.analysis import AnalysisError, SentenceAnalysis
from vizlm.inspect.reading import pieces_of
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.models import effects as fx


@torch.no_grad()
def slot_effect_rows(ckpt: Checkpoint, sa: SentenceAnalysis, rows: Sequence[int]) -> np.ndarray:
    """[len(rows), S] slot effects (nats) of some rows of ``sa``, e.g. the selected word of a
    text too long for :data:`EFFECT_PAIRS`: rows after the last one are not recomputed. A Transformer's: of the
    head ``sa`` shows (:func:`vizlm.models.effects.head_effects`)."""
    if sa.attention is None:
        raise AnalysisError(f"{sa.model} has no attention: it has no slot effects")
    rows = [int(r) for r in rows]
    if sa.slot_effects is not None and np.isfinite(sa.slot_effects[rows]).all():
        return sa.slot_effects[rows]
    last = max(rows)  # the model is causal: rows up to ``last`` read no token after it
    rd = pieces_of(ckpt, sa.norms[: last + 1], [b for b in sa.restarts if b <= last])
    if sa.self_attention:  # the head shown (a layer's heads together for their mean)
        select = rd.scatter_rows(rows, rd.targets)  # (B, Tb, 1)
        effects = fx.head_effects(ckpt.model, rd.inputs, rd.targets, *sa.head, select=select)[1]  # (B, Tb, Tb)
        part = rd.gather_slots(effects)[rows].double().cpu().numpy()
        return np.pad(part, ((0, 0), (0, len(sa.targets) - part.shape[1])))
    h = ckpt.model.encode(rd.inputs)  # (B, Tb, d)
    out = ckpt.model.head(h)
    select = rd.scatter_rows(rows, out.attention)  # (B, Tb, 1)
    effects = fx.slot_effects(ckpt.model, h, rd.targets, out=out, select=select)  # (B, Tb, Sb)
    part = rd.gather_slots(effects)[rows].double().cpu().numpy()  # (len(rows), last + 2): no later slot has weight
    return np.pad(part, ((0, 0), (0, len(sa.targets) - part.shape[1])))


def with_slot_effects(ckpt: Checkpoint, sa: SentenceAnalysis) -> SentenceAnalysis:
    """``sa`` with every slot effect (a copy; ``sa`` itself if it has them or has no attention)."""
    if sa.attention is None or (sa.slot_effects is not None and np.isfinite(sa.slot_effects).all()):
        return sa
    return dataclasses.replace(sa, slot_effects=slot_effect_rows(ckpt, dataclasses.replace(sa, slot_effects=None),
                                                                 range(len(sa.targets))))
