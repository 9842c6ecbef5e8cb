"""A Transformer's self-attention in the analysis: every layer and head laid out with slot j = input j, one head (or
a layer's mean) shown at a time, the same views, the same file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import assert_same_math

from vizlm.api import Model
from vizlm.core.errors import InputError
from vizlm.data.vocab import Vocab
from vizlm.inspect.analysis import analyze
from vizlm.modeling.checkpoint import load_checkpoint, save_checkpoint
from vizlm.models import build_model
from vizlm.present.heatmap import attention_heatmap
from vizlm.present.links import head_code, parse_head_code, parse_query
from vizlm.present.serialize import AnalysisFileError, analysis_dict, analysis_from_dict
from vizlm.present.style import slot_axis_labels, target_axis_labels

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "."]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.manual_seed(0)
    vocab = Vocab(["<pad>", "<s>", "</s>", "<unk>"] + WORDS)
    model = build_model("transformer", vocab_size=len(vocab), emb_dim=8, hidden_dim=16, heads=2, layers=3, block=6,
                        context="document").eval()
    folder = tmp_path_factory.mktemp("t") / "transformer"
    save_checkpoint(folder, model, "transformer", vocab)
    return load_checkpoint(folder)


def test_the_heads_are_the_models_with_slot_j_the_input_j(ckpt):
    """Row r of head (l, h) is the model's own weights of position r over positions 0..r (its input and the ones
    before it); the shown attention is the last layer's mean over its heads."""
    sa = analyze(ckpt, "the cat sat on the mat")
    ids = torch.tensor([[ckpt.vocab.stoi["<s>"]] + ckpt.vocab.encode(sa.norms)])
    with torch.no_grad():
        _, att = ckpt.model.encode_with_attention(ids)  # (1, L, H, T, T)
    assert sa.self_attention and sa.heads.shape == (3, 2, 7, 7)
    assert_same_math(torch.from_numpy(sa.heads), att[0].double())
    assert sa.head == (2, None) and sa.head_label == "layer 3, mean of 2 heads"
    np.testing.assert_allclose(sa.attention, sa.heads[2].mean(0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(sa.attention.sum(1), 1, rtol=0, atol=1e-6)
    assert sa.slot_labels == sa.input_labels == ["<s>", "the", "cat", "sat", "on", "the", "mat"]
    assert [sa.slot_token(j) for j in range(7)] == [-1, 0, 1, 2, 3, 4, 5]
    assert sa.slot_offsets()[4, 4] == 0 and sa.slot_offsets()[4, 1] == 3  # the word just read: 0 words back
    assert sa.start_slots == [] and sa.read_effect is None and sa.slot_effects is None


def test_a_later_word_changes_no_earlier_row_of_any_head(ckpt):
    a = analyze(ckpt, "the cat sat on")
    b = analyze(ckpt, "the cat sat dog")
    np.testing.assert_array_equal(a.heads[:, :, :4], b.heads[:, :, :4])  # rows 0..3 read <s> the cat sat
    assert not np.array_equal(a.heads[:, :, 4], b.heads[:, :, 4])


def test_a_row_attends_within_its_block_only(ckpt):
    """The model reads a text in blocks of 6 tokens: row 6 starts a block and attends to itself alone."""
    sa = analyze(ckpt, "the cat sat on the mat . the dog ran")
    assert (sa.heads[:, :, 6, :6] == 0).all() and np.allclose(sa.heads[:, :, 6, 6], 1)
    assert not sa.allowed()[7, :6].any() and sa.allowed()[7, 6:8].all()


def test_at_head_shows_one_head_or_a_layers_mean(ckpt):
    sa = Model(ckpt).analyze("the cat sat on the mat")
    one = sa.at_head(0, 1)
    assert one.head == (0, 1) and one.head_label == "layer 1, head 2" and type(one) is type(sa)
    assert np.shares_memory(one.attention, sa.heads) and one.heads is sa.heads
    np.testing.assert_array_equal(one.attention, sa.heads[0, 1])
    assert sa.at_head(-1) is sa and sa.at_head(1).head == (1, None)
    hl = one.highlighted(rows=[4])[0]
    assert [h.slot for h in hl] == [int(j) for j in np.argsort(-one.attention[4])[: len(hl)]]
    for bad in (3, -4, 1.0, True):
        with pytest.raises(InputError, match="layer must be"):
            sa.at_head(bad)
    with pytest.raises(InputError, match="head must be"):
        sa.at_head(0, 2)


def test_a_model_without_heads_says_so():
    from vizlm.inspect.analysis import SentenceAnalysis

    sa = SentenceAnalysis("m", "a", ["a"], ["a"], [(0, 1)], [False], ["a", "</s>"], np.zeros(2), [[], []],
                          np.zeros((2, 0)), None, None)
    with pytest.raises(InputError, match="no self-attention heads"):
        sa.at_head(0)


def test_the_views_number_a_words_slot_as_its_position(ckpt):
    sa = analyze(ckpt, "the cat sat")
    assert slot_axis_labels(sa) == ["1 <s>", "2 the", "3 cat", "4 sat"]
    assert target_axis_labels(sa)[:3] == ["2 the", "3 cat", "4 sat"]  # a word's row and column share its number
    spec = attention_heatmap(sa.at_head(0, 0)).to_dict()
    assert "self-attention, layer 1, head 1" in json.dumps(spec)


def test_a_saved_analysis_keeps_every_head_and_the_one_shown(ckpt, tmp_path):
    sa = Model(ckpt).analyze("the cat sat on the mat").at_head(1, 0)
    back = analysis_from_dict(json.loads(json.dumps(analysis_dict(sa))))
    assert back.head == (1, 0) and back.self_attention
    np.testing.assert_allclose(back.heads, sa.heads, rtol=1e-12, atol=0)
    np.testing.assert_allclose(back.attention, sa.attention, rtol=1e-12, atol=0)
    assert back.slot_labels == sa.slot_labels
    doc = analysis_dict(sa)
    doc["head"] = [5, 0]
    with pytest.raises(AnalysisFileError, match="not one of the 3 layers x 2 heads"):
        analysis_from_dict(doc)
    doc = analysis_dict(sa)
    doc["targets"][3]["heads"][0] = doc["targets"][3]["heads"][0][:1]
    with pytest.raises(AnalysisFileError, match="target 3's 'heads' must be 3 layers of 2 heads"):
        analysis_from_dict(doc)


def test_the_head_in_a_link(ckpt):
    assert head_code((1, None)) == "2" and head_code((0, 3)) == "1.4"
    assert parse_head_code("2.1") == (1, 0) and parse_head_code("3") == (2, None)
    assert parse_head_code("0") is None and parse_head_code("1.x") is None and parse_head_code("9" * 5) is None
    state, notes = parse_query({"model": "m", "head": "2.1"}, ["m"], "m", None, "x")
    assert state.head == "2.1" and not notes and state.query()["head"] == "2.1"
    state, notes = parse_query({"model": "m", "head": "two"}, ["m"], "m", None, "x")
    assert state.head is None and "head 'two'" in notes[0]


def test_the_cli_shows_a_head_and_refuses_one_it_does_not_have(ckpt, capsys):
    from vizlm.cli import main

    assert main(["analyze", "--checkpoint", str(ckpt.path), "--text", "the cat sat", "--layer", "1", "--head", "2"]) == 0
    out = capsys.readouterr().out
    assert "self-attention, layer 1, head 2 (of 3 layers x 2 heads" in out and "slot effects not computed" not in out
    assert main(["analyze", "--checkpoint", str(ckpt.path), "--text", "the cat sat", "--head", "3"]) == 2
    assert "--head 3: transformer has 2 heads a layer (1 to 2)" in capsys.readouterr().err
    assert main(["analyze", "--checkpoint", "lstm", "--text", "the cat sat", "--layer", "1"]) == 2
    assert "lstm has none" in capsys.readouterr().err


def test_every_head_in_one_frame(ckpt):
    sa = Model(ckpt).analyze("the cat sat")
    frame = sa.heads_frame()
    assert len(frame) == 3 * 2 * int(sa.allowed().sum())
    row = frame[(frame.layer == 2) & (frame["head"] == 1) & (frame.target_index == 2) & (frame.slot == 2)].iloc[0]
    assert row.attended == "cat" and row.distance == 1 and row.weight == sa.heads[1, 0, 2, 2]
    assert "self-attention 3x2, layer 3, mean of 2 heads" in repr(sa)
    assert sa.at_head(0, 0).heads_frame().equals(frame)  # every head, whichever is shown


@pytest.mark.parametrize("context", ["document", "sentence"])
def test_attention_by_position_per_layer_is_the_analyses_mean(ckpt, context, tmp_path):
    """Fig. 3 of a Transformer: a line per layer (its mean over heads), offset 0 the word just read, equal to the
    mean over the analyses' rows of the same texts; a word of an earlier block counts with weight 0."""
    from vizlm.inspect.analysis import analyze_sentences
    from vizlm.inspect.corpus_stats import attention_by_position

    ck = ckpt
    if context == "sentence":
        model = build_model("transformer", **{**ckpt.model.config.__dict__, "context": "sentence"}).eval()
        model.load_state_dict(ckpt.model.state_dict())
        save_checkpoint(tmp_path / "s", model, "transformer", ckpt.vocab)
        ck = load_checkpoint(tmp_path / "s")
    sents = [["the", "cat", "sat", "on", "the", "mat"], ["the", "dog", "ran"], ["the", "cat", "ran", "on", "the", "dog",
                                                                             "mat", "sat"]]
    stats = attention_by_position([ck], sents, window=4, effects=False, ids=["a:0", "a:1", "b:0"], use_cache=False)
    frame = stats.frame
    assert sorted(set(frame.model)) == [f"{ck.label} · layer {k}" for k in (1, 2, 3)]
    texts = [[sents[0], sents[1]], [sents[2]]] if context == "document" else [[s] for s in sents]
    weights: dict = {}
    for text in texts:
        sa = analyze_sentences(ck, text)
        offsets = sa.slot_offsets()
        for layer in range(3):
            mean = sa.heads[layer].mean(0)
            for d in range(4):
                weights.setdefault((layer, d), []).extend(mean[(offsets == d) & sa.readable()])
    for (layer, d), values in weights.items():
        row = frame[(frame.model == f"{ck.label} · layer {layer + 1}") & (frame.offset == d)].iloc[0]
        assert row["count"] == len(values)
        assert row["mean"] == pytest.approx(float(np.mean(values)), rel=1e-6)  # float32 weights, other batches
    assert frame.effect.isna().all()
