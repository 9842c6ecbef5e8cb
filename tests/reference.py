"""Slow step-by-step reference implementations of every model's head.

They follow the equations literally, one time step at a time with explicit
memories, so that the fast masked implementations can be checked against them.
:func:`reference_document` also steps the LSTM one token at a time, carrying its
``(h, c)`` by hand: the reference for a document read as running text.
"""

from __future__ import annotations

import torch


def reference(
    model, inputs: torch.Tensor | None = None, h: torch.Tensor | None = None, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits (B, T, V), attention (B, T, T) or None), one step at a time.

    From token ids ``inputs``, or from given LSTM outputs ``h`` (to time the heads alone).
    ``weights`` (B, T, T) replace each step's softmax: the weights of the slots in its memory
    are used as given (the attention effects' recomputation, step by step). RM's memory
    holds words, so it needs ``inputs`` always (its ``h`` may be the LSTM's outputs alone, or
    its own outputs ``[h; M x; C x]``, of which the reference uses the LSTM's part only).
    """
    name = type(model).__name__
    if name == "TransformerLM":  # read in blocks from the start, as a document
        return reference_document(model, inputs)
    if name == "RMLM" and inputs is None:
        raise ValueError("RM's reference reads the words: give inputs")
    if h is None:
        h = model.encode(inputs)  # the recurrent part is shared; the heads differ
    B, T, _ = h.shape
    logits = []
    att = torch.zeros(B, T, T, dtype=h.dtype) if name != "NGramRNN" and name != "LSTMLM" else None
    for t in range(T):  # row t predicts from h_{t+1} (1-based), memory h_0..h_t
        if name == "LSTMLM":
            logits.append(model.decoder(h[:, t]))
            continue
        if name == "NGramRNN":
            k = model.config.hidden_dim
            parts = []
            for j in range(model.config.n - 1):
                src = t - j
                parts.append(h[:, src, j * k : (j + 1) * k] if src >= 0 else torch.zeros(B, k, dtype=h.dtype))
            logits.append(model.decoder(torch.tanh(model.w_n(torch.cat(parts, -1)))))
            continue
        logits.append(_step(model, name, h, t, att, None if weights is None else weights[:, t], inputs))
    return torch.stack(logits, 1), att


def reference_document(model, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A whole document (B, T) read one token at a time from a zero state: (logits, attention (B, T, T)).
    A Transformer reads it in blocks of ``block`` tokens from its start, each from scratch (no attention in
    the slot layout: None)."""
    if type(model).__name__ == "TransformerLM":
        W = model.config.block
        return torch.cat([transformer_reference(model, inputs[:, s : s + W])[0]
                          for s in range(0, inputs.shape[1], W)], 1), None
    hc, outputs = None, []
    for t in range(inputs.shape[1]):
        o, hc = model.rnn(model.embed(inputs[:, t : t + 1]), hc)  # one step, state carried
        outputs.append(o[:, 0])
    return reference(model, inputs, h=torch.stack(outputs, 1))


def _first(model, t: int) -> int:
    """The oldest memory slot of step t: AMSRN and Salton keep the last ``memory`` states if set;
    AMSRN without the start slot never has slot 0."""
    window = getattr(model.config, "memory", None)
    first = 0 if window is None else max(0, t + 1 - window)
    return first if getattr(model.config, "start_slot", True) else max(first, 1)


def _slots(h: torch.Tensor, t: int, first: int) -> list[torch.Tensor]:
    """Memory slots first..t as a list; slot 0 is the zero start state h_0."""
    return [torch.zeros_like(h[:, 0]) if i == 0 else h[:, i - 1] for i in range(first, t + 1)]


def _step(model, name, h, t, att, given=None, inputs=None):
    ht = h[:, t]
    if name == "RMLM":
        return _rm_step(model, h, t, att, given, inputs)
    if name == "AMSRN":
        g1, g2 = model.gates(ht)
        k = model.key(ht)
        first = _first(model, t)
        mem = _slots(h, t, first)
        if not mem:  # no start slot, first step: nothing to attend to, nothing read
            return model.decoder(ht) + model.read_proj(torch.zeros_like(ht))
        e = torch.stack([((m * g1) * k).sum(-1) for m in mem], -1)
        a = e.softmax(-1) if given is None else given[:, first : t + 1]
        r = sum(a[:, i, None] * (m * g2) for i, m in enumerate(mem))
        att[:, t, first : t + 1] = a
        return model.decoder(ht) + model.read_proj(r)
    if name == "SaltonLM":
        first = _first(model, t)
        mem = _slots(h, t, first)
        scores = []
        for m in mem:
            pre = model.w_s(m) + (model.w_q(ht) if model.w_q is not None else 0)
            scores.append(model.v(torch.tanh(pre)).squeeze(-1))
        a = torch.stack(scores, -1).softmax(-1) if given is None else given[:, first : t + 1]
        c = sum(a[:, i, None] * m for i, m in enumerate(mem))
        att[:, t, first : t + 1] = a
        return model.decoder(torch.tanh(model.w_c(torch.cat([ht, c], -1))))
    # Daniluk: window of the L previous outputs
    L = model.config.window
    first = max(0, t + 1 - L)
    key, value, pred = model.split(h)
    keys, values = _slots(key, t, first), _slots(value, t, first)
    kt = key[:, t]
    scores = torch.stack([model.w(torch.tanh(model.w_y(y) + model.w_h(kt))).squeeze(-1) for y in keys], -1)
    a = scores.softmax(-1) if given is None else given[:, first : t + 1]
    r = sum(a[:, i, None] * v for i, v in enumerate(values))
    att[:, t, first : t + 1] = a
    return model.decoder(torch.tanh(model.w_r(r) + model.w_x(pred[:, t])))


def _rm_step(model, h, t, att, given, inputs):
    """Tran et al.'s RM(+tM-g) at row t: memory of the last n words before the current one
    (slot i >= 1 is the word read at position i, slot 0 the zero start slot)."""
    d, n = model.config.hidden_dim, model.config.window
    B = h.shape[0]
    ht = h[:, t, :d]  # the LSTM's output, whatever else h carries
    first = max(0, t + 1 - n)

    def word(table, i):
        return torch.zeros(B, d, dtype=h.dtype) if i == 0 else table(inputs[:, i - 1])

    slots = range(first, t + 1)  # temporal vector of slot i: its distance t - i from the newest, oldest first
    scores = [((word(model.address, i) + model.temporal[n - 1 - (t - i)]) * ht).sum(-1) for i in slots]
    p = torch.stack(scores, -1).softmax(-1) if given is None else given[:, first : t + 1]
    s = sum(p[:, k, None] * word(model.content, i) for k, i in enumerate(slots))
    att[:, t, first : t + 1] = p
    w_r, w_z, w = model.w_s.weight.split(d)
    u_r, u_z = model.u_rz.weight.split(d)
    r = torch.sigmoid(s @ w_r.T + ht @ u_r.T)
    z = torch.sigmoid(s @ w_z.T + ht @ u_z.T)
    h_tilde = torch.tanh(s @ w.T + (r * ht) @ model.u.weight.T)
    return model.decoder((1 - z) * ht + z * h_tilde)


def reference_effects(model, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(read effect (B, T), slot effects (B, T, T)) in nats, the slow way: the step-by-step
    reference run again with all weights zero, then once for every (row, slot) pair with that
    slot's weight zeroed and the row renormalised (nothing left: all zero), one pair at a time."""
    h = model.encode(inputs)
    targets = torch.cat([inputs[:, 1:], torch.full_like(inputs[:, :1], 2)], 1)  # next ids, then </s>

    def logp(logits):
        return logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0]  # (B, T)

    logits, att = reference(model, inputs, h=h)
    base = logp(logits)
    read = base - logp(reference(model, inputs, h=h, weights=torch.zeros_like(att))[0])
    B, T, S = att.shape
    slots = torch.zeros(B, T, S, dtype=h.dtype)
    for r in range(T):
        for j in range(S):
            w = att.clone()
            w[:, r, j] = 0.0
            rest = w[:, r].sum(-1, keepdim=True)
            w[:, r] = torch.where(rest > 0, w[:, r] / rest, torch.zeros_like(w[:, r]))
            dropped = logp(reference(model, inputs, h=h, weights=w)[0])
            slots[:, r, j] = torch.where(att[:, r, j] > 0, base[:, r] - dropped[:, r], torch.zeros_like(base[:, r]))
    return read, slots


def transformer_reference(model, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (B, T, V), attention (B, layers, heads, T, T)) of a :class:`~vizlm.models.transformer.TransformerLM`,
    one step and one head at a time from its weights (Vaswani et al. 2017, Sec. 3; post-norm layers): step t
    sees the inputs 1..t only, its own included. Eval mode (no dropout)."""
    import math

    import torch.nn.functional as F

    c = model.config
    d, H = c.emb_dim, c.heads
    dh = d // H
    B, T = inputs.shape
    pos = torch.zeros(T, d, dtype=torch.float64)
    for p in range(T):
        for i in range(0, d, 2):
            angle = p / 10000 ** (i / d)
            pos[p, i] = math.sin(angle)
            if i + 1 < d:
                pos[p, i + 1] = math.cos(angle)
    x = model.embed.weight[inputs] * math.sqrt(d) + pos.to(model.embed.weight.dtype)  # (B, T, d)

    def norm(z, ln):
        return F.layer_norm(z, (d,), ln.weight, ln.bias, ln.eps)

    att = torch.zeros(B, c.layers, H, T, T, dtype=x.dtype)
    for k, layer in enumerate(model.encoder.layers):
        sa = layer.self_attn
        wq, wk, wv = sa.in_proj_weight.split(d)
        bq, bk, bv = sa.in_proj_bias.split(d)
        rows = []
        for t in range(T):
            heads = []
            for h in range(H):
                part = slice(h * dh, (h + 1) * dh)
                q = x[:, t] @ wq[part].T + bq[part]  # (B, dh)
                keys = x[:, : t + 1] @ wk[part].T + bk[part]  # (B, t+1, dh)
                values = x[:, : t + 1] @ wv[part].T + bv[part]
                w = ((keys @ q[:, :, None])[..., 0] / math.sqrt(dh)).softmax(-1)  # (B, t+1)
                att[:, k, h, t, : t + 1] = w
                heads.append((w[..., None] * values).sum(1))  # (B, dh)
            rows.append(sa.out_proj(torch.cat(heads, -1)))  # (B, d)
        x = norm(x + torch.stack(rows, 1), layer.norm1)
        x = norm(x + layer.linear2(F.relu(layer.linear1(x))), layer.norm2)
    return model.decoder(norm(x, model.encoder.norm)), att
