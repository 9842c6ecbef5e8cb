"""Causal self-attention over a window of LSTM states: an example vizlm plugin (docs/PLUGINS.md).

A scaled dot-product attention head (Vaswani et al., 2017, Eq. 1) on top of an LSTM, reading the
last ``L`` (config ``window``) of its own earlier outputs. With ``h_t`` the LSTM output after word
``t`` and memory slot ``j`` holding ``m_0 = 0`` (the zero start state) or ``m_j = h_j``, row ``t``
(predicting word ``t + 1``) attends to slots ``t - L + 1 .. t``, never a later one (vizlm's slot
layout, :mod:`vizlm.models.base`):

    q_t = W_q h_t          k_j = W_k m_j          v_j = W_v m_j           (W_q, W_k: d_k x d; W_v: d x d)
    a_tj = softmax_j (q_t . k_j / sqrt(d_k))      over the slots of row t's window
    r_t = sum_j a_tj v_j                          the read
    o_t = tanh(W_o [h_t; r_t] + b_o)              P(w_{t+1}) = softmax(W_dec o_t + b_dec)

The read enters linearly and ``v_0 = W_v 0 = 0``, so all-zero weights read ``r_t = 0``: the model's
no-read path, ``o_t = tanh(W_o [h_t; 0] + b_o)``, which vizlm's read effect compares with.

What vizlm needs (the contract of :class:`vizlm.models.base.AttentionLM`): a config dataclass
subclassing ``BaseConfig``; ``attend`` returning ``(read, weights, extras)`` and honouring given
``weights`` (the attention effects recompute a prediction from other weights); ``output_layer``
returning a ``Readout`` row by row; ``memory_size`` / ``window_size`` for document context. The
LSTM (``encode``, ``recur``), the carried state and ``forward`` come from the base class.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from vizlm.models import Limit, Plugin
from vizlm.models.base import (
    AttentionLM,
    BaseConfig,
    Readout,
    check_weights,
    check_window,
    masked_softmax,
    memory_of,
    slot_mask,
)

__version__ = "0.1.0"


@dataclass
class SelfAttnConfig(BaseConfig):
    """``hidden_dim`` d is the LSTM's size; ``key_dim`` d_k the size of queries and keys."""

    window: int = 5  # L: how many of the newest slots a row attends to (vizlm's limit: 1 to 100)
    key_dim: int = 16  # d_k (this plugin's own field: its limit is given in PLUGIN below)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_window(self)


class SelfAttnLM(AttentionLM):
    """The model of the module docstring."""

    def __init__(self, config: SelfAttnConfig):
        super().__init__(config)  # embedding and LSTM (encode / recur)
        d, k, V = config.hidden_dim, config.key_dim, config.vocab_size
        self.query = nn.Linear(d, k, bias=False)  # W_q
        self.key = nn.Linear(d, k, bias=False)  # W_k
        self.value = nn.Linear(d, d, bias=False)  # W_v: no bias, so the zero start slot and zero weights read 0
        self.combine = nn.Linear(2 * d, d)  # W_o, b_o
        self.decoder = nn.Linear(d, V)  # W_dec, b_dec
        self.reset_parameters()

    def memory_size(self) -> int:
        return self.config.window  # document context carries the last L slots

    def window_size(self) -> int:
        return self.config.window

    def attend(
        self, h: torch.Tensor, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        # h: LSTM outputs h_1..h_T (B, T, d); memory: carried slots (B, M, d), the newest last
        B, T, _ = h.shape
        if memory is None:  # a sentence: slots [h_0 = 0, h_1 .. h_{T-1}]
            mem = memory_of(h)  # (B, S=T, d)
            mask = slot_mask(T, self.window_size(), h.device)  # (T, S): slot j <= row, within the window
        else:  # a segment of a document: carried slots, then this segment's
            mem = torch.cat([memory, h[:, :-1]], 1)  # (B, S=M+T-1, d)
            mask = slot_mask(T, self.window_size(), h.device, memory.shape[1], valid)  # (B, T, S)
        if weights is None:
            q = self.query(h)  # (B, T, d_k)
            k = self.key(mem)  # (B, S, d_k)
            scores = q @ k.transpose(1, 2) / math.sqrt(self.config.key_dim)  # (B, T, S)
            alpha = masked_softmax(scores, mask)  # (B, T, S): zero on later slots and outside the window
        else:  # the effects' weights, in place of the softmax; none on a slot the row may not use
            check_weights(weights, B, T, mem.shape[1])
            alpha = weights.masked_fill(~mask, 0.0)  # (B, T, S)
        read = alpha @ self.value(mem)  # (B, T, d): r_t = sum_j a_tj W_v m_j
        return read, alpha, {}

    def output_layer(self, h: torch.Tensor, read: torch.Tensor) -> Readout:
        o = torch.tanh(self.combine(torch.cat([h, read], -1)))  # (B, T, d): o_t
        return Readout(self.drop(o), self.decoder.weight, self.decoder.bias)  # logits (B, T, V)


# What the entry point names: vizlm reads this object (docs/PLUGINS.md).
PLUGIN = Plugin(
    config=SelfAttnConfig,
    model=SelfAttnLM,
    limits={"key_dim": Limit(1, 4096)},  # fields vizlm.models.LIMITS lacks; `window` shares vizlm's limit
    description="causal self-attention over a window of LSTM states (example plugin)",
)

__all__ = ["PLUGIN", "SelfAttnConfig", "SelfAttnLM"]
