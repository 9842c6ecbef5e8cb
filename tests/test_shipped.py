"""The corpus statistics shipped with the bundled checkpoints (``data/stats/``, written by
``scripts/ship_stats.py``): every corpus page's first view of a bundled model on a bundled split
is read from them, never computed (so it opens at once on a cold cache), and they are what
computing them gives."""

from __future__ import annotations

import pytest
import torch
from conftest import TOLERANCE

from vizlm.inspect import attribution_corpus, case_gallery as cases, corpus_stats as corpus
from vizlm.inspect.highlight import DEFAULT
from vizlm.inspect.attribution_corpus import BY_DISTANCE, corpus_attribution
from vizlm.inspect.case_gallery import GALLERY_EXAMPLES, GALLERY_LIMIT, GALLERY_RANK, corpus_cases
from vizlm.modeling.checkpoint import bundled_checkpoints, bundled_dir, load_checkpoint, meta_corpus
from vizlm.inspect.corpus_stats import MAX_WINDOW, positions_corpus, split_scores
from vizlm.data.registry import CORPORA, CORPUS_LANGUAGE, HELD_OUT

pytestmark = pytest.mark.skipif(not bundled_checkpoints(), reason="no bundled checkpoints in checkpoints/")


def held_out_splits(ckpt) -> list[tuple[str, str]]:
    language = CORPUS_LANGUAGE.get(meta_corpus(ckpt.meta))
    return [(c, s) for c, splits in CORPORA.items() if CORPUS_LANGUAGE[c] == language for s in HELD_OUT if s in splits]


def test_the_corpus_pages_first_views_of_bundled_models_are_shipped(monkeypatch, tmp_path):
    """With an empty cache and every computation refused: Compare's per-sentence NLLs and the Cases
    report at the page's defaults for every bundled checkpoint on every held-out split of its
    language; Positions at its widest window and a narrower one on the split the pages open with, and
    its attribution by distance there (every model, attention or not)."""
    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path))

    def refuse(*args, **kwargs):
        raise AssertionError(f"{where}: computed, not read from data/stats/: run scripts/ship_stats.py")

    monkeypatch.setattr(corpus, "_nll", refuse)
    monkeypatch.setattr(corpus, "_position_sums", refuse)
    monkeypatch.setattr(corpus, "_self_attention_sums", refuse)
    monkeypatch.setattr(cases, "_case_report", refuse)
    monkeypatch.setattr(attribution_corpus, "collect", refuse)
    where = ""
    for name in bundled_checkpoints():
        ckpt = load_checkpoint(bundled_dir() / name)
        for corpus_name, split in held_out_splits(ckpt):
            where = f"{name} on {corpus_name}/{split}"
            assert len(split_scores(ckpt, corpus_name, split)["nll"]) > 0, where
            if (corpus_name, split) == (meta_corpus(ckpt.meta), HELD_OUT[0]):
                by_distance = corpus_attribution(ckpt, corpus_name, split, **BY_DISTANCE)
                assert by_distance["model"] == name and by_distance["positions"]["count"][1] > 0, where
            if ckpt.has_attention or getattr(ckpt.model, "self_attention", False):  # a Transformer's heads too
                if (corpus_name, split) == (meta_corpus(ckpt.meta), HELD_OUT[0]):  # the split the pages open with
                    for window in (MAX_WINDOW, 10):
                        assert not positions_corpus([ckpt], corpus_name, split, window=window).frame.empty, where
                report = corpus_cases(ckpt, corpus_name, split, setting=DEFAULT, limit=GALLERY_LIMIT,
                                      examples_per_label=GALLERY_EXAMPLES, rank=GALLERY_RANK)
                assert report.model.split(" · ")[0] == name and report.sentences > 0, where
    assert not list(tmp_path.iterdir())  # nothing needed computing


def test_a_shipped_entry_is_what_computing_gives(monkeypatch, tmp_path):
    """Two computations (here and where the entries were made; another machine's kernels round
    differently): float32 models, so float32's tolerance."""
    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path))
    ckpt = load_checkpoint(bundled_dir() / "kvp")
    shipped = split_scores(ckpt, "wsj", "test")
    computed = split_scores(ckpt, "wsj", "test", use_cache=False)
    assert shipped["tokens"] == computed["tokens"]
    torch.testing.assert_close(torch.tensor(shipped["nll"]), torch.tensor(computed["nll"]),
                               **TOLERANCE[torch.float32])
    # the Cases report: its rules may have changed since (then raise case_gallery.CASES_VERSION and ship again)
    kw = {"setting": DEFAULT, "limit": GALLERY_LIMIT, "examples_per_label": GALLERY_EXAMPLES,
          "rank": GALLERY_RANK}
    shipped, computed = (corpus_cases(ckpt, "brown", "test", use_cache=use, **kw) for use in (True, False))
    assert (shipped.pairs, shipped.counts) == (computed.pairs, computed.counts)
    assert not list(tmp_path.iterdir())  # the shipped entries were read


def test_prune_deletes_only_the_entries_of_checkpoints_no_longer_bundled(tmp_path):
    """``ship_stats.py --prune``: an entry whose checkpoint checksum is no bundled checkpoint's goes; a bundled
    checkpoint's entry and anything without a checkpoint stay."""
    import gzip
    import importlib.util
    import json

    from vizlm.core import paths
    from vizlm.inspect.cache import SHIPPED_SUFFIX, checkpoint_digest

    spec = importlib.util.spec_from_file_location("ship_stats", paths.home() / "scripts" / "ship_stats.py")
    ship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship)
    bundled = checkpoint_digest(load_checkpoint(bundled_dir() / bundled_checkpoints()[0]))
    for name, parts in (("kept", {"kind": "positions", "checkpoint": bundled}),
                        ("gone", {"kind": "positions", "checkpoint": "0" * 64}), ("other", {"kind": "corpus"})):
        (tmp_path / f"{name}{SHIPPED_SUFFIX}").write_bytes(gzip.compress(json.dumps({"parts": parts, "value": {}}).encode()))
    assert ship.prune(tmp_path) == [tmp_path / f"gone{SHIPPED_SUFFIX}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"kept{SHIPPED_SUFFIX}", f"other{SHIPPED_SUFFIX}"]
