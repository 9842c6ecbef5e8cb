"""The faithfulness tests (vizlm.inspect.faithfulness) on models whose answer is known, and against slow references on
tiny float64 models: a hand-built copy model whose prediction depends on the attention read alone (attention is
faithful), models of every attention family whose read is cut off from the output (attention provably
ignored), and each metric recomputed one row at a time with the whole head."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import TOLERANCE
from test_attribution import PASSAGE, tiny

from vizlm.inspect import agreement as ag
from vizlm.inspect import attribution as at
from vizlm.inspect import attribution_methods as am
from vizlm.inspect import faithfulness as fa
from vizlm.inspect import faithfulness_corpus as fc
from vizlm.inspect import faithfulness_erasure as fe
from vizlm.inspect.analysis import analyze, analyze_sentences
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.data.vocab import SPECIALS, Vocab
from vizlm.models import build_model

ATTENTION_VARIANTS = [("amsrn", {}), ("amsrn", {"start_slot": False}), ("attention", {"window": 3}),
                      ("kv", {"window": 4}), ("kvp", {"window": 5}), ("salton", {"score": "combined"}),
                      ("rm", {"window": 4})]
ATOL = TOLERANCE[torch.float64]["atol"]


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny matrices, one thread


def close(a, b, atol=1e-9):
    """Two computations in float64 of one quantity (many products and a log-softmax apart): within 1e-9."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert (np.isnan(a) == np.isnan(b)).all()
    ok = ~np.isnan(a)
    np.testing.assert_allclose(a[ok], b[ok], rtol=1e-9, atol=atol)


# --------------------------------------------------------------------------- a copy model, faithful by construction
KEYS, FILLERS = ["k0", "k1", "k2"], ["f0", "f1", "f2", "f3"]
COPY_VOCAB = Vocab(list(SPECIALS) + KEYS + FILLERS)
COPY_ROW = 4  # "<s> k f f f": row 4 reads the last filler and predicts the copy of the key in slot 2


@pytest.fixture(scope="module")
def copy_model():
    """RM (Tran et al.) built by hand so that the prediction is the attention read and nothing else: the LSTM
    ignores its input (zero input and recurrent weights, forget gate shut) and outputs one constant vector, the
    temporal vector of the key's place in the window (band index 2 of 5 for row 4) scores 8 above every other
    slot, the content table is one-hot, the gate z is 1, and the output layer reads the content back."""
    V = len(COPY_VOCAB)
    model = build_model("rm", vocab_size=V, emb_dim=4, hidden_dim=V, window=5).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        d = V
        model.rnn.bias_ih_l0[:d] = 20.0  # i = 1
        model.rnn.bias_ih_l0[d : 2 * d] = -20.0  # f = 0: c_t = i g, the same every step
        model.rnn.bias_ih_l0[2 * d : 3 * d] = 1.0  # g = tanh(1)
        model.rnn.bias_ih_l0[3 * d :] = 20.0  # o = 1
        h = math.tanh(math.tanh(1.0))  # every unit of every output
        model.temporal[2] = 8.0 / (h * d)  # (M x_i + T_i) . h_t: 8 at band index 2, 0 elsewhere
        model.content.weight.copy_(torch.eye(V))  # C x = one-hot of x
        model.u_rz.weight[d:] = 20.0 / (h * d)  # U_z h = 20: z = 1, h'_t = h~_t
        model.w_s.weight[2 * d :] = torch.eye(V)  # W s: h~_t = tanh(s_t)
        model.decoder.weight.copy_(4.0 * torch.eye(V))
    return Checkpoint(model, COPY_VOCAB, "copy-rm")


def test_attention_is_faithful_on_the_copy_model(copy_model):
    for key in KEYS:
        sa = analyze_sentences(copy_model, [[key, "f0", "f3", "f1", key]])
        assert sa.attention[COPY_ROW, 2] > 0.99 and sa.top_words[COPY_ROW][0] == key
        # dropping the most attended slot flips the prediction; a random slot of three rarely matters as much
        erase = fe.erasure_curves(copy_model, sa, ks=[1], rankings=["attention"])
        row = erase[erase.row == COPY_ROW].iloc[0]
        assert row.flip == 1.0 and row.dlogp > 1.0
        # attention agrees with the slot effects: the key's slot is the one that matters
        agree = fa.agreement_table(copy_model, sa, methods=["occlusion"]).iloc[COPY_ROW]
        assert agree["attention~slot-effect"] > 0.8 and agree["attention~occlusion"] > 0.8
        # no other weights give the same prediction: the adversary moves little within a small epsilon
        adv = fa.adversarial(copy_model, sa, epsilon=0.01, steps=150).iloc[COPY_ROW]
        assert abs(adv.dlogp) < 0.01 and adv.jsd < 0.05
        # comprehensiveness of the attention's top slot is large, its sufficiency nearly complete
        ao = fe.aopc(copy_model, sa, rankings=["attention", "random"], fractions=[0.3])
        a = ao[(ao.row == COPY_ROW) & (ao.ranking == "attention")].iloc[0]
        assert a.comprehensiveness > 1.0 and abs(a.sufficiency) < 0.05
        # the key reaches the copy through the read alone: the LSTM does not read its input
        paths = fa.two_paths(copy_model, sa)
        assert (paths.state == 0).all()
        k = paths[(paths.row == COPY_ROW) & (paths.position == 1)].iloc[0]
        assert k.read > 1.0 and k.read == pytest.approx(k.total, abs=ATOL)
        # uniform attention loses the copy
        uni = fa.uniform_baseline(copy_model, sa).iloc[COPY_ROW]
        assert uni.logprob - uni.uniform_logprob > 1.0


# --------------------------------------------------------------------------- attention provably ignored
def ignoring(name, **kw):
    """A tiny model of the family whose read never reaches the output layer (the read's weights into it zero)."""
    ckpt = tiny(name, **kw)
    m = ckpt.model
    with torch.no_grad():
        if name == "amsrn":
            m.read_proj.weight.zero_()  # W_pr
        elif name == "salton":
            m.w_c.weight[:, m.config.hidden_dim :] = 0.0  # W_c [h; c]: the context's columns
        elif name == "rm":
            m.w_s.weight.zero_()  # the read into the gates and h~
        else:
            m.w_r.weight.zero_()  # W^r r_t
    return ckpt


def _jsd(a: np.ndarray, b: np.ndarray) -> float:
    m = (a + b) / 2
    return 0.5 * sum(x * math.log(x / y) for p in (a, b) for x, y in zip(p, m) if x > 0)


@pytest.mark.parametrize("name,kw", [("attention", {"window": 3}), ("kvp", {"window": 3})])
def test_another_seed_s_attention_lies_its_jsd_from_the_model_s_own(name, kw):
    """Wiegreffe & Pinter's seed variation: per row, the Jensen-Shannon divergence between the model's weights and
    another seed's on the same words, as the two analyses give them, by hand; none from the model itself."""
    ckpt, other = tiny(name, **kw), tiny(name, seed=1, **kw)
    with torch.no_grad():  # weights this small attend almost uniformly: sharpen both
        for p in (*ckpt.model.parameters(), *other.model.parameters()):
            p.mul_(10)
    sa, so = analyze_sentences(ckpt, PASSAGE), analyze_sentences(other, PASSAGE)
    uni = fa.uniform_baseline(ckpt, sa, other=other)
    for r in range(len(sa.targets)):
        a, b = np.nan_to_num(sa.attention[r]), np.nan_to_num(so.attention[r])
        if (a > 0).sum() + (b > 0).sum() < 3 and np.isnan(uni.seed_jsd[r]):  # a row of one slot: no divergence
            continue
        assert uni.seed_jsd[r] == pytest.approx(_jsd(a, b), abs=1e-9), r
    assert np.nanmax(uni.seed_jsd) > 1e-3
    assert np.nanmax(np.abs(fa.uniform_baseline(ckpt, sa, other=ckpt).seed_jsd)) <= ATOL


@pytest.mark.parametrize("name,kw", ATTENTION_VARIANTS)
@pytest.mark.parametrize("context", ["sentence", "document"])
def test_ignored_attention_changes_nothing(name, kw, context):
    ckpt = ignoring(name, context=context, **kw)
    sa = analyze_sentences(ckpt, PASSAGE)
    perm = fa.permutations(ckpt, sa, n=5)
    assert np.isfinite(perm.median_tvd).any()
    for col in ("median_tvd", "median_jsd", "median_abs_dlogp"):
        assert np.nanmax(np.abs(perm[col])) <= ATOL
    uni = fa.uniform_baseline(ckpt, sa, other=tiny(name, seed=1, context=context, **kw))
    close(uni.uniform_logprob, uni.logprob, ATOL)
    close(uni.frozen_logprob, uni.logprob, ATOL)
    adv = fa.adversarial(ckpt, sa, epsilon=1e-6, steps=60)
    assert np.nanmax(np.abs(adv.dlogp)) <= ATOL
    movable = adv.slots >= 2
    assert (adv.jsd[movable] > 0.2).all()  # far from the model's own weights, nothing changed
    erase = fe.erasure_curves(ckpt, sa, rankings=["attention", "gradient", "random"])
    assert np.nanmax(np.abs(erase.dlogp)) <= ATOL and np.nansum(erase.flip) == 0
    ao = fe.aopc(ckpt, sa, rankings=["attention", "occlusion", "random"])
    assert np.nanmax(np.abs(ao[["comprehensiveness", "sufficiency"]].to_numpy())) <= ATOL
    paths = fa.two_paths(ckpt, sa)
    assert np.abs(paths.read).max() <= ATOL
    close(paths.state + paths.interaction, paths.total, ATOL)


# --------------------------------------------------------------------------- against slow references
def _whole(model, ids, weights=None):
    """log-softmax (T, V) of one piece read whole, with ``weights`` (T, S) in place of the attention."""
    with torch.no_grad():
        h = model.encode(torch.tensor([ids]))
        out = model.head(h, weights=None if weights is None else weights[None])
        return out.logits[0].log_softmax(-1), out.attention[0], h


def _pieces(ckpt, sa):
    for first, inputs, targets in am.reading_pieces(ckpt, sa):
        yield first, inputs.tolist(), targets.tolist()


def ent(x):
    return -(x * np.log(x)).sum()  # entropy in nats


def _word_slots(model, Tb):
    allowed = model.allowed_slots(Tb)
    return [[j for j in range(2, r + 1) if allowed[r, j]] for r in range(Tb)]


@pytest.mark.parametrize("name,kw", ATTENTION_VARIANTS)
def test_permutations_equal_one_row_at_a_time(name, kw):
    """Each shuffle rebuilt by hand from the same draws (word slots in the order of their keys, the start slot
    and the <s> slot kept), the next-word distributions compared in numpy (JSD as H(m) - (H(p) + H(q)) / 2)."""
    ckpt = tiny(name, context="document", **kw)
    sa = analyze_sentences(ckpt, PASSAGE)
    n = 7
    got = fa.permutations(ckpt, sa, n=n, seed=4)
    rng = np.random.default_rng(4)
    for first, ids, targets in _pieces(ckpt, sa):
        logp, att, _ = _whole(ckpt.model, ids)
        Tb = len(ids)
        words = _word_slots(ckpt.model, Tb)
        if not any(len(w) >= 2 for w in words):
            continue
        keys = rng.random((n, Tb, Tb))
        for r in range(Tb):
            row = got.iloc[first + r]
            assert row.word_slots == len(words[r])
            if len(words[r]) < 2:
                assert np.isnan(row.median_tvd)
                continue
            assert row.max_weight == pytest.approx(float(att[r, words[r]].max()), abs=ATOL)
            tvd, jsd, dl = [], [], []
            for q in range(n):
                w = att.clone()
                shuffled = [words[r][i] for i in np.argsort(keys[q, r, words[r]])]
                for dst, src in zip(words[r], shuffled):
                    w[r, dst] = att[r, src]
                moved = _whole(ckpt.model, ids, w)[0][r].numpy()
                p, m_ = logp[r].exp().numpy(), np.exp(moved)
                mix = (p + m_) / 2
                tvd.append(0.5 * np.abs(p - m_).sum())
                jsd.append(ent(mix) - (ent(p) + ent(m_)) / 2)
                dl.append(abs(moved[targets[r]] - float(logp[r, targets[r]])))
            close(row.median_tvd, np.median(tvd))
            close(row.median_jsd, np.median(jsd), 1e-9)
            close(row.median_abs_dlogp, np.median(dl))


@pytest.mark.parametrize("name,kw", ATTENTION_VARIANTS)
def test_erasure_aopc_and_uniform_equal_one_row_at_a_time(name, kw):
    ckpt = tiny(name, **kw)
    sa = analyze_sentences(ckpt, PASSAGE)
    erase = fe.erasure_curves(ckpt, sa, ks=[1, 2], rankings=["attention"])
    ao = fe.aopc(ckpt, sa, rankings=["attention"], fractions=[0.5])
    uni = fa.uniform_baseline(ckpt, sa)
    for first, ids, targets in _pieces(ckpt, sa):
        logp, att, _ = _whole(ckpt.model, ids)
        Tb = len(ids)
        words = _word_slots(ckpt.model, Tb)
        allowed = ckpt.model.allowed_slots(Tb)
        for r in range(Tb):
            base = float(logp[r, targets[r]])
            ranked = sorted(words[r], key=lambda j: (-float(att[r, j]), -j))

            def dropped(slots, r=r, base=base, ids=ids, targets=targets, logp=logp, att=att):
                w = att.clone()
                w[r, slots] = 0.0
                w[r] = w[r] / w[r].sum() if w[r].sum() > 0 else w[r]
                moved = _whole(ckpt.model, ids, w)[0][r]
                return base - float(moved[targets[r]]), int(moved.argmax()) != int(logp[r].argmax())

            for k in (1, 2):
                got = erase[(erase.row == first + r) & (erase.k == k)].iloc[0]
                if len(words[r]) < k:
                    assert np.isnan(got.dlogp)
                    continue
                d, flipped = dropped(ranked[:k])
                close(got.dlogp, d)
                assert got.flip == float(flipped)
            got = ao[ao.row == first + r].iloc[0]
            if words[r]:
                k = math.ceil(0.5 * len(words[r]))
                assert got.slots == k
                close(got.comprehensiveness, dropped(ranked[:k])[0])
                close(got.sufficiency, dropped(ranked[k:])[0])
            u = allowed[r].double() / max(1, int(allowed[r].sum()))
            w = att.clone()
            w[r] = u
            close(uni.uniform_logprob[first + r], float(_whole(ckpt.model, ids, w)[0][r, targets[r]]))


@pytest.mark.parametrize("name,kw", ATTENTION_VARIANTS)
def test_two_paths_equal_hybrid_readings(name, kw):
    """``read``: the whole head over outputs that are the occluded reading's before the row and the reading's own
    from it on (row r reads its memory from steps before it, its own output at r); ``state``: the reverse;
    ``total``: the occlusion attribution."""
    ckpt = tiny(name, context="document", **kw)
    sa = analyze_sentences(ckpt, PASSAGE[:2])
    paths = fa.two_paths(ckpt, sa)
    occl = at.attribute(ckpt, sa, "occlusion")
    close(paths.total, occl.scores[paths.row, paths.position])
    assert len(paths) == int(occl.covered.sum())
    (_, ids, targets), = _pieces(ckpt, sa)
    logp, _, h = _whole(ckpt.model, ids)
    for p in (1, 3):
        occluded = list(ids)
        occluded[p] = Vocab.unk_id
        with torch.no_grad():
            ho = ckpt.model.encode(torch.tensor([occluded]))
            for r in range(p, len(ids)):
                got = paths[(paths.row == r) & (paths.position == p)].iloc[0]
                assert got.distance == r + 1 - p
                base = float(logp[r, targets[r]])
                for col, hybrid in (("read", torch.cat([ho[:, :r], h[:, r:]], 1)),
                                    ("state", torch.cat([h[:, :r], ho[:, r:]], 1))):
                    moved = ckpt.model.head(hybrid).logits[0, r].log_softmax(-1)
                    close(getattr(got, col), base - float(moved[targets[r]]))


@pytest.mark.parametrize("name,kw", ATTENTION_VARIANTS[:3] + ATTENTION_VARIANTS[-1:])
def test_agreement_table_uses_the_attributions_agreement(name, kw):
    """attention~method is the attribution's own agreement (another code path); the method pairs are tau-b of
    |attribution| over the same positions; ``gradient`` ranks by d log P / d weight (central differences)."""
    ckpt = tiny(name, **kw)
    sa = analyze_sentences(ckpt, PASSAGE)
    table = fa.agreement_table(ckpt, sa, methods=["gradient-x-input", "occlusion"])
    gxi, occ = at.attribute(ckpt, sa, "gradient-x-input"), at.attribute(ckpt, sa, "occlusion")
    close(table["attention~gradient-x-input"], gxi.agreement().kendall_tau)
    close(table["attention~occlusion"], occ.agreement().kendall_tau)
    close(table["attention~slot-effect"], at.attribute(ckpt, sa, "slot-effect").agreement().kendall_tau)
    both = gxi.attended & gxi.covered
    ref = [ag.kendall_tau(np.abs(gxi.scores[r, both[r]]), np.abs(occ.scores[r, both[r]])) for r in range(len(sa.targets))]
    close(table["gradient-x-input~occlusion"], ref)
    assert np.isfinite(table["gradient-x-input~occlusion"]).any()
    # the gradient ranking against central differences of one weight
    piece = fa._read(ckpt, sa)[0]
    grad = fe._slot_scores(ckpt, sa, piece, "gradient", np.random.default_rng(0), {})
    ids, targets = piece.inputs.tolist(), piece.targets.tolist()
    r = len(ids) - 1
    j = max(_word_slots(ckpt.model, len(ids))[r])
    eps = 1e-6
    _, att, _ = _whole(ckpt.model, ids)
    vals = []
    for s in (eps, -eps):
        w = att.clone()
        w[r, j] += s
        vals.append(float(_whole(ckpt.model, ids, w)[0][r, targets[r]]))
    assert grad[r, j] == pytest.approx((vals[0] - vals[1]) / (2 * eps), rel=1e-5, abs=1e-8)


def test_adversary_keeps_its_bound_and_moves_when_it_can():
    ckpt = tiny("salton")
    sa = analyze_sentences(ckpt, PASSAGE[:1])
    adv = fa.adversarial(ckpt, sa, epsilon=0.05, steps=80)
    ok = adv.slots >= 2
    assert (np.abs(adv.dlogp[ok]) < 0.05).all() and (adv.jsd[ok] >= 0).all() and (adv.jsd[ok] <= math.log(2)).all()
    assert adv.jsd[ok].max() > 0.01
    assert adv.jsd[~ok].isna().all()


def test_bad_input_is_refused():
    lstm = tiny("lstm")
    sa = analyze_sentences(lstm, PASSAGE)
    with pytest.raises(fa.FaithfulnessError, match="no attention"):
        fa.permutations(lstm, sa)
    ckpt = tiny("kvp")
    sa = analyze_sentences(ckpt, PASSAGE)
    with pytest.raises(fa.FaithfulnessError, match="unknown ranking"):
        fe.erasure_curves(ckpt, sa, rankings=["saliency"])
    with pytest.raises(fa.FaithfulnessError, match="same family"):
        fa.uniform_baseline(ckpt, sa, other=tiny("kvp", window=3))
    with pytest.raises(fa.FaithfulnessError, match="epsilon"):
        fa.adversarial(ckpt, sa, epsilon=0)
    with pytest.raises(fa.FaithfulnessError, match="permutations"):
        fa.permutations(ckpt, sa, n=0)
    for select in ([5, 2], [3, 3], [-1], [10**9]):  # refused before any sentence is read
        with pytest.raises(fa.FaithfulnessError, match="ascending order"):
            fc.collect(ckpt, "brown", "test", select=select)
    with pytest.raises(fa.FaithfulnessError, match="ascending order"):
        fc.corpus_faithfulness(ckpt, "brown", "test", select=[2, 1], use_cache=False)
    assert issubclass(fa.FaithfulnessError, ValueError)


def test_model_is_not_changed():
    ckpt = tiny("amsrn")
    sa = analyze_sentences(ckpt, PASSAGE)
    before = {k: v.clone() for k, v in ckpt.model.state_dict().items()}
    fa.adversarial(ckpt, sa, steps=5)
    fe.erasure_curves(ckpt, sa)
    assert all(torch.equal(before[k], v) for k, v in ckpt.model.state_dict().items())
    assert all(p.grad is None for p in ckpt.model.parameters())



# --------------------------------------------------------------------------- over a split
@pytest.mark.parametrize("context", ["sentence", "document"])
def test_corpus_statistics_on_a_tiny_corpus(monkeypatch, tmp_path, context):
    """The corpus statistics are the per-text tests over the units (a document model's passages), their intervals
    bootstrap over units, and the result is cached with every parameter in its key."""
    from corpora import make_corpus

    data = make_corpus(tmp_path / "data", train=5, valid=5, test=8, doc_sentences=4, mean_length=5)
    monkeypatch.setenv("VIZLM_DATA", str(data))
    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path / "cache"))
    vocab = Vocab.for_corpus("brown", data)
    ckpt = tiny("amsrn", vocab=vocab, context=context)
    other = tiny("amsrn", seed=1, vocab=vocab, context=context)
    kw = {"limit": 6, "permutations_n": 5, "adversary_steps": 10, "methods": ["gradient-x-input", "occlusion"],
          "passage_tokens": 15, "other": other, "n_boot": 50}
    res = fc.corpus_faithfulness(ckpt, "brown", "test", **kw)
    frames, documents = fc.collect(ckpt, "brown", "test", 6, 5, fa.EPSILON, 10, ["gradient-x-input", "occlusion"],
                                   passage_tokens=15, other=other)
    units = len(documents)
    assert res["units"] == units and res["read_in"] == ("passages" if context == "document" else "sentences")
    # the intervals resample the documents (4 sentences each): the first 6 sentences are of 2
    assert res["resampled"] == "documents" and res["documents"] == 2 and sorted(set(documents)) == [0, 1]
    if context == "document":
        assert units < 6
    # by hand from the per-text frames
    a = frames["agreement"]
    chosen = a[a.positions >= 2]
    tau = res["agreement"]["kendall_tau"]["attention~slot-effect"]
    assert tau["value"] == pytest.approx(np.nanmean(chosen["attention~slot-effect"]), rel=1e-12)
    assert tau["lo"] <= tau["value"] <= tau["hi"]
    assert "gradient-x-input~occlusion" in res["agreement"]["ceiling"]
    perm = res["permutations"]
    assert sum(b["rows"] for b in perm["bins"]) == perm["rows"] == int((frames["permutations"].word_slots >= 2).sum())
    u = frames["uniform"]
    assert res["uniform"]["uniform_minus_own"]["value"] == pytest.approx((u.logprob - u.uniform_logprob).mean())
    assert "frozen_nll" in res["uniform"]
    assert res["uniform"]["seed_jsd"]["value"] == pytest.approx(np.nanmean(u.seed_jsd), rel=1e-12)
    assert set(res["erasure"]) == {"attention", "gradient", "random", "gradient-x-input", "occlusion"}
    assert res["erasure"]["attention"]["k"] == list(fe.ERASE_K)
    assert set(res["aopc"]) == {"attention", "gradient", "gradient-x-input", "occlusion", "random"}
    paths = res["paths"]
    assert paths["distance"][0] == "1" and paths["read_share"][0]["value"] == 0.0  # the current word has no slot
    t = frames["paths"]
    near = t[t.distance == 2]
    assert paths["read_share"][1]["value"] == pytest.approx(near.read.abs().sum() / (near.read.abs().sum()
                                                                                     + near.state.abs().sum()))
    # cached: served again without computing; another parameter is another entry
    monkeypatch.setattr(fc, "collect", lambda *a, **k: pytest.fail("recomputed"))
    assert fc.corpus_faithfulness(ckpt, "brown", "test", **kw)["units"] == units
    with pytest.raises(BaseException, match="recomputed"):
        fc.corpus_faithfulness(ckpt, "brown", "test", **{**kw, "epsilon": 0.02})


# --------------------------------------------------------------------------- one predicted word (the Explorer's panel)
@pytest.mark.parametrize("name,kw,context", [("amsrn", {}, "sentence"), ("kvp", {"window": 3}, "document")])
def test_one_row_adversary_and_paths(name, kw, context):
    """adversarial_row's weights are a distribution over the row's slots that keeps |delta log P| < epsilon, its
    JSD and delta are those of the weights it returns (the whole head recomputed), the other rows are untouched;
    two_paths of some rows is the whole text's frame at those rows, the reading computed only up to them."""
    ckpt = tiny(name, context=context, **kw)
    sa = analyze_sentences(ckpt, PASSAGE)
    row = len(sa.targets) - 3 if context == "document" else 7  # the second sentence's third word (sentence model)
    adv = fa.adversarial_row(ckpt, sa, row, epsilon=0.05, steps=60)
    assert adv.attrs["row"] == row and list(adv.slot) == list(np.flatnonzero(sa.allowed()[row]))
    assert adv.adversarial.sum() == pytest.approx(1.0) and (adv.adversarial >= 0).all()
    close(adv.weight, sa.attention[row, adv.slot])
    (first, ids, targets), = [p for p in _pieces(ckpt, sa) if p[0] <= row < p[0] + len(p[1])]
    logp, att, _ = _whole(ckpt.model, ids)
    w = att.clone()
    w[row - first, adv.slot.to_numpy() - first] = torch.tensor(adv.adversarial.to_numpy(), dtype=w.dtype)
    moved = _whole(ckpt.model, ids, w)[0]
    r = row - first
    close(adv.attrs["dlogp"], float(logp[r, targets[r]] - moved[r, targets[r]]))
    assert abs(adv.attrs["dlogp"]) < 0.05 and 0.0 <= adv.attrs["jsd"] <= math.log(2)
    own = torch.tensor(adv.weight.to_numpy())[None]
    close(adv.attrs["jsd"], float(fa._jsd_rows(own, torch.tensor(adv.adversarial.to_numpy())[None])[0]))
    whole = fa.two_paths(ckpt, sa)
    some = fa.two_paths(ckpt, sa, rows=[row, 1])
    ref = whole[whole.row.isin([row, 1])].sort_values(["row", "position"], ignore_index=True)
    got = some.sort_values(["row", "position"], ignore_index=True)
    assert list(got.position) == list(ref.position) and list(got.distance) == list(ref.distance)
    for col in ("total", "read", "state", "interaction"):
        close(got[col], ref[col])
    with pytest.raises(fa.FaithfulnessError, match="row must be"):
        fa.adversarial_row(ckpt, sa, len(sa.targets))
    with pytest.raises(fa.FaithfulnessError, match="row must be"):
        fa.two_paths(ckpt, sa, rows=[-1])


# --------------------------------------------------------------------------- the Python API and the figures
@pytest.fixture(scope="module")
def split_result(tmp_path_factory):
    """Model.corpus_faithfulness of a tiny AMSRN over 4 sentences of a generated corpus (cheap parameters)."""
    from corpora import make_corpus

    import vizlm

    root = tmp_path_factory.mktemp("faith")
    mp = pytest.MonkeyPatch()
    mp.setenv("VIZLM_DATA", str(make_corpus(root / "data", train=5, valid=5, test=6, mean_length=5)))
    mp.setenv("VIZLM_CACHE", str(root / "cache"))
    ckpt = tiny("amsrn", vocab=Vocab.for_corpus("brown", root / "data"))
    lm = vizlm.Model(ckpt)
    kw = {"limit": 4, "permutations": 5, "adversary_steps": 10, "methods": ["gradient-x-input", "occlusion"]}
    yield lm, kw, lm.corpus_faithfulness("brown", "test", **kw)
    mp.undo()


def test_the_api_door_checks_its_arguments_and_caches(split_result):
    import vizlm
    from vizlm.core.errors import VizlmError

    lm, _, res = split_result
    assert res["units"] == 4 and res["model"] == lm.checkpoint.label
    direct = fc.corpus_faithfulness(lm.checkpoint, "brown", "test", limit=4, permutations_n=5, adversary_steps=10,
                                    methods=["gradient-x-input", "occlusion"])
    assert json.dumps(direct, sort_keys=True) == json.dumps(res, sort_keys=True)  # one cache entry (NaN != NaN)
    assert lm.faithfulness_seconds("brown", "test", limit=4) is not None  # the default tests are not cached
    assert fc.is_stored(lm.checkpoint, "brown", "test", limit=4, permutations_n=5, adversary_steps=10,
                        methods=["gradient-x-input", "occlusion"])
    for bad, match in (({"limit": 0}, "limit"), ({"permutations": 0}, "permutations"), ({"epsilon": -1}, "epsilon"),
                       ({"epsilon": True}, "epsilon"), ({"adversary_steps": 1.5}, "adversary_steps"),
                       ({"methods": ["saliency"]}, "saliency"), ({"split": "nope"}, "no split"),
                       ({"other": 3}, "other")):
        with pytest.raises(VizlmError, match=match):
            lm.corpus_faithfulness(**{"corpus": "brown", "split": "test", **bad})
    with pytest.raises(VizlmError, match="no attention"):
        vizlm.Model(tiny("lstm", vocab=lm.checkpoint.vocab)).corpus_faithfulness("brown", "test", limit=1)


def test_the_figures_draw_every_statistic_with_its_interval(split_result):
    from vizlm.present import faithfulness_plots as fp
    from vizlm.present.export import chart_spec

    _, _, res = split_result
    er = fp.erasure_frame(res)
    assert set(er.ranking) == set(res["erasure"]) and list(er[er.ranking == "attention"].k) == list(fe.ERASE_K)
    first = er[(er.ranking == "random") & (er.k == 1)].iloc[0]
    assert first.dlogp == res["erasure"]["random"]["dlogp"][0]["value"]
    assert first.flip_hi == res["erasure"]["random"]["flip"][0]["hi"]
    ao = fp.aopc_frame(res)
    got = ao[(ao.ranking == "attention") & (ao.measure == "sufficiency")].iloc[0]
    assert got.value == res["aopc"]["attention"]["sufficiency"]["value"]
    pe = fp.permutation_frame(res)
    assert len(pe) == 2 * len(res["permutations"]["bins"]) and pe.rows.sum() == 2 * res["permutations"]["rows"]
    ag = fp.agreement_frame(res)
    assert set(ag[ag.ceiling].pair) == {"slot effect ~ gradient × input", "slot effect ~ occlusion",
                                        "gradient × input ~ occlusion"}
    assert not ag.ceiling.iloc[0]  # attention's pairs first
    un = fp.uniform_frame(res)
    assert list(un.attention) == ["own", "uniform"]
    assert un.perplexity[1] == pytest.approx(math.exp(res["uniform"]["uniform_nll"]["value"]))
    pa = fp.paths_frame(res)
    assert list(pa.distance) == res["paths"]["distance"] and pa.read_share[0] == 0.0
    charts = [fp.erasure_chart(er), fp.erasure_chart(er, "flip"), fp.aopc_chart(ao), fp.permutation_chart(pe),
              fp.agreement_chart(ag), fp.paths_chart(pa)]
    for chart in charts:
        spec = chart_spec(chart)  # a valid Vega-Lite spec
        text = str(spec)
        assert "lo" in text and "hi" in text  # every chart draws its interval
    with pytest.raises(ValueError, match="measure"):
        fp.erasure_chart(er, "tau")
    with pytest.raises(ValueError, match="no erasure"):
        fp.erasure_chart(fp.erasure_frame({}))
    # one word: own and adversarial weights, the two paths
    ckpt = tiny("amsrn")
    sa = analyze_sentences(ckpt, PASSAGE[:1])
    adv = fa.adversarial_row(ckpt, sa, 3, steps=5)
    paths = fa.two_paths(ckpt, sa, rows=[3])
    for chart in (fp.adversarial_row_chart(adv), fp.row_paths_chart(paths)):
        chart_spec(chart)


# --------------------------------------------------------------------------- a Transformer's head
TF_WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "."]
TF_VOCAB = Vocab(list(SPECIALS) + TF_WORDS)
TF_TEXT = "the cat sat on the mat . the dog ran"  # 11 rows in blocks of 6: the second block from row 6


def tiny_transformer(seed: int = 0) -> Checkpoint:
    torch.manual_seed(seed)
    model = build_model("transformer", vocab_size=len(TF_VOCAB), emb_dim=8, hidden_dim=16, heads=2, layers=3,
                        block=6, context="document").double().eval()
    return Checkpoint(model, TF_VOCAB, "transformer")


def _row_edited(model, inputs, target, layer, head, row, weights):
    """log P(target) of ``row`` with its weights of (``layer``, ``head``) replaced by ``weights`` (T,), the whole
    text run again by hand: the other positions as computed."""
    xs, mask = model.layer_inputs(inputs)

    def edit(w):
        w = w.clone()
        w[0, head, row] = weights
        return w

    x = model.run_layer(layer, xs[layer], mask, edit=edit)[0]
    for k in range(layer + 1, model.config.layers):
        x = model.run_layer(k, x, mask)[0]
    return model.head(model.outputs(x)).logits[0, row].log_softmax(-1)[target].item()


@pytest.mark.parametrize("layer, head", [(0, 1), (2, 0)])
def test_a_transformer_heads_tests_change_one_row_as_the_whole_text_run_again_does(layer, head):
    """A head's tests change one row's weights at a time, the other positions as computed: uniform weights and the
    most attended word slot dropped (renormalised) give what the whole text gives run again with that one edit,
    across a block boundary; the tests refuse a layer's mean and the two paths, which a Transformer lacks."""
    ckpt = tiny_transformer()
    sa = analyze(ckpt, TF_TEXT).at_head(layer, head)
    model = ckpt.model
    ids = torch.tensor([[TF_VOCAB.bos_id, *TF_VOCAB.encode(sa.norms)]])
    targets = [*TF_VOCAB.encode(sa.norms), TF_VOCAB.eos_id]
    uni = fa.uniform_baseline(ckpt, sa)
    erase = fe.erasure_curves(ckpt, sa, rankings=["attention"])
    erase = erase[erase.k == 1].set_index("row")
    allowed = torch.from_numpy(np.array(sa.allowed()))
    with torch.no_grad():
        for row in (1, 4, 6, 7, 10):
            slots = allowed[row].double()
            ref = _row_edited(model, ids, targets[row], layer, head, row, slots / slots.sum())
            assert uni.uniform_logprob[row] == pytest.approx(ref, abs=1e-9), row
            own = torch.from_numpy(sa.attention[row]).clone()
            words = own * (torch.arange(len(own)) >= 1) * slots  # the <s> slot held fixed
            own[int(words.argmax())] = 0  # row 6 starts a block: its one slot is itself, and it then reads nothing
            ref = _row_edited(model, ids, targets[row], layer, head, row, own / own.sum() if own.sum() > 0 else own)
            assert uni.logprob[row] - erase.dlogp[row] == pytest.approx(ref, abs=1e-9), row
    with pytest.raises(fa.FaithfulnessError, match="show one first"):
        fa.permutations(ckpt, analyze(ckpt, TF_TEXT))
    with pytest.raises(fa.FaithfulnessError, match="no recurrent state"):
        fa.two_paths(ckpt, sa)
    with pytest.raises(fa.FaithfulnessError, match="another seed"):
        fa.uniform_baseline(ckpt, sa, other=tiny_transformer(1))


def test_a_transformer_head_whose_output_is_ignored_changes_nothing():
    """A head whose output never reaches the layer's projection (its columns of out_proj zero): shuffled, uniform,
    adversarial or erased weights change no prediction, and the adversary moves its weights far."""
    ckpt = tiny_transformer()
    layer, head = 1, 0
    with torch.no_grad():
        dh = ckpt.model.config.emb_dim // ckpt.model.config.heads
        ckpt.model.encoder.layers[layer].self_attn.out_proj.weight[:, head * dh : (head + 1) * dh] = 0
    sa = analyze(ckpt, TF_TEXT).at_head(layer, head)
    perm = fa.permutations(ckpt, sa, n=5)
    assert np.isfinite(perm.median_tvd).any() and np.nanmax(np.abs(perm.median_abs_dlogp)) <= ATOL
    uni = fa.uniform_baseline(ckpt, sa)
    close(uni.uniform_logprob, uni.logprob, ATOL)
    adv = fa.adversarial(ckpt, sa, epsilon=1e-6, steps=60)
    assert np.nanmax(np.abs(adv.dlogp)) <= ATOL and (adv.jsd[adv.slots >= 3] > 0.1).all()
    erase = fe.erasure_curves(ckpt, sa, rankings=["attention", "gradient", "random", "occlusion"])
    assert np.nanmax(np.abs(erase.dlogp)) <= ATOL and np.nansum(erase.flip) == 0
    ao = fe.aopc(ckpt, sa, rankings=["attention", "random"])
    assert np.nanmax(np.abs(ao[["comprehensiveness", "sufficiency"]].to_numpy())) <= ATOL
