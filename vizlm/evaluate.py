"""Perplexity: per-sentence NLL summed over predicted tokens (``</s>`` included,
padding excluded), batched over length buckets."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vizlm.data import iter_batches


@dataclass
class SentenceScores:
    nll: list[float]  # per sentence, nats summed over its predicted tokens
    tokens: list[int]  # predicted tokens per sentence (length + 1 for </s>)

    @property
    def total_nll(self) -> float:
        return float(sum(self.nll))

    @property
    def total_tokens(self) -> int:
        return int(sum(self.tokens))

    @property
    def perplexity(self) -> float:
        return math.exp(self.total_nll / max(self.total_tokens, 1))

    def summary(self) -> dict:
        return {
            "perplexity": self.perplexity,
            "nll": self.total_nll / max(self.total_tokens, 1),
            "tokens": self.total_tokens,
            "sentences": len(self.nll),
        }


@torch.no_grad()
def score_sentences(model: nn.Module, seqs: list[list[int]], batch_size: int = 128) -> SentenceScores:
    """NLL of every sentence (ids without <s>/</s>), in the input order."""
    was_training = model.training
    model.eval()
    nll = [0.0] * len(seqs)
    count = [0] * len(seqs)
    for idx, inputs, targets in iter_batches(seqs, batch_size):
        logits = model(inputs).logits  # (B, T, V)
        tok = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=0, reduction="none")
        tok = tok.view(targets.shape)  # (B, T)
        per = tok.sum(1).double()  # (B,)
        for b, i in enumerate(idx):
            nll[i] = float(per[b])
            count[i] = len(seqs[i]) + 1
    model.train(was_training)
    return SentenceScores(nll, count)
