"""Perplexity: per-sentence NLL summed over predicted tokens (``</s>`` included,
padding excluded). Sentence-context models are scored over length buckets; document-
context models read whole documents as running text with their state carried
between segments (:func:`score_documents`), and report the same per-sentence NLLs.

:func:`score_split` scores a split of any size a chunk at a time (:mod:`vizlm.data.tokens`), one
rank's share of it in a data-parallel run, and returns totals only."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from vizlm.data.batches import (
    document_batches,
    document_plan,
    iter_batches,
    plan_batches,
    plan_segment,
    split_documents,
)
from vizlm.core.distributed import shard
from vizlm.data.tokens import ChunkData, TokenSplit

# Tokens per scoring batch at most: a batch's (B, T, V) logits and their softmax then take a few
# hundred MB with a 10k vocabulary, however long the sentences (a text file of 400-token pieces).
EVAL_MAX_TOKENS = 8192


OVERFLOW_NOTE = ("the perplexity is inf: it overflows a float (a mean NLL above 709 nats a token), "
                 "the model gives this text next to no probability")


def perplexity(nll: float, tokens: int) -> float:
    """``exp(nll / tokens)`` (nats summed over ``tokens`` predicted tokens), ``inf`` where that
    overflows a float (a model that gives the text next to no probability) instead of an error."""
    try:
        return math.exp(nll / max(tokens, 1))
    except OverflowError:
        return math.inf


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
        return perplexity(self.total_nll, self.total_tokens)

    def summary(self) -> dict:
        return Totals(self.total_nll, self.total_tokens, len(self.nll)).summary()


@dataclass
class Totals:
    """Summed NLL (nats), predicted tokens and sentences: what a perplexity needs, and what the
    ranks of a data-parallel run add up."""

    nll: float = 0.0
    tokens: int = 0
    sentences: int = 0

    def __add__(self, other: Totals) -> Totals:
        return Totals(self.nll + other.nll, self.tokens + other.tokens, self.sentences + other.sentences)

    @property
    def perplexity(self) -> float:
        return perplexity(self.nll, self.tokens)

    def summary(self) -> dict:
        doc = {"perplexity": self.perplexity, "nll": self.nll / max(self.tokens, 1), "tokens": self.tokens,
               "sentences": self.sentences}
        return doc if math.isfinite(doc["perplexity"]) else {**doc, "note": OVERFLOW_NOTE}


@torch.no_grad()
def unigram_perplexity(train: TokenSplit, valid: TokenSplit, vocab_size: int) -> float:
    """Perplexity on ``valid`` of the add-one unigram model of ``train``'s word frequencies: what
    a language model reaches before it uses any context (a model trained from scratch first
    settles here, the *initial plateau* of :attr:`vizlm.modeling.config.TrainConfig.plateau`)."""
    counts = train.counts(vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    seen = valid.counts(vocab_size)
    return math.exp(-float((seen * logp).sum()) / max(int(seen.sum()), 1))


def score_sentences(model: nn.Module, seqs: list[list[int]], batch_size: int = 128) -> SentenceScores:
    """NLL of every sentence (ids without <s>/</s>), in the input order."""
    was_training = model.training
    model.eval()
    nll = [0.0] * len(seqs)
    count = [0] * len(seqs)
    device = _device(model)
    for idx, inputs, targets in iter_batches(seqs, batch_size, max_tokens=EVAL_MAX_TOKENS):
        targets = targets.to(device)
        tok = model(inputs.to(device)).token_nll(targets)  # (B, T), 0 at padding
        per = tok.sum(1).double().cpu()  # (B,)
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
    for seg, tok in _read_documents(model, document_batches(docs, streams, segment)):
        real = seg.positions >= 0  # (B, T)
        tok_nll[seg.positions[real]] = tok[real].double()
    model.train(was_training)
    sentence_of = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes, dtype=torch.long))
    per = torch.zeros(len(sizes), dtype=torch.float64).index_add_(0, sentence_of, tok_nll)  # (sentences,)
    return SentenceScores(per.tolist(), sizes)


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def read_documents(model: nn.Module, segments):
    """``(segment, output, state)`` for segments read in order, the state carried between them and
    reset where documents start; ``state`` is the one the segment was read after (its carried
    memory: the slots before the segment's own in ``output.attention``)."""
    device, state = _device(model), None
    for seg in segments:
        if state is None:
            state = model.initial_state(seg.inputs.shape[0])
        start = state.narrow(seg.inputs.shape[0]).reset(seg.starts)
        out = model(seg.inputs.to(device), start)
        state = out.state
        yield seg, out, start


def _read_documents(model: nn.Module, segments):
    """``(segment, per-target NLL (B, T) on the CPU)`` of :func:`read_documents`."""
    device = _device(model)
    for seg, out, _ in read_documents(model, segments):
        yield seg, out.token_nll(seg.targets.to(device)).cpu()  # (B, T)


def split_segments(split: TokenSplit, rank: int = 0, world: int = 1, streams: int = 64, segment: int = 50,
                   max_tokens: int | None = None):
    """The segments of documents ``rank, rank + world, ...`` of ``split`` read as running text (as
    :func:`score_split` reads them), a chunk at a time; for :func:`read_documents`."""
    for _, data, mine in document_shares(split, rank, world, max_tokens):
        yield from chunk_segments(data.select_documents(mine), streams, segment)


def document_shares(split: TokenSplit, rank: int = 0, world: int = 1, max_tokens: int | None = None):
    """``(chunk, its ids, the chunk's documents rank ``rank`` reads)`` of every chunk where that rank has some:
    documents ``rank, rank + world, ...`` of ``split``, a chunk at a time."""
    for chunk in split.chunks(max_tokens):
        mine = shard(chunk.d1 - chunk.d0, (rank - chunk.d0) % world, world)
        if len(mine):
            yield chunk, split.read(chunk), mine


def chunk_segments(data: ChunkData, streams: int, segment: int):
    """The segments of the documents of ``data`` read as running text by ``streams`` streams, ``segment`` targets
    each (:func:`vizlm.data.batches.document_plan`); a segment's ``positions`` index ``data.tokens``."""
    plan = document_plan(data.document_targets(), streams, segment)
    inputs = data.running_inputs()
    return (plan_segment(plan, k, inputs, data.tokens) for k in range(len(plan)))


@torch.no_grad()
def score_split(model: nn.Module, split: TokenSplit, rank: int = 0, world: int = 1, batch_size: int = 128,
                streams: int = 64, segment: int = 50, max_tokens: int | None = None) -> Totals:
    """Totals of rank ``rank``'s share of ``split`` (all of it when ``world`` is 1), read a chunk
    at a time in the model's context: sentence batches ``rank, rank + world, ...`` of each chunk
    (as :func:`score_sentences` batches them), or its documents ``rank, rank + world, ...`` read
    as running text (as :func:`score_documents`). The ranks' totals add up to the whole split's
    (:meth:`vizlm.core.distributed.Context.sum`), equal to one process's up to float rounding."""
    was_training = model.training
    model.eval()
    device, total = _device(model), Totals()
    document = getattr(model.config, "context", "sentence") == "document"
    done = 0  # batches of the chunks before this one: the sharing goes on across chunks
    for chunk in split.chunks(max_tokens):
        if document and not len(mine := shard(chunk.d1 - chunk.d0, (rank - chunk.d0) % world, world)):
            continue
        data = split.read(chunk)
        if document:  # documents rank, rank + world, ... of the split
            total += _score_chunk_documents(model, data.select_documents(mine), streams, segment)
            continue
        batches = plan_batches(data.lengths(), batch_size, max_tokens=EVAL_MAX_TOKENS)
        first, done = done, done + len(batches)
        for j in shard(len(batches), (rank - first) % world, world):
            inputs, targets = data.collate(batches[j])
            targets = targets.to(device)
            nll = model(inputs.to(device)).token_nll(targets).sum(dtype=torch.float64)
            total += Totals(float(nll), int((targets != 0).sum()), len(batches[j]))
    model.train(was_training)
    return total


@torch.no_grad()
def sentence_nll_split(model: nn.Module, split: TokenSplit, rank: int = 0, world: int = 1, batch_size: int = 128,
                       streams: int = 64, segment: int = 50, max_tokens: int | None = None) -> np.ndarray:
    """Per-sentence NLL (S,) float64 of ``split`` in the model's context, read a chunk at a time:
    rank ``rank``'s share (the same as :func:`score_split`'s) filled in, zeros elsewhere, so the
    ranks' arrays add up to one process's (:meth:`vizlm.core.distributed.Context.sum_array`)."""
    was_training = model.training
    model.eval()
    device = _device(model)
    out = np.zeros(len(split), dtype=np.float64)
    document = getattr(model.config, "context", "sentence") == "document"
    done = 0
    for chunk in split.chunks(max_tokens):
        if document and not len(mine := shard(chunk.d1 - chunk.d0, (rank - chunk.d0) % world, world)):
            continue
        data = split.read(chunk)
        if document:
            part = data.select_documents(mine)
            tok = _document_target_nll(model, part, streams, segment)  # (targets,)
            rows = np.concatenate([np.arange(*data.documents[[d, d + 1], 0]) for d in mine]) + chunk.s0
            out[rows] = np.add.reduceat(tok, part.offsets[:-1])
            continue
        batches = plan_batches(data.lengths(), batch_size, max_tokens=EVAL_MAX_TOKENS)
        first, done = done, done + len(batches)
        for j in shard(len(batches), (rank - first) % world, world):
            inputs, targets = data.collate(batches[j])
            tok = model(inputs.to(device)).token_nll(targets.to(device))  # (B, T)
            out[np.asarray(batches[j]) + chunk.s0] = tok.sum(1).double().cpu().numpy()
    model.train(was_training)
    return out


def _document_target_nll(model: nn.Module, data: ChunkData, streams: int, segment: int) -> np.ndarray:
    """NLL of every target of ``data``'s documents read as running text, in order (targets,)."""
    tok_nll = np.zeros(len(data.tokens), dtype=np.float64)
    for seg, tok in _read_documents(model, chunk_segments(data, streams, segment)):
        real = seg.positions >= 0  # (B, T)
        tok_nll[seg.positions[real].numpy()] = tok[real].double().numpy()
    return tok_nll


def _score_chunk_documents(model: nn.Module, data: ChunkData, streams: int, segment: int) -> Totals:
    if not len(data.tokens):
        return Totals()
    return Totals(float(_document_target_nll(model, data, streams, segment).sum()), len(data.tokens), len(data.offsets) - 1)


def score(
    model: nn.Module, seqs: list[list[int]], documents: list[int] | None = None, batch_size: int = 128
) -> SentenceScores:
    """NLL of every sentence in the model's own context (``model.config.context``).

    ``documents`` gives the sentences per document, in order (:func:`vizlm.data.folder.document_sizes`);
    a document-context model reads each as running text, and each sentence alone
    when it is None. Sentence-context models always read sentences alone.
    """
    if getattr(model.config, "context", "sentence") == "document":
        return score_documents(model, split_documents(seqs, documents))
    return score_sentences(model, seqs, batch_size)


def split_stream(split: TokenSplit) -> torch.Tensor:
    """The whole split as one token stream, (N,) long: every sentence's words followed by ``</s>``,
    in order (a blank line is a lone ``</s>``), as pytorch/examples' ``data.Corpus`` reads a file
    (each line's words plus ``<eos>``); read a chunk at a time into memory."""
    parts = [split.read(c).tokens for c in split.chunks()]
    return torch.from_numpy(np.concatenate(parts).astype(np.int64)) if parts else torch.zeros(0, dtype=torch.long)


@torch.no_grad()
def score_stream(model: nn.Module, tokens: torch.Tensor, streams: int = 10, bptt: int = 35) -> Totals:
    """Totals of a token stream read as pytorch/examples' ``word_language_model`` evaluates a split.

    The stream (N,) is cut into ``streams`` contiguous columns of ``N // streams`` tokens (the
    remainder dropped; its ``batchify``); the columns are read side by side ``bptt`` steps at a
    time, the state carried from one step to the next and never reset, from a zero state at the
    start. Every token but each column's first is predicted: ``streams * (N // streams - 1)``
    targets. ``nll / tokens`` is its ``evaluate()``'s loss, and the perplexity its test perplexity.
    Works for every family (an attention model's memory is carried with the state).
    """
    if streams < 1 or bptt < 1:
        raise ValueError("streams and bptt must be >= 1")
    was_training = model.training
    model.eval()
    device = _device(model)
    per = tokens.numel() // streams
    data = tokens[: per * streams].view(streams, per).to(device)  # (B, per): column b is a contiguous piece
    state, nll = model.initial_state(streams), 0.0
    for i in range(0, per - 1, bptt):
        n = min(bptt, per - 1 - i)
        out = model(data[:, i : i + n], state)  # (B, n) inputs
        state = out.state.detach()
        nll += float(out.token_nll(data[:, i + 1 : i + 1 + n]).sum(dtype=torch.float64))  # (B, n) targets
    model.train(was_training)
    return Totals(nll, streams * max(per - 1, 0), 0)
