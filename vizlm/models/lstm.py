"""The recurrent LM baseline: embedding -> recurrent layers -> linear -> softmax.

The recurrent layers are an LSTM by default, or a GRU or an Elman RNN (tanh or ReLU): config
``rnn``, ``layers`` deep, the cells of pytorch/examples' ``word_language_model`` (``RNNModel``),
so one of its models imported (:mod:`vizlm.modeling.importer`) is this model. ``tie`` shares the
embedding with the output layer's weight (Press & Wolf 2016, Inan et al. 2016), which needs
``emb_dim == hidden_dim``; the shared tensor is stored once, as ``embed.weight``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vizlm.models.base import CELLS, BaseConfig, LMOutput, Readout, RecurrentLM

TIED = "decoder.weight"  # the output layer's weight, the embedding's when tied: not stored twice


@dataclass
class LSTMConfig(BaseConfig):
    rnn: str = "lstm"  # lstm | gru | rnn_tanh | rnn_relu
    tie: bool = False  # the output layer's weight is the embedding (emb_dim == hidden_dim)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rnn not in CELLS:
            raise ValueError(f"unknown rnn {self.rnn!r}; valid: {', '.join(CELLS)}")
        if self.tie and self.emb_dim != self.hidden_dim:
            raise ValueError(f"tie needs emb_dim == hidden_dim, not {self.emb_dim} and {self.hidden_dim}")


class LSTMLM(RecurrentLM):
    def __init__(self, config: LSTMConfig):
        super().__init__(config)
        self.decoder = nn.Linear(config.hidden_dim, config.vocab_size)
        self.reset_parameters()
        if config.tie:
            self.decoder.weight = self.embed.weight  # one parameter, (V, d)
            self._register_state_dict_hook(_drop_tied)
            self._register_load_state_dict_pre_hook(_fill_tied)

    def head(self, h: torch.Tensor, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None) -> LMOutput:
        # h: top-layer outputs (B, T, d); no memory: the recurrent state alone carries the document
        return LMOutput(Readout(h, self.decoder.weight, self.decoder.bias))  # logits (B, T, V)


def _drop_tied(module, state_dict, prefix, local_metadata) -> None:
    """A tied model's state dict holds the shared weight once (safetensors refuses aliased tensors)."""
    state_dict.pop(prefix + TIED, None)


def _fill_tied(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs) -> None:
    """Loading a tied model: the output layer's weight is the embedding's."""
    if prefix + "embed.weight" in state_dict and prefix + TIED not in state_dict:
        state_dict[prefix + TIED] = state_dict[prefix + "embed.weight"]
