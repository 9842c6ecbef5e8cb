"""The highlight setting (vizlm.inspect.highlight): one validated value, one rule for attention and attribution, and the
Explorer's one-word view (vizlm.present.word_view) agreeing with the JSON document."""

from __future__ import annotations

import numpy as np
import pytest

import vizlm
from vizlm.core.errors import InputError
from vizlm.inspect.analysis import MIN_TOP_K_WEIGHT, SentenceAnalysis
from vizlm.inspect.highlight import DEFAULT, NONE, ScoreRow, Share, TopK, chosen, describe, fields, setting
from vizlm.present.serialize import analysis_dict
from vizlm.present.word_view import word_view

TEXT = "The dogs in the park are barking because they saw a cat ."


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.2", True, None])
def test_a_share_is_a_number_from_0_to_1(bad):
    with pytest.raises(InputError, match="threshold must be a number from 0 to 1"):
        Share(bad)


@pytest.mark.parametrize("bad", [0, -3, 51, 2.5, "3", False])
def test_top_k_is_a_whole_number_from_1(bad):
    with pytest.raises(InputError, match="top_k must be a whole number from 1 to"):
        TopK(bad)


def test_the_door_makes_one_value():
    assert setting() == DEFAULT == Share(0.2) and setting(0.3) == Share(0.3) and setting(top_k=2) == TopK(2)
    assert setting(default=NONE) is NONE
    with pytest.raises(InputError, match="not both"):
        setting(0.3, 2)
    assert [fields(v) for v in (Share(0.3), TopK(2), NONE)] == [(0.3, None), (None, 2), (None, None)]
    assert [describe(v) for v in (Share(0.25), TopK(3), NONE)] == ["weight ≥ 0.25", "top 3", ""]
    assert Share(1) == Share(1.0) and hash(TopK(2)) == hash(TopK(2))  # a memo key, a cache key


def test_the_rule_largest_first_within_a_share_or_the_top_k():
    size = np.array([0.1, np.nan, 0.5, 0.2, 0.5, 0.04])  # NaN: cannot be highlighted
    row = ScoreRow(size, 1.0, 0.05)
    assert chosen(row, Share(0.2)) == [2, 4, 3]  # ties: the earlier position first
    assert chosen(row, Share(0.0)) == [2, 4, 3, 0, 5]
    assert chosen(row, TopK(5)) == [2, 4, 3, 0]  # below `least` is no top-k pick
    assert chosen(row, NONE) == []
    relative = ScoreRow(size * 4, scale=2.0)  # a share of the scale: 0.5 * 4 / 2 = 1
    assert chosen(relative, Share(1.0)) == [2, 4] and chosen(relative, TopK(5)) == [2, 4, 3, 0, 5]
    np.testing.assert_allclose(relative.shares[[2, 3]], [1.0, 0.4])


@pytest.fixture(scope="module")
def a():
    return vizlm.load("amsrn").analyze(TEXT)


def test_attention_and_attribution_use_the_one_rule(a):
    for r in range(len(a.targets)):
        weights = np.where(a.allowed()[r], a.attention[r], np.nan)
        order = [int(j) for j in np.flatnonzero(a.allowed()[r]) if a.attention[r, j] >= 0.3]
        assert [h.slot for h in a.highlighted(Share(0.3), rows=[r])[0]] == sorted(order, key=lambda j: -weights[j])
        top = [h.slot for h in a.highlighted(TopK(2), rows=[r])[0]]
        assert len(top) <= 2 and all(a.attention[r, j] >= MIN_TOP_K_WEIGHT for j in top)
    attr = vizlm.load("amsrn").attribute(TEXT, method="gradient-x-input")
    size = np.abs(attr.scores) * attr.covered
    for r in attr.computed_rows():
        lit = attr.highlighted(r, Share(0.5))
        assert set(lit) == {p for p in range(size.shape[1]) if size[r, p] > 0 and size[r, p] >= 0.5 * size[r].max()}
        assert attr.highlights(r, threshold=0.5) == lit and attr.highlighted(r, NONE) == []


def test_the_api_adds_methods_and_overrides_none_the_layers_below_call(a):
    below = {name for name in vars(SentenceAnalysis) if not name.startswith("__")}
    assert not below & set(vars(type(a))) - {"_setting"}
    assert a.highlight == DEFAULT and (a.threshold, a.top_k) == (0.2, None)
    b = vizlm.Analysis.of(a, TopK(2))
    assert (b.threshold, b.top_k) == (None, 2) and b.highlights() is b.highlighted(TopK(2))


@pytest.mark.parametrize("value", [DEFAULT, TopK(2), Share(0.05)])
def test_the_word_view_is_the_json_documents_row(a, value):
    doc = analysis_dict(a, value)
    for r in range(len(a.targets)):
        t, view = doc["targets"][r], word_view(a, r, value)
        assert (view.word, view.prob, view.surprisal_bits) == (t["word"], t["prob"], t["surprisal_bits"])
        assert (view.read_effect_bits, view.prob_without_read, view.start_weight, view.gate_mean) == pytest.approx(
            (t["read_effect_bits"], t["prob_without_read"], t["start_weight"], t["gate_mean"]), rel=1e-12)
        assert [{"word": w, "prob": p} for w, p in view.top] == t["top"]
        assert [h.to_dict() for h in view.highlights] == t["highlights"] and view.cases == t["cases"]
