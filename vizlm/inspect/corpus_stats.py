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
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from vizlm.inspect.cache import cached, checkpoint_digest, lookup, store
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.data.batches import document_batches, iter_batches, plan_batches, split_documents
from vizlm.data.folder import document_sizes
from vizlm.data.registry import split_texts
from vizlm.data.vocab import Vocab, encode_sentences
from vizlm.core.distributed import SINGLE, Context, shard
from vizlm.modeling.evaluate import OVERFLOW_NOTE, perplexity, read_documents, score, sentence_nll_split, split_segments
from vizlm.models import effects as fx
from vizlm.models.base import attention_entropy
from vizlm.data.tokens import TokenSplit, open_split

Progress = Callable[[float], None] | None
LN2 = math.log(2)
# in the cache key: 2 added the effects, 3 the mean largest weight of a row, 4 stores the sums (any narrower window)
POSITIONS_VERSION = 4
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
    mean slot effect there (bits: log2 P(target) minus the same with that slot dropped)."""

    frame: pd.DataFrame  # POSITION_COLUMNS: model, offset, mean, lo, hi, count, effect, effect_lo, effect_hi
    entropy: dict[str, float]  # mean attention entropy (nats) per model
    beyond: dict[str, float]  # mean weight on slots more than L back
    peak: dict[str, float]  # mean largest weight of a row: how selective the rows are
    skipped: list[str] = field(default_factory=list)  # models without attention
    # per model: tokens, mean_read_bits, mean_abs_read_bits, share_over_1_bit (|read effect| > 1 bit)
    effects: dict[str, dict] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # models whose reading failed (a plugin's), and why

    def to_dict(self) -> dict:
        return {"positions": self.frame.to_dict("records"), "entropy": self.entropy, "beyond_window": self.beyond,
                "largest_weight": self.peak, "skipped": self.skipped, "effects": self.effects, "failed": self.failed}

    @classmethod
    def merge(cls, parts: list[PositionStats], failed: dict[str, str] | None = None) -> PositionStats:
        """The statistics of several models computed apart, as one (the models in the order of ``parts``)."""
        frames = [p.frame for p in parts if not p.frame.empty]
        return cls(pd.concat(frames, ignore_index=True) if frames else (parts[0].frame if parts else
                                                                         pd.DataFrame(columns=POSITION_COLUMNS)),
                   {k: v for p in parts for k, v in p.entropy.items()}, {k: v for p in parts for k, v in p.beyond.items()},
                   {k: v for p in parts for k, v in p.peak.items()}, [n for p in parts for n in p.skipped],
                   {k: v for p in parts for k, v in p.effects.items()}, dict(failed or {}))


def offset_slots(T: int, window: int, carried: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Slot index of offset ``d`` (1..L) for every row of a segment read after ``carried`` memory slots
    (1: a sentence from a zero state), and whether that slot exists: (T, L) each."""
    rows = torch.arange(T)[:, None]
    d = torch.arange(1, window + 1)[None, :]
    slot = rows + carried - d  # offset 1 is slot carried - 1 + r, the newest memory entry
    return slot.clamp_min(0), slot >= 0


# The sums of one model's position statistics, in one float64 array that adds up over chunks and
# ranks: total, total of squares and count of the weight at offsets 1..L; total and total of squares
# of the slot effect (bits); entropy, beyond-window weight, rows; read-effect sum, |sum|, > 1 bit;
# largest weight of a row.
def _layout(window: int) -> dict[str, slice]:
    L = window
    names = ["total", "total_sq", "count", "eff", "eff_sq"]
    out = {n: slice(k * L, (k + 1) * L) for k, n in enumerate(names)}
    for k, n in enumerate(["ent", "beyond", "rows", "read_sum", "read_abs", "read_big", "peak"]):
        out[n] = slice(5 * L + k, 5 * L + k + 1)
    return out


@torch.no_grad()
def _position_sums(ckpt: Checkpoint, reads, window: int, tick, effects: bool = True) -> np.ndarray | None:
    """The summed statistics of :func:`_layout` over ``reads``, ``(output, targets (B, T), state)`` of
    a forward pass each (``state``: the carried memory a document segment was read after, None for
    sentences read from a zero state); None for a model without attention. Offset ``d`` of a row is
    the slot ``d`` steps back in the model's memory, across sentence boundaries in running text; it
    exists where the slot is a real position (not before the text, not padding of a carried memory)."""
    model = ckpt.model
    at = _layout(window)
    sums = np.zeros(at["peak"].stop, dtype=np.float64)
    for out, targets, state in reads:
        if out.attention is None:
            return None
        device = targets.device
        att = out.attention.double()  # (B, T, S)
        B, T, S = att.shape
        carried = S - T + 1  # memory slots carried into the segment (1: the start slot of a sentence)
        real = targets != 0  # (B, T)
        slot, exists = offset_slots(T, window, carried)  # (T, L)
        slot, exists = slot.to(device), exists.to(device)
        if state is not None:  # (B, T, L): the carried slots before a stream's document start are padding
            exists = exists[None] & (slot[None] >= (carried - state.valid)[:, None, None])
        m = (exists & real[..., None]).double()  # (B, T, L)
        if effects:
            back = torch.arange(T, device=device)[:, None] + (carried - 1) - torch.arange(S, device=device)[None, :]
            select = ((back >= 0) & (back < window))[None] & real[..., None]  # (B, T, S) offsets 1..L, real rows
            memory, valid = (None, None) if state is None else (state.memory, state.valid)
            read, e = fx.attention_effects(model, out.hidden, targets, out=out, select=select, memory=memory,
                                           valid=valid)  # (B, T), (B, T, S) nats
            read = read.double() / LN2  # bits
            sums[at["read_sum"]] += float((read * real).sum())
            sums[at["read_abs"]] += float((read.abs() * real).sum())
            sums[at["read_big"]] += float(((read.abs() > 1) & real).sum())
            e = e.double().gather(2, slot.expand(B, T, window)) / LN2  # (B, T, L) bits
            sums[at["eff"]] += (e * m).sum((0, 1)).cpu().numpy()
            sums[at["eff_sq"]] += (e * e * m).sum((0, 1)).cpu().numpy()
        w = att.gather(2, slot.expand(B, T, window))  # (B, T, L)
        sums[at["total"]] += (w * m).sum((0, 1)).cpu().numpy()
        sums[at["total_sq"]] += (w * w * m).sum((0, 1)).cpu().numpy()
        sums[at["count"]] += m.sum((0, 1)).cpu().numpy()
        allowed = model.allowed_slots(T, state, device)  # (T, S) or (B, T, S)
        sums[at["ent"]] += float((attention_entropy(att, allowed) * real).sum())
        sums[at["beyond"]] += float(((1 - (w * m).sum(-1)) * real).sum())
        sums[at["rows"]] += float(real.sum())
        sums[at["peak"]] += float((att.max(-1).values * real).sum())
        tick()
    return sums


def _sentence_reads(model, batches):
    """``(output, targets, None)`` of sentence batches ``(inputs, targets)`` read from a zero state."""
    device = next(model.parameters()).device
    for inputs, targets in batches:
        yield model(inputs.to(device)), targets.to(device), None


def _document_reads(model, segments):
    """``(output, targets, state)`` of document segments read as running text (:func:`read_documents`)."""
    device = next(model.parameters()).device
    for seg, out, state in read_documents(model, segments):
        yield out, seg.targets.to(device), state


def _self_attending(ckpt: Checkpoint) -> bool:
    return bool(getattr(ckpt.model, "self_attention", False))


def _block_batches(ckpt: Checkpoint, split: TokenSplit, batch_size: int, rank: int = 0, world: int = 1):
    """``(inputs, targets, start)`` (B, block), (B, block), (B,) of the blocks a Transformer reads rank ``rank``'s share
    of ``split`` in: each document (running text) or each sentence (sentence context) from ``<s>``, cut in blocks
    of ``block`` tokens from its start, each block read from scratch (:mod:`vizlm.models.transformer`): the
    weights of the blocks are those of the whole text read at once. ``start``: where a block starts in its text.
    Right-padded with target 0."""
    W = ckpt.model.config.block
    done = 0
    for chunk in split.chunks():
        data = split.read(chunk)
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
            for r, (a, b, _) in enumerate(part):
                x[r, : b - a] = torch.from_numpy(inputs[a:b])
                y[r, : b - a] = torch.from_numpy(data.tokens[a:b].astype(np.int64))
            yield x, y, torch.tensor([k for _, _, k in part])


@torch.no_grad()
def _self_attention_sums(model, batches, window: int, tick) -> np.ndarray:
    """:func:`_position_sums` of a Transformer, one row per layer (its mean over heads): (layers, sums). Offset
    ``k`` (0-based) of the per-offset sums is ``k`` words back from the word just read, the word itself at 0
    (distance ``k + 1``, :func:`vizlm.inspect.analysis.distance`); it exists where that word is in the text, and
    a word of an earlier block has weight 0 (a block reads nothing before it), as a word beyond a recurrent
    model's window does. No effects."""
    at = _layout(window)
    device = next(model.parameters()).device
    sums = np.zeros((model.config.layers, at["peak"].stop), dtype=np.float64)
    for inputs, targets, start in batches:
        inputs, targets, start = inputs.to(device), targets.to(device), start.to(device)
        att = model.encode_with_attention(inputs)[1].double().mean(2)  # (B, L, T, T) each layer's mean over heads
        B, L, T, _ = att.shape
        real = (targets != 0)[:, None, :]  # (B, 1, T)
        slot = torch.arange(T, device=device)[:, None] - torch.arange(window, device=device)[None, :]  # (T, window)
        exists = (start[:, None, None] + slot[None]) >= 0  # (B, T, window) the word is in the text
        m = (exists[:, None] & real[..., None]).double()  # (B, 1, T, window)
        w = att.gather(3, slot.clamp_min(0).expand(B, L, T, window)) * (slot >= 0)  # (B, L, T, window) 0: earlier block
        causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
        sums[:, at["total"]] += (w * m).sum((0, 2)).cpu().numpy()
        sums[:, at["total_sq"]] += (w * w * m).sum((0, 2)).cpu().numpy()
        sums[:, at["count"]] += m.sum((0, 2)).expand(L, window).cpu().numpy()  # the same for every layer
        ent = attention_entropy(att.reshape(B * L, T, T), causal).reshape(B, L, T)
        sums[:, at["ent"]] += (ent * real).sum((0, 2)).cpu().numpy()[:, None]
        sums[:, at["beyond"]] += ((1 - (w * m).sum(-1)) * real).sum((0, 2)).cpu().numpy()[:, None]
        sums[:, at["rows"]] += float(real.sum())
        sums[:, at["peak"]] += (att.max(-1).values * real).sum((0, 2)).cpu().numpy()[:, None]
        tick()
    return sums


_SUMS_PER_OFFSET = ("total", "total_sq", "count", "eff", "eff_sq")


def _narrow(sums: np.ndarray, wide: int, window: int) -> np.ndarray:
    """The sums of :func:`_position_sums` at ``window`` from those at a ``wide``r one: the offsets'
    sums are the same, and the weight beyond ``window`` gains what offsets window+1..wide held."""
    if wide == window:
        return sums
    a, b = _layout(wide), _layout(window)
    out = np.zeros(b["peak"].stop, dtype=np.float64)
    for name, part in b.items():
        out[part] = sums[a[name]][: window] if name in _SUMS_PER_OFFSET else sums[a[name]]
    out[b["beyond"]] += sums[a["total"]][window:].sum()
    return out


def _positions_cached(parts_of: Callable[[int, bool], dict], window: int, effects: bool,
                      compute: Callable[[], np.ndarray | None], enabled: bool) -> dict:
    """One model's :func:`_position_stats` ({} without attention): from stored sums at ``window`` or
    a wider one up to :data:`MAX_WINDOW` (those with effects serve a request without), else
    ``compute()``d and stored. ``parts_of(window, effects)``: the cache key."""
    if enabled:
        for wide in range(window, max(window, MAX_WINDOW) + 1):
            for eff in (True,) if effects else (False, True):
                value = lookup(parts_of(wide, eff))
                if isinstance(value, dict) and value.get("window") == wide and (
                        value.get("sums") is None or np.shape(value["sums"])[-1] == _layout(wide)["peak"].stop):
                    return _stats_from(value, window, effects)
    sums = compute()
    value = {"window": window, "sums": None if sums is None else sums.tolist()}
    if enabled:
        store(parts_of(window, effects), value)
    return _stats_from(value, window, effects)


def _stats_from(value: dict, window: int, effects: bool) -> dict:
    """One model's statistics ({} without attention); a Transformer's: ``{"layers": [each layer's]}``, offsets
    counted from the word just read (0)."""
    if value["sums"] is None:
        return {}
    sums = np.asarray(value["sums"], dtype=np.float64)
    if sums.ndim == 2:  # self-attention, a row per layer
        return {"layers": [{**_position_stats(_narrow(row, value["window"], window), window, False),
                            "offset": list(range(window))} for row in sums]}
    return _position_stats(_narrow(sums, value["window"], window), window, effects)


def _position_stats(sums: np.ndarray, window: int, effects: bool = True) -> dict:
    """Means and 95% confidence bands from :func:`_position_sums`."""
    at = _layout(window)
    count = torch.from_numpy(sums[at["count"]])
    rows = float(sums[at["rows"]][0])

    def band(s, sq):  # mean and 95% confidence interval of the mean
        s, sq = torch.from_numpy(sums[s]), torch.from_numpy(sums[sq])
        mean = s / count.clamp_min(1)
        std = (sq / count.clamp_min(1) - mean**2).clamp_min(0).sqrt()
        half = 1.96 * std / count.clamp_min(1).sqrt()
        return mean, mean - half, mean + half

    mean, lo, hi = band(at["total"], at["total_sq"])
    res = {
        "offset": list(range(1, window + 1)), "mean": mean.tolist(), "lo": lo.tolist(),
        "hi": hi.tolist(), "count": count.long().tolist(),
        **{name: float(sums[at[key]][0]) / max(rows, 1)
           for name, key in (("entropy", "ent"), ("beyond", "beyond"), ("peak", "peak"))},
    }
    if effects:
        e_mean, e_lo, e_hi = band(at["eff"], at["eff_sq"])
        read_sum, read_abs, read_big = (float(sums[at[k]][0]) for k in ("read_sum", "read_abs", "read_big"))
        res |= {"effect": e_mean.tolist(), "effect_lo": e_lo.tolist(), "effect_hi": e_hi.tolist(),
                "read": {"tokens": int(rows), "mean_read_bits": read_sum / max(rows, 1),
                         "mean_abs_read_bits": read_abs / max(rows, 1), "share_over_1_bit": read_big / max(rows, 1)}}
    return res


def _split_batches(split: TokenSplit, batch_size: int, rank: int, world: int):
    """Rank ``rank``'s length-bucketed batches of the non-empty sentences of ``split``, a chunk
    at a time (as :func:`iter_batches` batches them, for a split of one chunk)."""
    done = 0
    for chunk in split.chunks():
        data = split.read(chunk)
        lengths = data.lengths()
        keep = [i for i, n in enumerate(lengths) if n]
        batches = plan_batches([lengths[i] for i in keep], batch_size)
        first, done = done, done + len(batches)
        for j in shard(len(batches), (rank - first) % world, world):
            yield data.collate([keep[i] for i in batches[j]])


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
    frames, entropy, beyond, peak, skipped, read = [], {}, {}, {}, [], {}
    for ckpt, whole in results:
        if not whole:
            skipped.append(ckpt.label)
            continue
        layers = whole.get("layers")
        for label, res in ([(ckpt.label, whole)] if layers is None else
                           [(layer_label(ckpt.label, k), res) for k, res in enumerate(layers)]):
            nan = [math.nan] * window
            frames.append(pd.DataFrame({"model": label, **{k: res.get(k, nan) for k in POSITION_COLUMNS[1:]}}))
            entropy[label], beyond[label], peak[label] = res["entropy"], res["beyond"], res["peak"]
            if "read" in res:
                read[label] = res["read"]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=POSITION_COLUMNS)
    return PositionStats(frame, entropy, beyond, peak, skipped, read)


def attention_by_position(ckpts: list[Checkpoint], sentences: list[list[str]], window: int = 10,
                          batch_size: int = 128, progress: Progress = None, corpus_checksum: str | None = None,
                          use_cache: bool = True, effects: bool = True, ids: list[str] | None = None) -> PositionStats:
    """Average attention by relative position for every attention model in ``ckpts``; with
    ``effects``, the average slot effect at each position too (NaN without) and the read effects.

    Each model reads ``sentences`` in its context: given their ``ids`` (``document:index``), a
    document model reads the documents as running text (its offsets reach across sentence
    boundaries, up to its own window), otherwise every sentence alone."""
    if window < 1:
        raise ValueError("window must be >= 1")
    keep = [i for i, s in enumerate(sentences) if s]
    sents = [sentences[i] for i in keep]
    sizes = document_sizes([ids[i] for i in keep]) if ids is not None else None
    tick = _progress(math.ceil(len(sents) / batch_size) * len(ckpts), progress)

    def compute(ckpt: Checkpoint) -> np.ndarray | None:
        seqs = encode_sentences(sents, ckpt.vocab)
        if _self_attending(ckpt):
            split = TokenSplit.from_sequences(seqs, sizes if _reads_documents(ckpt) else None)
            return _self_attention_sums(ckpt.model, _block_batches(ckpt, split, batch_size), window, tick)
        if _reads_documents(ckpt) and sizes is not None:
            docs = split_documents(seqs, sizes)
            reads = _document_reads(ckpt.model, document_batches(docs, DOC_STREAMS, DOC_SEGMENT))
        else:
            reads = _sentence_reads(ckpt.model, (b[1:] for b in iter_batches(seqs, batch_size)))
        return _position_sums(ckpt, reads, window, tick, effects)

    return _collect([(c, _positions_cached(lambda w, e, c=c: _position_parts(c, corpus_checksum, w, e), window, effects,
                                           lambda c=c: compute(c), use_cache and corpus_checksum is not None))
                     for c in ckpts], window)


def positions_corpus(ckpts: list[Checkpoint], corpus: str, split: str, window: int = 10,
                     progress: Progress = None, use_cache: bool = True, effects: bool = True, ctx: Context = SINGLE,
                     batch_size: int = 128, sentences: int | None = None) -> PositionStats:
    """:func:`attention_by_position` over a processed split, cached; the split is read a chunk at
    a time, each rank of ``ctx`` reading its share of the batches (the sums add up over ranks), a
    document model its share of the documents as running text. ``sentences``: only the split's
    first sentences (what a dry run's metrics cover)."""
    if window < 1:
        raise ValueError("window must be >= 1")
    splits = [open_split(corpus, split, ckpt.vocab) for ckpt in ckpts]
    if sentences is not None:
        splits = [sp.head(sentences) for sp in splits]
    tick = _progress(sum(math.ceil(len(sp) / batch_size / ctx.world_size) for sp, c in zip(splits, ckpts)
                         if c.has_attention or _self_attending(c)), progress)

    def compute(ckpt: Checkpoint, sp: TokenSplit) -> np.ndarray | None:
        if _self_attending(ckpt):
            batches = _block_batches(ckpt, sp, batch_size, ctx.rank, ctx.world_size)
            return ctx.sum_array(_self_attention_sums(ckpt.model, batches, window, tick))
        if not ckpt.has_attention:
            return None
        if _reads_documents(ckpt):
            reads = _document_reads(ckpt.model, split_segments(sp, ctx.rank, ctx.world_size, DOC_STREAMS, DOC_SEGMENT))
        else:
            reads = _sentence_reads(ckpt.model, _split_batches(sp, batch_size, ctx.rank, ctx.world_size))
        return ctx.sum_array(_position_sums(ckpt, reads, window, tick, effects))

    def parts(ckpt: Checkpoint, sp: TokenSplit, wide: int, eff: bool) -> dict:
        key = _position_parts(ckpt, sp.checksum, wide, eff)
        return key if sentences is None else {**key, "sentences": sentences}

    return _collect([(c, _positions_cached(lambda w, e, c=c, sp=sp: parts(c, sp, w, e), window, effects,
                                           lambda c=c, sp=sp: compute(c, sp), use_cache and not ctx.distributed))
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
