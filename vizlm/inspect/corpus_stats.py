"""Corpus-level statistics: per-sentence perplexity comparison of two models, and
average attention by relative position (Daniluk et al., Fig. 3) next to the average
effect of the slot at that position and the share of words the attention read moves
by more than 1 bit (:mod:`vizlm.models.effects`).

Both run batched forward passes over length buckets and are cached on disk
(:mod:`vizlm.inspect.cache`) keyed by the checkpoints' weights and the corpus checksum.

Over a processed split (:func:`compare_corpus`, :func:`positions_corpus`) the forward passes
read the split a chunk at a time (:mod:`vizlm.data.tokens`; from its token-id files when it has
some), so their memory does not grow with the corpus, and under torchrun each rank reads its
share and the sums are added (``ctx``); the cache is then not used, since every rank must
take part in the computation.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from vizlm.inspect.cache import cached, checkpoint_digest, lookup, store
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.data.batches import plan_batches
from vizlm.data.folder import document_sizes
from vizlm.data.registry import split_texts
from vizlm.data.vocab import Vocab, encode_sentences
from vizlm.core.distributed import SINGLE, Context, shard
from vizlm.inspect.attribution_corpus import cluster_means
from vizlm.modeling.evaluate import (OVERFLOW_NOTE, chunk_segments, document_shares, perplexity, read_documents,
                                    score, sentence_nll_split)
from vizlm.models import effects as fx
from vizlm.models.base import attention_entropy
from vizlm.data.tokens import Chunk, ChunkData, TokenSplit, open_split

Progress = Callable[[float], None] | None
LN2 = math.log(2)
# in the cache key: 2 added the effects, 3 the mean largest weight of a row, 4 stores the sums (any narrower window),
# 5 per document (intervals resample documents)
POSITIONS_VERSION = 5
MAX_WINDOW = 30  # the most positions back the app shows; statistics stored for a window serve every narrower one
POSITION_COLUMNS = ["model", "offset", "mean", "lo", "hi", "count", "effect", "effect_lo", "effect_hi"]
DOC_STREAMS, DOC_SEGMENT = 64, 50  # how a document model reads text for the statistics (as vizlm.modeling.evaluate scores it)


# --------------------------------------------------------------------------- comparison
@dataclass
class Comparison:
    """Model b against baseline a, sentence by sentence (b is "the attention model")."""

    name_a: str
    name_b: str
    table: pd.DataFrame  # sentence_id, text, length, ppl_a, ppl_b, difference, log_ratio; most improved first
    summary: dict

    def most_improved(self, n: int = 10, min_length: int = 0) -> pd.DataFrame:
        """Sentences whose perplexity b lowers most (by log-ratio), at least ``min_length`` words; only those
        it lowers (fewer than ``n`` when b improves fewer)."""
        t = self.table
        return t[(t.length >= min_length) & (t.log_ratio < 0)].head(n)

    def most_worsened(self, n: int = 10, min_length: int = 0) -> pd.DataFrame:
        """Sentences whose perplexity b raises most, at least ``min_length`` words; only those it raises."""
        t = self.table
        return t[(t.length >= min_length) & (t.log_ratio > 0)].iloc[::-1].head(n)

    def to_dict(self) -> dict:
        return {"a": self.name_a, "b": self.name_b, "summary": self.summary, "table": self.table.to_dict("records")}


def _check_same_vocab(a: Checkpoint, b: Checkpoint) -> None:
    if a.vocab.itos != b.vocab.itos:
        raise ValueError(
            f"cannot compare {a.label} and {b.label}: their vocabularies differ "
            f"({len(a.vocab)} vs {len(b.vocab)} words), so their perplexities are not comparable"
        )


def _nll(ckpt: Checkpoint, sentences: list[list[str]] | None = None, batch_size: int = 128,
         ids: list[str] | None = None, split: TokenSplit | None = None,
         ctx: Context = SINGLE) -> tuple[list[float], list[int]]:
    """Per-sentence NLL in the model's context: a document-context model reads the
    documents of ``ids`` (``document:index``) as running text. Given a ``split`` instead, it
    is read a chunk at a time, each rank of ``ctx`` scoring its share."""
    if split is not None:
        nll = ctx.sum_array(sentence_nll_split(ckpt.model, split, ctx.rank, ctx.world_size, batch_size))
        return nll.tolist(), split.sentence_tokens().tolist()
    sizes = document_sizes(ids) if ids is not None else None
    s = score(ckpt.model, encode_sentences(sentences, ckpt.vocab), sizes, batch_size)
    return s.nll, s.tokens


def build_comparison(
    a: Checkpoint, b: Checkpoint, nll_a, nll_b, tokens, ids, texts, n_boot: int = 1000, seed: int = 0,
    documents: list[int] | None = None,
) -> Comparison:
    """The table and summary from per-sentence NLLs (nats) and token counts.

    ``documents`` (sentences per document, in order): the bootstrap resamples whole documents
    instead of sentences, as it must when a model reads running text (its sentences within a
    document are not independent); the summary says which (``resampled``)."""
    nll_a, nll_b, tok = np.asarray(nll_a, float), np.asarray(nll_b, float), np.asarray(tokens, float)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # an overflowing perplexity is inf
        ppl_a, ppl_b = np.exp(nll_a / tok), np.exp(nll_b / tok)
        table = pd.DataFrame({
            "sentence_id": list(ids), "text": list(texts), "length": (tok - 1).astype(int),
            "ppl_a": ppl_a, "ppl_b": ppl_b, "difference": ppl_b - ppl_a, "log_ratio": np.log(ppl_b / ppl_a),
        })
        sentence_ratio = np.exp((nll_b - nll_a) / tok)  # finite where both perplexities overflow
    table = table.sort_values(["log_ratio", "sentence_id"], kind="stable").reset_index(drop=True)
    summary = {**ratio_interval(nll_a, nll_b, tok, documents, n_boot, seed),
               "share_improved": float((nll_b < nll_a).mean()),
               "median_sentence_ratio": float(np.median(sentence_ratio))}
    return Comparison(a.label, b.label, table, summary)


def ratio_interval(nll_a, nll_b, tokens, documents: list[int] | None = None, n_boot: int = 1000,
                   seed: int = 0) -> dict:
    """Corpus perplexity of b against a from per-sentence NLLs (nats) and token counts: both
    perplexities, their ratio b / a and its paired-bootstrap 95% interval.

    ``documents`` (sentences per document, in order): whole documents are resampled instead of
    sentences, as they must be when a model reads running text (``resampled`` says which)."""
    nll_a, nll_b, tok = np.asarray(nll_a, float), np.asarray(nll_b, float), np.asarray(tokens, float)
    if documents is not None:  # one unit per document: its summed NLLs and tokens
        starts = np.cumsum([0, *documents[:-1]])
        boot = _bootstrap_ratios(*(np.add.reduceat(x, starts) for x in (nll_a, nll_b, tok)), n_boot, seed)
    else:
        boot = _bootstrap_ratios(nll_a, nll_b, tok, n_boot, seed)
    corpus_a, corpus_b = perplexity(nll_a.sum(), tok.sum()), perplexity(nll_b.sum(), tok.sum())
    finite = math.isfinite(corpus_a) and math.isfinite(corpus_b)
    with np.errstate(invalid="ignore"):  # resamples whose perplexities both overflow: NaN, and said so below
        low, high = float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))
    return {
        "sentences": len(tok), "tokens": int(tok.sum()), "perplexity_a": corpus_a, "perplexity_b": corpus_b,
        "ratio": corpus_b / corpus_a if finite else perplexity(nll_b.sum() - nll_a.sum(), tok.sum()),
        "ratio_ci_low": low, "ratio_ci_high": high, "resampled": "sentences" if documents is None else "documents",
        **({} if finite else {"note": OVERFLOW_NOTE + " (the ratio is exp of the mean NLL difference, which is finite)"}),
    }


BOOTSTRAP_BLOCK = 2**22  # resampled indices drawn at a time: ~32 MB, whatever the corpus size


def _bootstrap_ratios(nll_a: np.ndarray, nll_b: np.ndarray, tok: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """Corpus perplexity ratio b / a of ``n_boot`` resamples of the sentences (paired bootstrap),
    drawn a block of resamples at a time: the same draws as one (n_boot, sentences) array, in
    bounded memory (a million sentences would otherwise take 8 GB of indices)."""
    rng = np.random.default_rng(seed)
    n = len(tok)
    rows = max(1, BOOTSTRAP_BLOCK // max(n, 1))
    out = []
    for r0 in range(0, n_boot, rows):
        idx = rng.integers(0, n, size=(min(rows, n_boot - r0), n))
        with np.errstate(over="ignore"):
            out.append(np.exp((nll_b[idx].sum(1) - nll_a[idx].sum(1)) / tok[idx].sum(1)))
    return np.concatenate(out) if out else np.zeros(0)


def compare(
    a: Checkpoint, b: Checkpoint, sentences: list[list[str]], ids: list[str],
    originals: list[list[str]] | None = None, batch_size: int = 128, n_boot: int = 1000, seed: int = 0,
) -> Comparison:
    """Per-sentence perplexity of ``a`` and ``b`` on ``sentences`` (not cached)."""
    _check_same_vocab(a, b)
    keep = [i for i, s in enumerate(sentences) if s]
    sents = [sentences[i] for i in keep]
    kept_ids = [ids[i] for i in keep]
    nll_a, tokens = _nll(a, sents, batch_size, kept_ids)
    nll_b, _ = _nll(b, sents, batch_size, kept_ids)
    texts = [" ".join((originals or sentences)[i]) for i in keep]
    return build_comparison(a, b, nll_a, nll_b, tokens, kept_ids, texts, n_boot, seed,
                            documents=_resampled_documents(kept_ids))


def split_scores(ckpt: Checkpoint, corpus: str, split: str, use_cache: bool = True, ctx: Context = SINGLE,
                 checksum: str | None = None) -> dict:
    """``{"nll": [...], "tokens": [...]}`` of every sentence of a processed split in the model's context
    (what :func:`compare_corpus` pairs), cached; ``checksum``: the split's, when the caller has it."""
    if checksum is None:
        checksum = split_texts(corpus, split)[2]
    parts = {"kind": "sentence_nll", "checkpoint": checkpoint_digest(ckpt), "corpus": checksum}
    if ckpt.model.config.context != "sentence":
        parts["context"] = ckpt.model.config.context

    def compute():
        return dict(zip(("nll", "tokens"), _nll(ckpt, split=open_split(corpus, split, ckpt.vocab), ctx=ctx)))

    return cached(parts, compute, use_cache and not ctx.distributed)


def compare_corpus(a: Checkpoint, b: Checkpoint, corpus: str, split: str, progress: Progress = None,
                   use_cache: bool = True, ctx: Context = SINGLE) -> Comparison:
    """:func:`compare` on a processed split; each model's per-sentence NLLs are cached.

    The models read the split a chunk at a time (shared across the ranks of ``ctx``); the table
    then holds every sentence's text."""
    _check_same_vocab(a, b)
    ids, texts, checksum = split_texts(corpus, split)
    scores = []
    for k, ckpt in enumerate((a, b)):
        scores.append(split_scores(ckpt, corpus, split, use_cache, ctx, checksum))
        if progress:
            progress((k + 1) / 2)
    return build_comparison(a, b, scores[0]["nll"], scores[1]["nll"], scores[0]["tokens"], ids, texts,
                            documents=_resampled_documents(ids))


def _resampled_documents(ids: list[str]) -> list[int] | None:
    """Sentences per document, the unit the bootstrap resamples: a split samples documents (Brown:
    document index mod 10), so whole documents are drawn for every model, sentence-level ones too;
    None (sentences) for sentences of one document."""
    sizes = document_sizes(ids)
    return sizes if len(sizes) > 1 else None


# --------------------------------------------------------------------------- positions
@dataclass
class PositionStats:
    """Mean attention weight at offsets 1..L back from the target (1 = most recent slot), and the
    mean slot effect there (bits: log2 P(target) minus the same with that slot dropped), each with a
    95% bootstrap interval that resamples the split's documents (``resampled``)."""

    frame: pd.DataFrame  # POSITION_COLUMNS: model, offset, mean, lo, hi, count, effect, effect_lo, effect_hi
    entropy: dict[str, float]  # mean attention entropy (nats) per model
    beyond: dict[str, float]  # mean weight on slots more than L back
    peak: dict[str, float]  # mean largest weight of a row: how selective the rows are
    skipped: list[str] = field(default_factory=list)  # models without attention
    # per model: tokens, mean_read_bits, mean_abs_read_bits, share_over_1_bit (|read effect| > 1 bit)
    effects: dict[str, dict] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # models whose reading failed (a plugin's), and why
    # per model: what the intervals resample ("documents"; "sentences" in a text of one document; "words" for
    # one sentence), how many units were read ("read") and, per unit of it, the weight and its count at each offset
    # ("total", "count": (units, L))
    units: dict[str, dict] = field(default_factory=dict)

    @property
    def resampled(self) -> dict[str, str]:
        return {name: u["resampled"] for name, u in self.units.items()}

    def band_note(self, name: Callable[[str], str] = str) -> str:
        """What the 95% intervals resample, in a sentence (per model, each written ``name(model)``, where they
        differ)."""
        def band(model: str) -> str:  # a bootstrap over a few units says how few: its interval is rough
            u = self.units[model]
            few = u["resampled"] != "words" and u["read"] < FEW_UNITS
            return BANDS[u["resampled"]] + (f"; only {u['read']} {u['resampled']}, so the interval is rough" if few
                                            else "")

        kinds = {m: band(m) for m in self.units}
        texts = list(dict.fromkeys(kinds.values()))
        if len(texts) == 1:
            return f"95% intervals, {texts[0]}."
        return "95% intervals, " + "; ".join(
            f"{', '.join(name(m) for m, k in kinds.items() if k == text)}: {text}" for text in texts) + "."

    def to_dict(self) -> dict:
        return {"positions": self.frame.to_dict("records"), "entropy": self.entropy, "beyond_window": self.beyond,
                "largest_weight": self.peak, "skipped": self.skipped, "effects": self.effects, "failed": self.failed,
                "resampled": self.resampled}

    @classmethod
    def merge(cls, parts: list[PositionStats], failed: dict[str, str] | None = None) -> PositionStats:
        """The statistics of several models computed apart, as one (the models in the order of ``parts``)."""
        frames = [p.frame for p in parts if not p.frame.empty]
        return cls(pd.concat(frames, ignore_index=True) if frames else (parts[0].frame if parts else
                                                                         pd.DataFrame(columns=POSITION_COLUMNS)),
                   {k: v for p in parts for k, v in p.entropy.items()}, {k: v for p in parts for k, v in p.beyond.items()},
                   {k: v for p in parts for k, v in p.peak.items()}, [n for p in parts for n in p.skipped],
                   {k: v for p in parts for k, v in p.effects.items()}, dict(failed or {}),
                   {k: v for p in parts for k, v in p.units.items()})


def offset_slots(T: int, window: int, carried: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Slot index of offset ``d`` (1..L) for every row of a segment read after ``carried`` memory slots
    (1: a sentence from a zero state), and whether that slot exists: (T, L) each."""
    rows = torch.arange(T)[:, None]
    d = torch.arange(1, window + 1)[None, :]
    slot = rows + carried - d  # offset 1 is slot carried - 1 + r, the newest memory entry
    return slot.clamp_min(0), slot >= 0


# The sums of one model's position statistics, per unit the intervals resample (a row each), in float64 arrays
# that add up over chunks and ranks: total, total of squares and count of the weight at offsets 1..L; total and
# total of squares of the slot effect (bits); entropy, beyond-window weight, rows; read-effect sum, |sum|, > 1 bit;
# largest weight of a row.
def _layout(window: int) -> dict[str, slice]:
    L = window
    names = ["total", "total_sq", "count", "eff", "eff_sq"]
    out = {n: slice(k * L, (k + 1) * L) for k, n in enumerate(names)}
    for k, n in enumerate(["ent", "beyond", "rows", "read_sum", "read_abs", "read_big", "peak"]):
        out[n] = slice(5 * L + k, 5 * L + k + 1)
    return out


BANDS = {"documents": "a bootstrap over the documents read (the unit a corpus split samples)",
         "sentences": "a bootstrap over the sentences (the text is one document)",
         "words": "a normal interval over the words (one sentence)"}  # what PositionStats' intervals resample
FEW_UNITS = 10  # a bootstrap over fewer units than this is said to be rough
MAX_UNITS = 1000  # at most this many units are resampled: more documents are taken in runs of neighbours


@dataclass(frozen=True)
class _Units:
    """What the position statistics' intervals resample in a split: its documents (the unit a split samples),
    or, in a text of one document, its sentences; more than :data:`MAX_UNITS` are grouped into that many runs of
    neighbours (a bootstrap over groups of whole units stays valid). :meth:`tokens`: the group of every token
    of a chunk."""

    resampled: str  # "documents" or "sentences"
    total: int  # documents or sentences in the split
    groups: int

    @classmethod
    def of(cls, split: TokenSplit, documents: bool = True) -> _Units:
        """``documents``: whether the split's documents are the text's (False: its sentences, each held as one)."""
        by, total = ("documents", split.n_documents) if documents and split.n_documents >= 2 else ("sentences", len(split))
        return cls(by, total, max(1, min(total, MAX_UNITS)))

    def tokens(self, chunk: Chunk, data: ChunkData) -> np.ndarray:
        """(tokens of the chunk,) int64: the group of each token."""
        starts = data.documents[:, 1] if self.resampled == "documents" else data.offsets
        first = chunk.d0 if self.resampled == "documents" else chunk.s0
        unit = np.repeat(first + np.arange(len(starts) - 1), np.diff(starts))
        return unit * self.groups // max(self.total, 1)


def _add_units(acc: torch.Tensor, units: torch.Tensor, parts: torch.Tensor) -> None:
    """Add ``parts`` (B, T, ..., F) of every target into ``acc`` (groups, ..., F) at its unit ``units`` (B, T)."""
    acc.index_add_(0, units.reshape(-1).to(acc.device), parts.reshape(-1, *parts.shape[2:]).to(acc.dtype))


@torch.no_grad()
def _position_sums(ckpt: Checkpoint, reads, window: int, tick, groups: int, effects: bool = True) -> np.ndarray | None:
    """The summed statistics of :func:`_layout` over ``reads``, ``(output, targets (B, T), state, units (B, T))``
    of a forward pass each (``state``: the carried memory a document segment was read after, None for sentences
    read from a zero state; ``units``: the group each target's sums go to), (groups, F); None for a model
    without attention. Offset ``d`` of a row is the slot ``d`` steps back in the model's memory, across sentence
    boundaries in running text; it exists where the slot is a real position (not before the text, not padding of
    a carried memory)."""
    model = ckpt.model
    at = _layout(window)
    acc = torch.zeros(groups, at["peak"].stop, dtype=torch.float64, device=next(model.parameters()).device)
    for out, targets, state, units in reads:
        if out.attention is None:
            return None
        device = targets.device
        att = out.attention.double()  # (B, T, S)
        B, T, S = att.shape
        carried = S - T + 1  # memory slots carried into the segment (1: the start slot of a sentence)
        real = targets != 0  # (B, T)
        r = real.double()
        slot, exists = offset_slots(T, window, carried)  # (T, L)
        slot, exists = slot.to(device), exists.to(device)
        if state is not None:  # (B, T, L): the carried slots before a stream's document start are padding
            exists = exists[None] & (slot[None] >= (carried - state.valid)[:, None, None])
        m = (exists & real[..., None]).double()  # (B, T, L)
        w = att.gather(2, slot.expand(B, T, window))  # (B, T, L)
        eff = torch.zeros(B, T, window, dtype=torch.float64, device=device)
        read = torch.zeros(B, T, dtype=torch.float64, device=device)
        if effects:
            back = torch.arange(T, device=device)[:, None] + (carried - 1) - torch.arange(S, device=device)[None, :]
            select = ((back >= 0) & (back < window))[None] & real[..., None]  # (B, T, S) offsets 1..L, real rows
            memory, valid = (None, None) if state is None else (state.memory, state.valid)
            read, e = fx.attention_effects(model, out.hidden, targets, out=out, select=select, memory=memory,
                                           valid=valid)  # (B, T), (B, T, S) nats
            read = read.double() / LN2  # bits
            eff = e.double().gather(2, slot.expand(B, T, window)) / LN2  # (B, T, L) bits
        allowed = model.allowed_slots(T, state, device)  # (T, S) or (B, T, S)
        per_target = [
            w * m, w * w * m, m, eff * m, eff * eff * m,
            (attention_entropy(att, allowed) * r)[..., None], ((1 - (w * m).sum(-1)) * r)[..., None], r[..., None],
            (read * r)[..., None], (read.abs() * r)[..., None], ((read.abs() > 1) & real).double()[..., None],
            (att.max(-1).values * r)[..., None],
        ]
        _add_units(acc, units, torch.cat(per_target, -1))
        tick()
    return acc.cpu().numpy()


def _sentence_reads(model, batches):
    """``(output, targets, None, units)`` of sentence batches ``(inputs, targets, units)`` read from a zero state."""
    device = next(model.parameters()).device
    for inputs, targets, units in batches:
        yield model(inputs.to(device)), targets.to(device), None, units


def _document_reads(model, segments):
    """``(output, targets, state, units)`` of document segments ``(segment, units (B, T))`` read as running text
    (:func:`read_documents`)."""
    device = next(model.parameters()).device
    units: deque = deque()

    def each():  # read_documents reads a segment at a time, in order
        for seg, u in segments:
            units.append(u)
            yield seg

    for seg, out, state in read_documents(model, each()):
        yield out, seg.targets.to(device), state, units.popleft()


def _self_attending(ckpt: Checkpoint) -> bool:
    return bool(getattr(ckpt.model, "self_attention", False))


def _block_batches(ckpt: Checkpoint, split: TokenSplit, batch_size: int, rank: int = 0, world: int = 1,
                   units: _Units | None = None):
    """``(inputs, targets, start, units)`` (B, block), (B, block), (B,), (B, block) of the blocks a Transformer
    reads rank ``rank``'s share of ``split`` in: each document (running text) or each sentence (sentence context)
    from ``<s>``, cut in blocks of ``block`` tokens from its start, each block read from scratch
    (:mod:`vizlm.models.transformer`): the weights of the blocks are those of the whole text read at once.
    ``start``: where a block starts in its text; ``units``: each target's group (:class:`_Units`). Right-padded
    with target 0."""
    W = ckpt.model.config.block
    units = units or _Units.of(split)
    done = 0
    for chunk in split.chunks():
        data = split.read(chunk)
        group = units.tokens(chunk, data)
        if _reads_documents(ckpt):
            inputs, starts = data.running_inputs(), data.documents[:, 1]
            pieces = [(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]
        else:
            inputs = data.running_inputs()
            inputs[data.offsets[:-1]] = Vocab.bos_id  # every sentence from <s>
            pieces = [(int(a), int(b)) for a, b in zip(data.offsets[:-1], data.offsets[1:]) if b - a > 1]
        first, done = done, done + len(pieces)
        blocks = [(k, min(k + W, b), k - a) for j in shard(len(pieces), (rank - first) % world, world)
                  for a, b in [pieces[j]] for k in range(a, b, W)]
        for i in range(0, len(blocks), batch_size):
            part = blocks[i : i + batch_size]
            x = torch.zeros(len(part), W, dtype=torch.long)
            y = torch.zeros(len(part), W, dtype=torch.long)
            u = torch.zeros(len(part), W, dtype=torch.long)
            for r, (a, b, _) in enumerate(part):
                x[r, : b - a] = torch.from_numpy(inputs[a:b])
                y[r, : b - a] = torch.from_numpy(data.tokens[a:b].astype(np.int64))
                u[r, : b - a] = torch.from_numpy(group[a:b])
            yield x, y, torch.tensor([k for _, _, k in part]), u


@torch.no_grad()
def _self_attention_sums(model, batches, window: int, tick, groups: int) -> np.ndarray:
    """:func:`_position_sums` of a Transformer, each layer's (the mean over its heads): (groups, layers, F). Offset
    ``k`` (0-based) of the per-offset sums is ``k`` words back from the word just read, the word itself at 0
    (distance ``k + 1``, :func:`vizlm.inspect.analysis.distance`); it exists where that word is in the text, and
    a word of an earlier block has weight 0 (a block reads nothing before it), as a word beyond a recurrent
    model's window does. No effects."""
    at = _layout(window)
    device = next(model.parameters()).device
    acc = torch.zeros(groups, model.config.layers, at["peak"].stop, dtype=torch.float64, device=device)
    for inputs, targets, start, units in batches:
        inputs, targets, start = inputs.to(device), targets.to(device), start.to(device)
        att = model.encode_with_attention(inputs)[1].double().mean(2)  # (B, L, T, T) each layer's mean over heads
        att = att.transpose(1, 2)  # (B, T, L, T)
        B, T, L, _ = att.shape
        real = targets != 0  # (B, T)
        r = real.double()[..., None]  # (B, T, 1): the same for every layer
        slot = torch.arange(T, device=device)[:, None] - torch.arange(window, device=device)[None, :]  # (T, window)
        exists = (start[:, None, None] + slot[None]) >= 0  # (B, T, window) the word is in the text
        m = (exists & real[..., None]).double()[:, :, None]  # (B, T, 1, window)
        index = slot.clamp_min(0)[None, :, None].expand(B, T, L, window)
        w = att.gather(3, index) * (slot >= 0)[None, :, None]  # (B, T, L, window) 0: a word of an earlier block
        causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
        ent = attention_entropy(att.transpose(1, 2).reshape(B * L, T, T), causal).reshape(B, L, T).transpose(1, 2)
        zeros = torch.zeros(B, T, L, window, dtype=torch.float64, device=device)
        per_target = [
            w * m, w * w * m, m.expand(B, T, L, window), zeros, zeros,
            (ent * r)[..., None], ((1 - (w * m).sum(-1)) * r)[..., None], r.expand(B, T, L)[..., None],
            *[torch.zeros(B, T, L, 1, dtype=torch.float64, device=device)] * 3,
            (att.max(-1).values * r)[..., None],
        ]
        _add_units(acc, units, torch.cat(per_target, -1))
        tick()
    return acc.cpu().numpy()


_SUMS_PER_OFFSET = ("total", "total_sq", "count", "eff", "eff_sq")


def _narrow(sums: np.ndarray, wide: int, window: int) -> np.ndarray:
    """The sums of :func:`_position_sums` (..., F) at ``window`` from those at a ``wide``r one: the offsets'
    sums are the same, and the weight beyond ``window`` gains what offsets window+1..wide held."""
    if wide == window:
        return sums
    a, b = _layout(wide), _layout(window)
    out = np.zeros((*sums.shape[:-1], b["peak"].stop), dtype=np.float64)
    for name, part in b.items():
        out[..., part] = sums[..., a[name]][..., :window] if name in _SUMS_PER_OFFSET else sums[..., a[name]]
    out[..., b["beyond"]] += sums[..., a["total"]][..., window:].sum(-1, keepdims=True)
    return out


def _positions_cached(parts_of: Callable[[int, bool], dict], window: int, effects: bool,
                      compute: Callable[[], tuple[np.ndarray | None, str]], enabled: bool) -> dict:
    """One model's :func:`_position_stats` ({} without attention): from stored sums at ``window`` or
    a wider one up to :data:`MAX_WINDOW` (those with effects serve a request without), else
    ``compute()``d (the sums and what they resample) and stored. ``parts_of(window, effects)``: the cache key."""
    if enabled:
        for wide in range(window, max(window, MAX_WINDOW) + 1):
            for eff in (True,) if effects else (False, True):
                value = lookup(parts_of(wide, eff))
                if isinstance(value, dict) and value.get("window") == wide and (
                        value.get("sums") is None or np.shape(value["sums"])[-1] == _layout(wide)["peak"].stop):
                    return _stats_from(value, window, effects)
    sums, resampled = compute()
    value = {"window": window, "resampled": resampled, "sums": None if sums is None else sums.tolist()}
    if enabled:
        store(parts_of(window, effects), value)
    return _stats_from(value, window, effects)


def _stats_from(value: dict, window: int, effects: bool) -> dict:
    """One model's statistics ({} without attention); a Transformer's: ``{"layers": [each layer's]}``, offsets
    counted from the word just read (0)."""
    if value["sums"] is None:
        return {}
    sums = np.asarray(value["sums"], dtype=np.float64)
    sums = _narrow(sums, value["window"], window)
    if sums.ndim == 3:  # self-attention: (units, layers, F)
        return {"layers": [{**_position_stats(sums[:, k], window, value["resampled"], False),
                            "offset": list(range(window))} for k in range(sums.shape[1])]}
    return _position_stats(sums, window, value["resampled"], effects)


def _position_stats(sums: np.ndarray, window: int, resampled: str, effects: bool = True) -> dict:
    """Means and 95% intervals from :func:`_position_sums` (units, F): a bootstrap over the units (``resampled``),
    or, with one unit (a single sentence), a normal interval over its words (``resampled``: "words")."""
    at = _layout(window)
    total = sums.sum(0)
    count = total[at["count"]]
    rows = float(total[at["rows"]][0])
    units = int((sums[:, at["rows"]][:, 0] > 0).sum())
    resampled = resampled if units >= 2 else "words"

    def band(s: slice, sq: slice) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # mean and its 95% interval
        mean = total[s] / np.maximum(count, 1)
        if units >= 2:
            _, lo, hi = cluster_means(sums[:, s], sums[:, at["count"]])
        else:
            std = np.sqrt(np.maximum(total[sq] / np.maximum(count, 1) - mean**2, 0))
            lo, hi = mean - 1.96 * std / np.sqrt(np.maximum(count, 1)), mean + 1.96 * std / np.sqrt(np.maximum(count, 1))
        return mean, np.where(count > 0, lo, mean), np.where(count > 0, hi, mean)

    mean, lo, hi = band(at["total"], at["total_sq"])
    res = {
        "offset": list(range(1, window + 1)), "mean": mean.tolist(), "lo": lo.tolist(),
        "hi": hi.tolist(), "count": count.astype(np.int64).tolist(),
        **{name: float(total[at[key]][0]) / max(rows, 1)
           for name, key in (("entropy", "ent"), ("beyond", "beyond"), ("peak", "peak"))},
        "units": {"resampled": resampled, "read": units, "total": sums[:, at["total"]], "count": sums[:, at["count"]]},
    }
    if effects:
        e_mean, e_lo, e_hi = band(at["eff"], at["eff_sq"])
        read_sum, read_abs, read_big = (float(total[at[k]][0]) for k in ("read_sum", "read_abs", "read_big"))
        res |= {"effect": e_mean.tolist(), "effect_lo": e_lo.tolist(), "effect_hi": e_hi.tolist(),
                "read": {"tokens": int(rows), "mean_read_bits": read_sum / max(rows, 1),
                         "mean_abs_read_bits": read_abs / max(rows, 1), "share_over_1_bit": read_big / max(rows, 1)}}
    return res


def _split_batches(split: TokenSplit, batch_size: int, rank: int, world: int, units: _Units | None = None):
    """Rank ``rank``'s length-bucketed batches of the non-empty sentences of ``split``, a chunk at a time (as
    :func:`vizlm.data.batches.iter_batches` batches them, for a split of one chunk): ``(inputs, targets, units)``, ``units`` the
    group of every target (:class:`_Units`)."""
    units = units or _Units.of(split)
    done = 0
    for chunk in split.chunks():
        data = split.read(chunk)
        group = units.tokens(chunk, data)
        lengths = data.lengths()
        keep = [i for i, n in enumerate(lengths) if n]
        batches = plan_batches([lengths[i] for i in keep], batch_size)
        first, done = done, done + len(batches)
        for j in shard(len(batches), (rank - first) % world, world):
            idx = [keep[i] for i in batches[j]]
            inputs, targets = data.collate(idx)
            yield inputs, targets, torch.from_numpy(group[data.offsets[idx]])[:, None].expand_as(targets)


def _split_segments(split: TokenSplit, rank: int, world: int, units: _Units):
    """:func:`vizlm.modeling.evaluate.split_segments` of ``split`` at the statistics' streams and segment length,
    each segment with the group of every target (B, T) (:class:`_Units`)."""
    for chunk, data, mine in document_shares(split, rank, world):
        group = units.tokens(chunk, data)
        group = np.concatenate([group[data.documents[d, 1] : data.documents[d + 1, 1]] for d in mine])
        for seg in chunk_segments(data.select_documents(mine), DOC_STREAMS, DOC_SEGMENT):
            yield seg, torch.from_numpy(group[seg.positions.clamp_min(0).numpy()])


def _reads_documents(ckpt: Checkpoint) -> bool:
    return ckpt.model.config.context == "document"


def _position_parts(ckpt: Checkpoint, corpus_checksum: str | None, window: int, effects: bool) -> dict:
    """The cache key of one model's position statistics (a document model's read as running text)."""
    parts = {"kind": "positions", "version": POSITIONS_VERSION, "checkpoint": checkpoint_digest(ckpt),
             "corpus": corpus_checksum, "window": window, "effects": effects}
    if _reads_documents(ckpt):
        parts["context"] = "document"
    return parts


def _progress(total: int, progress: Progress):
    """A ``tick()`` that reports ``done / total`` to ``progress``."""
    done = [0]

    def tick():
        done[0] += 1
        if progress:
            progress(min(1.0, done[0] / max(total, 1)))

    return tick


def layer_label(model: str, layer: int) -> str:
    """How the position statistics name a Transformer's layer ``layer`` (counted from 0): ``"name · layer 1"``."""
    return f"{model} · layer {layer + 1}"


def _collect(results: list[tuple[Checkpoint, dict]], window: int) -> PositionStats:
    """:class:`PositionStats` of every model's :func:`_position_stats` ({} for a model without attention)."""
    frames, entropy, beyond, peak, skipped, read, units = [], {}, {}, {}, [], {}, {}
    for ckpt, whole in results:
        if not whole:
            skipped.append(ckpt.label)
            continue
        layers = whole.get("layers")
        for label, res in ([(ckpt.label, whole)] if layers is None else
                           [(layer_label(ckpt.label, k), res) for k, res in enumerate(layers)]):
            nan = [math.nan] * window
            frames.append(pd.DataFrame({"model": label, **{k: res.get(k, nan) for k in POSITION_COLUMNS[1:]}}))
            entropy[label], beyond[label], peak[label], units[label] = (res["entropy"], res["beyond"], res["peak"],
                                                                        res["units"])
            if "read" in res:
                read[label] = res["read"]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=POSITION_COLUMNS)
    return PositionStats(frame, entropy, beyond, peak, skipped, read, units=units)


def _split_sums(ckpt: Checkpoint, split: TokenSplit, window: int, tick, effects: bool, batch_size: int,
                ctx: Context = SINGLE, documents: bool = True) -> tuple[np.ndarray | None, str]:
    """``(sums, what they resample)`` of one model over ``split`` (:func:`_position_sums`, a Transformer's
    :func:`_self_attention_sums`; None without attention), each rank of ``ctx`` reading its share and the sums
    added. ``documents``: the split's documents are the text's (a document model reads them as running text);
    False: they are its sentences, each held as a document of its own, and a document model reads each alone."""
    units = _Units.of(split, documents)
    if _self_attending(ckpt):
        batches = _block_batches(ckpt, split, batch_size, ctx.rank, ctx.world_size, units)
        return ctx.sum_array(_self_attention_sums(ckpt.model, batches, window, tick, units.groups)), units.resampled
    if not ckpt.has_attention:
        return None, units.resampled
    if _reads_documents(ckpt) and documents:
        reads = _document_reads(ckpt.model, _split_segments(split, ctx.rank, ctx.world_size, units))
    else:
        reads = _sentence_reads(ckpt.model, _split_batches(split, batch_size, ctx.rank, ctx.world_size, units))
    sums = _position_sums(ckpt, reads, window, tick, units.groups, effects)
    return (None if sums is None else ctx.sum_array(sums)), units.resampled


def attention_by_position(ckpts: list[Checkpoint], sentences: list[list[str]], window: int = 10,
                          batch_size: int = 128, progress: Progress = None, corpus_checksum: str | None = None,
                          use_cache: bool = True, effects: bool = True, ids: list[str] | None = None) -> PositionStats:
    """Average attention by relative position for every attention model in ``ckpts``; with
    ``effects``, the average slot effect at each position too (NaN without) and the read effects.

    Each model reads ``sentences`` in its context: given their ``ids`` (``document:index``), a
    document model reads the documents as running text (its offsets reach across sentence
    boundaries, up to its own window), otherwise every sentence alone. The intervals resample the
    documents the ``ids`` name (the sentences, in a text of one document or without ``ids``)."""
    if window < 1:
        raise ValueError("window must be >= 1")
    keep = [i for i, s in enumerate(sentences) if s]
    sents = [sentences[i] for i in keep]
    sizes = document_sizes([ids[i] for i in keep]) if ids is not None else None
    tick = _progress(math.ceil(len(sents) / batch_size) * len(ckpts), progress)

    def compute(ckpt: Checkpoint) -> tuple[np.ndarray | None, str]:
        split = TokenSplit.from_sequences(encode_sentences(sents, ckpt.vocab), sizes)
        return _split_sums(ckpt, split, window, tick, effects, batch_size, documents=sizes is not None)

    return _collect([(c, _positions_cached(lambda w, e, c=c: _position_parts(c, corpus_checksum, w, e), window, effects,
                                           lambda c=c: compute(c), use_cache and corpus_checksum is not None))
                     for c in ckpts], window)


def positions_corpus(ckpts: list[Checkpoint], corpus: str, split: str, window: int = 10,
                     progress: Progress = None, use_cache: bool = True, effects: bool = True, ctx: Context = SINGLE,
                     batch_size: int = 128, sentences: int | None = None) -> PositionStats:
    """:func:`attention_by_position` over a processed split, cached; the split is read a chunk at
    a time, each rank of ``ctx`` reading its share of the batches (the sums add up over ranks), a
    document model its share of the documents as running text. ``sentences``: only the split's
    first sentences (what a dry run's metrics cover). The intervals resample the split's documents."""
    if window < 1:
        raise ValueError("window must be >= 1")
    splits = [open_split(corpus, split, ckpt.vocab) for ckpt in ckpts]
    if sentences is not None:
        splits = [sp.head(sentences) for sp in splits]
    tick = _progress(sum(math.ceil(len(sp) / batch_size / ctx.world_size) for sp, c in zip(splits, ckpts)
                         if c.has_attention or _self_attending(c)), progress)

    def parts(ckpt: Checkpoint, sp: TokenSplit, wide: int, eff: bool) -> dict:
        key = _position_parts(ckpt, sp.checksum, wide, eff)
        return key if sentences is None else {**key, "sentences": sentences}

    return _collect([(c, _positions_cached(lambda w, e, c=c, sp=sp: parts(c, sp, w, e), window, effects,
                                           lambda c=c, sp=sp: _split_sums(c, sp, window, tick, effects, batch_size, ctx),
                                           use_cache and not ctx.distributed))
                     for c, sp in zip(ckpts, splits)], window)


def sentence_positions(sa, window: int = 10) -> pd.DataFrame:
    """Per-text view: weight (and slot effect in bits, NaN if not computed) at offsets 1..L (self-attention: 0..L-1,
    the head shown) for every target of one analysis, in the model's reading (:meth:`~vizlm.inspect.analysis.SentenceAnalysis.slot_offsets`:
    a sentence read alone counts back to its own start slot, running text across sentences)."""
    columns = ["target", "word", "offset", "weight", "effect", "attended"]
    if sa.attention is None:
        return pd.DataFrame(columns=columns)
    offsets = sa.slot_offsets()  # (T, S)
    lo = sa.shift  # the newest memory slot, or with self-attention the word just read (0)
    rows, slots = np.nonzero(sa.readable() & (offsets >= lo) & (offsets < lo + window))
    order = np.lexsort((offsets[rows, slots], rows))  # by row, then offset
    rows, slots = rows[order], slots[order]
    labels = sa.slot_labels
    effects = sa.slot_effect_bits
    return pd.DataFrame({
        "target": rows, "word": [sa.targets[r] for r in rows], "offset": offsets[rows, slots],
        "weight": sa.attention[rows, slots],
        "effect": np.full(len(rows), math.nan) if effects is None else effects[rows, slots],
        "attended": [labels[j] for j in slots],
    }, columns=columns)
