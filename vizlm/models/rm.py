"""Recurrent memory network RM(+tM-g): Tran, Bisazza & Monz (2016), "Recurrent Memory
Networks for Language Modeling" (NAACL), the comparison model of Daniluk et al. (2017)
and Liu & Lee.

A memory block on top of the LSTM. Its memory holds the words of the last ``n`` steps
(config ``window``) through two embedding tables of the LSTM's size ``d``, one to address
(``M``) and one for content (``C``), plus a learned temporal matrix ``T``, one vector per
relative position, added to the addressing embeddings ("+tM"). With ``x_i`` the word in
memory slot ``i`` and ``h_t`` the LSTM output (Tran et al., the memory block):

    p_t = softmax_i ((M x_i + T_i) . h_t)        s_t = sum_i p_ti C x_i

and the read is merged with ``h_t`` by a GRU-like gate ("-g", their gating composition):

    r_t = sigmoid(W_r s_t + U_r h_t)             z_t = sigmoid(W_z s_t + U_z h_t)
    h~_t = tanh(W s_t + U (r_t * h_t))           h'_t = (1 - z_t) * h_t + z_t * h~_t
    P(w) = softmax(W_o h'_t + b)

Slot layout (:mod:`vizlm.models.base`): slot ``j >= 1`` is the word read at input position
``j`` and slot 0 the zero start slot (zero address and content; it still gets its temporal
vector while inside the window), so row ``t`` attends to the ``n`` slots before it. Tran et
al.'s memory at step ``t`` includes the current word ``x_t``; here it holds the ``n`` words
before it, because in the shared layout a row may never use its own position (the current
word is already in the query ``h_t``, and the effects, positions and heat maps of every
family read slot ``j`` as "the word before the one being predicted"). ``T_0`` is thus the
previous word's vector, where the paper's is the current word's.

The memory block reads words, not LSTM states, so the outputs of :meth:`RMLM.recur` are
``[h_t; M x_t; C x_t]`` (B, T, 3d): the head, the attention effects (which recompute the
head from other weights) and the carried :class:`~vizlm.models.base.State` (which keeps the
last ``n`` slots, ``[M x_i; C x_i]``, (B, n, 2d)) then work on outputs alone, as for every
other family. Every row is computed at once on a band of the window
(:class:`~vizlm.models.base.WindowLM`). Zero attention weights read ``s_t = 0``: the
gates then merge ``h_t`` with nothing, the model's path without the memory.

Tran et al. put the block on top of the LSTM (RM) or between two LSTMs (RMR); this is RM,
with one LSTM layer of ``hidden_dim`` as every family here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vizlm.models.base import BaseConfig, Readout, WindowLM, check_window


@dataclass
class RMConfig(BaseConfig):
    """``hidden_dim`` d is the LSTM's size and the size of the memory embeddings ``M`` and ``C``."""

    window: int = 15  # n: the memory holds the last n words (Daniluk et al. ran 1, 5, 10 and 15)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_window(self)


class RMLM(WindowLM):

    def __init__(self, config: RMConfig):
        super().__init__(config)
        d, V = config.hidden_dim, config.vocab_size
        self.address = nn.Embedding(V, d, padding_idx=0)  # M
        self.content = nn.Embedding(V, d, padding_idx=0)  # C
        self.temporal = nn.Parameter(torch.empty(config.window, d))  # T_i, one per relative position, oldest first
        self.w_s = nn.Linear(d, 3 * d, bias=False)  # [W_r; W_z; W]: the read into the gates
        self.u_rz = nn.Linear(d, 2 * d, bias=False)  # [U_r; U_z]
        self.u = nn.Linear(d, d, bias=False)  # U
        self.decoder = nn.Linear(d, V)  # W_o, b (same name as the LSTM's, so --init-from copies it)
        self.reset_parameters()

    def recur(
        self, inputs: torch.Tensor, hc: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        h, hc = super().recur(inputs, hc)  # (B, T, d)
        words = self.drop(torch.cat([self.address(inputs), self.content(inputs)], -1))  # (B, T, 2d): [M x_t; C x_t]
        return torch.cat([h, words], -1), hc  # (B, T, 3d)

    def to_slots(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs[..., self.config.hidden_dim :]  # (B, T, 2d): the words' embeddings

    def slot_size(self) -> int:
        return 2 * self.config.hidden_dim

    def band_scores(self, h: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        # h: outputs (B, T, 3d); slots: each row's band of earlier words (B, T, L, 2d), oldest first
        d = self.config.hidden_dim
        keys = slots[..., :d] + self.temporal  # (B, T, L, d): M x_i + T_i
        return (keys @ h[..., :d, None]).squeeze(-1)  # (B, T, L): (M x_i + T_i) . h_t

    def band_values(self, slots: torch.Tensor) -> torch.Tensor:
        return slots[..., self.config.hidden_dim :]  # (B, T, L, d): C x_i

    def output_layer(self, h: torch.Tensor, read: torch.Tensor) -> Readout:
        ht = h[..., : self.config.hidden_dim]  # (B, T, d) the LSTM output
        s_r, s_z, s_h = self.w_s(read).chunk(3, -1)  # (B, T, d) each: W_r s, W_z s, W s
        h_r, h_z = self.u_rz(ht).chunk(2, -1)  # (B, T, d) each: U_r h, U_z h
        r = torch.sigmoid(s_r + h_r)  # (B, T, d)
        z = torch.sigmoid(s_z + h_z)  # (B, T, d)
        h_tilde = torch.tanh(s_h + self.u(r * ht))  # (B, T, d)
        merged = (1 - z) * ht + z * h_tilde  # (B, T, d): h'_t
        return Readout(self.drop(merged), self.decoder.weight, self.decoder.bias)  # logits (B, T, V)
