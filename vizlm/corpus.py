"""Corpus-level statistics: per-sentence perplexity comparison of two models, and
average attention by relative position (Daniluk et al., Fig. 3) next to the average
effect of the slot at that position and the share of words the attention read moves
by more than 1 bit (:mod:`vizlm.models.effects`).

Both run batched forward passes over length buckets and are cached on disk
(:mod:`vizlm.cache`) keyed by the checkpoints' weights and the corpus checksum.

Over a processed split (:func:`compare_corpus`, :func:`positions_corpus`) the forward passes
read the split a chunk at a time (:mod:`vizlm.tokens`; from its token-id files when it has
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

from vizlm.cache import cached, checkpoint_digest
from vizlm.checkpoint import Checkpoint
from vizlm.data import document_sizes, encode_sentences, iter_batches, plan_batches, split_texts
from vizlm.distributed import SINGLE, Context, shard
from vizlm.evaluate import score, sentence_nll_split
from vizlm.models import effects as fx
from vizlm.models.base import attention_entropy, slot_mask
from vizlm.tokens import TokenSplit, open_split

Progress = Callable[[float], None] | None
LN2 = math.log(2)
POSITIONS_VERSION = 2  # in the cache key: 2 added the effects
POSITION_COLUMNS = ["model", "offset", "mean", "lo", "hi", "count", "effect", "effect_lo", "effect_hi"]


# --------------------------------------------------------------------------- comparison
@dataclass
class Comparison:
    """Model b against baseline a, sentence by sentence (b is "the attention model")."""

    name_a: str
    name_b: str
    table: pd.DataFrame  # sentence_id, text, length, ppl_a, ppl_b, difference, log_ratio; most improved first
    summary: dict

    def most_improved(self, n: int = 10, min_length: int = 0) -> pd.DataFrame:
        """Sentences whose perplexity b lowers most (by log-ratio), at least ``min_length`` words."""
        return self.table[self.table.length >= min_length].head(n)

    def most_worsened(self, n: int = 10, min_length: int = 0) -> pd.DataFrame:
        return self.table[self.table.length >= min_length].iloc[::-1].head(n)

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
    ppl_a, ppl_b = np.exp(nll_a / tok), np.exp(nll_b / tok)
    table = pd.DataFrame({
        "sentence_id": list(ids), "text": list(texts), "length": (tok - 1).astype(int),
        "ppl_a": ppl_a, "ppl_b": ppl_b, "difference": ppl_b - ppl_a, "log_ratio": np.log(ppl_b / ppl_a),
    })
    table = table.sort_values(["log_ratio", "sentence_id"], kind="stable").reset_index(drop=True)
    if documents is not None:  # one unit per document: its summed NLLs and tokens
        starts = np.cumsum([0, *documents[:-1]])
        boot = _bootstrap_ratios(*(np.add.reduceat(x, starts) for x in (nll_a, nll_b, tok)), n_boot, seed)
    else:
        boot = _bootstrap_ratios(nll_a, nll_b, tok, n_boot, seed)
    corpus_a, corpus_b = math.exp(nll_a.sum() / tok.sum()), math.exp(nll_b.sum() / tok.sum())
    summary = {
        "sentences": len(tok), "tokens": int(tok.sum()),
        "perplexity_a": corpus_a, "perplexity_b": corpus_b, "ratio": corpus_b / corpus_a,
        "ratio_ci_low": float(np.quantile(boot, 0.025)), "ratio_ci_high": float(np.quantile(boot, 0.975)),
        "share_improved": float((ppl_b < ppl_a).mean()), "median_sentence_ratio": float(np.median(ppl_b / ppl_a)),
        "resampled": "sentences" if documents is None else "documents",
    }
    return Comparison(a.label, b.label, table, summary)


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
    running = "document" in (a.model.config.context, b.model.config.context)
    return build_comparison(a, b, nll_a, nll_b, tokens, kept_ids, texts, n_boot, seed,
                            documents=document_sizes(kept_ids) if running else None)


def compare_corpus(a: Checkpoint, b: Checkpoint, corpus: str, split: str, progress: Progress = None,
                   use_cache: bool = True, ctx: Context = SINGLE) -> Comparison:
    """:func:`compare` on a processed split; each model's per-sentence NLLs are cached.

    The models read the split a chunk at a time (shared across the ranks of ``ctx``); the table
    then holds every sentence's text."""
    _check_same_vocab(a, b)
    ids, texts, checksum = split_texts(corpus, split)
    scores = []
    for k, ckpt in enumerate((a, b)):
        parts = {"kind": "sentence_nll", "checkpoint": checkpoint_digest(ckpt), "corpus": checksum}
        if ckpt.model.config.context != "sentence":
            parts["context"] = ckpt.model.config.context

        def compute(ckpt=ckpt):
            return dict(zip(("nll", "tokens"), _nll(ckpt, split=open_split(corpus, split, ckpt.vocab), ctx=ctx)))

        scores.append(cached(parts, compute, use_cache and not ctx.distributed))
        if progress:
            progress((k + 1) / 2)
    running = "document" in (a.model.config.context, b.model.config.context)
    return build_comparison(a, b, scores[0]["nll"], scores[1]["nll"], scores[0]["tokens"], ids, texts,
                            documents=document_sizes(ids) if running else None)


# --------------------------------------------------------------------------- positions
@dataclass
class PositionStats:
    """Mean attention weight at offsets 1..L back from the target (1 = most recent slot), and the
    mean slot effect there (bits: log2 P(target) minus the same with that slot dropped)."""

    frame: pd.DataFrame  # POSITION_COLUMNS: model, offset, mean, lo, hi, count, effect, effect_lo, effect_hi
    entropy: dict[str, float]  # mean attention entropy (nats) per model
    beyond: dict[str, float]  # mean weight on slots more than L back
    skipped: list[str] = field(default_factory=list)  # models without attention
    # per model: tokens, mean_read_bits, mean_abs_read_bits, share_over_1_bit (|read effect| > 1 bit)
    effects: dict[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"positions": self.frame.to_dict("records"), "entropy": self.entropy, "beyond_window": self.beyond,
                "skipped": self.skipped, "effects": self.effects}

    @classmethod
    def from_dict(cls, d: dict) -> "PositionStats":
        frame = pd.DataFrame(d["positions"], columns=POSITION_COLUMNS)
        return cls(frame, d["entropy"], d["beyond_window"], d["skipped"], d.get("effects", {}))


def offset_slots(T: int, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Slot index of offset ``d`` (1..L) for every row, and whether it exists: (T, L) each."""
    rows = torch.arange(T)[:, None]
    d = torch.arange(1, window + 1)[None, :]
    slot = rows + 1 - d  # offset 1 is slot r, the newest memory entry
    return slot.clamp_min(0), slot >= 0


# The sums of one model's position statistics, in one float64 array that adds up over chunks and
# ranks: total, total of squares and count of the weight at offsets 1..L; total and total of squares
# of the slot effect (bits); entropy, beyond-window weight, rows; read-effect sum, |sum|, > 1 bit.
def _layout(window: int) -> dict[str, slice]:
    L = window
    names = ["total", "total_sq", "count", "eff", "eff_sq"]
    out = {n: slice(k * L, (k + 1) * L) for k, n in enumerate(names)}
    for k, n in enumerate(["ent", "beyond", "rows", "read_sum", "read_abs", "read_big"]):
        out[n] = slice(5 * L + k, 5 * L + k + 1)
    return out


@torch.no_grad()
def _position_sums(ckpt: Checkpoint, batches, window: int, tick, effects: bool = True) -> np.ndarray | None:
    """The summed statistics of :func:`_layout` over ``batches`` of ``(inputs, targets)``; None for a
    model without attention."""
    model = ckpt.model
    device = next(model.parameters()).device
    at = _layout(window)
    sums = np.zeros(5 * window + 6, dtype=np.float64)
    for inputs, targets in batches:
        inputs, targets = inputs.to(device), targets.to(device)
        out = model(inputs)
        if out.attention is None:
            return None
        att = out.attention.double()  # (B, T, S)
        B, T, _ = att.shape
        real = targets != 0  # (B, T)
        slot, exists = offset_slots(T, window)  # (T, L)
        slot, exists = slot.to(device), exists.to(device)
        m = (exists[None] & real[..., None]).double()  # (B, T, L)
        if effects:
            back = torch.arange(T, device=device)[:, None] - torch.arange(att.shape[2], device=device)[None, :]
            select = ((back >= 0) & (back < window))[None] & real[..., None]  # (B, T, S) offsets 1..L, real rows
            h = model.encode(inputs)  # as forward() computed it
            read, e = fx.attention_effects(model, h, targets, out=out, select=select)  # (B, T), (B, T, S) nats
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
        sums[at["ent"]] += float((attention_entropy(att, slot_mask(T, device=device)) * real).sum())
        sums[at["beyond"]] += float(((1 - (w * m).sum(-1)) * real).sum())
        sums[at["rows"]] += float(real.sum())
        tick()
    return sums


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
        "entropy": float(sums[at["ent"]][0]) / max(rows, 1), "beyond": float(sums[at["beyond"]][0]) / max(rows, 1),
    }
    if effects:
        e_mean, e_lo, e_hi = band(at["eff"], at["eff_sq"])
        read_sum, read_abs, read_big = (float(sums[at[k]][0]) for k in ("read_sum", "read_abs", "read_big"))
        res |= {"effect": e_mean.tolist(), "effect_lo": e_lo.tolist(), "effect_hi": e_hi.tolist(),
                "read": {"tokens": int(rows), "mean_read_bits": read_sum / max(rows, 1),
                         "mean_abs_read_bits": read_abs / max(rows, 1), "share_over_1_bit": read_big / max(rows, 1)}}
    return res


def _positions_one(ckpt: Checkpoint, seqs: list[list[int]], window: int, batch_size: int, tick,
                   effects: bool = True) -> dict | None:
    batches = ((inputs, targets) for _, inputs, targets in iter_batches(seqs, batch_size))
    sums = _position_sums(ckpt, batches, window, tick, effects)
    return None if sums is None else _position_stats(sums, window, effects)


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


def attention_by_position(ckpts: list[Checkpoint], sentences: list[list[str]], window: int = 10,
                          batch_size: int = 128, progress: Progress = None, corpus_checksum: str | None = None,
                          use_cache: bool = True, effects: bool = True) -> PositionStats:
    """Average attention by relative position for every attention model in ``ckpts``; with
    ``effects``, the average slot effect at each position too (NaN without) and the read effects."""
    if window < 1:
        raise ValueError("window must be >= 1")
    sents = [s for s in sentences if s]
    n_batches = math.ceil(len(sents) / batch_size) * len(ckpts)
    done = [0]

    def tick():
        done[0] += 1
        if progress:
            progress(min(1.0, done[0] / max(n_batches, 1)))

    frames, entropy, beyond, skipped, read = [], {}, {}, [], {}
    for ckpt in ckpts:
        def compute(ckpt=ckpt):
            return _positions_one(ckpt, encode_sentences(sents, ckpt.vocab), window, batch_size, tick, effects) or {}

        parts = {"kind": "positions", "version": POSITIONS_VERSION, "checkpoint": checkpoint_digest(ckpt),
                 "corpus": corpus_checksum, "window": window, "effects": effects}
        res = cached(parts, compute, use_cache and corpus_checksum is not None)
        if not res:
            skipped.append(ckpt.label)
            continue
        nan = [math.nan] * window
        cols = {k: res.get(k, nan) for k in POSITION_COLUMNS[1:]}
        frames.append(pd.DataFrame({"model": ckpt.label, **cols}))
        entropy[ckpt.label], beyond[ckpt.label] = res["entropy"], res["beyond"]
        if "read" in res:
            read[ckpt.label] = res["read"]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=POSITION_COLUMNS)
    return PositionStats(frame, entropy, beyond, skipped, read)


def positions_corpus(ckpts: list[Checkpoint], corpus: str, split: str, window: int = 10,
                     progress: Progress = None, use_cache: bool = True, effects: bool = True, ctx: Context = SINGLE,
                     batch_size: int = 128) -> PositionStats:
    """:func:`attention_by_position` over a processed split, cached; the split is read a chunk at
    a time, each rank of ``ctx`` reading its share of the batches (the sums add up over ranks)."""
    if window < 1:
        raise ValueError("window must be >= 1")
    frames, entropy, beyond, skipped, read = [], {}, {}, [], {}
    splits = [open_split(corpus, split, ckpt.vocab) for ckpt in ckpts]
    n_batches = sum(math.ceil(len(sp) / batch_size / ctx.world_size) for sp, c in zip(splits, ckpts) if c.has_attention)
    done = [0]

    def tick():
        done[0] += 1
        if progress:
            progress(min(1.0, done[0] / max(n_batches, 1)))

    for ckpt, sp in zip(ckpts, splits):
        def compute(ckpt=ckpt, sp=sp):
            if not ckpt.has_attention:
                return {}
            sums = _position_sums(ckpt, _split_batches(sp, batch_size, ctx.rank, ctx.world_size), window, tick, effects)
            return _position_stats(ctx.sum_array(sums), window, effects)

        parts = {"kind": "positions", "version": POSITIONS_VERSION, "checkpoint": checkpoint_digest(ckpt),
                 "corpus": sp.checksum, "window": window, "effects": effects}
        res = cached(parts, compute, use_cache and not ctx.distributed)
        if not res:
            skipped.append(ckpt.label)
            continue
        nan = [math.nan] * window
        frames.append(pd.DataFrame({"model": ckpt.label, **{k: res.get(k, nan) for k in POSITION_COLUMNS[1:]}}))
        entropy[ckpt.label], beyond[ckpt.label] = res["entropy"], res["beyond"]
        if "read" in res:
            read[ckpt.label] = res["read"]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=POSITION_COLUMNS)
    return PositionStats(frame, entropy, beyond, skipped, read)


def sentence_positions(sa, window: int = 10) -> pd.DataFrame:
    """Per-sentence view: weight (and slot effect in bits, NaN if not computed) at offsets 1..L
    for every target of one analysis."""
    columns = ["target", "word", "offset", "weight", "effect", "attended"]
    if sa.attention is None:
        return pd.DataFrame(columns=columns)
    T = len(sa.targets)
    slot, exists = offset_slots(T, window)
    labels = sa.slot_labels
    effects = sa.slot_effect_bits
    rows = []
    for r in range(T):
        for k in range(window):
            if exists[r, k]:
                j = int(slot[r, k])
                rows.append({"target": r, "word": sa.targets[r], "offset": k + 1,
                             "weight": float(sa.attention[r, j]),
                             "effect": math.nan if effects is None else float(effects[r, j]), "attended": labels[j]})
    return pd.DataFrame(rows, columns=columns)
