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

Both are in nats. :func:`slot_effects` batches the slots: copy ``o`` of a sentence drops,
in every row, the slot ``o`` places before the row's newest one (so a window of ``L``
needs ``L`` copies, not one per slot; only sentences with a pair at ``o`` are copied),
and the output layer, the costly part (a 10,000-word vocabulary), runs only on the
(row, slot) pairs asked for, in chunks. A model whose read enters the logits linearly
(AMSRN: ``W_pr r_t``) has ``shift_logits``: the logits without the read, or with another
read, are its row's logits shifted by the change of the read (``W_pr (r' - r)``), one
product instead of the whole output layer; with ``W_pr = 0`` the shift is exactly zero.
"""

from __future__ import annotations

import torch

from vizlm.models.base import AttentionLM, LMOutput

PAIR_CHUNK = 64  # (row, slot) pairs per output-layer call: 64 x 10k logits (2.5 MB) stay in the CPU cache
COPY_ELEMENTS = 2_000_000  # weights per attend() call over slot copies (copies x T x S), ~8 MB in float32


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log P(target)`` from logits (..., V) and target ids (...): (...)."""
    return logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0]  # one fused pass: faster than logsumexp


def drop_slot(weights: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """Weights (..., S) with ``slot`` (...) set to zero and the rest renormalised to sum to 1;
    a row with no weight left becomes all zero (nothing is read)."""
    return _renormalised(weights.scatter(-1, slot[..., None], 0.0))  # (..., S)


def drop_slots(weights: torch.Tensor, dropped: torch.Tensor) -> torch.Tensor:
    """:func:`drop_slot` of several slots at once: weights (..., S) with the slots where ``dropped`` (..., S)
    is True set to zero and the rest renormalised to sum to 1 (all zero where no weight is left)."""
    return _renormalised(weights.masked_fill(dropped, 0.0))  # (..., S)


def _renormalised(kept: torch.Tensor) -> torch.Tensor:
    rest = kept.sum(-1, keepdim=True)  # (..., 1)
    return torch.where(rest > 0, kept / rest.clamp_min(torch.finfo(kept.dtype).tiny), torch.zeros_like(kept))


def _check(model) -> None:
    if not isinstance(model, AttentionLM):
        raise ValueError(f"{type(model).__name__} has no attention: it has no attention effects")


@torch.no_grad()
def attention_effects(
    model: AttentionLM, h: torch.Tensor, targets: torch.Tensor, out: LMOutput | None = None, slots: bool = True,
    select: torch.Tensor | None = None, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None,
    base: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(read effect (B, T), slot effects (B, T, S) or None)`` in nats (:func:`read_effect`,
    :func:`slot_effects`), sharing the work both need; ``base`` (B, T) is ``log P(target)`` of
    ``out`` if the caller has it."""
    _check(model)
    out = out if out is not None else model.head(h, memory, valid)
    base = base if base is not None else target_logprobs(out.logits, targets)  # (B, T) log P(target) as computed
    shift = getattr(model, "shift_logits", None)
    own = model.attend(h, memory, valid)[0] if shift is not None else None  # (B, T, k) the reads as computed
    if shift is not None:  # r_t = 0: take W_pr r_t back out of the logits (one product, not the output layer)
        off = shift(out.logits.flatten(0, 1).clone(), -own.flatten(0, 1)).view_as(out.logits)
    else:
        off = model.head(h, memory, valid, weights=torch.zeros_like(out.attention)).logits  # r_t = 0
    read = base - target_logprobs(off, targets)
    return read, (_slot_effects(model, h, targets, out, base, select, memory, valid, own) if slots else None)


def read_effect(
    model: AttentionLM, h: torch.Tensor, targets: torch.Tensor, out: LMOutput | None = None,
    memory: torch.Tensor | None = None, valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """``log P(target)`` with the read minus without it (all weights zero): (B, T) nats.

    ``h`` (B, T, d) are the LSTM outputs and ``targets`` (B, T) the predicted ids; ``out``
    is ``model.head(h, memory, valid)`` if already computed.
    """
    return attention_effects(model, h, targets, out, slots=False, memory=memory, valid=valid)[0]


@torch.no_grad()
def slot_effects(
    model: AttentionLM, h: torch.Tensor, targets: torch.Tensor, out: LMOutput | None = None,
    select: torch.Tensor | None = None, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """``log P(target)`` as computed minus with slot ``j`` dropped: (B, T, S) nats.

    ``select`` (B, T, S) bool picks the (row, slot) pairs to compute (default: all);
    pairs not selected, and pairs whose weight is zero, are 0. Row ``t`` of ``h`` needs
    only ``h[:, :t + 1]`` (the model is causal), so rows after the last selected one are
    not recomputed, and a copy is made only of the sentences with a pair at its offset.
    """
    _check(model)
    out = out if out is not None else model.head(h, memory, valid)
    return _slot_effects(model, h, targets, out, target_logprobs(out.logits, targets), select, memory, valid)


def _slot_effects(model, h, targets, out, base, select, memory, valid, own=None) -> torch.Tensor:
    alpha = out.attention  # (B, T, S)
    B, T, S = alpha.shape
    effects = torch.zeros_like(alpha)
    want = alpha > 0 if select is None else select & (alpha > 0)  # (B, T, S)
    b_idx, r_idx, j_idx = want.nonzero(as_tuple=True)  # (P,) each
    if not len(r_idx):
        return effects
    rows = int(r_idx.max()) + 1  # later rows are not needed
    carried = S - T + 1  # slots before the first row's newest one: 1 in the sentence layout
    S_used = carried + rows - 1
    h_used, a_used = h[:, :rows], alpha[:, :rows, :S_used]  # (B, R, d), (B, R, S')
    newest = torch.arange(rows, device=h.device) + (carried - 1)  # (R,) the newest slot of each row
    # One copy per (offset, sentence) with a pair there: copy (o, b) is sentence b with, in every row,
    # the slot o places before the row's newest dropped (o = 0: the newest slot).
    pair_key = (newest[r_idx] - j_idx) * B + b_idx  # (P,)
    copies = torch.unique(pair_key)  # (N,) sorted: by offset, then sentence
    pair_copy = torch.searchsorted(copies, pair_key)  # (P,) the copy each pair is read from
    order = torch.argsort(pair_copy)
    b_idx, r_idx, j_idx, pair_copy = b_idx[order], r_idx[order], j_idx[order], pair_copy[order]
    shift = getattr(model, "shift_logits", None)  # AMSRN: logits + W_pr (r' - r)
    if shift is not None:  # (B, R, k) the reads as computed
        own = model.attend(h_used, memory, valid)[0] if own is None else own[:, :rows]
    per_call = max(1, COPY_ELEMENTS // (rows * S_used))
    for n0 in range(0, len(copies), per_call):
        key = copies[n0 : n0 + per_call]  # (C,)
        cb, co = key % B, key // B  # (C,) sentence and offset of each copy
        slot = (newest[None, :] - co[:, None]).clamp_min(0)  # (C, R) the slot each copy drops in each row
        w = drop_slot(a_used[cb], slot)  # (C, R, S')
        read, _, _ = model.attend(h_used[cb], None if memory is None else memory[cb],
                                  None if valid is None else valid[cb], weights=w)  # (C, R, k)
        lo, hi = torch.searchsorted(pair_copy, torch.tensor([n0, n0 + len(key)], device=pair_copy.device)).tolist()
        for i in range(lo, hi, PAIR_CHUNK):
            pb, pr, pj = (x[i : min(hi, i + PAIR_CHUNK)] for x in (b_idx, r_idx, j_idx))
            pc = pair_copy[i : min(hi, i + PAIR_CHUNK)] - n0
            if shift is not None:  # the read enters the logits linearly: shift the row's logits
                logits = shift(out.logits[pb, pr], read[pc, pr] - own[pb, pr])  # (P', V)
            else:
                logits = model.readout(h_used[pb, pr][None], read[pc, pr][None])[0]  # (P', V)
            effects[pb, pr, pj] = base[pb, pr] - target_logprobs(logits, targets[pb, pr])
    return effects


# --------------------------------------------------------------------------- self-attention (a Transformer)
def head_row_outputs(model, layer_inputs: tuple[list[torch.Tensor], torch.Tensor], layer: int, heads: list[int],
                     streams: torch.Tensor, rows: torch.Tensor, change) -> torch.Tensor:
    """(P, d) a Transformer's output at row ``rows[p]`` of stream ``streams[p]`` with, at ``layer``, that row's
    weights of ``heads`` replaced by ``change(kept (n, h, W), part, start (n,))`` (``part``: the slice of the P
    pairs in this chunk; ``start``: their rows' block starts, so ``kept``'s slot ``s`` is position ``start + s``;
    differentiable in what it returns), only that row changed: the other positions read as computed, so the
    row's later layers see them unchanged. A row reads its own block only, so each pair is a copy of the row's
    block (from its start to the block's end: the positions after the row, masked, change nothing) run from
    ``layer`` on (:meth:`TransformerLM.run_layer`) with the block's causal mask, in chunks of
    :data:`COPY_ELEMENTS` weights. ``layer_inputs``: :meth:`TransformerLM.layer_inputs` of the text."""
    xs, mask = layer_inputs
    T, block, H = xs[0].shape[0], model.config.block, model.config.heads
    W = min(block, T)
    block_mask = mask[:W, :W]  # causal: the first block's
    steps = torch.arange(W, device=rows.device)
    hs = torch.tensor(heads, device=rows.device)
    chunk = max(1, COPY_ELEMENTS // max(1, H * W * W))
    out = []
    for i in range(0, len(rows), chunk):
        part = slice(i, i + chunk)
        bi, ri = streams[part], rows[part]
        at = torch.arange(len(ri), device=ri.device)
        start = (ri // block) * block  # (n,) the first position of the row's block
        where = (start[:, None] + steps[None, :]).clamp_max(T - 1)  # (n, W) positions copied
        local = ri - start  # (n,) the row in its copy

        def edit(weights: torch.Tensor, at=at, local=local, part=part, start=start) -> torch.Tensor:  # (n, H, W, W)
            weights = weights.clone()
            kept = weights[at[:, None], hs[None, :], local[:, None]]  # (n, h, W)
            weights[at[:, None], hs[None, :], local[:, None]] = change(kept, part, start).to(weights.dtype)
            return weights

        x = model.run_layer(layer, xs[layer][where.T, bi[None, :]], block_mask, edit=edit)[0]  # (W, n, d)
        for k in range(layer + 1, model.config.layers):
            x = model.run_layer(k, x, block_mask)[0]
        out.append(model.outputs(x)[at, local])  # (n, d): each copy's own row
    return torch.cat(out) if out else xs[0].new_zeros(0, xs[0].shape[-1])


@torch.no_grad()
def head_effects(model, inputs: torch.Tensor, targets: torch.Tensor, layer: int, head: int | None,
                 slots: bool = True, select: torch.Tensor | None = None,
                 layer_inputs: tuple[list[torch.Tensor], torch.Tensor] | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The effects of a Transformer's self-attention head ``head`` of ``layer`` (None: all of the layer's heads,
    the view of their mean), in nats, for token ids ``inputs`` (B, T) read from their start:

    * **read effect** (B, T): ``log P(target)`` minus the same with the head's output zeroed at every position
      before the layer's output projection (the head masked, as Michel et al. 2019 mask heads): how much the
      predictions need what the head reads;
    * **slot effect** (B, T, T) of slot ``j`` in row ``r``: ``log P(target_r)`` minus the same with ``j`` dropped
      from row ``r``'s weights of the head (the others renormalised; all of the layer's heads for ``head``
      None), only row ``r`` changed: the other positions read as computed, so row ``r``'s later layers see
      them unchanged. Computed where the row puts weight on the slot and ``select`` (B, T, T or 1) allows it,
      NaN elsewhere; a row whose only weight is on ``j`` reads nothing.

    Each dropped pair is a copy of its row's block (a row reads nothing before it) run from ``layer`` on
    (:func:`head_row_outputs`). ``layer_inputs``: :meth:`TransformerLM.layer_inputs` when the caller has them."""
    xs, mask = model.layer_inputs(inputs) if layer_inputs is None else layer_inputs
    L, H = model.config.layers, model.config.heads
    base = target_logprobs(model.head(model.outputs(xs[-1])).logits, targets)  # (B, T)
    kept = torch.ones(H, dtype=xs[0].dtype, device=xs[0].device)
    heads = list(range(H)) if head is None else [head]
    kept[heads] = 0
    x = model.run_layer(layer, xs[layer], mask, head_mask=kept)[0]
    for k in range(layer + 1, L):
        x = model.run_layer(k, x, mask)[0]
    read = base - target_logprobs(model.head(model.outputs(x)).logits, targets)  # (B, T)
    if not slots:
        return read, None
    w = model.run_layer(layer, xs[layer], mask)[1][:, heads]  # (B, h, T, T) the weights of the head(s)
    want = (w > 0).any(1) & (targets != 0)[:, :, None]  # (B, T, T)
    if select is not None:
        want &= select
    B, T = targets.shape
    effects = torch.full((B, T, T), float("nan"), dtype=base.dtype, device=base.device)
    effects[~(w > 0).any(1)] = 0.0  # a slot without weight: dropping it changes nothing
    b, r, j = want.nonzero(as_tuple=True)  # (N,) each

    def dropped(kept: torch.Tensor, part: slice, start: torch.Tensor) -> torch.Tensor:  # (n, h, W)
        return drop_slot(kept, (j[part] - start)[:, None].expand(len(start), len(heads)))

    h = head_row_outputs(model, (xs, mask), layer, heads, b, r, dropped)  # (N, d)
    per = max(1, COPY_ELEMENTS // model.config.vocab_size)  # rows of logits at a time
    for i in range(0, len(b), per):
        bi, ri, ji = b[i : i + per], r[i : i + per], j[i : i + per]
        lp = target_logprobs(model.head(h[i : i + per, None]).logits[:, 0], targets[bi, ri])  # (n,)
        effects[bi, ri, ji] = base[bi, ri] - lp
    return read, effects
