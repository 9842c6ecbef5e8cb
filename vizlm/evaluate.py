"""Perplexity: per-sentence NLL summed over predicted tokens (``</s>`` included,
padding excluded). Sentence-context models are scored over length buckets; document-
context models read whole documents as running text with their state carried
between segments (:func:`score_documents`), and report the same per-sentence NLLs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vizlm.data import document_batches, iter_batches, split_documents

# Tokens per scoring batch at most: a batch's (B, T, V) logits and their softmax then take a few
# hundred MB with a 10k vocabulary, however long the sentences (a text file of 400-token pieces).
EVAL_MAX_TOKENS = 8192


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
    for idx, inputs, targets in iter_batches(seqs, batch_size, max_tokens=EVAL_MAX_TOKENS):
        logits = model(inputs).logits  # (B, T, V)
        tok = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=0, reduction="none")
        tok = tok.view(targets.shape)  # (B, T)
        per = tok.sum(1).double()  # (B,)
        for b, i in enumerate(idx):
            nll[i] = float(per[b])
            count[i] = len(seqs[i]) + 1
    model.train(was_training)
    return SentenceScores(nll, count)


@torch.no_grad()
def score_documents(
    model: nn.Module, docs: list[list[list[int]]], streams: int = 64, segment: int = 50
) -> SentenceScores:
    """NLL of every sentence of ``docs`` (each a list of sentences of ids), in order,
    reading each document as running text (``<s>`` at its start, ``</s>`` between
    sentences) in segments of ``segment`` tokens, the state carried between them.

    Sentence ``i`` is charged for its words and its ``</s>``, as in
    :func:`score_sentences`, so the two perplexities count the same tokens. The
    result does not depend on ``streams`` or ``segment`` beyond float noise
    (``tests/test_document.py``).
    """
    was_training = model.training
    model.eval()
    sizes = [len(s) + 1 for d in docs for s in d]  # predicted tokens per sentence
    tok_nll = torch.zeros(sum(sizes), dtype=torch.float64)
    state = None
    for seg in document_batches(docs, streams, segment):
        if state is None:
            state = model.initial_state(seg.inputs.shape[0])
        out = model(seg.inputs, state.narrow(seg.inputs.shape[0]).reset(seg.starts))
        state = out.state
        logits = out.logits  # (B, T, V)
        tok = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), seg.targets.reshape(-1), reduction="none")
        real = seg.positions >= 0  # (B, T)
        tok_nll[seg.positions[real]] = tok.view(seg.targets.shape)[real].double()
    model.train(was_training)
    sentence_of = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes, dtype=torch.long))
    per = torch.zeros(len(sizes), dtype=torch.float64).index_add_(0, sentence_of, tok_nll)  # (sentences,)
    return SentenceScores(per.tolist(), sizes)


def score(
    model: nn.Module, seqs: list[list[int]], documents: list[int] | None = None, batch_size: int = 128
) -> SentenceScores:
    """NLL of every sentence in the model's own context (``model.config.context``).

    ``documents`` gives the sentences per document, in order (:func:`vizlm.data.document_sizes`);
    a document-context model reads each as running text, and each sentence alone
    when it is None. Sentence-context models always read sentences alone.
    """
    if getattr(model.config, "context", "sentence") == "document":
        return score_documents(model, split_documents(seqs, documents))
    return score_sentences(model, seqs, batch_size)
