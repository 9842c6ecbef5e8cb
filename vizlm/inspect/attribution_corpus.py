"""Token attribution over a split, per model (:func:`corpus_attribution`, cached on disk like
:mod:`vizlm.inspect.corpus_stats`'s): the distribution of agreement with the attention
(:mod:`vizlm.inspect.agreement`) with 95% intervals, Jain & Wallace's permutation test (shuffle each row's
attention weights over its own slots: how far does the prediction move?, :func:`permutation_shift`), and
attribution by relative position beside the attention's (Daniluk et al., Fig. 3).

Each unit (:func:`reading_units`: a sentence, or a document model's passage of whole sentences) is read in the
model's context and attributed by :func:`vizlm.inspect.attribution.attribute`; an interval is a bootstrap over
clusters of predictions (:func:`cluster_interval`, :func:`cluster_mean`, which the faithfulness tests and the evidence
share): here the split's documents (:func:`unit_documents`), the unit a corpus split samples. The evidence keeps
per-unit sums (:func:`unit_sums`) of the per-target arrays (:func:`collect`) and each unit's document. All scores
are in nats of ``log P(target)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from vizlm.data.folder import document_keys
from vizlm.data.registry import load_corpus, split_checksum
from vizlm.inspect.agreement import TOP_K, nanmean
from vizlm.inspect.analysis import SentenceAnalysis, analyze_sentences
from vizlm.inspect.attribution import DEFAULT_STEPS, METHODS, attribute, check_steps
from vizlm.inspect.attribution_methods import AttributionError, reading_pieces
from vizlm.inspect.cache import cached, checkpoint_digest, stored
from vizlm.modeling.checkpoint import Checkpoint

ATTRIBUTION_VERSION = 3  # in the cache key: bump when the statistics change (2: intervals over documents, 3: the
# per-offset band too)
MAX_OFFSET = 30  # the most words back the position statistics keep (beyond: summed)
PASSAGE_TOKENS = 100  # a document model reads a document in passages of whole sentences up to this many tokens
PERMUTATIONS = 10  # shuffles of each row's attention in the permutation test
MAX_PERMUTATIONS = 1000  # the most any door accepts (Jain & Wallace used 100)
# Attribution by distance as the Positions page shows it (and data/stats/ ships it for the bundled models):
# gradient x input, one backward pass per block of predicted words, and no permutation test (the page does not
# show it; it doubles an attention model's time). One dict, so the page, the shipping script and the tests ask
# for the same cache entry.
BY_DISTANCE = {"method": "gradient-x-input", "permutations": 0}
PERMUTATION_ROWS = 64  # shuffled rows per output-layer call: 64 x 10k logits (2.5 MB) stay in the CPU cache
N_BOOT = 1000


# --------------------------------------------------------------------------- permutation test
@torch.no_grad()
def permutation_shift(ckpt: Checkpoint, sa: SentenceAnalysis, permutations: int = PERMUTATIONS,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Jain & Wallace's permutation test on one analysed text: each row's attention weights shuffled over
    the slots the row could attend to (its own weights, another order), the head recomputed with them
    (the recurrent states as read: :meth:`~vizlm.models.base.AttentionLM.head` with ``weights``).

    Returns ``(|delta log P(target)|, total variation distance of the next-word distribution)``, each
    (T, permutations); NaN for rows with fewer than two slots (nothing to shuffle)."""
    if sa.attention is None:
        raise AttributionError(f"{sa.model} has no attention: there is nothing to permute")
    model = ckpt.model
    rng = np.random.default_rng(seed)
    T = len(sa.targets)
    allowed = sa.allowed()
    dlogp = np.full((T, permutations), math.nan)
    tvd = np.full((T, permutations), math.nan)
    for first, inputs, targets in reading_pieces(ckpt, sa):
        Tb = len(inputs)
        h = model.encode(inputs[None])  # (1, Tb, D)
        out = model.head(h)
        att = out.attention[0]  # (Tb, Tb) the piece's own slots
        mask = allowed[first : first + Tb, first : first + Tb]  # (Tb, Tb)
        shuffle = [r for r in range(Tb) if mask[r].sum() >= 2]
        if not shuffle:
            continue
        dev = att.device  # the model's; the results come back to the CPU
        m = torch.tensor(np.asarray(mask, dtype=bool), device=dev)  # (Tb, Tb), a copy: the mask may be read only
        keys = torch.from_numpy(rng.random((permutations, Tb, Tb))).to(dev).masked_fill(~m, math.inf)  # (K, Tb, Tb)
        order = keys.argsort(-1)  # (K, Tb, Tb): a random order of each row's allowed slots first
        span = torch.arange(Tb, device=dev)
        allowed_first = torch.where(m, span, span + Tb).argsort(-1)  # (Tb, Tb): the allowed slots in order first
        src = att.expand(permutations, Tb, Tb).gather(-1, order)  # (K, Tb, Tb) the weights in shuffled order
        # slot allowed_first[r, i] gets the weight of slot order[q, r, i]: a permutation over the allowed slots;
        # beyond them both index slots with weight 0
        weights = torch.zeros_like(src).scatter(-1, allowed_first.expand(permutations, Tb, Tb), src)
        rows = torch.tensor(shuffle, device=dev)  # (R,)
        tgt = targets[rows]
        own = out.readout
        logp = F.linear(own.features[0, rows], own.weight, own.bias).log_softmax(-1)  # (R, V) as computed
        base, p = logp.gather(-1, tgt[:, None])[:, 0], logp.exp()  # (R,), (R, V)
        # only the shuffled rows go through the output layer, a few permutations per call (K x R x 10k logits
        # would not stay in the cache), and the distributions are compared in place
        feats = model.head(h.expand(permutations, -1, -1), weights=weights).readout.features[:, rows]  # (K, R, F)
        d, t = base.new_empty(permutations, len(rows)), base.new_empty(permutations, len(rows))  # (K, R)
        per_call = max(1, PERMUTATION_ROWS // len(rows))
        for k in range(0, permutations, per_call):
            moved = F.linear(feats[k : k + per_call], own.weight, own.bias).log_softmax(-1)  # (k, R, V)
            d[k : k + per_call] = moved.gather(-1, tgt[None, :, None].expand(len(moved), -1, 1))[..., 0] - base
            t[k : k + per_call] = 0.5 * moved.exp_().sub_(p).abs_().sum(-1)
        dlogp[first + np.array(shuffle)] = d.abs().T.double().cpu().numpy()
        tvd[first + np.array(shuffle)] = t.T.double().cpu().numpy()
    return dlogp, tvd

# --------------------------------------------------------------------------- corpus statistics
def reading_units(sentences: list[list[str]], ids: list[str], document: bool, passage_tokens: int) -> list[list[int]]:
    """The sentence indices each unit reads: every sentence alone (a sentence model), or passages of
    consecutive whole sentences of one document up to ``passage_tokens`` tokens (a document model; a
    longer sentence alone), each read as running text from a zero state as an analysed passage is."""
    keep = [i for i, s in enumerate(sentences) if s]
    if not document:
        return [[i] for i in keep]
    units: list[list[int]] = []
    doc_of = document_keys(ids)
    size = 0
    for i in keep:
        n = len(sentences[i]) + 1
        if units and doc_of[units[-1][-1]] == doc_of[i] and size + n <= passage_tokens:
            units[-1].append(i)
            size += n
        else:
            units.append([i])
            size = n
    return units


def unit_documents(units: list[list[int]], ids: list[str]) -> np.ndarray:
    """The document of each unit (:func:`reading_units`' units of the sentences with these ``ids``;
    :func:`vizlm.data.folder.document_keys`), numbered 0, 1, ... in order of first appearance: the clusters a
    bootstrap over documents resamples (a corpus split samples documents, not sentences)."""
    keys = document_keys(ids)
    numbering: dict[str, int] = {}
    return np.asarray([numbering.setdefault(keys[u[0]], len(numbering)) for u in units], dtype=np.int32)


def resample_clusters(unit_document: np.ndarray) -> tuple[np.ndarray, str]:
    """``(cluster of each unit, what the clusters are)``: what a corpus statistic's bootstrap resamples, given each
    unit's document (:func:`unit_documents`). The documents (``"documents"``), the unit a split samples; where
    every unit read is of one document (a split's first sentences), that one document has no spread to resample,
    and the units themselves are resampled (``"units"``: sentences, or a document model's passages)."""
    unit_document = np.asarray(unit_document, int)
    if int(unit_document.max(initial=-1)) >= 1:
        return unit_document, "documents"
    return np.arange(len(unit_document)), "units"


def clusters_of(unit_document: np.ndarray, resample: str = "documents") -> tuple[np.ndarray, int]:
    """``(cluster of each unit, number of clusters)``: what a bootstrap over stored per-unit sums resamples,
    ``"documents"`` (:func:`resample_clusters`: the documents, or the units where all are of one) or ``"units"``
    (sentences or passages: narrower intervals that ignore the documents)."""
    unit_document = np.asarray(unit_document, int)
    if resample == "units":
        return np.arange(len(unit_document)), len(unit_document)
    if resample != "documents":
        raise ValueError(f"resample must be 'documents' or 'units', not {resample!r}")
    cluster, _ = resample_clusters(unit_document)
    return cluster, int(cluster.max(initial=-1)) + 1


def model_window(ckpt: Checkpoint) -> int | None:
    """How many of the newest slots a row may attend to (Daniluk et al.'s L, RM's n, AMSRN's and Salton's
    ``memory``); None: the whole reading, or no attention."""
    return ckpt.model.window_size() if ckpt.has_attention else None


def corpus_attribution(
    ckpt: Checkpoint, corpus: str, split: str, method: str = "gradient-x-input", limit: int | None = None,
    n_steps: int = DEFAULT_STEPS, permutations: int = PERMUTATIONS, max_offset: int = MAX_OFFSET,
    passage_tokens: int = PASSAGE_TOKENS, absolute: bool = True, n_boot: int = N_BOOT, seed: int = 0,
    use_cache: bool = True, progress: Callable[[float], None] | None = None,
) -> dict:
    """Attribution over a processed split (its first ``limit`` sentences), cached (:mod:`vizlm.inspect.cache`,
    keyed by the checkpoint's and the split's checksums, the method and every parameter).

    Each unit (:func:`reading_units`: a sentence, or a document model's passage) is read in the model's
    context and attributed with ``method``. The result (JSON-able):

    * ``positions``: per offset ``0..max_offset`` (0: the current word), the mean share of a row's
      ``|attribution|`` at that many words back over the rows that reach it, with a normal 95% interval
      (as :mod:`vizlm.inspect.corpus_stats`'s positions), the mean attention weight there (attention models), and
      ``beyond``: the mean share further back; ``beyond_window``: the share beyond the model's attention
      window (:func:`model_window`; None without one);
    * attention models only: ``agreement`` (per target over the positions both cover, rows with at least
      two: tau-b mean, median, quantiles; the share of targets whose most attended word is the most
      important one; top-3 overlap) and ``permutation`` (Jain & Wallace: per target the median over
      ``permutations`` shuffles of ``|delta log P(target)|`` and of the total variation distance of the
      next-word distribution; their corpus median and mean, and the share of targets the median shuffle
      moves by more than 1 bit);

    every interval but the positions' a 95% bootstrap over the split's documents (:func:`unit_documents`: the
    unit a corpus split samples; predictions of one document are not independent; over the units where all are of
    one document, :func:`resample_clusters`; ``resampled`` says which), ``n_boot`` resamples from ``seed``;
    ``units`` and ``documents`` say how many were read.
    """
    if method == "integrated-gradients":
        n_steps = check_steps(n_steps)
    parts = _cache_parts(ckpt, corpus, split, method, limit, n_steps, permutations, max_offset, passage_tokens,
                         absolute, n_boot, seed)

    read_in = "passages" if parts["context"] == "document" else "sentences"

    def compute() -> dict:
        rows, units = collect(ckpt, corpus, split, method, limit, n_steps, permutations, max_offset, passage_tokens,
                              absolute, seed, progress)
        stats = _statistics(rows, model_window(ckpt), max_offset, n_boot, seed)
        return {"model": ckpt.label, "method": method, "corpus": corpus, "split": split, "context": parts["context"],
                "units": units, "read_in": read_in, "documents": int(rows["unit_document"].max(initial=-1)) + 1,
                "resampled": read_in if stats.pop("resampled") == "units" else "documents", **stats}

    return cached(parts, compute, use_cache)


def _cache_parts(ckpt: Checkpoint, corpus: str, split: str, method: str, limit: int | None, n_steps: int,
                 permutations: int, max_offset: int, passage_tokens: int, absolute: bool, n_boot: int,
                 seed: int) -> dict:
    """:func:`corpus_attribution`'s cache key: the checkpoint's and the split's checksums and every parameter."""
    if method not in METHODS:
        raise AttributionError(f"unknown attribution method {method!r}; valid: {', '.join(METHODS)}")
    document = getattr(ckpt.model.config, "context", "sentence") == "document"
    parts = {"kind": "attribution", "version": ATTRIBUTION_VERSION, "checkpoint": checkpoint_digest(ckpt),
             "corpus": split_checksum(corpus, split), "method": method, "limit": limit,
             "permutations": permutations, "max_offset": max_offset, "absolute": absolute, "n_boot": n_boot,
             "seed": seed, "context": "document" if document else "sentence"}
    if method == "integrated-gradients":
        parts["n_steps"] = n_steps
    if document:
        parts["passage_tokens"] = passage_tokens
    return parts


def is_stored(ckpt: Checkpoint, corpus: str, split: str, method: str = "gradient-x-input", limit: int | None = None,
              n_steps: int = DEFAULT_STEPS, permutations: int = PERMUTATIONS, max_offset: int = MAX_OFFSET,
              passage_tokens: int = PASSAGE_TOKENS, absolute: bool = True, n_boot: int = N_BOOT,
              seed: int = 0) -> bool:
    """Whether :func:`corpus_attribution` with these arguments is read from the disk cache or the shipped
    statistics (``data/stats/``) rather than computed: the cost is said only for what will be computed."""
    return stored(_cache_parts(ckpt, corpus, split, method, limit, n_steps, permutations, max_offset, passage_tokens,
                               absolute, n_boot, seed))


def corpus_agreement(ckpt: Checkpoint, corpus: str, split: str, method: str = "gradient-x-input",
                     limit: int | None = None, **kwargs) -> dict:
    """:func:`corpus_attribution` of an attention model (its ``agreement`` and ``permutation`` parts);
    raises :class:`~vizlm.inspect.attribution_methods.AttributionError` for a model without attention."""
    if not ckpt.has_attention:
        raise AttributionError(f"{ckpt.label} has no attention: there is nothing to agree with")
    return corpus_attribution(ckpt, corpus, split, method, limit, **kwargs)


def _collect(ckpt, sentences, units, method, n_steps, permutations, max_offset, absolute, seed,
             progress) -> dict:
    """Per-target arrays over the units: unit index, agreement, permutation shifts, position shares."""
    W = max_offset
    unit_of, tau, top1, topk, npos = [], [], [], [], []
    dlogp, tvd, perm_unit = [], [], []
    share = []  # (rows, W + 2): shares at offsets 0..W and beyond W
    reach = []  # (rows, W + 1) bool: the offset is in the row's reading
    beyond_window = []
    att_at = []  # (rows, W + 1) attention weight at offsets 0..W (NaN: no slot)
    window = model_window(ckpt)
    for k, unit in enumerate(units):
        # read without the read effects, which the statistics do not use (one output layer fewer)
        sa = analyze_sentences(ckpt, [sentences[i] for i in unit], top_k=0, effects=False, max_tokens=None)
        res = attribute(ckpt, sa, method, n_steps)
        T = len(res.targets)
        off = res.offsets()
        mag = np.abs(res.scores)
        total = mag.sum(1)  # (T,)
        shares = np.zeros((T, W + 2))
        reached = np.zeros((T, W + 1), dtype=bool)
        for o in range(W + 1):
            at = res.covered & (off == o)
            shares[:, o] = (mag * at).sum(1)
            reached[:, o] = at.any(1)
        shares[:, W + 1] = (mag * (res.covered & (off > W))).sum(1)
        ok = total > 0
        shares[ok] /= total[ok, None]
        shares[~ok] = math.nan
        share.append(shares)
        reach.append(reached)
        if window is not None:
            bw = np.where(ok, (mag * (res.covered & (off > window))).sum(1) / np.where(ok, total, 1), math.nan)
            beyond_window.append(bw)
        unit_of.append(np.full(T, k))
        if res.attention is not None:
            agree = res.agreement(absolute)
            tau.append(agree.kendall_tau.to_numpy(float))
            top1.append(agree.top1.to_numpy(float))
            topk.append(agree.top_k_overlap.to_numpy(float))
            npos.append(agree.positions.to_numpy(int))
            w = np.full((T, W + 1), math.nan)
            for o in range(1, W + 1):
                at = res.attended & (off == o)
                has = at.any(1)
                w[has, o] = (res.attention * at).sum(1)[has]
            att_at.append(w)
            if permutations:
                d, t = permutation_shift(ckpt, res.analysis, permutations, seed + k)
                dlogp.append(np.median(d, 1))
                tvd.append(np.median(t, 1))
                perm_unit.append(np.full(T, k))
        if progress:
            progress((k + 1) / len(units))
    return {"unit": _cat(unit_of), "share": np.concatenate(share) if share else np.zeros((0, W + 2)),
            "reach": np.concatenate(reach) if reach else np.zeros((0, W + 1), bool),
            "beyond_window": _cat(beyond_window) if window is not None else None,
            "tau": _cat(tau), "top1": _cat(top1), "topk": _cat(topk), "npos": _cat(npos),
            "attention": np.concatenate(att_at) if att_at else None,
            "dlogp": _cat(dlogp), "tvd": _cat(tvd), "perm_unit": _cat(perm_unit)}


def _cat(xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(xs) if xs else np.zeros(0)


# Draws of at most this many entries (2 MB) are kept once made, the last 16 of them (a report asks for the same
# 50 documents x 1,000 resamples some two thousand times); larger ones are drawn afresh each time.
_KEPT_DRAWS = 250_000


def bootstrap_draws(n_units: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_units), read-only: how often each unit is drawn in each bootstrap resample (with replacement);
    the same arguments give the same draws."""
    if n_units * n_boot <= _KEPT_DRAWS:
        return _kept_draws(n_units, n_boot, seed)
    return _draws(n_units, n_boot, seed)


def _draws(n_units: int, n_boot: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n_units, np.full(n_units, 1 / n_units), size=n_boot)
    draws.flags.writeable = False
    return draws


_kept_draws = functools.lru_cache(maxsize=16)(_draws)


def _percentiles(boot: np.ndarray) -> dict:
    """``{"lo", "hi"}``: the 95% percentile interval of the finite bootstrap values."""
    boot = boot[np.isfinite(boot)]
    if not len(boot):
        return {"lo": math.nan, "hi": math.nan}
    return {"lo": float(np.quantile(boot, 0.025)), "hi": float(np.quantile(boot, 0.975))}


def cluster_mean(sums: np.ndarray, counts: np.ndarray, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """``{"value", "lo", "hi", "n"}``: the mean of values given per unit as their sum and count (``sums[u]``,
    ``counts[u]``: a unit with none counts 0), with a 95% bootstrap interval that resamples the units. What
    :func:`cluster_interval` computes for ``stat="mean"``, from the per-unit sums alone (the evidence keeps
    those: :func:`unit_sums`)."""
    sums, counts = np.asarray(sums, float), np.asarray(counts, float)
    n = int(counts.sum())
    if not n:
        return {"value": math.nan, "lo": math.nan, "hi": math.nan, "n": 0}
    value, lo, hi = cluster_means(sums[:, None], counts[:, None], n_boot, seed)
    return {"value": float(value[0]), "lo": float(lo[0]), "hi": float(hi[0]), "n": n}


def cluster_means(sums: np.ndarray, counts: np.ndarray, n_boot: int = N_BOOT, seed: int = 0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(value, lo, hi)``, each (K,): :func:`cluster_mean` of K quantities at once, given per unit as
    ``sums[u, k]`` and ``counts[u, k]`` (units, K), every quantity resampled with the same draws of the units
    (NaN where a quantity has no count)."""
    value, boot = cluster_resamples(sums, counts, n_boot, seed)
    lo, hi = np.full(len(value), math.nan), np.full(len(value), math.nan)
    some = np.isfinite(boot).any(0)
    if some.any():
        lo[some], hi[some] = np.nanquantile(boot[:, some], [0.025, 0.975], axis=0)
    return value, lo, hi


def cluster_resamples(sums: np.ndarray, counts: np.ndarray, n_boot: int = N_BOOT, seed: int = 0
                      ) -> tuple[np.ndarray, np.ndarray]:
    """``(value (K,), resampled (n_boot, K))``: the means of :func:`cluster_means` and each bootstrap resample's
    (the units drawn with replacement, :func:`bootstrap_draws`), for a statistic made of them (a sum of means);
    NaN where there is no count."""
    sums, counts = np.asarray(sums, float), np.asarray(counts, float)
    draws = bootstrap_draws(len(sums), n_boot, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = sums.sum(0) / counts.sum(0)
        boot = (draws @ sums) / (draws @ counts)  # (n_boot, K)
    boot[~np.isfinite(boot)] = np.nan
    value[~np.isfinite(value)] = np.nan
    return value, boot


def cluster_ratio(num: np.ndarray, den: np.ndarray, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """``{"value", "lo", "hi"}``: ``sum(num) / sum(den)`` of per-unit sums (a share of a total: the attention read's
    part of a dependence), with a 95% bootstrap interval that resamples the units: :func:`cluster_means` of one
    quantity whose "counts" are the total's per-unit parts (not whole numbers)."""
    den = np.asarray(den, float)
    if not len(den) or float(den.sum()) <= 0:
        return {"value": math.nan, "lo": math.nan, "hi": math.nan}
    value, lo, hi = cluster_means(np.asarray(num, float)[:, None], den[:, None], n_boot, seed)
    return {"value": float(value[0]), "lo": float(lo[0]), "hi": float(hi[0])}


def cluster_interval(values: np.ndarray, units: np.ndarray, n_units: int, stat: str = "mean",
                     n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """``{"value", "lo", "hi", "n"}``: the mean or median of ``values`` (NaN ignored) with a 95% bootstrap
    interval that resamples the units (``units[i]``: the unit of value i, 0..n_units-1) with replacement."""
    values, units = np.asarray(values, float), np.asarray(units, int)
    ok = np.isfinite(values)
    values, units = values[ok], units[ok]
    if not len(values):
        return {"value": math.nan, "lo": math.nan, "hi": math.nan, "n": 0}
    if stat == "mean":
        return cluster_mean(np.bincount(units, weights=values, minlength=n_units),
                            np.bincount(units, minlength=n_units).astype(float), n_boot, seed)
    if stat != "median":
        raise ValueError(f"stat must be 'mean' or 'median', not {stat!r}")
    order = np.argsort(values, kind="stable")
    boot = resampled_medians(values[order], units[order], bootstrap_draws(n_units, n_boot, seed))
    return {"value": float(np.median(values)), **_percentiles(boot), "n": int(len(values))}


_MEDIAN_TABLE = 2**22  # entries of resampled_medians' running counts (int32: 16 MB); beyond, one resample at a time


def resampled_medians(v: np.ndarray, u: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """(n_boot,): each resample's median of the sorted values ``v`` (their units ``u``), every value counted as
    often as its unit is drawn (``draws``: (n_boot, n_units)): the first value whose running count reaches half
    the resample's total (NaN where the resample holds no value). All resamples at once by a binary search on
    the values' running counts per unit, ``log2(n)`` steps (a resample's running count at value i is its draws
    times the units' counts up to i); where that table would outgrow :data:`_MEDIAN_TABLE` entries, one resample
    at a time by a running sum. The counts are whole numbers, so both give exactly the same medians."""
    n, n_units = len(v), draws.shape[1]
    if n * n_units > _MEDIAN_TABLE:
        boot = np.empty(len(draws))
        for i, d in enumerate(draws):
            c = np.cumsum(d[u])  # each value counted as often as its unit was drawn
            boot[i] = v[np.searchsorted(c, c[-1] / 2)] if c[-1] > 0 else math.nan
        return boot
    running = np.cumsum(np.eye(n_units, dtype=np.int32)[u], axis=0, dtype=np.int32)  # (n, n_units): counts to i
    draws = draws.astype(np.int64)
    total = draws @ running[-1].astype(np.int64)  # (n_boot,)
    lo, hi = np.zeros(len(draws), np.int64), np.full(len(draws), n - 1, np.int64)
    while (lo < hi).any():  # the first i whose 2 x running count >= total (hi always satisfies it)
        mid = (lo + hi) // 2
        reached = 2 * np.einsum("bk,bk->b", running[mid], draws) >= total
        hi, lo = np.where(reached, mid, hi), np.where(reached, lo, mid + 1)
    return np.where(total > 0, v[lo], math.nan)


# The per-target quantities the evidence keeps as per-unit sums (:func:`unit_sums`), each a mean over targets:
# where a prediction's |attribution| lies by distance, how much of it lies beyond the attention window, the
# agreement with the attention (targets with >= 2 positions both cover) and Jain & Wallace's permutation shift.
DISTANCE_BINS = {"share_now": (0, 0), "share_1": (1, 1), "share_2_5": (2, 5), "share_beyond_5": (6, None)}
UNIT_SUMS = (*DISTANCE_BINS, "beyond_window", "kendall_tau", "top1", f"top{TOP_K}_overlap", "top1_chance",
             f"top{TOP_K}_chance", "abs_dlogp", "moved_1_bit", "tvd")


def unit_sums(rows: dict, n_units: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per unit, the sum and the count of each per-target quantity of :data:`UNIT_SUMS` (NaN targets left
    out): ``{name: (sums [n_units], counts [n_units])}``; what :func:`cluster_mean` needs, so the evidence of a
    corpus attribution stays small (its units, not its targets) and its intervals are exactly the library's.
    Quantities a model does not have (agreement without attention) are absent."""

    def per_unit(values: np.ndarray, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ok = np.isfinite(values)
        return (np.bincount(units[ok], weights=values[ok], minlength=n_units),
                np.bincount(units[ok], minlength=n_units).astype(float))

    unit, share = rows["unit"].astype(int), rows["share"]  # share: (targets, W + 2), offsets 0..W then beyond W
    W = share.shape[1] - 2
    out = {}
    for name, (lo, hi) in DISTANCE_BINS.items():
        cols = list(range(lo, W + 2)) if hi is None else list(range(lo, hi + 1))
        out[name] = per_unit(share[:, cols].sum(1), unit)  # NaN rows (nothing attributed) stay NaN
    if rows["beyond_window"] is not None:
        out["beyond_window"] = per_unit(rows["beyond_window"], unit)
    if rows["attention"] is not None:
        chosen = rows["npos"] >= 2  # a row with one slot chooses nothing
        for name, key in (("kendall_tau", "tau"), ("top1", "top1"), (f"top{TOP_K}_overlap", "topk")):
            out[name] = per_unit(np.where(chosen, rows[key], math.nan), unit)
        # the same by chance (attention and attribution unrelated; ties aside): the most attended of n positions
        # is the most important one with probability 1/n, and two random m-subsets of n share m/n of m
        n = np.where(chosen, rows["npos"], 1).astype(float)
        out["top1_chance"] = per_unit(np.where(chosen, 1 / n, math.nan), unit)
        out[f"top{TOP_K}_chance"] = per_unit(np.where(chosen, np.minimum(TOP_K, n) / n, math.nan), unit)
        if len(rows["dlogp"]):
            pu = rows["perm_unit"].astype(int)
            dlogp = rows["dlogp"]
            out["abs_dlogp"] = per_unit(dlogp, pu)
            out["moved_1_bit"] = per_unit(np.where(np.isfinite(dlogp), (dlogp > math.log(2)).astype(float), math.nan), pu)
            out["tvd"] = per_unit(rows["tvd"], pu)
    return out


def collect(ckpt: Checkpoint, corpus: str, split: str, method: str = "gradient-x-input", limit: int | None = None,
            n_steps: int = DEFAULT_STEPS, permutations: int = PERMUTATIONS, max_offset: int = MAX_OFFSET,
            passage_tokens: int = PASSAGE_TOKENS, absolute: bool = True, seed: int = 0,
            progress: Callable[[float], None] | None = None, select: list[int] | None = None) -> tuple[dict, int]:
    """``(rows, units)``: the per-target arrays of :func:`corpus_attribution` over a processed split (its first
    ``limit`` sentences, or the sentences ``select`` indexes, in order), not cached, and how many units
    (:func:`reading_units`: sentences, or a document model's passages) they come from; ``rows["unit_document"]``:
    each unit's document (:func:`unit_documents`)."""
    if method not in METHODS:
        raise AttributionError(f"unknown attribution method {method!r}; valid: {', '.join(METHODS)}")
    if method == "slot-effect" and not ckpt.has_attention:
        raise AttributionError(f"{ckpt.label} has no attention: it has no slot effects")
    data = load_corpus(corpus, split)
    document = getattr(ckpt.model.config, "context", "sentence") == "document"
    index = list(select) if select is not None else list(range(len(data.sentences)))[:limit]
    sentences, ids = [data.sentences[i] for i in index], [data.ids[i] for i in index]
    units = reading_units(sentences, ids, document, passage_tokens)
    rows = _collect(ckpt, sentences, units, method, n_steps, permutations, max_offset, absolute, seed, progress)
    rows["unit_document"] = unit_documents(units, ids)
    return rows, len(units)


def _statistics(rows: dict, window: int | None, W: int, n_boot: int, seed: int) -> dict:
    share, reach = rows["share"], rows["reach"]
    cluster, resampled = resample_clusters(rows["unit_document"])
    n_clusters = int(cluster.max(initial=-1)) + 1

    def interval(values: np.ndarray, units: np.ndarray, stat: str = "mean") -> dict:
        return cluster_interval(values, cluster[units.astype(int)], n_clusters, stat, n_boot, seed)

    ok = reach[:, : W + 1] & np.isfinite(share[:, : W + 1])  # (rows, W + 1) the offsets each row has
    of = cluster[rows["unit"].astype(int)]
    per_cluster = [np.stack([np.bincount(of, weights=np.where(ok[:, o], x[:, o], 0), minlength=n_clusters)
                             for o in range(W + 1)], 1) for x in (share, ok.astype(float))]  # (clusters, W + 1) each
    mean, lo, hi = cluster_means(*per_cluster, n_boot=n_boot, seed=seed)
    positions = {"offset": list(range(W + 1)), "mean": mean.tolist(), "lo": lo.tolist(), "hi": hi.tolist(),
                 "count": ok.sum(0).astype(int).tolist()}
    out: dict = {"targets": int(len(rows["unit"])), "positions": positions, "resampled": resampled}
    positions["beyond"] = interval(share[:, W + 1], rows["unit"])
    positions["window"] = window
    positions["beyond_window"] = (None if rows["beyond_window"] is None else
                                  interval(rows["beyond_window"], rows["unit"]))
    if rows["attention"] is not None:
        att = rows["attention"]
        positions["attention"] = [nanmean(att[:, o]) for o in range(W + 1)]
        chosen = rows["npos"] >= 2  # a row with one slot chooses nothing
        unit = rows["unit"][chosen]
        tau = rows["tau"][chosen]
        finite = tau[np.isfinite(tau)]
        out["agreement"] = {
            "targets": int(chosen.sum()),
            "kendall_tau": interval(tau, unit),
            "kendall_tau_median": interval(tau, unit, "median"),
            "kendall_tau_quantiles": {str(q): float(np.quantile(finite, q)) if len(finite) else math.nan
                                      for q in (0.1, 0.25, 0.5, 0.75, 0.9)},
            "top1_share": interval(rows["top1"][chosen], unit),
            f"top{TOP_K}_overlap": interval(rows["topk"][chosen], unit),
        }
        if len(rows["dlogp"]):
            pu = rows["perm_unit"]
            out["permutation"] = {
                "targets": int(np.isfinite(rows["dlogp"]).sum()),
                "median_abs_dlogp": interval(rows["dlogp"], pu, "median"),
                "mean_abs_dlogp": interval(rows["dlogp"], pu),
                "median_tvd": interval(rows["tvd"], pu, "median"),
                "mean_tvd": interval(rows["tvd"], pu),
                "share_over_1_bit": interval(
                    np.where(np.isfinite(rows["dlogp"]), (rows["dlogp"] > math.log(2)).astype(float), math.nan), pu),
                "unit": "nats",
            }
    return out



__all__ = [
    "BY_DISTANCE",
    "bootstrap_draws",
    "cluster_interval",
    "cluster_mean",
    "cluster_means",
    "cluster_ratio",
    "cluster_resamples",
    "clusters_of",
    "collect",
    "corpus_agreement",
    "corpus_attribution",
    "is_stored",
    "model_window",
    "permutation_shift",
    "reading_units",
    "resample_clusters",
    "unit_documents",
    "unit_sums",
]
