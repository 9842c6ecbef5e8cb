"""The Explorer's and Compare's URL state (vizlm.present.links): malformed or out-of-range values fall back with a note each."""

from __future__ import annotations

import pytest

from vizlm.inspect.analysis import MAX_TEXT_CHARS
from vizlm.inspect.highlight import DEFAULT, Share, TopK
from vizlm.present.links import MAX_TOP_K, CompareState, ExplorerState, explorer_query, parse_compare_query, parse_query

NAMES = ["lstm", "amsrn", "kvp"]


def parse(**params):
    return parse_query(params, NAMES, "amsrn", "lstm", "default text")


def test_valid_values_give_no_notes_and_round_trip():
    state, notes = parse(model="kvp", compare="lstm", text="the end .", threshold="0.35", target="2")
    assert notes == []
    assert state == ExplorerState("kvp", "lstm", "the end .", Share(0.35), 2)
    assert parse(**state.query())[0] == state
    assert explorer_query("kvp", "x")["threshold"] == f"{DEFAULT.share:g}"


@pytest.mark.parametrize("raw, expected", [("7", 1.0), ("-5", 0.0), ("1e9", 1.0)])
def test_threshold_out_of_range_is_clamped_with_a_note(raw, expected):
    state, notes = parse(threshold=raw)
    assert state.highlight == Share(expected)
    assert len(notes) == 1 and "outside 0 to 1" in notes[0] and f"{expected:g}" in notes[0]


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "abc", ""])
def test_threshold_not_a_number_falls_back_with_a_note(raw):
    state, notes = parse(threshold=raw)
    assert state.highlight == DEFAULT
    assert len(notes) == 1 and "not a number" in notes[0]


def test_top_k_and_target():
    state, notes = parse(topk="50")
    assert state.highlight == TopK(MAX_TOP_K) and "outside 1 to" in notes[0]
    state, notes = parse(topk="0")
    assert state.highlight == TopK(1) and notes
    state, notes = parse(topk="x")
    assert not isinstance(state.highlight, TopK) and "not a whole number" in notes[0]
    for bad in ("-1", "two"):
        state, notes = parse(target=bad)
        assert state.target is None and "not a word number" in notes[0]
    assert parse(target="99")[0].target == 99  # the page knows the text's length and says so (test_app)


def test_unknown_models_and_long_text():
    state, notes = parse(model="gpt9", compare="nope")
    assert state.model == "amsrn" and state.compare is None and len(notes) == 2
    state, notes = parse(text="x" * (MAX_TEXT_CHARS + 10))
    assert len(state.text) == MAX_TEXT_CHARS and f"{MAX_TEXT_CHARS:,}" in notes[0]


def parse_compare(**params):
    return parse_compare_query(params, NAMES, "lstm", "amsrn")


def test_compare_state_round_trips():
    state, notes = parse_compare(a="kvp", b="lstm", corpus="wsj", split="test")
    assert notes == [] and state == CompareState("kvp", "lstm", "wsj", "test")
    assert parse_compare(**state.query()) == (state, [])
    assert parse_compare() == (CompareState("lstm", "amsrn"), [])  # no link: the defaults, the first corpus


@pytest.mark.parametrize("params, state, note", [
    ({"a": "gpt9"}, CompareState("lstm", "amsrn"), "baseline model 'gpt9'"),
    ({"b": "gpt9"}, CompareState("lstm", "amsrn"), "compared model 'gpt9'"),
    ({"a": "amsrn"}, CompareState("amsrn", "lstm"), None),  # b left out: another than a, without a note
    ({"a": "kvp", "b": "kvp"}, CompareState("kvp", "amsrn"), "compares kvp with itself"),
    ({"corpus": "klingon", "split": "test"}, CompareState("lstm", "amsrn"), "corpus 'klingon'"),
    ({"corpus": "wsj", "split": "train"}, CompareState("lstm", "amsrn", "wsj"), "wsj has no split 'train'"),
])
def test_a_malformed_compare_link_falls_back_with_a_note(params, state, note):
    got, notes = parse_compare(**params)
    assert got == state
    assert (notes == []) if note is None else (len(notes) == 1 and note in notes[0])
