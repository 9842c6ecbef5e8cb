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
    assert sa.start_slots == []


def test_the_analysis_carries_every_views_effects_and_shows_the_heads(ckpt):
    """Read and slot effects of each layer's heads and of each head (vizlm.models.effects.head_effects), laid out as
    the rows and slots; at_head shows the head's; a text with too many pairs keeps the read effects only."""
    from vizlm.models.effects import head_effects

    sa = analyze(ckpt, "the cat sat on the mat")
    assert set(sa.head_effects) == {(k, h) for k in range(3) for h in (None, 0, 1)}
    ids = torch.tensor([[ckpt.vocab.stoi["<s>"]] + ckpt.vocab.encode(sa.norms)])
    targets = torch.tensor([ckpt.vocab.encode(sa.norms) + [ckpt.vocab.eos_id]])
    with torch.no_grad():
        read, slots = head_effects(ckpt.model, ids, targets, 0, 1)
    one = sa.at_head(0, 1)
    np.testing.assert_array_equal(one.read_effect, read[0].double().numpy())
    np.testing.assert_array_equal(one.slot_effects, slots[0].double().numpy())
    assert sa.read_effect is sa.head_effects[(2, None)][0] and one.effect_rank_correlation() is not None
    assert [h.effect_bits is not None for h in one.highlighted(rows=[3])[0]] == [True] * len(one.highlighted(rows=[3])[0])
    few = analyze(ckpt, "the cat sat on the mat", max_effect_pairs=10)
    assert few.slot_effects is None and few.read_effect is not None


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


def test_attribution_agrees_with_each_head_over_the_words_it_reads(ckpt):
    """A head's weight on position p is its weight on slot p (the current word included), and the agreement is
    computed per head and per layer's mean."""
    attr = Model(ckpt).attribute("the cat sat on the mat", method="gradient-x-input")
    sa = attr.analysis
    assert attr.attended[3, 3] and not attr.attended[3, 4] and attr.attention[3, 3] == sa.attention[3, 3]
    one = attr.at_head(0, 1)
    np.testing.assert_array_equal(one.attention[4, :5], sa.heads[0, 1, 4, :5])
    assert one.analysis.head == (0, 1) and type(one) is type(attr) and one.scores is attr.scores
    table = attr.agreement_by_head()
    assert len(table) == 3 * 3 and list(table.columns[:3]) == ["layer", "head", "targets"]
    row = table[(table.layer == 1) & (table["head"] == 2)].iloc[0]
    assert row.kendall_tau == pytest.approx(one.agreement_summary()["kendall_tau"], nan_ok=True)


def _reference_logprob(model, inputs, targets, layer, heads, row, slot=None):
    """log P(targets[0, row]) with, at ``layer``, ``heads``' outputs zeroed everywhere (slot None) or ``slot`` dropped
    from row ``row``'s weights of ``heads`` (renormalised): the whole text run again by hand, one edit."""
    xs, mask = model.layer_inputs(inputs)
    x = xs[layer]
    if slot is None:
        kept = torch.ones(model.config.heads, dtype=x.dtype)
        kept[heads] = 0
        x = model.run_layer(layer, x, mask, head_mask=kept)[0]
    else:
        def edit(w):
            w = w.clone()
            for h in heads:
                w[0, h, row, slot] = 0
                w[0, h, row] = w[0, h, row] / w[0, h, row].sum() if w[0, h, row].sum() > 0 else 0 * w[0, h, row]
            return w
        x = model.run_layer(layer, x, mask, edit=edit)[0]
    for k in range(layer + 1, model.config.layers):
        x = model.run_layer(k, x, mask)[0]
    return model.head(model.outputs(x)).logits[0, row].log_softmax(-1)[targets[0, row]]


@pytest.mark.parametrize("layer, head", [(0, 1), (1, None), (2, 0)])
def test_head_effects_are_the_edits_run_one_at_a_time(ckpt, layer, head):
    """A head's read effect (its output zeroed) and slot effects (one row's slot dropped, renormalised) are what the
    whole text gives run again with that one edit, within float32 rounding; the layer-by-hand pass is the modules'."""
    from vizlm.models.effects import head_effects

    model = ckpt.model
    x = torch.tensor([[1, 4, 5, 6, 7, 4, 8, 9]])  # <s> the cat sat on the mat dog
    y = torch.tensor([[4, 5, 6, 7, 4, 8, 9, 2]])
    with torch.no_grad():
        xs, _ = model.layer_inputs(x)
        assert_same_math(model.outputs(xs[-1]), model.encode(x))
        read, slots = head_effects(model, x, y, layer, head)
        heads = [0, 1] if head is None else [head]
        base = model(x).logits[0].log_softmax(-1).gather(1, y[0, :, None])[:, 0]
        for row in (0, 3, 7):
            ref = base[row] - _reference_logprob(model, x, y, layer, heads, row)
            assert read[0, row].item() == pytest.approx(ref.item(), abs=1e-5)
            for slot in range(row + 1):
                ref = base[row] - _reference_logprob(model, x, y, layer, heads, row, slot)
                assert slots[0, row, slot].item() == pytest.approx(ref.item(), abs=1e-5), (row, slot)
    assert torch.isnan(slots).sum() == 0 and (slots[0][torch.ones(8, 8).triu(1).bool()] == 0).all()


def test_a_transformer_heads_cases_over_a_corpus_are_its_analyses_labels(ckpt):
    """The corpus gallery of a Transformer labels the highlights of the head asked for (default: the last layer's
    heads together), as the analysis of each document shows them, beside the distance-matched chance rate."""
    from vizlm.inspect.case_gallery import corpus_cases
    from vizlm.inspect.cases import label_cases
    from vizlm.inspect.highlight import Share

    sents = [["the", "cat", "sat", "on", "the", "mat"], ["the", "dog", "ran", "on", "the", "mat"]]
    report = corpus_cases(ckpt, sentences=sents, ids=["a:0", "a:1"], setting=Share(0.2), use_cache=False)
    assert report.model == "transformer · layer 3, mean of 2 heads"
    sa = analyze(ckpt, "the cat sat on the mat\nthe dog ran on the mat")
    expected = label_cases(sa, Share(0.2))
    assert report.pairs == len(expected) and report.labelled == sum(bool(c.labels) for c in expected)
    one = corpus_cases(ckpt, sentences=sents, ids=["a:0", "a:1"], setting=Share(0.2), use_cache=False, head=(0, 1))
    assert one.model == "transformer · layer 1, head 2"
    assert one.pairs == len(label_cases(sa.at_head(0, 1), Share(0.2)))
    with pytest.raises(InputError, match="3 layers x 2 heads"):
        corpus_cases(ckpt, sentences=sents, setting=Share(0.2), use_cache=False, head=(3, None))
