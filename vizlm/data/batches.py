"""Batches: which sentences, or which stretches of running text, a step reads, and the tensors of each.

Two readings (a model's ``context``). **Sentences**: length-bucketed batches (:func:`plan_batches`), each
sentence ``w_1..w_n`` read as ``<s> w_1..w_n`` predicting ``w_1..w_n </s>``. **Documents**: running text
read by parallel streams in segments of ``bptt`` tokens for truncated BPTT (:func:`document_plan`,
:func:`plan_segment`).

The plans need only lengths, and the tensors come from the arrays of :mod:`vizlm.data.tokens`
(:meth:`~vizlm.data.tokens.ChunkData.collate`, :meth:`~vizlm.data.tokens.ChunkData.running_inputs`), so
that every batcher is one computation. Sentences and documents held in memory (scoring: :func:`iter_batches`,
:func:`document_batches`) are one chunk of their own; a training epoch (:class:`SentenceEpoch`,
:class:`DocumentEpoch`) reads a split of any size a chunk at a time.

Shuffling is by chunk: an epoch reads the chunks in a shuffled order and shuffles the sentence batches (or
the documents) within each. A split of one chunk, such as Brown's 1M training tokens under the default 2M,
is batched exactly as :func:`iter_batches` and :func:`document_batches` batch it in memory, so a corpus
gives the same training with or without token-id files.

Data parallelism: every rank plans the same global steps (the plan needs only lengths); rank ``r`` of ``W``
reads sentences ``r, r + W, ...`` of each global batch, or streams ``r, r + W, ...`` of each document step
(:func:`vizlm.core.distributed.shard`), and every rank knows the global step's token count, which
normalises the loss (:mod:`vizlm.modeling.train`).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from vizlm.core.distributed import shard
from vizlm.data.tokens import ChunkData, TokenSplit
from vizlm.data.vocab import Vocab


def in_memory(seqs: list[list[int]], sizes: list[int] | None = None) -> ChunkData:
    """Encoded sentences held in memory (``sizes``: sentences per document; None: one each) as one chunk."""
    return TokenSplit.from_sequences(seqs, sizes).whole()


# --------------------------------------------------------------------------- sentences
def collate(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sentences -> (inputs, targets), each (B, T), right-padded with 0.

    A sentence ``w_1..w_n`` is read as ``<s> w_1..w_n`` and predicts ``w_1..w_n </s>``
    (:meth:`~vizlm.data.tokens.ChunkData.collate`).
    """
    return in_memory(seqs).collate(range(len(seqs)))


def bucket_batches(lengths: list[int], batch_size: int, shuffle: bool, seed: int = 0) -> list[list[int]]:
    """Index lists of sentences of similar length (little padding).

    Sentences are sorted by length (ties shuffled when ``shuffle``), cut into
    batches, and the batch order shuffled, so each epoch sees every sentence once.
    """
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    if shuffle:
        rng.shuffle(order)
    order.sort(key=lambda i: lengths[i])
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if shuffle:
        rng.shuffle(batches)
    return batches


def plan_batches(lengths: list[int], batch_size: int, shuffle: bool = False, seed: int = 0,
                 max_tokens: int | None = None) -> list[list[int]]:
    """The index lists of :func:`iter_batches`, from sentence lengths alone.

    ``max_tokens`` bounds a batch's padded size (sentences x longest + 1): a bucket of long
    sentences is cut into smaller batches, so the (B, T, V) logits of scoring stay bounded
    whatever the text. Buckets within the budget are unchanged.
    """
    out = []
    for idx in bucket_batches(lengths, batch_size, shuffle, seed):
        step = len(idx)
        if max_tokens is not None:
            step = max(1, min(step, max_tokens // (max(lengths[i] for i in idx) + 1)))
        out.extend(idx[k : k + step] for k in range(0, len(idx), step))
    return out


def iter_batches(seqs: list[list[int]], batch_size: int, shuffle: bool = False, seed: int = 0,
                 max_tokens: int | None = None):
    """Yield ``(indices, inputs, targets)`` over length-bucketed batches (:func:`plan_batches`) of sentences
    held in memory, for scoring them: the indices say which score is whose, and ``max_tokens`` bounds a
    batch's logits. :class:`SentenceEpoch` batches a split of any size for training with the same plan and
    :meth:`~vizlm.data.tokens.ChunkData.collate` (equal batches for a split of one chunk and one rank)."""
    data = in_memory(seqs)
    for part in plan_batches(data.lengths(), batch_size, shuffle, seed, max_tokens):
        inputs, targets = data.collate(part)
        yield part, inputs, targets


# --------------------------------------------------------------------------- documents
def split_documents(seqs: list, sizes: list[int] | None) -> list[list]:
    """Group ``seqs`` into documents of ``sizes`` sentences (None: one sentence each)."""
    if sizes is None:
        return [[s] for s in seqs]
    if sum(sizes) != len(seqs):
        raise ValueError(f"documents hold {sum(sizes)} sentences but there are {len(seqs)}")
    ends = list(itertools.accumulate(sizes))
    return [seqs[end - n : end] for n, end in zip(sizes, ends)]


def document_tokens(doc: list[list[int]]) -> list[int]:
    """A document as running text: ``<s> s_1 </s> s_2 </s> ... s_n </s>``.

    Inputs are all but the last token, targets all but the first, so every sentence
    predicts its words and its ``</s>``, as in sentence context, and the first word of
    a sentence is predicted from the previous sentence's ``</s>``.
    """
    return [Vocab.bos_id, *in_memory(doc, [len(doc)]).tokens.tolist()]


@dataclass
class Segment:
    """One step of truncated BPTT over parallel document streams.

    Streams that have no document left drop out of the batch, always from the end, so
    ``B`` only shrinks over an epoch: the state of the first ``B`` streams carries on.
    """

    inputs: torch.Tensor  # (B, T) token ids, 0-padded after a stream's document ends
    targets: torch.Tensor  # (B, T) next tokens, 0 = padding
    starts: torch.Tensor  # (B,) bool: the stream begins a new document here (reset its state)
    positions: torch.Tensor  # (B, T) long: index of each target in the documents' targets in order, -1 = padding


@dataclass
class DocumentPlan:
    """Which targets each stream reads at each step: the layout of :func:`document_batches`,
    from document sizes alone, so that a corpus on disk can be read one step (and one rank's
    streams) at a time. Targets are numbered in the concatenated targets of the documents."""

    start: torch.Tensor  # (K, B) long: the segment's first target
    length: torch.Tensor  # (K, B) long: real targets in the segment, 0 = the stream is done
    starts: torch.Tensor  # (K, B) bool: the stream begins a document here
    active: list[int]  # (K,) streams still reading at each step (a prefix of the B streams)
    bptt: int

    def __len__(self) -> int:
        return len(self.active)

    def tokens(self, k: int) -> int:
        """Real targets of step ``k`` over all streams."""
        return int(self.length[k].sum())


def document_plan(sizes: list[int], streams: int = 64, bptt: int = 20, shuffle: bool = False,
                  seed: int = 0, balance: bool = False) -> DocumentPlan:
    """The stream layout of documents with ``sizes`` targets each (see :func:`document_batches`).

    ``balance`` (training): the documents' segments, in reading order, are cut into ``streams``
    equal runs instead, so every stream reads to the end of the epoch and no step has fewer
    streams than the others (but the last). Whole documents per stream leave a tail in which
    a few streams read on alone (on Brown, 131 of 856 steps, the last 65 with 16 streams or
    fewer): with Adam, those steps fit the model to the last few documents and the
    checkpoint taken after the epoch is worse (valid perplexity 171.8 -> 178.7 in an epoch in
    which the training perplexity fell from 169 to 155). A cut document (at most
    ``streams - 1`` an epoch, different ones each shuffled epoch) goes on in the next
    stream from a fresh state, as at a document start.
    """
    if bptt < 1 or streams < 1:
        raise ValueError("bptt and streams must be >= 1")
    first = [0]  # index of each document's first target in the concatenated targets
    for n in sizes:
        first.append(first[-1] + n)
    order = [i for i in range(len(sizes)) if sizes[i]]
    if shuffle:
        random.Random(seed).shuffle(order)
    if balance:
        return _balanced_plan(sizes, first, order, streams, bptt)
    heap = [(0, b) for b in range(max(1, min(streams, len(order))))]  # (segments so far, stream)
    lanes: list[list[int]] = [[] for _ in heap]  # stream -> its documents in reading order
    for d in order:
        load, b = heapq.heappop(heap)
        lanes[b].append(d)
        heapq.heappush(heap, (load + -(-sizes[d] // bptt), b))
    return _grid_plan([_segments(sizes, first, lane, bptt) for lane in lanes], bptt)


def _segments(sizes: list[int], first: list[int], docs: list[int], bptt: int) -> torch.Tensor:
    """``(first target, length, starts a document)`` of the segments of ``docs`` read in order, (S, 3)."""
    parts = [torch.zeros(0, 3, dtype=torch.long)]
    for d in docs:
        off = torch.arange(0, sizes[d], bptt)  # (segments,)
        parts.append(torch.stack([first[d] + off, (sizes[d] - off).clamp_max(bptt), off == 0], 1))
    return torch.cat(parts)


def _grid_plan(segs: list[torch.Tensor], bptt: int) -> DocumentPlan:
    """The plan of streams reading ``segs`` (each (steps, 3)), longest first."""
    segs = sorted(segs, key=len, reverse=True)  # streams still reading are always a prefix
    K, B = len(segs[0]), len(segs)
    grid = torch.zeros(K, B, 3, dtype=torch.long)  # (steps, streams, (first target, length, starts))
    for b, seg in enumerate(segs):
        grid[: len(seg), b] = seg
    start, length, starts = grid.unbind(2)  # (K, B) each
    active = (length > 0).sum(1).tolist()  # streams reading at each step
    return DocumentPlan(start, length, starts.bool(), active, bptt)


def _balanced_plan(sizes: list[int], first: list[int], order: list[int], streams: int, bptt: int) -> DocumentPlan:
    """``document_plan(balance=True)``: the segments in reading order, cut into equal runs."""
    every = _segments(sizes, first, order, bptt)  # (S, 3)
    # at most one stream per document: fewer documents than streams are cut no more than that
    steps = max(1, -(-len(every) // max(1, min(streams, len(order)))))
    if not len(every):
        return _grid_plan([every], bptt)
    runs = list(every.split(steps))
    for run in runs:
        run[0, 2] = 1  # a stream starts from a fresh state, also inside a cut document
    return _grid_plan(runs, bptt)


def plan_segment(plan: DocumentPlan, k: int, flat_inputs, flat_targets, lanes: range | None = None) -> Segment:
    """Step ``k`` of ``plan`` for the streams ``lanes`` (default: every active one; they must
    be active). ``flat_inputs`` / ``flat_targets``: the documents' inputs and targets, concatenated,
    as 1-D tensors or arrays (a window of a corpus on disk); only the targets of this step are read."""
    lanes = range(plan.active[k]) if lanes is None else lanes
    sel = torch.as_tensor(list(lanes), dtype=torch.long)
    start, length = plan.start[k, sel], plan.length[k, sel]  # (b,) each
    steps = torch.arange(plan.bptt)
    real = steps < length[:, None]  # (b, T)
    positions = torch.where(real, start[:, None] + steps, -1)  # (b, T)
    at = positions.clamp_min(0)
    if not isinstance(flat_targets, torch.Tensor):  # a numpy window: fancy-index it, then convert
        inputs, targets = (torch.from_numpy(flat[at.numpy()].astype("int64")) for flat in (flat_inputs, flat_targets))
    else:
        inputs, targets = flat_inputs[at], flat_targets[at]
    zero = torch.zeros((), dtype=torch.long)
    return Segment(torch.where(real, inputs, zero), torch.where(real, targets, zero), plan.starts[k, sel], positions)


def document_batches(
    docs: list[list[list[int]]], streams: int = 64, bptt: int = 20, shuffle: bool = False, seed: int = 0,
    balance: bool = False,
) -> list[Segment]:
    """Documents read as running text by ``streams`` parallel streams, ``bptt`` tokens a segment.

    Each document goes whole to one stream (the least loaded so far, in document order;
    shuffled first when ``shuffle``). A document always starts a segment: its last
    segment is padded, so a stream's state is reset only between segments
    (``Segment.starts``), never inside one, and one LSTM call reads a whole segment.
    That padding is under one segment per document (Brown documents are ~2,300
    tokens, so about 0.4% at ``bptt`` 20). Streams run out of documents at different
    times; they are ordered longest first and the batch shrinks to those still
    reading, so the tail of an epoch computes no padding rows either. ``positions``
    index the concatenated targets of ``docs`` in the given order, to gather per-token
    and per-sentence scores. The layout is :func:`document_plan`'s (``balance``: training's,
    where documents may be cut between streams). Documents held in memory, for scoring them;
    :class:`DocumentEpoch` reads a split of any size for training with the same plan and segments
    (equal segments for a split of one chunk and one rank).
    """
    data = in_memory([s for d in docs for s in d], [len(d) for d in docs])
    plan = document_plan(data.document_targets(), streams, bptt, shuffle, seed, balance)
    inputs = data.running_inputs()
    return [plan_segment(plan, k, inputs, data.tokens) for k in range(len(plan))]


# --------------------------------------------------------------------------- training epochs
@dataclass
class Step:
    """One global optimisation step, as one rank sees it."""

    inputs: torch.Tensor | None  # (b, T) this rank's rows; None when it has none at this step
    targets: torch.Tensor | None  # (b, T)
    tokens: int  # real targets of the whole step, every rank's: the loss is normalised by it
    starts: torch.Tensor | None = None  # (b,) document context: streams that begin a document
    fresh: bool = False  # document context: a chunk's first step (every stream starts afresh)


def _chunk_order(n: int, shuffle: bool, seed: int) -> list[int]:
    order = list(range(n))
    if shuffle and n > 1:
        random.Random(f"{seed}/chunks").shuffle(order)
    return order


def _chunk_seed(seed: int, c: int) -> int:
    return seed + 1_000_003 * c  # chunk 0 keeps the epoch's seed: one chunk batches as in memory


class _Epoch:
    """An epoch as global steps over the chunks of a split, in ``order``; ``counts[c]`` steps in chunk ``c``."""

    order: list[int]
    counts: list[int]

    def __len__(self) -> int:
        return sum(self.counts)

    def _chunks_from(self, start: int) -> Iterator[tuple[int, int]]:
        """``(chunk, its first global step)`` for the chunks holding steps ``>= start``, in epoch order
        (a resumed epoch reads none of the chunks before its position)."""
        k = 0
        for c in self.order:
            if k + self.counts[c] > start:
                yield c, k
            k += self.counts[c]


class SentenceEpoch(_Epoch):
    """The length-bucketed batches of a training epoch (:func:`plan_batches` per chunk): over the chunks of a
    split of any size, one rank's rows of each global batch, the global step's token count (which
    normalises the loss), from any step on (a resumed epoch). A split of one chunk read by one rank gives
    :func:`iter_batches`' batches (``shuffle=True``), which serves sentences held in memory for scoring."""

    def __init__(self, split: TokenSplit, batch_size: int, seed: int, shuffle: bool = True,
                 max_tokens: int | None = None):
        self.split, self.batch_size, self.seed, self.shuffle = split, batch_size, seed, shuffle
        self.chunks = split.chunks(max_tokens)
        self.order = _chunk_order(len(self.chunks), shuffle, seed)
        self.counts = [-(-(c.s1 - c.s0) // batch_size) for c in self.chunks]

    def steps(self, rank: int = 0, world: int = 1, start: int = 0) -> Iterator[Step]:
        """Global steps ``start, start + 1, ...``: this rank's sentences of each batch."""
        for c, k in self._chunks_from(start):
            data = self.split.read(self.chunks[c])
            lengths = data.lengths()
            for idx in plan_batches(lengths, self.batch_size, self.shuffle, _chunk_seed(self.seed, c)):
                if k >= start:
                    mine = [idx[i] for i in shard(len(idx), rank, world)]
                    inputs, targets = data.collate(mine) if mine else (None, None)
                    yield Step(inputs, targets, sum(lengths[i] + 1 for i in idx))
                k += 1


class DocumentEpoch(_Epoch):
    """The document streams of a training epoch (:func:`document_plan` per chunk): over the chunks of a split
    of any size, one rank's streams of each step, the step's token count, from any step on. A split of one
    chunk read by one rank gives :func:`document_batches`' segments, which serves documents held in memory
    for scoring."""

    def __init__(self, split: TokenSplit, streams: int, bptt: int, seed: int, shuffle: bool = True,
                 max_tokens: int | None = None, balance: bool = True):
        self.split, self.streams, self.bptt, self.seed, self.shuffle = split, streams, bptt, seed, shuffle
        self.balance = balance  # equal streams (document_plan(balance=True)): the layout training reads
        self.chunks = split.chunks(max_tokens)
        self.order = _chunk_order(len(self.chunks), shuffle, seed)
        self.counts = [len(self._plan(c, self._sizes(c))) for c in range(len(self.chunks))]

    def _sizes(self, c: int) -> list[int]:
        ch = self.chunks[c]
        return np.diff(np.asarray(self.split._documents[ch.d0 : ch.d1 + 1])[:, 1]).tolist()

    def _plan(self, c: int, sizes: list[int]):
        return document_plan(sizes, self.streams, self.bptt, self.shuffle, _chunk_seed(self.seed, c), self.balance)

    def steps(self, rank: int = 0, world: int = 1, start: int = 0) -> Iterator[Step]:
        """Global steps ``start, start + 1, ...``: this rank's streams (``rank, rank + world, ...``)."""
        for c, k in self._chunks_from(start):
            data = self.split.read(self.chunks[c])
            plan = self._plan(c, data.document_targets())
            inputs = data.running_inputs()
            for j in range(len(plan)):
                if k >= start:
                    lanes = shard(plan.active[j], rank, world)
                    seg = plan_segment(plan, j, inputs, data.tokens, lanes) if len(lanes) else None
                    yield Step(seg and seg.inputs, seg and seg.targets, plan.tokens(j), seg and seg.starts, fresh=j == 0)
                k += 1


__all__ = ["DocumentEpoch", "DocumentPlan", "Segment", "SentenceEpoch", "Step", "bucket_batches", "collate",
           "document_batches", "document_plan", "document_tokens", "in_memory", "iter_batches", "plan_batches",
           "plan_segment", "split_documents"]
