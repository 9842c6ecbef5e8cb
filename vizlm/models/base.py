"""Pieces shared by every model family: the output type, the recurrent encoder and
the causal slot masks used by the attention models.

Slot layout (see ``docs/models.md`` of the shared docs): the model reads inputs
``x_1..x_T`` (``x_1 = <s>``) and produces LSTM outputs ``h_1..h_T``. Memory slot 0
is the zero start state ``h_0``; slot ``i >= 1`` holds ``h_i``. The row for step
``t`` (0-based row ``r = t - 1``) may use slots ``0..r`` only: memory never holds
``h_t`` itself, and never anything later.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class BaseConfig:
    """Hyper-parameters every family has."""

    vocab_size: int = 10_000
    emb_dim: int = 50
    hidden_dim: int = 50  # LSTM output size
    dropout: float = 0.0
    init_range: float = 0.1  # uniform init, as Daniluk et al.


@dataclass
class LMOutput:
    """What every model returns for a batch."""

    logits: torch.Tensor  # (B, T, V) next-word logits
    attention: torch.Tensor | None = None  # (B, T, S=T) weights over memory slots, rows sum to 1
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # e.g. AMSRN gates (B, T, d)


def slot_mask(T: int, window: int | None = None, device=None) -> torch.Tensor:
    """Allowed (row, slot) pairs, (T, S=T) bool: slot j <= r, and j > r - window."""
    rows = torch.arange(T, device=device)[:, None]  # (T, 1)
    slots = torch.arange(T, device=device)[None, :]  # (1, S)
    allowed = slots <= rows
    if window is not None:
        allowed = allowed & (slots > rows - window)
    return allowed  # (T, S)


def memory_of(h: torch.Tensor) -> torch.Tensor:
    """Slots ``[h_0 = 0, h_1, ..., h_{T-1}]`` from outputs ``h_1..h_T``: (B, T, d) -> (B, S=T, d)."""
    return F.pad(h, (0, 0, 1, 0))[:, :-1]


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over allowed slots; every row has at least one (slot 0 or slot r)."""
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


def attention_entropy(alpha: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """H(alpha) over allowed slots only, (B, T, S) -> (B, T); masked 0*log0 is 0, not NaN."""
    logs = torch.log(alpha.clamp_min(torch.finfo(alpha.dtype).tiny))
    return -torch.where(mask, alpha * logs, torch.zeros_like(alpha)).sum(-1)


def band(mem: torch.Tensor, window: int) -> torch.Tensor:
    """The ``window`` slots before each row, oldest first: (B, S, d) -> (B, T, L, d).

    Band position ``l`` of row ``r`` is slot ``r + 1 - L + l``; positions before
    slot 0 are zero and must be masked with :func:`band_mask`.
    """
    padded = F.pad(mem, (0, 0, window - 1, 0))  # (B, S + L - 1, d)
    return padded.unfold(1, window, 1).transpose(2, 3)  # (B, T, L, d)


def band_mask(T: int, window: int, device=None) -> torch.Tensor:
    """Which band positions are real slots: (T, L) bool."""
    rows = torch.arange(T, device=device)[:, None]
    offs = torch.arange(window, device=device)[None, :]
    return rows + 1 - window + offs >= 0  # (T, L)


def band_to_slots(weights: torch.Tensor) -> torch.Tensor:
    """Scatter band weights back to the slot axis: (B, T, L) -> (B, T, S=T)."""
    B, T, L = weights.shape
    idx = torch.arange(T, device=weights.device)[:, None] + torch.arange(L, device=weights.device)[None, :]
    full = weights.new_zeros(B, T, T + L - 1)
    full.scatter_(2, idx.expand(B, T, L), weights)
    return full[:, :, L - 1 :]  # (B, T, S)


class RecurrentLM(nn.Module):
    """Embedding -> one-layer LSTM; subclasses add attention and the output layer."""

    config: BaseConfig
    has_attention = False  # True where forward() returns attention weights

    def __init__(self, config: BaseConfig, rnn_size: int | None = None):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.emb_dim, padding_idx=0)
        self.rnn = nn.LSTM(config.emb_dim, rnn_size or config.hidden_dim, batch_first=True)
        self.drop = nn.Dropout(config.dropout)

    def reset_parameters(self) -> None:
        """Uniform +-init_range everywhere, forget-gate bias 1 (Daniluk et al., Sec. 4)."""
        r = self.config.init_range
        for name, p in self.named_parameters():
            nn.init.uniform_(p, -r, r)
        d = self.rnn.hidden_size
        with torch.no_grad():
            self.rnn.bias_ih_l0.zero_()
            self.rnn.bias_hh_l0.zero_()
            self.rnn.bias_ih_l0[d : 2 * d] = 1.0  # PyTorch gate order: i, f, g, o

    def embed_lstm(self, lstm: dict[str, torch.Tensor], unit_offset: int) -> list[str]:
        """Copy a trained LSTM LM (state dict, LSTM of ``hidden_dim`` units) into this wider one.

        Its units go to ``unit_offset .. unit_offset + hidden_dim`` of this LSTM, with no
        weights into them from the other units, so they compute exactly what they computed
        there; embedding and output layer (``decoder``) are copied too. The other units keep
        their random initialisation.
        """
        k, H = self.config.hidden_dim, self.rnn.hidden_size
        if lstm["rnn.weight_hh_l0"].shape != (4 * k, k) or lstm["embed.weight"].shape != self.embed.weight.shape:
            raise ValueError(f"the LSTM's sizes do not match this model (part size {k})")
        units = slice(unit_offset, unit_offset + k)
        rows = torch.cat([torch.arange(g * H, (g + 1) * H)[units] for g in range(4)])  # gates i, f, g, o
        with torch.no_grad():
            self.embed.weight.copy_(lstm["embed.weight"])
            self.decoder.weight.copy_(lstm["decoder.weight"])
            self.decoder.bias.copy_(lstm["decoder.bias"])
            self.rnn.weight_ih_l0[rows] = lstm["rnn.weight_ih_l0"]
            self.rnn.weight_hh_l0[rows] = 0.0
            self.rnn.weight_hh_l0[rows, units] = lstm["rnn.weight_hh_l0"]
            for b in ("bias_ih_l0", "bias_hh_l0"):
                getattr(self.rnn, b)[rows] = lstm[f"rnn.{b}"]
        return ["embed.weight", "rnn.*", "decoder.weight", "decoder.bias"]

    def encode(self, inputs: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> LSTM outputs h_1..h_T (B, T, d). State starts at zero."""
        x = self.drop(self.embed(inputs))  # (B, T, d_e)
        h, _ = self.rnn(x)  # (B, T, d)
        return self.drop(h)

    def head(self, h: torch.Tensor) -> LMOutput:  # pragma: no cover - abstract
        """Attention (if any) and the output layer over LSTM outputs ``h`` (B, T, d), all steps at once."""
        raise NotImplementedError

    def forward(self, inputs: torch.Tensor) -> LMOutput:
        return self.head(self.encode(inputs))
