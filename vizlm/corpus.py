"""Corpus-level statistics: per-sentence perplexity comparison of two models, and
average attention by relative position (Daniluk et al., Fig. 3) next to the average
effect of the slot at that position and the share of words the attention read moves
by more than 1 bit (:mod:`vizlm.models.effects`).

Both run batched forward passes over length buckets and are cached on disk
(:mod:`vizlm.cache`) keyed by the checkpoints' weights and the corpus checksum.
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
from vizlm.data import document_sizes, encode_sentences, iter_batches, load_corpus
from vizlm.evaluate import score
from vizlm.models import effects as fx
from vizlm.models.base import attention_entropy, slot_mask

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


def _nll(ckpt: Checkpoint, sentences: list[list[str]], batch_size: int = 128,
         ids: list[str] | None = None) -> tuple[list[float], list[int]]:
    """Per-sentence NLL in the model's context: a document-context model reads the
    documents of ``ids`` (``document:index``) as running text."""
    sizes = document_sizes(ids) if ids is not None else None
    s = score(ckpt.model, encode_sentences(sentences, ckpt.vocab), sizes, batch_size)
    return s.nll, s.tokens


def build_comparison(
    a: Checkpoint, b: Checkpoint, nll_a, nll_b, tokens, ids, texts, n_boot: int = 1000, seed: int = 0
) -> Comparison:
    """The table and summary from per-sentence NLLs (nats) and token counts."""
    nll_a, nll_b, tok = np.asarray(nll_a, float), np.asarray(nll_b, float), np.asarray(tokens, float)
    ppl_a, ppl_b = np.exp(nll_a / tok), np.exp(nll_b / tok)
    table = pd.DataFrame({
        "sentence_id": list(ids), "text": list(texts), "length": (tok - 1).astype(int),
        "ppl_a": ppl_a, "ppl_b": ppl_b, "difference": ppl_b - ppl_a, "log_ratio": np.log(ppl_b / ppl_a),
    })
    table = table.sort_values(["log_ratio", "sentence_id"], kind="stable").reset_index(drop=True)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(tok), size=(n_boot, len(tok)))
    boot = np.exp((nll_b[idx].sum(1) - nll_a[idx].sum(1)) / tok[idx].sum(1))
    corpus_a, corpus_b = math.exp(nll_a.sum() / tok.sum()), math.exp(nll_b.sum() / tok.sum())
    summary = {
        "sentences": int(len(tok)), "tokens": int(tok.sum()),
        "perplexity_a": corpus_a, "perplexity_b": corpus_b, "ratio": corpus_b / corpus_a,
        "ratio_ci_low": float(np.quantile(boot, 0.025)), "ratio_ci_high": float(np.quantile(boot, 0.975)),
        "share_improved": float((ppl_b < ppl_a).mean()), "median_sentence_ratio": float(np.median(ppl_b / ppl_a)),
    }
    return Comparison(a.label, b.label, table, summary)


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
    return build_comparison(a, b, nll_a, nll_b, tokens, kept_ids, texts, n_boot, seed)


def compare_corpus(a: Checkpoint, b: Checkpoint, corpus: str, split: str, progress: Progress = None,
                   use_cache: bool = True) -> Comparison:
    """:func:`compare` on a processed split; each model's per-sentence NLLs are cached."""
    _check_same_vocab(a, b)
    c = load_corpus(corpus, split)
    scores = []
    for k, ckpt in enumerate((a, b)):
        parts = {"kind": "sentence_nll", "checkpoint": checkpoint_digest(ckpt), "corpus": c.checksum}
        if ckpt.model.config.context != "sentence":
            parts["context"] = ckpt.model.config.context

        def compute(ckpt=ckpt):
            return dict(zip(("nll", "tokens"), _nll(ckpt, c.sentences, ids=c.ids)))

        scores.append(cached(parts, compute, use_cache))
        if progress:
            progress((k + 1) / 2)
    texts = [" ".join(o) for o in c.originals]
    return build_comparison(a, b, scores[0]["nll"], scores[1]["nll"], scores[0]["tokens"], c.ids, texts)


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


@torch.no_grad()
def _positions_one(ckpt: Checkpoint, seqs: list[list[int]], window: int, batch_size: int, tick,
                   effects: bool = True) -> dict | None:
    total = torch.zeros(window, dtype=torch.float64)
    total_sq = torch.zeros(window, dtype=torch.float64)
    count = torch.zeros(window, dtype=torch.float64)
    eff, eff_sq = torch.zeros(window, dtype=torch.float64), torch.zeros(window, dtype=torch.float64)
    ent_sum = beyond_sum = rows = 0.0
    read_sum = read_abs = read_big = 0.0
    for _, inputs, targets in iter_batches(seqs, batch_size):
        out = ckpt.model(inputs)
        att = out.attention  # (B, T, S)
        if att is None:
            return None
        B, T, _ = att.shape
        real = targets != 0  # (B, T)
        slot, exists = offset_slots(T, window)  # (T, L)
        m = (exists[None] & real[..., None]).double()  # (B, T, L)
        if effects:
            back = torch.arange(T)[:, None] - torch.arange(att.shape[2])[None, :]  # (T, S) offset - 1 of each slot
            select = ((back >= 0) & (back < window))[None] & real[..., None]  # (B, T, S) offsets 1..L, real rows
            h = ckpt.model.encode(inputs)  # as forward() computed it
            read, e = fx.attention_effects(ckpt.model, h, targets, out=out, select=select)  # (B, T), (B, T, S) nats
            read = read.double() / LN2  # bits
            read_sum += float((read * real).sum())
            read_abs += float((read.abs() * real).sum())
            read_big += float(((read.abs() > 1) & real).sum())
            e = e.double().gather(2, slot.expand(B, T, window)) / LN2  # (B, T, L) bits
            eff += (e * m).sum((0, 1))
            eff_sq += (e * e * m).sum((0, 1))
        att = att.double()
        w = att.gather(2, slot.expand(B, T, window))  # (B, T, L)
        total += (w * m).sum((0, 1))
        total_sq += (w * w * m).sum((0, 1))
        count += m.sum((0, 1))
        ent_sum += float((attention_entropy(att, slot_mask(T)) * real).sum())
        beyond_sum += float(((1 - (w * m).sum(-1)) * real).sum())
        rows += float(real.sum())
        tick()

    def band(s, sq):  # mean and 95% confidence interval of the mean
        mean = s / count.clamp_min(1)
        std = (sq / count.clamp_min(1) - mean**2).clamp_min(0).sqrt()
        half = 1.96 * std / count.clamp_min(1).sqrt()
        return mean, mean - half, mean + half

    mean, lo, hi = band(total, total_sq)
    res = {
        "offset": list(range(1, window + 1)), "mean": mean.tolist(), "lo": lo.tolist(),
        "hi": hi.tolist(), "count": count.long().tolist(),
        "entropy": ent_sum / max(rows, 1), "beyond": beyond_sum / max(rows, 1),
    }
    if effects:
        e_mean, e_lo, e_hi = band(eff, eff_sq)
        res |= {"effect": e_mean.tolist(), "effect_lo": e_lo.tolist(), "effect_hi": e_hi.tolist(),
                "read": {"tokens": int(rows), "mean_read_bits": read_sum / max(rows, 1),
                         "mean_abs_read_bits": read_abs / max(rows, 1), "share_over_1_bit": read_big / max(rows, 1)}}
    return res


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
                     progress: Progress = None, use_cache: bool = True, effects: bool = True) -> PositionStats:
    """:func:`attention_by_position` over a processed split, cached."""
    c = load_corpus(corpus, split)
    return attention_by_position(ckpts, c.sentences, window, progress=progress, corpus_checksum=c.checksum,
                                 use_cache=use_cache, effects=effects)


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
