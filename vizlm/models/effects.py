"""Does the attention matter? Its effect on log P(target), recomputing the head only.

An attention weight is not an effect: a row can put most of its weight on a slot whose
value barely moves the prediction. Attention sits on top of the LSTM, so the LSTM
outputs ``h`` are fixed and only the head is recomputed, from other weights
(:meth:`~vizlm.models.base.AttentionLM.head` with ``weights``):

* **read effect** of row ``t``: ``log P(target_t)`` with the read as computed minus with
  the read removed (all weights zero, so ``r_t = 0``: AMSRN predicts from
  ``W_ph h_t + b``, Daniluk et al.'s models from ``tanh(W_x p_t)``, Salton from
  ``tanh(W_c [h_t; 0] + b_c)``);
* **slot effect** of slot ``j`` in row ``t``: ``log P(target_t)`` as computed minus with
  slot ``j`` dropped and the row's other weights renormalised to sum to 1. That is
  the prediction the model makes when ``j`` is masked out of its memory (the softmax
  renormalises the same way). Positive: the slot helped. A row whose only weight is
  on ``j`` (the first row, which has only the start slot; every row of a window-1
  model) has no weight left: it reads nothing, and its slot effect is its read effect.
  A slot with zero weight (outside the window) has effect 0 and is not computed.

Both are in nats. :func:`slot_effects` batches the slots: copy ``o`` of the batch drops,
in every row, the slot ``o`` places before the row's newest one (so a window of ``L``
needs ``L`` copies, not one per slot), and the output layer, the costly part (a
10,000-word vocabulary), runs only on the (row, slot) pairs asked for, in chunks. A model
whose read enters the logits linearly (AMSRN: ``W_pr r_t``) has ``shift_logits``: a pair's
logits are then its row's logits shifted by the change of the read, one product instead of
the whole output layer.
"""

from __future__ import annotations

import torch

from vizlm.models.base import AttentionLM, LMOutput

PAIR_CHUNK = 64  # (row, slot) pairs per output-layer call: 64 x 10k logits (2.5 MB) stay in the CPU cache
COPY_ELEMENTS = 2_000_000  # weights per attend() call over slot copies (copies x B x T x S), ~8 MB in float32


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log P(target)`` from logits (..., V) and target ids (...): (...)."""
    return logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0]  # one fused pass: faster than logsumexp


def drop_slot(weights: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """Weights (..., S) with ``slot`` (...) set to zero and the rest renormalised to sum to 1;
    a row with no weight left becomes all zero (nothing is read)."""
    kept = weights.scatter(-1, slot[..., None], 0.0)  # (..., S)
    rest = kept.sum(-1, keepdim=True)  # (..., 1)
    return torch.where(rest > 0, kept / rest.clamp_min(torch.finfo(kept.dtype).tiny), torch.zeros_like(kept))


def _repeat(x: torch.Tensor | None, copies: int) -> torch.Tensor | None:
    """(B, ...) -> (copies * B, ...), copy-major."""
    return None if x is None else x.expand(copies, *x.shape).reshape(copies * x.shape[0], *x.shape[1:])


def _check(model) -> None:
    if not isinstance(model, AttentionLM):
        raise ValueError(f"{type(model).__name__} has no attention: it has no attention effects")


@torch.no_grad()
def read_effect(
    model: AttentionLM, h: torch.Tensor, targets: torch.Tensor, out: LMOutput | None = None,
    memory: torch.Tensor | None = None, valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """``log P(target)`` with the read minus without it (all weights zero): (B, T) nats.

    ``h`` (B, T, d) are the LSTM outputs and ``targets`` (B, T) the predicted ids; ``out``
    is ``model.head(h, memory, valid)`` if already computed.
    """
    _check(model)
    out = out if out is not None else model.head(h, memory, valid)
    off = model.head(h, memory, valid, weights=torch.zeros_like(out.attention))  # r_t = 0
    return target_logprobs(out.logits, targets) - target_logprobs(off.logits, targets)


@torch.no_grad()
def slot_effects(
    model: AttentionLM, h: torch.Tensor, targets: torch.Tensor, out: LMOutput | None = None,
    select: torch.Tensor | None = None, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """``log P(target)`` as computed minus with slot ``j`` dropped: (B, T, S) nats.

    ``select`` (B, T, S) bool picks the (row, slot) pairs to compute (default: all);
    pairs not selected, and pairs whose weight is zero, are 0. Row ``t`` of ``h`` needs
    only ``h[:, :t + 1]`` (the model is causal), so rows after the last selected one are
    not recomputed.
    """
    _check(model)
    out = out if out is not None else model.head(h, memory, valid)
    alpha = out.attention  # (B, T, S)
    B, T, S = alpha.shape
    effects = torch.zeros_like(alpha)
    want = alpha > 0 if select is None else select & (alpha > 0)  # (B, T, S)
    b_idx, r_idx, j_idx = want.nonzero(as_tuple=True)  # (P,) each
    if not len(r_idx):
        return effects
    base = target_logprobs(out.logits, targets)  # (B, T)
    rows = int(r_idx.max()) + 1  # later rows are not needed
    carried = S - T + 1  # slots before the first row's newest one: 1 in the sentence layout
    S_used = carried + rows - 1
    h_used, a_used = h[:, :rows], alpha[:, :rows, :S_used]  # (B, R, d), (B, R, S')
    newest = torch.arange(rows, device=h.device) + (carried - 1)  # (R,) the newest slot of each row
    pair_offset = newest[r_idx] - j_idx  # (P,) 0 = the newest slot
    offsets = torch.unique(pair_offset)  # sorted
    shift = getattr(model, "shift_logits", None)  # AMSRN: logits + W_pr (r' - r)
    own = model.attend(h_used, memory, valid)[0] if shift is not None else None  # (B, R, k) the reads as computed
    per_copy = B * rows * S_used
    n_copies = max(1, COPY_ELEMENTS // max(per_copy, 1))
    for start in range(0, len(offsets), n_copies):
        group = offsets[start : start + n_copies]  # (C,)
        C = len(group)
        slot = (newest[None, :] - group[:, None]).clamp_min(0)  # (C, R) the slot each copy drops in each row
        w = drop_slot(a_used.expand(C, B, rows, S_used), slot[:, None, :].expand(C, B, rows))  # (C, B, R, S')
        read, _, _ = model.attend(_repeat(h_used, C), _repeat(memory, C), _repeat(valid, C),
                                  weights=w.reshape(C * B, rows, S_used))
        read = read.view(C, B, rows, -1)  # (C, B, R, k)
        # the pairs of this group: copy c = position of their offset in ``group``
        in_group = torch.isin(pair_offset, group)
        pb, pr, pj = b_idx[in_group], r_idx[in_group], j_idx[in_group]
        pc = torch.searchsorted(group, pair_offset[in_group])
        for i in range(0, len(pb), PAIR_CHUNK):
            cb, cr, cj, cc = (x[i : i + PAIR_CHUNK] for x in (pb, pr, pj, pc))
            if shift is not None:  # the read enters the logits linearly: shift the row's logits
                logits = shift(out.logits[cb, cr], read[cc, cb, cr] - own[cb, cr])  # (P', V)
            else:
                logits = model.readout(h_used[cb, cr][None], read[cc, cb, cr][None])[0]  # (P', V)
            effects[cb, cr, cj] = base[cb, cr] - target_logprobs(logits, targets[cb, cr])
    return effects
