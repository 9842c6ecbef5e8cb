"""Attentive LM (Salton et al., 2017).

Memory ``[h_0, h_1, ..., h_{t-1}]`` (its last ``memory`` states when that is set, as
always in document context, like AMSRN); context ``c_t = sum_i a_ti h_i`` with scores
``single(h_i) = v . tanh(W_s h_i)`` or ``combined(h_i, h_t) = v . tanh(W_s h_i + W_q h_t)``;
``h'_t = tanh(W_c [h_t; c_t] + b_c)`` and ``P = softmax(W h'_t + b)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vizlm.models.base import (
    BaseConfig,
    Readout,
    StateMemoryLM,
    check_memory,
    check_weights,
    masked_softmax,
)

SCORES = ("single", "combined")


@dataclass
class SaltonConfig(BaseConfig):
    score: str = "combined"  # single | combined
    memory: int | None = None  # attend to the last `memory` states; None: the whole sentence

    def __post_init__(self) -> None:
        super().__post_init__()
        check_memory(self)
        if self.score not in SCORES:
            raise ValueError(f"unknown score {self.score!r}; valid: {', '.join(SCORES)}")


class SaltonLM(StateMemoryLM):

    def __init__(self, config: SaltonConfig):
        super().__init__(config)
        d = config.hidden_dim
        self.w_s = nn.Linear(d, d, bias=False)
        self.w_q = nn.Linear(d, d, bias=False) if config.score == "combined" else None
        self.v = nn.Linear(d, 1, bias=False)
        self.w_c = nn.Linear(2 * d, d)
        self.decoder = nn.Linear(d, config.vocab_size)
        self.reset_parameters()

    def attend(
        self, h: torch.Tensor, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        # h: LSTM outputs (B, T, d); memory: carried slots (B, M, d)
        B, T, _ = h.shape
        mem, mask = self.memory_slots(h, memory, valid)  # (B, S, d), (T, S) or (B, T, S)
        if weights is None:
            pre = self.w_s(mem)[:, None, :, :]  # (B, 1, S, d)
            if self.w_q is not None:
                pre = pre + self.w_q(h)[:, :, None, :]  # (B, T, S, d)
            scores = self.v(torch.tanh(pre)).squeeze(-1).expand(-1, T, -1)  # (B, T, S)
            alpha = masked_softmax(scores, mask)  # (B, T, S)
        else:
            check_weights(weights, B, T, mem.shape[1])
            alpha = weights.masked_fill(~mask, 0.0)  # (B, T, S)
        context = alpha @ mem  # (B, T, d): c_t = sum_i a_ti h_i
        return context, alpha, {}

    def output_layer(self, h: torch.Tensor, read: torch.Tensor) -> Readout:
        h_prime = torch.tanh(self.w_c(torch.cat([h, read], -1)))  # (B, T, d)
        return Readout(self.drop(h_prime), self.decoder.weight, self.decoder.bias)  # logits (B, T, V)
