"""Untrusted text on its way in: what :func:`vizlm.inspect.analysis.analyze` reads and bounds, and the
exports' defence in depth. Input files are covered in ``test_data.py``, the CLI in ``test_cli.py``."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from vizlm.inspect import analysis, reading
from vizlm.modeling.checkpoint import load_checkpoint
from vizlm.present.export import export_analysis, export_frame

NOT_IN_OUTPUT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufdd0-\ufdef\ufffe\uffff\ud800-\udfff]")


@pytest.fixture(scope="module")
def amsrn():
    return load_checkpoint("amsrn")


def test_a_long_text_is_cut_before_it_is_tokenised_or_tagged(amsrn, monkeypatch):
    """100k characters: only MAX_TEXT_CHARS are tokenised and MAX_TOKENS tagged (it used to tag all: seconds)."""
    text = "The dogs in the park are barking because they are hungry . " * 1700  # 100,300 characters
    read, tagged = [], []
    split, tag = analysis.passage_documents, analysis.tag_sentences
    monkeypatch.setattr(analysis, "passage_documents", lambda t: read.append(len(t)) or split(t))
    monkeypatch.setattr(analysis, "tag_sentences", lambda ss: tagged.append(sum(map(len, ss))) or tag(ss))
    sa = analysis.analyze(amsrn, text)
    assert max(read) <= analysis.MAX_TEXT_CHARS < len(text)
    assert tagged == [analysis.MAX_TOKENS]
    words = [w for w in sa.norms if w != reading.BOUNDARY]
    assert len(words) == analysis.MAX_TOKENS and len(sa.norms) == len(sa.tags) and sa.truncated > 0
    assert len(sa.boundaries) == analysis.MAX_TOKENS // 12  # a passage: 33 whole sentences and a part of one
    assert any(f"{len(text):,} characters" in n and f"first {analysis.MAX_TOKENS} tokens" in n for n in sa.notes), sa.notes
    assert text.startswith(sa.text)
    assert all(sa.text[s:e] == w for w, (s, e) in zip(sa.tokens, sa.offsets) if w != reading.BOUNDARY)


def test_a_text_just_over_the_token_limit_keeps_the_token_note(amsrn):
    sa = analysis.analyze(amsrn, "word " * (analysis.MAX_TOKENS + 7))
    assert sa.truncated == 7 and len(sa.norms) == analysis.MAX_TOKENS
    assert f"the text has {analysis.MAX_TOKENS + 7} tokens; only the first {analysis.MAX_TOKENS} were analysed" in sa.notes


@pytest.mark.parametrize("dirty", ["the\x00market\x1b[31m fell\x08 \ufffe today", "the \udcff\udcfe market fell"])
def test_analyze_cleans_its_text_keeping_offsets(amsrn, dirty):
    sa = analysis.analyze(amsrn, dirty)
    assert len(sa.text) == len(dirty) and not NOT_IN_OUTPUT.search(sa.text)
    assert not any(NOT_IN_OUTPUT.search(w) for w in sa.tokens + sa.norms)
    assert all(sa.text[s:e] == w for w, (s, e) in zip(sa.tokens, sa.offsets))
    assert "market" in sa.norms and "fell" in sa.norms
    json.loads(export_analysis(sa, "json"))  # valid UTF-8 JSON
    export_analysis(sa, "csv").decode("utf-8-sig")


def test_exports_of_text_with_lone_surrogates_do_not_raise():
    """Defence in depth for text that skipped clean_text: CSV cells are cleaned, JSON encodes with 'replace'."""
    df = pd.DataFrame({"text": pd.Series(["the \udcff\x00market"], dtype=object), "ppl": [1.5]})  # Arrow strings refuse it
    assert "the \ufffd market" in export_frame(df, "csv").decode("utf-8-sig")
    assert json.loads(export_frame(df, "json"))[0]["text"] == "the ?\x00market"  # \x00 is escaped in JSON
