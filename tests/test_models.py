"""Every model: fast masked path == step-by-step reference, causality, attention rows."""

from __future__ import annotations

import pytest
import torch
from conftest import ATTENTION_MODELS, TINY, all_variants, assert_no_future, assert_same_math, tiny_model
from reference import reference

from vizlm.models import build_model, make_config
from vizlm.models.base import attention_entropy, slot_mask
from vizlm.modeling.train import lm_loss


@pytest.mark.parametrize("name,kw", all_variants())
def test_fast_equals_reference(name, kw, batch):
    model = tiny_model(name, **kw)
    with torch.no_grad():
        out = model(batch)
        ref_logits, ref_att = reference(model, batch)
    torch.testing.assert_close(out.logits, ref_logits, atol=1e-5, rtol=1e-5)
    assert model.has_attention == (name in ATTENTION_MODELS)  # the flag the app and the analysis read
    if name in ATTENTION_MODELS:
        torch.testing.assert_close(out.attention, ref_att, atol=1e-5, rtol=1e-5)
    else:
        assert out.attention is None


@pytest.mark.parametrize("name,kw", all_variants())
def test_no_prediction_sees_the_future(name, kw, batch):
    assert_no_future(tiny_model(name, **kw), batch)


@pytest.mark.parametrize("name,kw", all_variants(ATTENTION_MODELS))
def test_attention_rows(name, kw, batch):
    model = tiny_model(name, **kw)
    with torch.no_grad():
        att = model(batch).attention  # (B, T, S)
    T = batch.shape[1]
    window = kw.get("window")
    allowed = slot_mask(T, window)
    start = kw.get("start_slot", True)
    if not start:
        allowed[:, 0] = False  # AMSRN without the zero start slot: h_1 .. h_{t-1} only
    assert torch.isfinite(att).all()
    assert (att >= 0).all()
    assert (att[:, ~allowed] == 0).all(), "weight outside the memory (future slot or outside the window)"
    # rows sum to 1, except a row with no slot at all (the first, without a start slot): 0
    torch.testing.assert_close(att.sum(-1), allowed.any(-1).to(att.dtype).expand(att.shape[:2]))
    # first step: only the start slot exists (or nothing)
    torch.testing.assert_close(att[:, 0, 0], torch.full(att.shape[:1], float(start), dtype=att.dtype))


def test_entropy_is_finite_with_zero_weights():
    alpha = torch.tensor([[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]], requires_grad=True)
    ent = attention_entropy(alpha, slot_mask(3))
    assert torch.isfinite(ent).all()
    torch.testing.assert_close(ent[0], torch.tensor([0.0, 0.6931471805599453, 0.0]))
    ent.sum().backward()
    assert torch.isfinite(alpha.grad).all()


def test_entropy_regulariser_in_loss(batch):
    model = build_model("amsrn", vocab_size=40, emb_dim=6, hidden_dim=5, entropy_weight=0.5)
    plain = build_model("amsrn", vocab_size=40, emb_dim=6, hidden_dim=5)
    plain.load_state_dict(model.state_dict())
    targets = torch.roll(batch, -1, 1)
    loss, nll, n = lm_loss(model, batch, targets)
    loss0, nll0, _ = lm_loss(plain, batch, targets)
    assert torch.isfinite(loss) and loss > loss0  # entropy is positive after step 1
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_amsrn_initialised_from_lstm_is_that_lstm(batch):
    from vizlm.modeling.checkpoint import Checkpoint
    from vizlm.data.vocab import SPECIALS, Vocab
    from vizlm.modeling.train import init_from

    vocab = Vocab(list(SPECIALS) + [f"w{i}" for i in range(36)])
    lstm = tiny_model("lstm")
    amsrn = build_model("amsrn", vocab_size=40, emb_dim=6, hidden_dim=5).double()
    copied = init_from(amsrn, Checkpoint(lstm, vocab, "lstm"), vocab)
    assert {"embed.weight", "rnn.weight_hh_l0", "decoder.weight"} <= set(copied)
    with torch.no_grad():
        torch.testing.assert_close(amsrn(batch).logits, lstm(batch).logits)


@pytest.mark.parametrize("variant,part", [("attention", -1), ("kv", -1), ("kvp", -1), ("ngram", 0)])
def test_daniluk_initialised_from_lstm_predicts_from_that_lstm(variant, part, batch):
    """The LSTM becomes the predict part (N-gram: part 1): h*_t = tanh(h_t of the LSTM) at first."""
    from vizlm.modeling.checkpoint import Checkpoint
    from vizlm.data.vocab import SPECIALS, Vocab
    from vizlm.modeling.train import init_from

    vocab = Vocab(list(SPECIALS) + [f"w{i}" for i in range(36)])
    lstm = tiny_model("lstm")
    extra = {} if variant == "ngram" else {"window": 3}
    model = build_model(variant, vocab_size=40, emb_dim=6, hidden_dim=5, **extra).double()
    init_from(model, Checkpoint(lstm, vocab, "lstm"), vocab)
    with torch.no_grad():
        h = lstm.encode(batch)
        parts = model.encode(batch).split(5, dim=-1)
        torch.testing.assert_close(parts[part], h)  # the other parts cannot disturb it
        torch.testing.assert_close(model(batch).logits, lstm.decoder(torch.tanh(h)))
    wrong = build_model(variant, vocab_size=40, emb_dim=6, hidden_dim=4)
    with pytest.raises(ValueError, match="sizes do not match"):
        init_from(wrong, Checkpoint(lstm, vocab, "lstm"), vocab)


def test_registry_errors_list_valid_names():
    with pytest.raises(ValueError, match="valid models: lstm, amsrn"):
        build_model("gpt")
    with pytest.raises(ValueError, match="valid: none, independent"):
        make_config("amsrn", selection="bogus")
    with pytest.raises(ValueError, match="no option"):
        make_config("lstm", window=3)


def test_kvp_parameter_budget_matches_lstm():
    lstm = build_model("lstm", hidden_dim=50)
    kvp = build_model("kvp", hidden_dim=50, window=5)
    n_lstm = sum(p.numel() for p in lstm.parameters())
    n_kvp = sum(p.numel() for p in kvp.parameters())
    assert 0.8 <= n_kvp / n_lstm <= 1.2


@pytest.mark.parametrize(
    "name,kw,size",
    [("kvp", {}, 42), ("kv", {}, 46), ("attention", {}, 49), ("ngram", {"n": 4}, 42), ("rm", {"window": 15}, 17),
     ("rm", {"window": 1}, 17)],
)
def test_match_params_gives_the_lstm_parameter_count(name, kw, size):
    """Daniluk et al. match every model's total parameter count to the LSTM's (here 50 units)."""
    from vizlm.models import count_parameters, match_parameters

    matched = match_parameters(name, {"vocab_size": 10_000, **kw})
    lstm = count_parameters(build_model("lstm", vocab_size=10_000, hidden_dim=50))
    model = count_parameters(build_model(name, vocab_size=10_000, hidden_dim=matched["hidden_dim"], **kw))
    assert matched["hidden_dim"] == size
    assert matched["reference_parameters"] == lstm and matched["parameters"] == model
    assert abs(model / lstm - 1) <= 0.02
    for other in (size - 1, size + 1):  # and no other part size is closer
        n = count_parameters(build_model(name, vocab_size=10_000, hidden_dim=other, **kw))
        assert abs(n - lstm) >= abs(model - lstm)


def test_match_params_lstm_of_amsrn_size():
    """The control AMSRN lacks: an LSTM with AMSRN's parameter count (~97 units at 50)."""
    from vizlm.models import count_parameters, match_parameters

    matched = match_parameters("lstm", {"vocab_size": 10_000}, reference="amsrn")
    amsrn = count_parameters(build_model("amsrn", vocab_size=10_000, hidden_dim=50))
    assert matched["hidden_dim"] == 97 and matched["reference_parameters"] == amsrn
    assert abs(matched["parameters"] / amsrn - 1) <= 0.02


def test_match_params_fails_clearly_when_no_size_is_close():
    from vizlm.models import match_parameters

    with pytest.raises(ValueError, match=r"cannot match lstm to kvp .* within ±2%: the closest, hidden_dim 2"):
        match_parameters("lstm", {"vocab_size": 40, "emb_dim": 6, "hidden_dim": 1}, reference="kvp")


@pytest.mark.parametrize("host", [True, False])
@pytest.mark.parametrize("padding", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 7, 256, 600])
def test_fused_output_loss_equals_cross_entropy(rows, bias, padding, host, monkeypatch):
    """The chunked output-layer loss (training) and per-token NLL (evaluation) equal
    ``F.cross_entropy`` over the multiplied-out logits, padding ignored, gradients included,
    across chunk boundaries (rows of 256), with padding rows and without (the CPU then skips
    zeroing their gradient); ``host=False`` runs the GPU's path (no look at the values) here."""
    import torch.nn.functional as F

    from vizlm.models import loss as base
    from vizlm.models.base import Readout

    monkeypatch.setattr(base, "_host_checks", lambda x: host)
    monkeypatch.setattr(base, "DEVICE_CHUNK_BYTES", 256 * 50 * 8)  # the GPU's chunks: 256 rows here too
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(2, rows, 12, generator=g, dtype=torch.float64, requires_grad=True)
    w = (torch.randn(50, 12, generator=g, dtype=torch.float64) / 3).requires_grad_()
    b = torch.randn(50, generator=g, dtype=torch.float64).requires_grad_() if bias else None
    t = torch.randint(0, 50, (2, rows), generator=g)
    if padding:
        t[0, -1] = 0
    else:
        t[t == 0] = 1
    r = Readout(x, w, b)
    logits = r.logits()
    ref = F.cross_entropy(logits.flatten(0, 1), t.reshape(-1), ignore_index=0, reduction="sum")
    params = [p for p in (x, w, b) if p is not None]
    want = torch.autograd.grad(ref, params)
    got_loss = r.nll(t)
    got = torch.autograd.grad(got_loss * 1.5, params)  # a scale on the loss reaches every gradient
    torch.testing.assert_close(got_loss, ref)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, 1.5 * e)
    tok = F.cross_entropy(logits.flatten(0, 1), t.reshape(-1), ignore_index=0, reduction="none").view(t.shape)
    torch.testing.assert_close(r.token_nll(t), tok.detach())
    assert (r.token_nll(t)[t == 0] == 0).all()
    gx = torch.autograd.grad(r.nll(t), x)[0]  # one input's gradient alone (frozen weights)
    torch.testing.assert_close(gx, want[0])
    assert torch.autograd.gradcheck(lambda x_, w_: Readout(x_, w_, None).nll(t[:, :5]), (x[:, :5].detach().requires_grad_(),
                                                                                       w.detach().requires_grad_()))


@pytest.mark.parametrize("host", [True, False])
def test_fused_output_loss_where_the_target_probability_underflows(host, monkeypatch):
    """A target ~200 logits below its row's best has probability 0 in float32; the fused loss still
    gives its NLL (from the logits, not ``-log 0``), equal to ``F.cross_entropy``, gradients finite."""
    import torch.nn.functional as F

    from vizlm.models import loss as base
    from vizlm.models.base import Readout

    monkeypatch.setattr(base, "_host_checks", lambda x: host)
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(1, 40, 8, generator=g) * 40).requires_grad_()
    w = torch.randn(30, 8, generator=g).requires_grad_()
    t = torch.randint(1, 30, (1, 40), generator=g)
    t[0, :5] = F.linear(x, w)[0, :5].argmin(-1)  # the least likely words: probabilities far below 1e-38
    logits = F.linear(x, w)
    assert (logits.softmax(-1).gather(-1, t[..., None])[0, :5] == 0).all()
    ref = F.cross_entropy(logits.flatten(0, 1), t.reshape(-1), ignore_index=0, reduction="sum")
    want = torch.autograd.grad(ref, (x, w))
    got_loss = Readout(x, w).nll(t)
    got = torch.autograd.grad(got_loss, (x, w))
    assert_same_math(got_loss, ref)
    for a, e in zip(got, want):
        assert_same_math(a, e)


@pytest.mark.parametrize("name,kw", all_variants())
def test_output_loss_matches_for_every_family(name, kw):
    """Training's loss through each family's output layer equals cross-entropy over its logits."""
    import torch.nn.functional as F

    model = tiny_model(name, **kw)
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    inputs, targets = torch.randint(4, V, (3, 9), generator=g), torch.randint(0, V, (3, 9), generator=g)
    out = model(inputs)
    assert out.readout is not None  # every family's loss goes through the fused output layer
    ref = F.cross_entropy(out.logits.flatten(0, 1), targets.reshape(-1), ignore_index=0, reduction="sum")
    torch.testing.assert_close(out.nll(targets), ref)


# --------------------------------------------------------------------------- AMSRN without the start slot
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_amsrn_without_start_slot_reads_nothing_at_the_first_step(batch, dtype):
    """No h_0: the first row has no slot, so its attention row is all zero and its read exactly zero
    (its logits are the LSTM path W_ph h_1 + b, no NaN from a softmax over nothing); the later rows
    attend to h_1 .. h_{t-1} only and sum to 1. The loss (with the entropy term) has finite gradients."""
    torch.manual_seed(0)
    model = build_model("amsrn", **TINY, start_slot=False, entropy_weight=0.5).to(dtype)
    torch.nn.init.uniform_(model.read_proj.weight, -0.3, 0.3)
    h = model.encode(batch)
    read, att, _ = model.attend(h)
    out = model.head(h)
    assert torch.isfinite(out.logits).all() and torch.isfinite(att).all()
    assert (read[:, 0] == 0).all() and (att[:, 0] == 0).all() and (att[:, :, 0] == 0).all()
    assert_same_math(out.logits[:, 0], model.decoder(h[:, 0]))  # the fused head vs the decoder alone
    torch.testing.assert_close(att[:, 1:].sum(-1), torch.ones(att.shape[0], att.shape[1] - 1, dtype=dtype))
    assert (att[:, 1, 1] == 1).all()  # the second row has h_1 alone
    loss, _, _ = lm_loss(model, batch, torch.roll(batch, -1, 1))
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert model.key.weight.grad.abs().sum() > 0  # the attention still learns from the later rows
    with_start = build_model("amsrn", **TINY).to(dtype)
    with_start.load_state_dict(model.state_dict())  # the same weights; only the memory differs
    assert not torch.equal(with_start(batch).logits[:, 1:], out.logits[:, 1:])


def test_masked_softmax_of_an_empty_row_is_zero_with_a_finite_gradient():
    from vizlm.models.base import masked_softmax

    scores = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], requires_grad=True)
    mask = torch.tensor([[False, False, False], [True, True, False]])
    alpha = masked_softmax(scores, mask)
    torch.testing.assert_close(alpha[0], torch.zeros(3))
    torch.testing.assert_close(alpha[1], torch.cat([torch.tensor([0.5, -1.0]).softmax(0), torch.zeros(1)]))
    (alpha * torch.arange(3.0)).sum().backward()
    assert torch.isfinite(scores.grad).all() and (scores.grad[0] == 0).all()


# --------------------------------------------------------------------------- RM (Tran et al.)
def test_rm_has_two_word_tables_a_temporal_matrix_and_gates():
    """Parameters beyond the LSTM LM of the same size: M and C (V x d each), T (n x d), W_r, W_z, W,
    U_r, U_z, U (d x d each, no biases)."""
    from vizlm.models import count_parameters

    V, d, n = 10_000, 17, 15
    rm = build_model("rm", vocab_size=V, hidden_dim=d, window=n)
    lstm = build_model("lstm", vocab_size=V, hidden_dim=d)
    assert count_parameters(rm) - count_parameters(lstm) == 2 * V * d + n * d + 6 * d * d
    assert rm.initial_state(3).memory.shape == (3, n, 2 * d)  # the carried words: [M x; C x]
    assert rm.encode(torch.tensor([[1, 5, 6]])).shape == (1, 3, 3 * d)  # [h_t; M x_t; C x_t]


def test_rm_addresses_with_one_table_and_reads_the_other(batch):
    """The attention weights come from M (+T) and h_t, never from C; the read from C alone."""
    model = tiny_model("rm", window=4)
    with torch.no_grad():
        base = model(batch)
        model.content.weight.mul_(3.0)
        content = model(batch)
        assert torch.equal(content.attention, base.attention) and not torch.equal(content.logits, base.logits)
        model.temporal[-1].add_(1.0)  # the previous word's vector (one for all would cancel in the softmax)
        moved = model(batch).attention
        assert not torch.equal(moved, base.attention) and torch.equal(moved[:, 0], base.attention[:, 0])


def test_rm_initialised_from_lstm_copies_its_lstm(batch):
    from vizlm.modeling.checkpoint import Checkpoint
    from vizlm.data.vocab import SPECIALS, Vocab
    from vizlm.modeling.train import init_from

    vocab = Vocab(list(SPECIALS) + [f"w{i}" for i in range(36)])
    lstm = tiny_model("lstm")
    rm = build_model("rm", **TINY, window=3).double()
    copied = init_from(rm, Checkpoint(lstm, vocab, "lstm"), vocab)
    assert set(copied) == {"embed.weight", "rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0",
                           "rnn.bias_hh_l0", "decoder.weight", "decoder.bias"}
    with torch.no_grad():
        torch.testing.assert_close(rm.encode(batch)[..., :5], lstm.encode(batch))
