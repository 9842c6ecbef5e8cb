"""AMSRN: attention-based memory selection recurrent network (Liu & Lee).

Memory at step t is the whole sentence so far, ``M_t = [h_0, ..., h_{t-1}]``, or
its last ``memory`` states when that is set (always in document context, where
the memory runs across sentences and is carried between segments).
With key ``k_t = W_k h_t + b_k`` and selection gates ``g1_t, g2_t`` in (0,1)^d:

    e_ti = (h_i * g1_t) . k_t          alpha_t = softmax(e_t)
    r_t  = sum_i alpha_ti (h_i * g2_t)
    P(w) = softmax(W_ph h_t + W_pr r_t + b)

Since ``(h_i * g1_t) . k_t = h_i . (g1_t * k_t)``, all scores are one batched
matmul of the memory with the gated keys.

``start_slot=False`` drops the zero start slot ``h_0`` (an extension, not in the paper):
the memory is ``[h_1, ..., h_{t-1}]``, so the first step (and the first step of every
document) has nothing to attend to; its read is exactly zero and its attention row all
zero (:func:`~vizlm.models.base.masked_softmax`). With the start slot, attention can be
"switched off" by putting weight on ``h_0``, which reads a zero vector; without it every
row that has a memory must read from real states.
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

SELECTIONS = ("none", "independent", "shared", "complementary")


@dataclass
class AMSRNConfig(BaseConfig):
    selection: str = "shared"  # none | independent | shared | complementary (paper Table 3)
    entropy_weight: float = 0.0  # lambda of the attention-entropy regulariser
    memory: int | None = None  # attend to the last `memory` states; None: the whole sentence
    start_slot: bool = True  # the zero start slot h_0 in the memory (False: h_1 .. h_{t-1} only)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_memory(self)
        if self.selection not in SELECTIONS:
            raise ValueError(f"unknown selection {self.selection!r}; valid: {', '.join(SELECTIONS)}")
        if self.entropy_weight < 0:
            raise ValueError("entropy_weight must be >= 0")


class AMSRN(StateMemoryLM):

    def __init__(self, config: AMSRNConfig):
        super().__init__(config)
        d = config.hidden_dim
        self.key = nn.Linear(d, d)  # W_k, b_k
        self.gate1 = nn.Linear(d, d) if config.selection in ("independent", "shared") else None
        self.gate2 = nn.Linear(d, d) if config.selection in ("independent", "complementary") else None
        self.decoder = nn.Linear(d, config.vocab_size)  # W_ph, b (same name as the LSTM's)
        self.read_proj = nn.Linear(d, config.vocab_size, bias=False)  # W_pr
        self.reset_parameters()
        # W_pr = 0: an AMSRN initialised from an LSTM starts as exactly that LSTM.
        nn.init.zeros_(self.read_proj.weight)

    def start_slots(self) -> int:
        return int(self.config.start_slot)

    def gates(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Selection gates g1, g2 for every step: (B, T, d) each."""
        sel = self.config.selection
        if sel == "none":
            ones = torch.ones_like(h)
            return ones, ones
        if sel == "shared":
            g = torch.sigmoid(self.gate1(h))
            return g, g
        if sel == "independent":
            return torch.sigmoid(self.gate1(h)), torch.sigmoid(self.gate2(h))
        g2 = torch.sigmoid(self.gate2(h))  # complementary
        return 1 - g2, g2

    def attend(
        self, h: torch.Tensor, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        # h: LSTM outputs (B, T, d); memory: carried slots (B, M, d)
        B, T, _ = h.shape
        mem, mask = self.memory_slots(h, memory, valid)  # (B, S, d), (T, S) or (B, T, S)
        g1, g2 = self.gates(h)  # (B, T, d)
        if weights is None:
            query = g1 * self.key(h)  # (B, T, d)
            scores = query @ mem.transpose(1, 2)  # (B, T, S)
            alpha = masked_softmax(scores, mask)  # (B, T, S)
        else:
            check_weights(weights, B, T, mem.shape[1])
            alpha = weights.masked_fill(~mask, 0.0)  # (B, T, S)
        read = (alpha @ mem) * g2  # (B, T, d): r_t = sum_i alpha_ti (h_i * g2_t)
        extras = {} if self.config.selection == "none" else {"gate1": g1, "gate2": g2}
        return read, alpha, extras

    def output_layer(self, h: torch.Tensor, read: torch.Tensor) -> Readout:
        # W_ph h_t + W_pr r_t + b as one product: [W_ph W_pr] [h_t; r_t] + b
        return Readout(torch.cat([h, read], -1), torch.cat([self.decoder.weight, self.read_proj.weight], 1),
                       self.decoder.bias)  # logits (B, T, V)

    def shift_logits(self, logits: torch.Tensor, read_change: torch.Tensor) -> torch.Tensor:
        """``logits`` (P, V), changed in place, after the read changes by ``read_change`` (P, d): the read enters
        linearly (``W_pr r_t``), so the attention effects need one product per pair, not two."""
        return logits.addmm_(read_change, self.read_proj.weight.t())  # in place: ``logits`` is a fresh gather
