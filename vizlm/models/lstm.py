"""The LSTM baseline: embedding -> LSTM -> linear -> softmax."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vizlm.models.base import BaseConfig, LMOutput, Readout, RecurrentLM


@dataclass
class LSTMConfig(BaseConfig):
    pass


class LSTMLM(RecurrentLM):
    def __init__(self, config: LSTMConfig):
        super().__init__(config)
        self.decoder = nn.Linear(config.hidden_dim, config.vocab_size)
        self.reset_parameters()

    def head(self, h: torch.Tensor, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None) -> LMOutput:
        # h: LSTM outputs (B, T, d); no memory: the LSTM state alone carries the document
        return LMOutput(Readout(h, self.decoder.weight, self.decoder.bias))  # logits (B, T, V)
