"""Attention effects: read effect and slot effects against a slow one-pair-at-a-time reference,
the zero-read cases, and the analysis, cases, corpus, plot and JSON outputs built on them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import ATTENTION_MODELS, TINY, all_variants, assert_same_math, tiny_model
from reference import reference_effects

from vizlm.inspect.analysis import LN2, analyze_batch, analyze_tokens, spearman
from vizlm.inspect.effects import slot_effect_rows, with_slot_effects
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.data.vocab import SPECIALS, Vocab
from vizlm.models import build_model
from vizlm.models import effects as fx
from vizlm.present.serialize import analysis_dict
from vizlm.inspect.highlight import Share


def targets_of(batch: torch.Tensor) -> torch.Tensor:
    return torch.cat([batch[:, 1:], torch.full_like(batch[:, :1], 2)], 1)


# --------------------------------------------------------------------------- models
@pytest.mark.parametrize("name,kw", all_variants(ATTENTION_MODELS))
def test_given_weights_reproduce_the_head(name, kw, batch):
    """``head(h, weights=alpha)`` with the model's own weights is the head, bit for bit, also after a state."""
    model = tiny_model(name, **kw)
    with torch.no_grad():
        h = model.encode(batch)
        out = model.head(h)
        again = model.head(h, weights=out.attention)
        assert torch.equal(again.logits, out.logits) and torch.equal(again.attention, out.attention)
        if name in ("amsrn", "salton"):
            model.config.memory = 4  # a finite memory to carry
        state = model(batch, model.initial_state(batch.shape[0])).state
        first = model(batch, state)
        again = model.head(model.recur(batch, (state.h, state.c))[0], state.memory, state.valid,
                           weights=first.attention)
        assert torch.equal(again.logits, first.logits)


@pytest.mark.parametrize("name,kw", all_variants(ATTENTION_MODELS))
def test_effects_equal_the_slow_reference(name, kw, batch):
    """Read and slot effects (batched over slots, output layer on pairs) == one pair at a time, step by step."""
    model = tiny_model(name, **kw)
    targets = targets_of(batch)
    with torch.no_grad():
        h = model.encode(batch)
        read = fx.read_effect(model, h, targets)
        slots = fx.slot_effects(model, h, targets)
    ref_read, ref_slots = reference_effects(model, batch)
    torch.testing.assert_close(read, ref_read, atol=1e-10, rtol=0)
    torch.testing.assert_close(slots, ref_slots, atol=1e-10, rtol=0)
    assert read.abs().max() > 1e-5 and slots.abs().max() > 1e-5  # the tiny models' attention does something


def test_chunked_and_selected_effects_equal_the_full_matrix(batch, monkeypatch):
    model = tiny_model("amsrn")
    targets = targets_of(batch)
    with torch.no_grad():
        h = model.encode(batch)
        full = fx.slot_effects(model, h, targets)
        select = torch.zeros_like(full, dtype=torch.bool)
        select[:, 4] = True  # one row
        select[1, :, 2] = True  # one slot of one sentence
        part = fx.slot_effects(model, h, targets, select=select)
        monkeypatch.setattr(fx, "PAIR_CHUNK", 5)
        monkeypatch.setattr(fx, "COPY_ELEMENTS", 1)  # one slot copy per attend() call
        chunked = fx.slot_effects(model, h, targets)
    assert_same_math(part, torch.where(select, full, torch.zeros_like(full)))
    assert_same_math(chunked, full)


def _zero_read(name: str, model) -> None:
    """Zero the weights through which the read reaches the prediction."""
    with torch.no_grad():
        if name == "amsrn":
            model.read_proj.weight.zero_()  # W_pr
        elif name == "salton":
            model.w_c.weight[:, model.config.hidden_dim :] = 0.0  # the c_t half of W_c [h_t; c_t]
        elif name == "rm":
            model.w_s.weight.zero_()  # W_r, W_z, W: the read s_t in the gates
        else:
            model.w_r.weight.zero_()  # W^r


@pytest.mark.parametrize("name,kw", all_variants(ATTENTION_MODELS))
def test_read_effect_is_exactly_zero_without_read_weights(name, kw, batch):
    model = tiny_model(name, **kw).float()  # float32, as the app runs: exactly 0, not merely small
    _zero_read(name, model)
    targets = targets_of(batch)
    with torch.no_grad():
        h = model.encode(batch)
        assert (fx.read_effect(model, h, targets) == 0).all()
        assert (fx.slot_effects(model, h, targets) == 0).all()


def test_a_slot_alone_in_its_row_has_the_read_effect(batch):
    """Dropping the only weighted slot leaves nothing to read: the row's slot effect is its read effect."""
    model = tiny_model("attention", window=1)  # every row attends to one slot
    targets = targets_of(batch)
    with torch.no_grad():
        h = model.encode(batch)
        read = fx.read_effect(model, h, targets)
        slots = fx.slot_effects(model, h, targets)
    T = batch.shape[1]
    assert_same_math(slots[:, torch.arange(T), torch.arange(T)], read)
    model = tiny_model("amsrn")
    with torch.no_grad():
        h = model.encode(batch)
        first = fx.slot_effects(model, h, targets)[:, 0, 0]  # row 0 has only the start slot
        assert_same_math(first, fx.read_effect(model, h, targets)[:, 0])


def test_drop_slot_renormalises_or_reads_nothing():
    w = torch.tensor([[0.5, 0.25, 0.25], [1.0, 0.0, 0.0]], dtype=torch.float64)
    out = fx.drop_slot(w, torch.tensor([0, 0]))
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]], dtype=torch.float64))


@pytest.mark.parametrize("name", ["lstm", "ngram"])
def test_models_without_attention_have_no_effects(name, batch):
    model = build_model(name, **TINY).eval()
    with torch.no_grad(), pytest.raises(ValueError, match="no attention"):
        fx.read_effect(model, model.encode(batch), targets_of(batch))


# --------------------------------------------------------------------------- analysis

VOCAB = Vocab(list(SPECIALS) + [f"w{i}" for i in range(36)])  # 40 words: TINY's vocabulary
WORDS = ["w3", "w17", "w3", "w8", "w30", "w17", "w2", "w3", "w11", "w5"]


def tiny_ckpt(name: str = "amsrn", scale: float | None = None, **kw) -> Checkpoint:
    model = tiny_model(name, **kw)
    if scale is not None:  # a stronger read (the tiny LSTM outputs are small): effects up to bits
        torch.nn.init.uniform_(model.read_proj.weight, -scale, scale)
    return Checkpoint(model, VOCAB, name)


def ids(words) -> torch.Tensor:
    return torch.tensor([[VOCAB.bos_id] + VOCAB.encode(words)])


@pytest.mark.parametrize(  # a window of 1 puts all weight on one slot: no ranks to correlate
    "name,kw", all_variants(["amsrn", "kvp", "salton"]) + [pytest.param("rm", {"window": 4}, id="rm-window=4")])
def test_analysis_carries_the_effects(name, kw):
    ckpt = tiny_ckpt(name, **kw)
    sa = analyze_tokens(ckpt, WORDS)
    with torch.no_grad():
        ref_read, ref_slots = reference_effects(ckpt.model, ids(WORDS))
    np.testing.assert_allclose(sa.read_effect, ref_read[0].numpy(), atol=1e-10)
    np.testing.assert_allclose(sa.slot_effects, ref_slots[0].numpy(), atol=1e-10)
    np.testing.assert_allclose(sa.read_effect_bits, sa.read_effect / math.log(2))
    doc = analysis_dict(sa, Share(0.1), cases=False)
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc  # plain JSON, round trip
    for r, t in enumerate(doc["targets"]):
        assert t["read_effect_bits"] == pytest.approx(sa.read_effect[r] / LN2, abs=1e-12)
        assert t["effects_bits"] == pytest.approx(list(sa.slot_effects[r, : r + 1] / LN2), abs=1e-12)
        for h in t["highlights"]:
            assert h["effect_bits"] == pytest.approx(sa.slot_effects[r, h["slot"]] / LN2, abs=1e-12)
    summary = doc["effects"]
    assert summary["unit"] == "bits" and summary["slot_effects"]
    assert summary["read_effect_mean_bits"] == pytest.approx(float(np.mean(sa.read_effect)) / LN2)
    # Spearman by hand: ranks of the allowed pairs (no ties here), Pearson of the ranks
    mask = sa.allowed()
    w, e = sa.attention[mask], sa.slot_effects[mask]
    rw, re = np.argsort(np.argsort(w)), np.argsort(np.argsort(e))
    assert summary["rank_correlation"] == pytest.approx(float(np.corrcoef(rw, re)[0, 1]))


def test_spearman_ties_and_degenerate_cases():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(np.corrcoef([0.5, 0.5, 2, 3], [0, 1, 2, 3])[0, 1])
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None


def test_analysis_without_start_slot():
    """AMSRN without h_0: the first word has no slot to show (nothing allowed, no highlight, read effect
    exactly 0); slot 0 is never allowed; the output is plain JSON."""
    sa = analyze_tokens(tiny_ckpt("amsrn", scale=30.0, start_slot=False), WORDS)
    allowed = sa.allowed()
    assert not allowed[0].any() and not allowed[:, 0].any() and allowed[1:, 1].all()
    assert sa.read_effect[0] == 0 and (sa.slot_effects[0] == 0).all() and (sa.slot_effects[:, 0] == 0).all()
    assert np.abs(sa.read_effect[1:]).max() > 1e-3
    doc = analysis_dict(sa, Share(0.1), cases=False)
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    first = doc["targets"][0]
    assert first["highlights"] == [] and first["start_weight"] == 0 and first["attention"] == [0.0]


def test_read_effect_is_exactly_zero_in_the_analysis():
    ckpt = tiny_ckpt("amsrn")
    ckpt.model.float()
    _zero_read("amsrn", ckpt.model)
    doc = analysis_dict(analyze_tokens(ckpt, WORDS), cases=False)
    assert all(t["read_effect_bits"] == 0 for t in doc["targets"])
    assert all(e == 0 for t in doc["targets"] for e in t["effects_bits"])


def test_models_without_attention_have_no_effects_in_the_analysis():
    sa = analyze_tokens(Checkpoint(tiny_model("lstm"), VOCAB, "lstm"), WORDS)
    assert sa.read_effect is None and sa.slot_effects is None and sa.effect_rank_correlation() is None
    doc = analysis_dict(sa, cases=False)
    assert doc["effects"] is None and all(t["read_effect_bits"] is None and t["effects_bits"] is None for t in doc["targets"])


def test_long_texts_get_slot_effects_on_demand():
    ckpt = tiny_ckpt("amsrn")
    full = analyze_tokens(ckpt, WORDS)
    short = analyze_tokens(ckpt, WORDS, max_effect_pairs=10)  # 66 pairs: too many
    assert short.slot_effects is None and short.read_effect is not None
    assert analysis_dict(short, cases=False)["targets"][3]["effects_bits"] is None
    np.testing.assert_allclose(slot_effect_rows(ckpt, short, [4, 7]), full.slot_effects[[4, 7]], atol=1e-12)
    np.testing.assert_allclose(with_slot_effects(ckpt, short).slot_effects, full.slot_effects, atol=1e-12)
    assert with_slot_effects(ckpt, full) is full


def test_batched_effects_equal_one_sentence_at_a_time():
    ckpt = tiny_ckpt("kvp", window=3)
    sents = [WORDS, WORDS[:4], ["w9"], WORDS[2:9]]
    for i, sa in analyze_batch(ckpt, sents, effects="slots", batch_size=3):
        one = analyze_tokens(ckpt, sents[i])
        np.testing.assert_allclose(sa.read_effect, one.read_effect, atol=1e-12)
        np.testing.assert_allclose(sa.slot_effects, one.slot_effects, atol=1e-12)
    for i, sa in analyze_batch(ckpt, sents, effects="slots", effect_pairs=lambda a: a >= 0.3):
        one = analyze_tokens(ckpt, sents[i])
        heavy = one.attention >= 0.3
        np.testing.assert_allclose(sa.slot_effects[heavy], one.slot_effects[heavy], atol=1e-12)
        assert np.isnan(sa.slot_effects[(one.attention > 0) & ~heavy]).all()  # not computed
        assert (sa.slot_effects[one.attention == 0] == 0).all()  # outside the window: no effect
        assert json.dumps(analysis_dict(sa, cases=False), allow_nan=False)  # NaN never reaches the JSON
    for _, sa in analyze_batch(ckpt, sents, effects="read"):
        assert sa.read_effect is not None and sa.slot_effects is None
    for _, sa in analyze_batch(ckpt, sents):
        assert sa.read_effect is None


# --------------------------------------------------------------------------- cases
ENGLISH = Vocab([*SPECIALS, "the", "dogs", "cat", "park", "are", "is", "barking", "because", "they", "hungry", "owners",
                 "running", "saw", "a", "so", "market", "rose", "prices", "fell", "city", "taxes", "jury", "said", "were",
                 "high", "money", "spent", "bridges", "roads", "state", "new", "schools", "year", "and", "of", "."])


def test_cases_carry_effects_and_rank_by_them():
    from vizlm.inspect.case_gallery import by_effect, corpus_cases
    from vizlm.inspect.cases import label_cases

    ckpt = Checkpoint(tiny_model("amsrn"), ENGLISH, "amsrn")
    torch.nn.init.uniform_(ckpt.model.read_proj.weight, -300, 300)
    sents = [s.split() for s in (
        "the dogs saw the cat and the dogs are barking because the cat saw the dogs .",
        "the market rose and prices rose so the market fell and prices fell .",
        "the jury said taxes were high because the city spent money on roads and bridges and taxes .",
        "the state spent money on new schools and the state said the schools were new .",
        "the owners are running because the dogs are running and the cat is running .",
    )]
    sa = analyze_tokens(ckpt, sents[0])
    cases = label_cases(sa, Share(0.05))
    assert cases and all(c.effect == pytest.approx(sa.slot_effects[c.target, c.slot] / LN2) for c in cases)
    ranked = by_effect(cases)
    assert [c.effect for c in ranked] == sorted((c.effect for c in cases), reverse=True)
    by = {rank: corpus_cases(ckpt, sentences=sents, setting=Share(0.05), rank=rank, examples_per_label=4)
          for rank in ("weight", "effect")}
    assert by["weight"].counts == by["effect"].counts and by["effect"].rank == "effect"
    for rank, report in by.items():
        shown = [ex for exs in report.examples.values() for ex in exs]
        assert len(shown) >= 8
        for exs in report.examples.values():
            assert [e[rank] for e in exs] == sorted((e[rank] for e in exs), reverse=True)
            for e in exs:
                one = analyze_tokens(ckpt, sents[int(e["sentence_id"][1:])])
                assert e["effect"] == pytest.approx(one.slot_effects[e["target"], e["slot"]] / LN2, abs=1e-9)
    assert by["weight"].examples != by["effect"].examples  # the two rankings pick different examples
    with pytest.raises(ValueError, match="rank"):
        corpus_cases(ckpt, sentences=sents, rank="loudness")


# --------------------------------------------------------------------------- corpus
def test_effect_by_position_and_read_share_match_brute_force():
    from vizlm.inspect.corpus_stats import attention_by_position, sentence_positions

    ckpts = [tiny_ckpt("amsrn", scale=400.0), tiny_ckpt("kvp", window=3)]
    g = torch.Generator().manual_seed(3)
    sents = [[f"w{int(i)}" for i in torch.randint(0, 36, (int(n),), generator=g)]
             for n in torch.randint(1, 12, (25,), generator=g)]
    stats = attention_by_position(ckpts, sents, window=4, batch_size=6)
    for ckpt in ckpts:
        per_offset = {d: [] for d in range(1, 5)}
        reads = []
        for s in sents:
            sa = analyze_tokens(ckpt, s)
            reads += list(sa.read_effect_bits)
            for r in range(len(sa.targets)):
                for d in range(1, 5):
                    if r + 1 - d >= 0:
                        per_offset[d].append(sa.slot_effects[r, r + 1 - d] / LN2)
        frame = stats.frame[stats.frame.model == ckpt.name].set_index("offset")
        for d, es in per_offset.items():
            assert frame.loc[d, "effect"] == pytest.approx(np.mean(es), abs=1e-9)
            assert frame.loc[d, "effect_lo"] <= frame.loc[d, "effect"] <= frame.loc[d, "effect_hi"]
        eff = stats.effects[ckpt.name]
        assert eff["tokens"] == len(reads)
        assert eff["share_over_1_bit"] == pytest.approx(np.mean(np.abs(reads) > 1))
        assert eff["mean_read_bits"] == pytest.approx(np.mean(reads), abs=1e-9)
    assert 0 < stats.effects["amsrn"]["share_over_1_bit"] < 1  # the test sees both sides of the line
    assert stats.frame[stats.frame.model == "kvp"].set_index("offset").loc[4, "effect"] == 0  # outside the window
    plain = attention_by_position(ckpts, sents, window=4, effects=False)
    assert plain.frame["effect"].isna().all() and plain.effects == {}
    assert np.allclose(plain.frame["mean"], stats.frame["mean"])
    df = sentence_positions(analyze_tokens(ckpts[0], sents[0]), window=3)
    sa = analyze_tokens(ckpts[0], sents[0])
    for row in df.itertuples():
        assert row.effect == pytest.approx(sa.slot_effects[row.target, row.target + 1 - row.offset] / LN2)


# --------------------------------------------------------------------------- plots
def test_effect_heatmap_and_positions_chart():
    import pandas as pd

    from vizlm.present import charts, heatmap, style

    sa = analyze_tokens(tiny_ckpt("kvp", window=3), WORDS)
    weight = heatmap.attention_heatmap(sa, Share(0.3)).to_dict()
    effect = heatmap.attention_heatmap(sa, Share(0.3), measure="effect").to_dict()
    colour = effect["layer"][0]["encoding"]["color"]
    assert weight["layer"][0]["encoding"]["color"]["field"] == "weight"
    assert colour["field"] == "effect" and "bits" in " ".join(colour["title"])
    assert colour["scale"]["scheme"] == style.EFFECT_SCHEME and colour["scale"]["domainMid"] == 0
    assert colour["scale"]["domain"] == [-style.EFFECT_DOMAIN_BITS, style.EFFECT_DOMAIN_BITS]
    assert "effect" in effect["title"]["text"]
    (rows,) = effect["datasets"].values()
    T = len(sa.targets)
    assert len(rows) == sum(min(r + 1, 3) for r in range(T))  # masked cells blank, as for weights
    for row in rows:
        r, j = int(row["target"].split()[0]) - 2, int(row["slot"].split()[0])
        assert row["effect"] == pytest.approx(sa.slot_effects[r, j] / LN2)
    with pytest.raises(ValueError, match="no slot effects"):
        heatmap.attention_heatmap(analyze_tokens(tiny_ckpt("kvp", window=3), WORDS, effects=False), measure="effect")
    with pytest.raises(ValueError, match="measure"):
        heatmap.attention_heatmap(sa, measure="volume")
    from vizlm.present.export import export_analysis

    svg = export_analysis(sa, "svg", measure="effect").decode()
    assert "slot effect" in svg and "in bits" in svg
    csv = export_analysis(sa, "csv").decode("utf-8-sig")
    assert "effect_bits" in csv.splitlines()[0] and "read_effect_bits" in csv.splitlines()[0]
    frame = pd.DataFrame({"model": ["kvp"] * 2, "offset": [1, 2], "mean": [0.6, 0.4], "lo": [0.5, 0.3], "hi": [0.7, 0.5],
                          "count": [10, 10], "effect": [0.3, -0.1], "effect_lo": [0.2, -0.2], "effect_hi": [0.4, 0.0]})
    spec = charts.positions_chart(frame, measure="effect").to_dict()
    line = spec["layer"][-1]["encoding"]
    assert line["y"]["field"] == "effect" and "bits" in line["y"]["title"]
