"""Attention effects: read effect and slot effects against a slow one-pair-at-a-time reference,
the zero-read cases, and the analysis, cases, corpus, plot and JSON outputs built on them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import ATTENTION_MODELS, TINY, all_variants, tiny_model
from reference import reference_effects

from vizlm.models import build_model
from vizlm.models import effects as fx


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
        again = model.head(model.rnn(model.embed(batch), (state.h, state.c))[0], state.memory, state.valid,
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
    torch.testing.assert_close(part, torch.where(select, full, torch.zeros_like(full)), atol=1e-12, rtol=0)
    torch.testing.assert_close(chunked, full, atol=1e-12, rtol=0)


def _zero_read(name: str, model) -> None:
    """Zero the weights through which the read reaches the prediction."""
    with torch.no_grad():
        if name == "amsrn":
            model.read_proj.weight.zero_()  # W_pr
        elif name == "salton":
            model.w_c.weight[:, model.config.hidden_dim :] = 0.0  # the c_t half of W_c [h_t; c_t]
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
    torch.testing.assert_close(slots[:, torch.arange(T), torch.arange(T)], read, atol=1e-12, rtol=0)
    model = tiny_model("amsrn")
    with torch.no_grad():
        h = model.encode(batch)
        first = fx.slot_effects(model, h, targets)[:, 0, 0]  # row 0 has only the start slot
        torch.testing.assert_close(first, fx.read_effect(model, h, targets)[:, 0], atol=1e-12, rtol=0)


def test_drop_slot_renormalises_or_reads_nothing():
    w = torch.tensor([[0.5, 0.25, 0.25], [1.0, 0.0, 0.0]], dtype=torch.float64)
    out = fx.drop_slot(w, torch.tensor([0, 0]))
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]], dtype=torch.float64))


@pytest.mark.parametrize("name", ["lstm", "ngram"])
def test_models_without_attention_have_no_effects(name, batch):
    model = build_model(name, **TINY).eval()
    with torch.no_grad(), pytest.raises(ValueError, match="no attention"):
        fx.read_effect(model, model.encode(batch), targets_of(batch))
