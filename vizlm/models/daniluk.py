"""Daniluk et al. (2017), "Frustratingly short attention spans in neural language
modeling": Attention, Key-Value and Key-Value-Predict over a sliding window of the
previous L outputs, and the N-gram RNN.

The memory at step t is ``[y_{t-L}, ..., y_{t-1}]`` (fewer at the sentence start;
the zero start slot ``h_0`` counts while inside the window). All steps are
computed at once on a (B, T, L, k) band of the memory, then scattered to the full
(B, T, S) slot axis for display (:class:`~vizlm.models.base.WindowLM`). In document
context the window runs across sentence boundaries and the last L outputs are carried
between segments.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vizlm.models.base import BaseConfig, LMOutput, Readout, RecurrentLM, WindowLM, check_window

VARIANTS = {"attention": 1, "kv": 2, "kvp": 3}  # how many parts the LSTM output is split into


@dataclass
class DanilukConfig(BaseConfig):
    """``hidden_dim`` is k, the size of each part; the LSTM output is parts x k."""

    variant: str = "kvp"  # attention | kv | kvp
    window: int = 5  # L

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; valid: {', '.join(VARIANTS)}")
        check_window(self)


class DanilukLM(WindowLM):

    def __init__(self, config: DanilukConfig):
        k = config.hidden_dim
        super().__init__(config, rnn_size=VARIANTS[config.variant] * k)
        self.w_y = nn.Linear(k, k, bias=False)  # W^Y
        self.w_h = nn.Linear(k, k, bias=False)  # W^h
        self.w = nn.Linear(k, 1, bias=False)  # w
        self.w_r = nn.Linear(k, k, bias=False)  # W^r
        self.w_x = nn.Linear(k, k, bias=False)  # W^x
        self.decoder = nn.Linear(k, config.vocab_size)  # W*, b
        self.reset_parameters()

    def init_from_lstm(self, lstm: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
        """Start from a trained LSTM LM so that the prediction part *is* that LSTM.

        The LSTM's units become the last part (the predict part for kvp, value/predict
        for kv, everything for attention); ``W^x = I`` and ``W^r = 0``, so the first step
        predicts from ``tanh(h_t)`` of the trained LSTM, and the attention parameters
        start learning once ``W^r`` moves.
        """
        k = self.config.hidden_dim
        copied = self.embed_lstm(lstm, unit_offset=(VARIANTS[self.config.variant] - 1) * k)
        with torch.no_grad():
            self.w_x.weight.copy_(torch.eye(k))
            self.w_r.weight.zero_()
        return copied

    def split(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(key, value, predict) parts of the LSTM output, each (B, T, k)."""
        parts = h.split(self.config.hidden_dim, dim=-1)
        if self.config.variant == "attention":
            return h, h, h
        if self.config.variant == "kv":
            return parts[0], parts[1], parts[1]
        return parts[0], parts[1], parts[2]

    def band_scores(self, h: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        # h: LSTM outputs (B, T, parts * k); slots: each row's band of earlier outputs (B, T, L, parts * k)
        key = self.split(h)[0]  # (B, T, k)
        keys = self.split(slots)[0]  # (B, T, L, k)
        m = torch.tanh(self.w_y(keys) + self.w_h(key)[:, :, None, :])  # (B, T, L, k)
        return self.w(m).squeeze(-1)  # (B, T, L)

    def band_values(self, slots: torch.Tensor) -> torch.Tensor:
        return self.split(slots)[1]  # (B, T, L, k): r = Y_t alpha^T

    def output_layer(self, h: torch.Tensor, read: torch.Tensor) -> Readout:
        _, _, pred = self.split(h)  # (B, T, k)
        h_star = torch.tanh(self.w_r(read) + self.w_x(pred))  # (B, T, k)
        return Readout(self.drop(h_star), self.decoder.weight, self.decoder.bias)  # logits (B, T, V)


@dataclass
class NGramConfig(BaseConfig):
    """``hidden_dim`` is the size of each of the N-1 parts."""

    n: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n < 2:
            raise ValueError("n must be >= 2")


class NGramRNN(RecurrentLM):
    """h*_t = tanh(W_N [h_t^1; h_{t-1}^2; ...; h_{t-N+2}^{N-1}]), zeros before the start."""

    def __init__(self, config: NGramConfig):
        k = config.hidden_dim
        super().__init__(config, rnn_size=(config.n - 1) * k)
        self.w_n = nn.Linear((config.n - 1) * k, k, bias=False)
        self.decoder = nn.Linear(k, config.vocab_size)
        self.reset_parameters()

    def init_from_lstm(self, lstm: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
        """Start from a trained LSTM LM: it becomes part 1 (the current step) and
        ``W_N = [I, 0, ...]``, so the first step predicts from ``tanh(h_t)`` of that LSTM."""
        k = self.config.hidden_dim
        copied = self.embed_lstm(lstm, unit_offset=0)
        with torch.no_grad():
            self.w_n.weight.zero_()
            self.w_n.weight[:, :k] = torch.eye(k)
        return copied

    def memory_size(self) -> int:
        return self.config.n - 2  # part j of h*_t comes from h_{t-j}, j <= N-2

    def head(self, h: torch.Tensor, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None) -> LMOutput:
        # h: LSTM outputs (B, T, (N-1) k); memory: the carried last N-2 outputs (B, N-2, (N-1) k)
        T = h.shape[1]
        k = self.config.hidden_dim
        if memory is None:
            parts = h.split(k, dim=-1)  # N-1 x (B, T, k)
            # part j comes from j steps back: shift right by j, zeros before the sentence.
            shifted = [F.pad(p, (0, 0, j, 0))[:, :T] for j, p in enumerate(parts)]
        else:
            # the carried outputs are zero at a document start, like the padding above
            M = memory.shape[1]
            parts = torch.cat([memory, h], 1).split(k, dim=-1)  # N-1 x (B, M + T, k)
            shifted = [p[:, M - j : M - j + T] for j, p in enumerate(parts)]  # (B, T, k) each
        h_star = torch.tanh(self.w_n(torch.cat(shifted, -1)))  # (B, T, k)
        return LMOutput(Readout(self.drop(h_star), self.decoder.weight, self.decoder.bias))  # logits (B, T, V)
