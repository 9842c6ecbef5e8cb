"""The faithfulness tests (:mod:`vizlm.inspect.faithfulness`, :mod:`vizlm.inspect.faithfulness_erasure`) over a
processed split: :func:`corpus_faithfulness` runs them (cached), with 95% bootstrap intervals over the split's
documents (:func:`vizlm.inspect.attribution_corpus.unit_documents`: the unit a corpus split samples), each read in
units (sentences, or a document model's passages, :func:`vizlm.inspect.attribution_corpus.reading_units`);
:func:`collect` gives every test's frame, :func:`statistics` their statistics; :func:`estimate_seconds` and
:func:`is_stored` say the cost before it starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import pairwise

import numpy as np
import pandas as pd

from vizlm.data.registry import load_corpus, split_checksum
from vizlm.core.errors import InputError
from vizlm.inspect.analysis import analyze_sentences, check_head, head_words
from vizlm.inspect.attribution import DEFAULT_STEPS, TEXT_METHODS, attribute, check_steps
from vizlm.inspect.attribution_corpus import (
    N_BOOT,
    PASSAGE_TOKENS,
    cluster_interval,
    cluster_ratio,
    reading_units,
    resample_clusters,
    unit_documents,
)
from vizlm.inspect.cache import cached, checkpoint_digest, stored
from vizlm.inspect.faithfulness import (
    ADVERSARY_LR,
    ADVERSARY_STEPS,
    EPSILON,
    PERMUTATIONS,
    FaithfulnessError,
    adversarial,
    agreement_table,
    permutations,
    self_attention,
    two_paths,
    uniform_baseline,
)
from vizlm.inspect.faithfulness_erasure import ERASE_K, FRACTIONS, MASKING, RANKINGS, aopc, erasure_curves
from vizlm.modeling.checkpoint import Checkpoint

WEIGHT_BINS = (0.0, 0.25, 0.5, 0.75, 1.0)  # the row's largest word-slot weight (Jain & Wallace's figures)
MAX_DISTANCE = 10  # the two paths by distance 1..MAX_DISTANCE, then beyond
FAITHFULNESS_VERSION = 2  # in the cache key: bump when the statistics change (2: intervals over documents)
TESTS = ("agreement", "permutations", "adversarial", "uniform", "erasure", "aopc", "paths")


def testable_head(ckpt: Checkpoint, head: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """The view the tests read, checked: None for attention over memory slots (which takes no ``head``); for a
    Transformer one head ``(layer, head)`` counted from 0 (default: the last layer's first head), as
    :meth:`~vizlm.inspect.analysis.SentenceAnalysis.at_head` counts. A model without attention, a head it does
    not have or a layer's heads together: :class:`FaithfulnessError`."""
    if head is not None and (isinstance(head, (str, bytes)) or not isinstance(head, Sequence) or len(head) != 2):
        raise FaithfulnessError(f"head is (layer, head), counted from 0, not {head!r}")
    if self_attention(ckpt):
        L, H = ckpt.model.config.layers, ckpt.model.config.heads
        layer, h = (L - 1, 0) if head is None else head
        if h is None:
            raise FaithfulnessError(f"{ckpt.label} is a Transformer: the tests replace the weights of one head; "
                                    "name one (layer, head), not a layer's heads together")
        try:
            return check_head(L, H, layer, h, ckpt.label)
        except InputError as exc:
            raise FaithfulnessError(str(exc)) from None
    if not ckpt.has_attention:
        raise FaithfulnessError(f"{ckpt.label} has no attention: there is nothing to test")
    if head is not None:
        raise FaithfulnessError(f"{ckpt.label} has no self-attention heads to choose from")
    return None


def collect(ckpt: Checkpoint, corpus: str, split: str, limit: int | None = None, permutations_n: int = PERMUTATIONS,
            epsilon: float = EPSILON, adversary_steps: int = ADVERSARY_STEPS, methods: Sequence[str] = TEXT_METHODS,
            n_steps: int = DEFAULT_STEPS, passage_tokens: int = PASSAGE_TOKENS, other: Checkpoint | None = None,
            seed: int = 0, progress: Callable[[float], None] | None = None,
            select: Sequence[int] | None = None,
            head: tuple[int, int] | None = None) -> tuple[dict[str, pd.DataFrame], np.ndarray]:
    """``(frames, documents)``: every test's frame over the first ``limit`` sentences of a processed split (or the
    sentences ``select`` names, by their index in the split, ascending), each with a ``unit`` column (the
    sentence, or a document model's passage, :func:`vizlm.inspect.attribution_corpus.reading_units`, each read
    from a zero state), not cached; and each unit's document (:func:`vizlm.inspect.attribution_corpus.unit_documents`;
    its length is the number of units). A Transformer's ``head`` (:func:`testable_head`) is tested; it has no
    two paths (its frame is empty)."""
    head = testable_head(ckpt, head)
    methods = list(methods)
    data = load_corpus(corpus, split)
    document = getattr(ckpt.model.config, "context", "sentence") == "document"
    index = _selected(len(data.sentences), limit, select)
    sentences, ids = [data.sentences[i] for i in index], [data.ids[i] for i in index]
    units = reading_units(sentences, ids, document, passage_tokens)
    parts: dict[str, list[pd.DataFrame]] = {t: [] for t in TESTS}
    for k, unit in enumerate(units):
        sa = analyze_sentences(ckpt, [sentences[i] for i in unit], top_k=0, effects=True, max_effect_pairs=0,
                               max_tokens=None)
        if head is not None:
            sa = sa.at_head(*head)
        atts = {m: attribute(ckpt, sa, m, n_steps) for m in ["slot-effect", *methods]}
        frames = {
            "agreement": agreement_table(ckpt, sa, methods, n_steps, atts),
            "permutations": permutations(ckpt, sa, permutations_n, seed + k),
            "adversarial": adversarial(ckpt, sa, epsilon, adversary_steps, seed=seed + k),
            "uniform": uniform_baseline(ckpt, sa, other),
            "erasure": erasure_curves(ckpt, sa, rankings=[*RANKINGS, *methods], seed=seed + k, attributions=atts),
            "aopc": aopc(ckpt, sa, rankings=["attention", "gradient", *methods, "random"], seed=seed + k,
                         attributions=atts),
            "paths": pd.DataFrame() if head is not None else two_paths(ckpt, sa),
        }
        for name, frame in frames.items():
            parts[name].append(frame.assign(unit=k))
        if progress:
            progress((k + 1) / len(units))
    frames = {name: pd.concat(xs, ignore_index=True) if xs else pd.DataFrame() for name, xs in parts.items()}
    return frames, unit_documents(units, ids)


def _selected(n: int, limit: int | None, select: Sequence[int] | None) -> list[int]:
    """The split's sentences a corpus run reads: ``select`` (indices, ascending, checked) or the first ``limit``."""
    if select is None:
        return list(range(n))[:limit]
    index = [int(i) for i in select]
    if any(b <= a for a, b in pairwise(index)) or (index and not 0 <= index[0] <= index[-1] < n):
        raise FaithfulnessError(f"select must name sentences of the split (0..{n - 1}) in ascending order")
    return index


def statistics(frames: dict[str, pd.DataFrame], documents: np.ndarray, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """The corpus statistics of :func:`collect`'s frames (JSON-able), every interval a 95% bootstrap over the
    documents (``documents``: each unit's, numbered from 0, as :func:`collect` gives them; over the units where all
    are of one document: :func:`vizlm.inspect.attribution_corpus.resample_clusters`)."""
    clusters, _ = resample_clusters(documents)  # what is resampled, by unit
    n_clusters = int(clusters.max(initial=-1)) + 1

    def ci(values, units, stat="mean"):
        return cluster_interval(np.asarray(values, float), clusters[np.asarray(units, int)], n_clusters, stat, n_boot,
                                seed)

    out: dict = {}
    a = frames["agreement"]
    if len(a):
        chosen = a[a.positions >= 2]  # a row with one position ranks nothing
        pairs = [c for c in a.columns if "~" in c]
        out["agreement"] = {"rows": len(chosen), "kendall_tau": {c: ci(chosen[c], chosen.unit) for c in pairs},
                            "ceiling": [c for c in pairs if not c.startswith("attention~")]}
    p = frames["permutations"]
    if len(p):
        shuffled = p[p.word_slots >= 2]
        bins = []
        for lo, hi in pairwise(WEIGHT_BINS):
            top = hi == WEIGHT_BINS[-1]
            sel = shuffled[(shuffled.max_weight >= lo) & ((shuffled.max_weight <= hi) if top else (shuffled.max_weight < hi))]
            bins.append({"lo": lo, "hi": hi, "rows": len(sel),
                         **{c: ci(sel[c], sel.unit, "median") for c in ("median_tvd", "median_jsd", "median_abs_dlogp")}})
        out["permutations"] = {
            "rows": len(shuffled), "binned_by": "the row's largest weight on a word slot", "bins": bins,
            "all": {c: ci(shuffled[c], shuffled.unit, "median") for c in ("median_tvd", "median_jsd", "median_abs_dlogp")},
            "fixed_weight": ci(shuffled.fixed_weight, shuffled.unit)}
    v = frames["adversarial"]
    if len(v):
        moved = v[v.slots >= 2]
        out["adversarial"] = {"rows": len(moved), "mean_jsd": ci(moved.jsd, moved.unit),
                              "median_jsd": ci(moved.jsd, moved.unit, "median"),
                              "share_over_half_ln2": ci((moved.jsd > 0.5 * math.log(2)).astype(float), moved.unit),
                              "mean_abs_dlogp": ci(moved.dlogp.abs(), moved.unit)}
    u = frames["uniform"]
    if len(u):
        out["uniform"] = {"tokens": len(u), "nll": ci(-u.logprob, u.unit), "uniform_nll": ci(-u.uniform_logprob, u.unit),
                          "uniform_minus_own": ci(u.logprob - u.uniform_logprob, u.unit)}
        if "frozen_logprob" in u:
            out["uniform"] |= {"frozen_nll": ci(-u.frozen_logprob, u.unit),
                               "frozen_minus_own": ci(u.logprob - u.frozen_logprob, u.unit),
                               "seed_jsd": ci(u.seed_jsd, u.unit)}  # NaN (one slot) ignored
    e = frames["erasure"]
    if len(e):
        out["erasure"] = {r: {"k": [int(k) for k in sorted(g.k.unique())],
                              "dlogp": [ci(gk.dlogp, gk.unit) for _, gk in g.groupby("k")],
                              "flip": [ci(gk.flip, gk.unit) for _, gk in g.groupby("k")]}
                          for r, g in e.groupby("ranking", sort=False)}
    o = frames["aopc"]
    if len(o):
        out["aopc"] = {}
        for r, g in o.groupby("ranking", sort=False):
            rows = g.groupby(["unit", "row"])[["comprehensiveness", "sufficiency"]].mean().reset_index()
            out["aopc"][r] = {
                "comprehensiveness": ci(rows.comprehensiveness, rows.unit), "sufficiency": ci(rows.sufficiency, rows.unit),
                "by_fraction": {str(f): {c: ci(gf[c], gf.unit) for c in ("comprehensiveness", "sufficiency")}
                                for f, gf in g.groupby("fraction")}}
    t = frames["paths"]
    if len(t):
        by = {"distance": [], "read": [], "state": [], "total": [], "read_share": []}
        for lo, hi in [(d, d) for d in range(1, MAX_DISTANCE + 1)] + [(MAX_DISTANCE + 1, None)]:
            sel = t[(t.distance >= lo) & ((t.distance <= hi) if hi is not None else True)]
            by["distance"].append(str(lo) if hi is not None else f">{MAX_DISTANCE}")
            for c in ("read", "state", "total"):
                by[c].append(ci(sel[c].abs(), sel.unit))
            of = clusters[sel.unit.to_numpy(int)]
            read = np.bincount(of, weights=sel.read.abs().to_numpy(), minlength=n_clusters)
            both = read + np.bincount(of, weights=sel.state.abs().to_numpy(), minlength=n_clusters)
            by["read_share"].append(cluster_ratio(read, both, n_boot, seed))
        out["paths"] = by
    return out


def _cache_parts(ckpt: Checkpoint, corpus: str, split: str, limit: int | None, permutations_n: int, epsilon: float,
                 adversary_steps: int, methods: Sequence[str], n_steps: int, passage_tokens: int,
                 other: Checkpoint | None, n_boot: int, seed: int, head: tuple[int, int] | None = None) -> dict:
    """The cache key of :func:`corpus_faithfulness` (every parameter), its arguments checked."""
    head = testable_head(ckpt, head)
    for m in methods:
        if m not in TEXT_METHODS:
            raise FaithfulnessError(f"unknown word-level method {m!r}; valid: {', '.join(TEXT_METHODS)}")
    n_steps = check_steps(n_steps)
    document = getattr(ckpt.model.config, "context", "sentence") == "document"
    return {"kind": "faithfulness", "version": FAITHFULNESS_VERSION, "checkpoint": checkpoint_digest(ckpt),
            "corpus": split_checksum(corpus, split), "split": split, "limit": limit, "permutations": permutations_n,
            "epsilon": epsilon, "adversary_steps": adversary_steps, "adversary_lr": ADVERSARY_LR,
            "methods": list(methods), "n_steps": n_steps, "ks": list(ERASE_K), "fractions": list(FRACTIONS),
            "n_boot": n_boot, "seed": seed, "context": "document" if document else "sentence",
            "passage_tokens": passage_tokens if document else None,
            "other": None if other is None else checkpoint_digest(other),
            **({} if head is None else {"head": list(head)})}  # a recurrent model's key as it was


def is_stored(ckpt: Checkpoint, corpus: str, split: str, limit: int | None = None, permutations_n: int = PERMUTATIONS,
              epsilon: float = EPSILON, adversary_steps: int = ADVERSARY_STEPS, methods: Sequence[str] = TEXT_METHODS,
              n_steps: int = DEFAULT_STEPS, passage_tokens: int = PASSAGE_TOKENS, other: Checkpoint | None = None,
              n_boot: int = N_BOOT, seed: int = 0, head: tuple[int, int] | None = None) -> bool:
    """Whether :func:`corpus_faithfulness` with these arguments is read from the disk cache rather than computed:
    the cost is said only for what will be computed."""
    return stored(_cache_parts(ckpt, corpus, split, limit, permutations_n, epsilon, adversary_steps, methods, n_steps,
                               passage_tokens, other, n_boot, seed, head))


# Every test over a split, the first time: seconds per token of the split, measured with the default parameters
# (100 permutations, 200 adversary steps, the three word-level methods) on a busy 2-core machine: the output layer
# over the vocabulary dominates (the bundled AMSRN and an 8-unit one with its 10,000 words cost alike, ~1.5 s).
SECONDS_PER_TOKEN = 0.05
SECONDS_PER_TOKEN_WORD = 1.5e-4  # per token and word of the vocabulary
SECONDS_PER_TOKEN_HEAD = 0.3  # a Transformer's head: each row run again alone (the bundled one, same machine)


def estimate_seconds(ckpt: Checkpoint, corpus: str, split: str, limit: int | None = None) -> float:
    """The expected time of :func:`corpus_faithfulness` of ``ckpt`` over the first ``limit`` sentences of a split
    with the default parameters, from their tokens and the vocabulary: an order of magnitude, said before it
    starts."""
    sentences = load_corpus(corpus, split).sentences
    tokens = sum(len(x) + 1 for x in (sentences[:limit] if limit is not None else sentences))  # with </s>
    if self_attention(ckpt):
        return tokens * SECONDS_PER_TOKEN_HEAD
    return tokens * (SECONDS_PER_TOKEN + SECONDS_PER_TOKEN_WORD * len(ckpt.vocab))


def corpus_faithfulness(
    ckpt: Checkpoint, corpus: str, split: str, limit: int | None = None, permutations_n: int = PERMUTATIONS,
    epsilon: float = EPSILON, adversary_steps: int = ADVERSARY_STEPS, methods: Sequence[str] = TEXT_METHODS,
    n_steps: int = DEFAULT_STEPS, passage_tokens: int = PASSAGE_TOKENS, other: Checkpoint | None = None,
    n_boot: int = N_BOOT, seed: int = 0, use_cache: bool = True, progress: Callable[[float], None] | None = None,
    select: Sequence[int] | None = None, head: tuple[int, int] | None = None,
) -> dict:
    """Every test over a processed split (its first ``limit`` sentences, or those ``select`` names), cached
    (:mod:`vizlm.inspect.cache`, keyed by the checkpoints' and the split's checksums and every parameter): :func:`statistics`
    of :func:`collect`.

    ``agreement`` (mean tau-b per pair, the ``ceiling`` pairs named), ``permutations`` (binned by the row's largest
    word-slot weight, :data:`WEIGHT_BINS`: per bin the median over rows of each row's median TVD, JSD and
    ``|delta log P|``), ``adversarial`` (JSD found within ``epsilon``), ``uniform`` (per-token NLL as read, with
    uniform and with ``other``'s attention), ``erasure`` (per ranking and k: mean delta log P, flip rate), ``aopc``
    (per ranking: comprehensiveness and sufficiency, their AOPC and per fraction), ``paths`` (per distance: mean
    ``|read|``, ``|state|``, ``|total|`` and the read's share of ``|read| + |state|``); ``masking``: how slots are
    dropped. Every interval a 95% bootstrap over the split's documents, or over the units where all are of one
    (``resampled`` says which; ``units`` and ``documents`` how many were read), ``n_boot`` resamples from
    ``seed``. A Transformer: one ``head`` (:func:`testable_head`; ``head`` in the result, counted from 0, and
    ``view`` in words), no two paths."""
    parts = _cache_parts(ckpt, corpus, split, limit, permutations_n, epsilon, adversary_steps, methods, n_steps,
                         passage_tokens, other, n_boot, seed, head)
    head = testable_head(ckpt, head)
    methods, n_steps, document = parts["methods"], parts["n_steps"], parts["context"] == "document"
    if select is not None:  # only when given: the keys of runs without it stay as they were
        parts["select"] = _selected(len(load_corpus(corpus, split).sentences), limit, select)

    def compute() -> dict:
        frames, documents = collect(ckpt, corpus, split, limit, permutations_n, epsilon, adversary_steps, methods,
                                    n_steps, passage_tokens, other, seed, progress, select, head)
        read_in = "passages" if document else "sentences"
        return {"model": ckpt.label, "corpus": corpus, "split": split, "context": parts["context"],
                "units": len(documents), "documents": int(documents.max(initial=-1)) + 1,
                "head": None if head is None else list(head),
                "view": None if head is None else head_words(head, ckpt.model.config.heads),
                "resampled": read_in if resample_clusters(documents)[1] == "units" else "documents", "read_in": read_in,
                "masking": MASKING,
                "unit": "nats",
                "permutations_per_row": permutations_n, "epsilon": epsilon,
                "other": None if other is None else other.label, **statistics(frames, documents, n_boot, seed)}

    return cached(parts, compute, use_cache)
