"""A Transformer LM: pytorch/examples' ``word_language_model`` ``TransformerModel``, built by vizlm.

The computation (Vaswani et al. 2017, "Attention is all you need", Sec. 3; the example's
``model.py``) for token ids ``x_1..x_T``::

    e_t   = E[x_t] * sqrt(d) + PE(t - 1)                     (Sec. 3.4; positions from 0)
    PE(p, 2i) = sin(p / 10000^(2i/d)),  PE(p, 2i+1) = cos(p / 10000^(2i/d))   (Sec. 3.5)
    z^0   = e;  for each of ``layers`` post-norm encoder layers (nn.TransformerEncoderLayer's defaults):
    a     = MultiHead(z, z, z) with the causal mask (row t attends to positions 1..t, itself included)
    z     = LayerNorm(z + a);  z = LayerNorm(z + W_2 relu(W_1 z + b_1) + b_2)
    h     = LayerNorm(z^layers)                              (nn.Transformer's encoder norm)
    logits_t = W_o h_t + b_o

``emb_dim`` is ``d_model`` (the example's ``--emsize``), ``hidden_dim`` the feed-forward size
(``--nhid``), ``layers`` the encoder layers (``--nlayers``), ``heads`` the heads (``--nhead``).
The layers are torch's own modules (``nn.TransformerEncoder`` of ``nn.TransformerEncoderLayer``,
sequence first, as the example builds them), so a model imported from the example computes
with the same kernels (:mod:`vizlm.modeling.importer`).

It is not recurrent, and it reads the way it was trained: the example trains and evaluates on
chunks of ``--bptt`` tokens, each read from scratch, so positions beyond that were never seen.
vizlm reads every text (a sentence, a passage, a document, a split's column) in **blocks** of
``block`` tokens (the example's ``--bptt``, 35) counted from the text's start: a row attends to
the tokens of its own block up to itself, at positions 0..block-1, and to nothing before its
block. One rule everywhere: the Explorer and ``analyze`` read a text so; a document read in
segments (:func:`vizlm.modeling.evaluate.score_documents`) gives the same numbers whatever the segment
length, because the state carries the tokens of the current block read so far
(:meth:`TransformerLM.initial_state`) and they are read again with the next segment; and
``eval --context stream --bptt 35`` reads each column's chunks of 35 from scratch, which is
the example's ``evaluate()`` for its Transformer.

Attention: per layer and head, :meth:`TransformerLM.encode_with_attention` gives the weights
(B, layers, heads, T, T) over the positions read so far (row t over positions 1..t, its own
included). They are not vizlm's slot layout of recurrent attention (:mod:`vizlm.models.base`: a row
never attends to its own step, and slot 0 is a zero start state), so the model does not say
``has_attention`` (the slot-ablation paths of the attention families do not apply) but says
``self_attention``: the analysis lays its weights out with slot ``j`` = input ``j``
(:mod:`vizlm.inspect.reading`), every layer and head, and its views show one layer's head, or
the mean over its heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vizlm.models.base import BaseConfig, LMOutput, Readout, State

NORM_EPS = 1e-5  # nn.TransformerEncoderLayer's and nn.Transformer's LayerNorm eps


@dataclass
class TransformerConfig(BaseConfig):
    """``emb_dim``: d_model; ``hidden_dim``: the feed-forward size; ``layers``: encoder layers."""

    heads: int = 2  # attention heads per layer; emb_dim must be a multiple
    block: int = 35  # a text is read in blocks of this many tokens from its start (pytorch/examples' --bptt)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.block < 1:
            raise ValueError("block must be >= 1")
        if self.heads < 1 or self.emb_dim % self.heads:
            raise ValueError(f"emb_dim ({self.emb_dim}) must be a multiple of heads ({self.heads})")


def positions(T: int, d: int, device=None) -> torch.Tensor:
    """Sinusoidal position encodings (T, d), float32, computed as the example's ``PositionalEncoding``
    computes its table (the same operations, so the same numbers), for any length."""
    position = torch.arange(0, T, dtype=torch.float, device=device).unsqueeze(1)  # (T, 1)
    div_term = torch.exp(torch.arange(0, d, 2, device=device).float() * (-math.log(10000.0) / d))  # (ceil(d/2),)
    pe = torch.zeros(T, d, device=device)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term[: d // 2])
    return pe


def causal_mask(T: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """(T, T) additive mask: 0 where row t may attend (positions <= t), -inf after (the example's
    ``log(tril(ones))``, which nn.TransformerEncoder recognises as causal)."""
    return nn.Transformer.generate_square_subsequent_mask(T, device=device, dtype=dtype)


class TransformerLM(nn.Module):
    """Embedding x sqrt(d) + positions -> post-norm encoder layers (causal) -> LayerNorm -> linear."""

    has_attention = False  # no attention in vizlm's slot layout (module docstring); see encode_with_attention()
    self_attention = True  # per layer and head over the words read so far, its own included

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        d = config.emb_dim
        self.embed = nn.Embedding(config.vocab_size, d)
        self.drop = nn.Dropout(config.dropout)  # after adding the positions (the example's PositionalEncoding)
        layer = nn.TransformerEncoderLayer(d, config.heads, config.hidden_dim, config.dropout, layer_norm_eps=NORM_EPS)
        self.encoder = nn.TransformerEncoder(layer, config.layers, norm=nn.LayerNorm(d, eps=NORM_EPS),
                                             enable_nested_tensor=False)
        self.decoder = nn.Linear(d, config.vocab_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """As the example: Xavier-uniform matrices in the encoder (nn.Transformer's reset), the embedding and
        output weight uniform +-init_range, the output bias zero."""
        for p in self.encoder.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        r = self.config.init_range
        nn.init.uniform_(self.embed.weight, -r, r)
        nn.init.uniform_(self.decoder.weight, -r, r)
        nn.init.zeros_(self.decoder.bias)

    def _inputs(self, inputs: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) at positions in their blocks ``where`` (T,) or (B, T) -> the first layer's inputs,
        sequence first (T, B, d)."""
        d = self.config.emb_dim
        x = (self.embed(inputs) * math.sqrt(d)).transpose(0, 1)  # (T, B, d); the embedding called on (B, T) as
        # in every family (attribution feeds its outputs)
        pe = positions(self.config.block, d, inputs.device).to(x.dtype)  # (block, d)
        x = x + (pe[where][:, None] if where.dim() == 1 else pe[where].transpose(0, 1))  # (T, B, d)
        return self.drop(x)

    def _blocks(self, T: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(position in its block (T,), additive mask (T, T))`` of a text of T tokens read from its start in
        blocks of ``block`` tokens: row t attends to the tokens of its own block up to itself. The mask is
        :func:`causal_mask` when the text is one block (what nn.TransformerEncoder recognises as causal)."""
        W, mask = self.config.block, causal_mask(T, device)
        p = torch.arange(T, device=device)
        if T > W:
            mask = mask.masked_fill((p // W)[:, None] != (p // W)[None, :], float("-inf"))  # (T, T)
        return p % W, mask

    def encode(self, inputs: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> the encoder's outputs h_1..h_T (B, T, d), the text read from its start in
        blocks (module docstring)."""
        where, mask = self._blocks(inputs.shape[1], inputs.device)
        x = self._inputs(inputs, where)  # (T, B, d)
        return self.encoder(x, mask=mask.to(x.dtype)).transpose(0, 1)  # (B, T, d)

    def head(self, h: torch.Tensor, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None) -> LMOutput:
        """The output layer over the encoder's outputs ``h`` (B, T, d); ``memory`` and ``valid`` are unused
        (the carried block is read again by :meth:`forward`)."""
        return LMOutput(Readout(h, self.decoder.weight, self.decoder.bias))  # logits (B, T, V)

    def forward(self, inputs: torch.Tensor, state: State | None = None) -> LMOutput:
        """Logits for token ids (B, T): a text from its start (:meth:`encode`), or with ``state`` a segment of a
        document after the tokens of its current block that the state carries (read again with it: a row sees
        exactly what it would see in the whole document read at once), and the state after the segment."""
        if state is None or not bool(state.valid.any()):
            h = self.encode(inputs)  # (B, T, d): every stream at a block start
        else:
            h = self._continue(inputs, state)  # (B, T, d)
        out = self.head(h)
        out.hidden = h
        if state is not None:
            out.state = self._after(inputs, state)
        return out

    def _continue(self, inputs: torch.Tensor, state: State) -> torch.Tensor:
        """Outputs (B, T, d) of a segment read after the ``valid`` carried tokens of each stream's block."""
        T = inputs.shape[1]
        M, W = self.memory_size(), self.config.block
        carried = state.memory[..., 0].round().long()  # (B, M) token ids, newest last
        ids = torch.cat([carried, inputs], 1)  # (B, M + T)
        p = torch.arange(M + T, device=inputs.device)[None, :] - (M - state.valid.to(inputs.device))[:, None]  # (B, M+T)
        real = p >= 0  # padding before a stream's carried tokens
        pos = p.clamp_min(0)
        block = torch.where(real, pos // W, -1)  # (B, M+T)
        allowed = (block[:, :, None] == block[:, None, :]) & (pos[:, None, :] <= pos[:, :, None]) & real[:, None, :]
        allowed |= torch.eye(M + T, dtype=torch.bool, device=inputs.device)  # a padding row sees itself (no NaN)
        x = self._inputs(ids, pos % W)  # (M+T, B, d)
        mask = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill(~allowed, float("-inf"))
        mask = mask.repeat_interleave(self.config.heads, 0)  # (B * heads, M+T, M+T), as nn.MultiheadAttention takes it
        return self.encoder(x, mask=mask).transpose(0, 1)[:, M:]  # (B, T, d)

    def _after(self, inputs: torch.Tensor, state: State) -> State:
        """The state after a segment: the tokens of each stream's current block, newest last."""
        M, T = self.memory_size(), inputs.shape[1]
        if not M:
            return state
        ids = torch.cat([state.memory[..., 0], inputs.to(state.memory.dtype)], 1)[:, -M:]  # (B, M)
        valid = (state.valid + T) % self.config.block  # (B,) tokens read of the current block
        return State(state.h, state.c, ids[..., None], valid, 0)

    def encode_with_attention(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(outputs (B, T, d), attention (B, layers, heads, T, T))``: :meth:`encode`'s outputs and the weights
        of every layer and head, row t over positions 1..T, zero after t, rows summing to 1. The layers are run
        with their own modules, ``need_weights=True, average_attn_weights=False`` (the fused kernel
        :meth:`encode` uses returns no weights); the outputs agree with :meth:`encode`'s within float rounding
        (tests/test_transformer.py)."""
        where, mask = self._blocks(inputs.shape[1], inputs.device)
        x = self._inputs(inputs, where)  # (T, B, d)
        mask = mask.to(x.dtype)  # (T, T)
        maps = []
        for layer in self.encoder.layers:  # post-norm (norm_first=False), as nn.TransformerEncoderLayer by default
            a, w = layer.self_attn(x, x, x, attn_mask=mask, need_weights=True, average_attn_weights=False)
            maps.append(w)  # (B, heads, T, T)
            x = layer.norm1(x + layer.dropout1(a))  # (T, B, d)
            ff = layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))  # (T, B, d)
            x = layer.norm2(x + layer.dropout2(ff))  # (T, B, d)
        return self.encoder.norm(x).transpose(0, 1), torch.stack(maps, 1)  # (B, T, d), (B, layers, heads, T, T)

    # ---------------------------------------------------------------- one layer by hand (effects)
    def layer_inputs(self, inputs: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """``(xs, mask)``: the input of every encoder layer and the last layer's output, ``xs[k]`` (T, B, d), as
        :meth:`run_layer` computes them, and the additive block mask (T, T) of a text read from its start."""
        where, mask = self._blocks(inputs.shape[1], inputs.device)
        x = self._inputs(inputs, where)  # (T, B, d)
        mask = mask.to(x.dtype)
        xs = [x]
        for k in range(self.config.layers):
            xs.append(self.run_layer(k, xs[-1], mask)[0])
        return xs, mask

    def run_layer(self, k: int, x: torch.Tensor, mask: torch.Tensor, edit=None,
                  head_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder layer ``k`` computed from its weights, step by step (Vaswani et al. Sec. 3.2; post-norm):
        ``(output (T, B, d), weights (B, heads, T, T))``. ``edit(weights) -> weights`` changes the attention weights
        before they read the values (e.g. a slot dropped); ``head_mask`` (heads,) or (B, heads) multiplies each
        head's output (0: the head's read removed) before the output projection. Without either, the layer's
        module computes the same within float rounding (tests/test_self_attention.py)."""
        layer = self.encoder.layers[k]
        sa = layer.self_attn
        T, B, d = x.shape
        H = self.config.heads
        q, key, v = F.linear(x, sa.in_proj_weight, sa.in_proj_bias).chunk(3, -1)  # (T, B, d) each
        q, key, v = (t.reshape(T, B, H, d // H).permute(1, 2, 0, 3) for t in (q, key, v))  # (B, H, T, dh)
        w = ((q @ key.transpose(-1, -2)) / math.sqrt(d // H) + mask).softmax(-1)  # (B, H, T, T)
        if edit is not None:
            w = edit(w)
        o = w @ v  # (B, H, T, dh)
        if head_mask is not None:
            o = o * (head_mask[None, :, None, None] if head_mask.dim() == 1 else head_mask[:, :, None, None])
        a = sa.out_proj(o.permute(2, 0, 1, 3).reshape(T, B, d))  # (T, B, d)
        x = layer.norm1(x + layer.dropout1(a))
        x = layer.norm2(x + layer.dropout2(layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))))
        return x, w

    def outputs(self, x: torch.Tensor) -> torch.Tensor:
        """The last layer's output (T, B, d) -> the encoder's outputs h (B, T, d) (its final norm)."""
        return self.encoder.norm(x).transpose(0, 1)

    # ---------------------------------------------------------------- the reading interface of vizlm's models
    def memory_size(self) -> int:
        """Token ids a state carries: those of the current block read so far (at most ``block - 1``)."""
        return self.config.block - 1

    def window_size(self) -> int | None:
        return None

    def start_slots(self) -> int:
        return 0

    def initial_state(self, batch_size: int) -> State:
        """The state at a document start for ``batch_size`` streams: no token of a block read yet. ``memory``
        (B, block - 1, 1) carries token ids (exact in float32 up to 2^24; vocabularies stay far below);
        ``h`` and ``c`` are empty (nothing recurrent)."""
        w = self.embed.weight
        return State(w.new_zeros(1, batch_size, 0), w.new_zeros(1, batch_size, 0),
                     w.new_zeros(batch_size, self.memory_size(), 1),
                     torch.zeros(batch_size, dtype=torch.long, device=w.device), 0)
