"""Corpus statistics against brute-force computations on tiny models."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import TINY, assert_same_math

from vizlm.core import paths
from vizlm.inspect.analysis import analyze_tokens
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.inspect.corpus_stats import attention_by_position, compare, compare_corpus, sentence_positions
from vizlm.data.vocab import SPECIALS, Vocab
from vizlm.models import build_model

VOCAB = Vocab(list(SPECIALS) + [f"w{i}" for i in range(36)])


def tiny(name, seed=0, vocab=VOCAB, **kw):
    torch.manual_seed(seed)
    return Checkpoint(build_model(name, **{**TINY, "vocab_size": len(vocab)}, **kw).eval(), vocab, name)


@pytest.fixture(scope="module")
def sentences():
    g = torch.Generator().manual_seed(5)
    return [[f"w{int(i)}" for i in torch.randint(0, 36, (int(n),), generator=g)]
            for n in torch.randint(1, 14, (40,), generator=g)]


def sentence_ppl(ckpt, words):
    """One sentence at a time, no batching, no padding."""
    ids = [VOCAB.bos_id] + VOCAB.encode(words)
    with torch.no_grad():
        logp = ckpt.model(torch.tensor([ids])).logits[0].log_softmax(-1)
    targets = ids[1:] + [VOCAB.eos_id]
    nll = -sum(float(logp[i, t]) for i, t in enumerate(targets))
    return nll, len(targets)


def test_compare_matches_brute_force(sentences):
    a, b = tiny("lstm", 0), tiny("kvp", 1, window=3)
    result = compare(a, b, sentences, [f"s{i}" for i in range(len(sentences))])
    brute = {f"s{i}": (sentence_ppl(a, s), sentence_ppl(b, s)) for i, s in enumerate(sentences)}
    for row in result.table.itertuples():
        (na, n), (nb, _) = brute[row.sentence_id]
        assert math.isclose(row.ppl_a, math.exp(na / n), rel_tol=1e-5)
        assert math.isclose(row.ppl_b, math.exp(nb / n), rel_tol=1e-5)
        assert row.length == n - 1
    tot_a = sum(v[0][0] for v in brute.values())
    tot_b = sum(v[1][0] for v in brute.values())
    tok = sum(v[0][1] for v in brute.values())
    s = result.summary
    assert math.isclose(s["ratio"], math.exp((tot_b - tot_a) / tok), rel_tol=1e-6)
    improved = np.mean([v[1][0] < v[0][0] for v in brute.values()])
    assert math.isclose(s["share_improved"], improved)
    assert s["ratio_ci_low"] <= s["ratio"] <= s["ratio_ci_high"]
    assert list(result.table.log_ratio) == sorted(result.table.log_ratio)  # most improved first
    assert result.most_worsened(1).log_ratio.iloc[0] == result.table.log_ratio.max()
    assert (result.most_improved(50, min_length=5).length >= 5).all()
    # only sentences b improves are "most improved", only those it worsens "most worsened", however many are asked
    every = len(result.table)
    assert len(result.most_improved(every)) == (result.table.log_ratio < 0).sum()
    assert len(result.most_worsened(every)) == (result.table.log_ratio > 0).sum()
    assert (result.most_improved(every).log_ratio < 0).all() and (result.most_worsened(every).log_ratio > 0).all()


def test_compare_refuses_different_vocabularies(sentences):
    other = Vocab(list(SPECIALS) + [f"v{i}" for i in range(36)])
    with pytest.raises(ValueError, match="vocabularies differ"):
        compare(tiny("lstm"), tiny("lstm", vocab=other), sentences, ["x"] * len(sentences))


def test_positions_match_brute_force(sentences):
    ckpts = [tiny("kvp", 2, window=3), tiny("amsrn", 3), tiny("lstm")]
    stats = attention_by_position(ckpts, sentences, window=4, batch_size=7)
    assert stats.skipped == ["lstm"]
    for ckpt in ckpts[:2]:
        per_offset = {d: [] for d in range(1, 5)}
        entropies, beyond, peaks = [], [], []
        for s in sentences:
            att = analyze_tokens(ckpt, s).attention  # (T, S)
            for r in range(att.shape[0]):
                row = att[r, : r + 1]
                entropies.append(-sum(p * math.log(p) for p in row if p > 0))
                peaks.append(max(row))
                inside = 0.0
                for d in range(1, 5):
                    if r + 1 - d >= 0:
                        per_offset[d].append(att[r, r + 1 - d])
                        inside += att[r, r + 1 - d]
                beyond.append(1 - inside)
        frame = stats.frame[stats.frame.model == ckpt.name].set_index("offset")
        for d, ws in per_offset.items():
            assert frame.loc[d, "count"] == len(ws)
            assert math.isclose(frame.loc[d, "mean"], np.mean(ws), rel_tol=1e-6, abs_tol=1e-9)
            assert frame.loc[d, "lo"] <= frame.loc[d, "mean"] <= frame.loc[d, "hi"]
        assert math.isclose(stats.entropy[ckpt.name], np.mean(entropies), rel_tol=1e-6)
        assert math.isclose(stats.beyond[ckpt.name], np.mean(beyond), rel_tol=1e-6, abs_tol=1e-9)
        assert math.isclose(stats.peak[ckpt.name], np.mean(peaks), rel_tol=1e-6)
        assert 1 / 4 < stats.peak[ckpt.name] < 1  # rows of up to 4 slots (kvp) or more
    kvp = stats.frame[stats.frame.model == "kvp"].set_index("offset")
    assert kvp.loc[4, "mean"] == 0  # outside the window of 3


def test_two_checkpoints_of_one_family_stay_apart(sentences, tmp_path):
    from vizlm.modeling.checkpoint import load_checkpoint, save_checkpoint

    for folder, seed in (("kvp", 2), ("kvp-scratch", 4)):
        save_checkpoint(tmp_path / folder, tiny("kvp", seed, window=3).model, "kvp", VOCAB)
    ckpts = [load_checkpoint(tmp_path / "kvp"), load_checkpoint(tmp_path / "kvp-scratch")]
    assert [c.label for c in ckpts] == ["kvp", "kvp-scratch"]
    stats = attention_by_position(ckpts, sentences, window=4)
    assert set(stats.frame.model) == set(stats.entropy) == {"kvp", "kvp-scratch"}
    assert stats.entropy["kvp"] != stats.entropy["kvp-scratch"]


def test_sentence_positions(sentences):
    sa = analyze_tokens(tiny("amsrn", 3), sentences[0])
    df = sentence_positions(sa, window=3)
    for row in df.itertuples():
        assert row.weight == pytest.approx(sa.attention[row.target, row.target + 1 - row.offset])


def test_corpus_results_are_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path))
    vocab = Vocab.for_corpus("brown")
    a, b = tiny("lstm", 0, vocab=vocab), tiny("amsrn", 1, vocab=vocab)
    calls = []
    import vizlm.inspect.corpus_stats as corpus

    real = corpus._nll
    monkeypatch.setattr(corpus, "_nll", lambda *args, **kw: calls.append(1) or real(*args, **kw))
    first = compare_corpus(a, b, "wsj", "test")
    assert len(calls) == 2 and len(list(tmp_path.glob("*.json"))) == 2
    second = compare_corpus(a, b, "wsj", "test")
    assert len(calls) == 2  # served from the cache
    assert first.table.equals(second.table) and first.summary == second.summary


def test_running_text_is_resampled_by_document():
    """With document sizes the bootstrap draws whole documents: the same corpus ratio, and an
    interval that widens when the sentences of a document move together (as they do when a
    model reads running text); without them every sentence is drawn on its own."""
    from vizlm.inspect.corpus_stats import build_comparison

    a = Checkpoint(torch.nn.Module(), VOCAB, "a")
    rng = np.random.default_rng(0)
    docs, per_doc = 40, 25
    doc_effect = np.repeat(rng.normal(0, 0.3, docs), per_doc)  # each document better or worse as a whole
    tok = np.full(docs * per_doc, 20.0)
    nll_a = tok * 5.0
    nll_b = nll_a + tok * (doc_effect + rng.normal(0, 0.05, docs * per_doc))
    ids = [f"d{i // per_doc}:{i % per_doc}" for i in range(docs * per_doc)]
    flat = build_comparison(a, a, nll_a, nll_b, tok, ids, ids)
    grouped = build_comparison(a, a, nll_a, nll_b, tok, ids, ids, documents=[per_doc] * docs)
    assert flat.summary["resampled"] == "sentences" and grouped.summary["resampled"] == "documents"
    assert grouped.summary["ratio"] == flat.summary["ratio"]
    width = {k: c.summary["ratio_ci_high"] - c.summary["ratio_ci_low"] for k, c in (("flat", flat), ("grouped", grouped))}
    assert width["grouped"] > 3 * width["flat"]


@pytest.mark.parametrize("family,kw,context", [("amsrn", {}, "sentence"), ("kvp", {"window": 4}, "document")])
def test_positions_stored_for_a_wider_window_serve_a_narrower_one(monkeypatch, tmp_path, family, kw, context):
    """The sums stored at window 6 give the statistics at window 3 without reading the text again,
    equal (float64 tolerance: the weight beyond the window is summed in another order) to those
    computed at window 3; with effects they serve a request without, never the other way."""
    import vizlm.inspect.corpus_stats as corpus

    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path))
    ckpt = tiny(family, 2, context=context, **kw)
    if family == "amsrn":  # W_pr starts at zero: give the read weight, so that the effects are not all zero
        torch.nn.init.uniform_(ckpt.model.read_proj.weight, -0.3, 0.3)
    name = ckpt.label
    g = torch.Generator().manual_seed(1)
    sents = [[f"w{int(i)}" for i in torch.randint(0, 36, (int(n),), generator=g)]
             for n in torch.randint(2, 12, (24,), generator=g)]
    ids = [f"d{i // 6}:{i % 6}" for i in range(len(sents))]
    run = lambda window, effects=True, cache=True: attention_by_position(  # noqa: E731
        [ckpt], sents, window=window, ids=ids, corpus_checksum="c" if cache else None, effects=effects)
    run(6)
    real, calls = corpus._position_sums, []
    monkeypatch.setattr(corpus, "_position_sums", lambda *a, **k: calls.append(1) or real(*a, **k))
    narrowed, without = run(3), run(3, effects=False)
    assert not calls  # both from the window-6 entry
    direct = run(3, cache=False)
    for a, b in ((narrowed, direct), (without, direct)):
        cols = ["mean", "lo", "hi", "count"] + (["effect", "effect_lo", "effect_hi"] if b is direct and a is narrowed else [])
        assert_same_math(torch.tensor(a.frame[cols].to_numpy(float)), torch.tensor(b.frame[cols].to_numpy(float)))
        for field in ("entropy", "beyond", "peak"):
            assert getattr(a, field)[name] == pytest.approx(getattr(b, field)[name], rel=1e-12, abs=1e-12)
    assert narrowed.effects[name] == pytest.approx(direct.effects[name], rel=1e-12)
    assert narrowed.effects[name]["mean_abs_read_bits"] > 0 and narrowed.frame["effect"].abs().sum() > 0
    assert without.frame["effect"].isna().all()
    before = len(calls)
    run(7)  # wider than anything stored: computed
    assert len(calls) == before + 1


def test_shipped_statistics_are_read_when_the_cache_has_none(monkeypatch, tmp_path):
    """An entry shipped beside the checkpoints (gzipped, read only) answers like one in the cache; the
    user's cache wins; a damaged shipped entry is recomputed."""
    import gzip
    import json

    from vizlm.inspect import cache

    shipped = tmp_path / "data" / paths.SHIPPED_STATS
    shipped.mkdir(parents=True)
    monkeypatch.setenv("VIZLM_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path / "cache"))
    parts = {"kind": "test", "n": 1}
    with gzip.open(shipped / f"{cache.key_of(parts)}{cache.SHIPPED_SUFFIX}", "wt", encoding="utf-8") as f:
        json.dump({"parts": parts, "value": {"from": "shipped"}}, f)
    assert cache.cached(parts, lambda: {"from": "computed"}) == {"from": "shipped"}
    assert not (tmp_path / "cache").exists()  # nothing copied into the user's cache
    cache.store(parts, {"from": "cache"})
    assert cache.cached(parts, lambda: {"from": "computed"}) == {"from": "cache"}
    other = {"kind": "test", "n": 2}
    (shipped / f"{cache.key_of(other)}{cache.SHIPPED_SUFFIX}").write_bytes(b"\x1f\x8b not gzip")
    assert cache.cached(other, lambda: {"from": "computed"}) == {"from": "computed"}


@pytest.mark.parametrize("family,kw", [
    ("amsrn", {}), ("kvp", {"window": 3, "context": "document"}),
    ("transformer", {"heads": 2, "layers": 2, "block": 6, "context": "document"}),
])
def test_position_bands_resample_documents(sentences, family, kw):
    """Each document's sums, read with the others in streams and batches, are those of the document read alone; the
    band is the bootstrap over them; one document resamples its sentences, one sentence its words."""
    from vizlm.inspect.attribution_corpus import cluster_means

    ckpt = tiny(family, 2, **kw)
    ids = [f"d{i % 3}:{i}" for i in range(len(sentences))]  # three documents, interleaved: grouped in order of first id
    ids = sorted(ids, key=lambda x: (x.split(":")[0], int(x.split(":")[1])))
    label = ckpt.label if family != "transformer" else f"{ckpt.label} · layer 1"
    whole = attention_by_position([ckpt], sentences, window=4, ids=ids, effects=False, use_cache=False)
    assert whole.resampled[label] == "documents"
    assert "over the documents read" in whole.band_note() and "only 3 documents, so the interval is rough" in whole.band_note()
    units = whole.units[label]
    assert units["total"].shape == (3, 4)
    for d in range(3):
        mine = [i for i, x in enumerate(ids) if x.startswith(f"d{d}:")]
        alone = attention_by_position([ckpt], [sentences[i] for i in mine], window=4, ids=[ids[i] for i in mine],
                                      effects=False, use_cache=False)
        assert alone.resampled[label] == "sentences"  # one document: its sentences are resampled
        assert np.allclose(units["total"][d], alone.units[label]["total"].sum(0), rtol=1e-9, atol=1e-12)
        assert np.array_equal(units["count"][d], alone.units[label]["count"].sum(0))
    _, lo, hi = cluster_means(units["total"], units["count"])
    frame = whole.frame[whole.frame.model == label]
    assert np.allclose(frame["lo"], np.where(units["count"].sum(0) > 0, lo, frame["mean"]), equal_nan=True)
    assert np.allclose(frame["hi"], np.where(units["count"].sum(0) > 0, hi, frame["mean"]), equal_nan=True)
    one = attention_by_position([ckpt], sentences[:1], window=4, ids=ids[:1], effects=False, use_cache=False)
    assert one.resampled[label] == "words" and "rough" not in one.band_note()
    many = attention_by_position([ckpt], sentences[:12], window=4, ids=[f"d{i}:0" for i in range(12)], effects=False,
                                 use_cache=False)  # twelve documents of a sentence each: enough for a plain bootstrap
    assert many.resampled[label] == "documents" and "rough" not in many.band_note()
