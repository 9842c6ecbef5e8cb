"""The transformer family: its attention per layer and head, its blocks, its checkpoint."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY, assert_same_math
from reference import transformer_reference

from vizlm.modeling.checkpoint import load_checkpoint, save_checkpoint
from vizlm.data.vocab import Vocab
from vizlm.models import build_model, check_config


def test_attention_per_layer_and_head_is_the_reference_and_the_outputs_encodes():
    """encode_with_attention: weights (B, layers, heads, T, T) as the step-by-step reference computes them (rows
    sum to 1, nothing on a later position, nothing before a row's block), and the outputs encode() gives. In
    float32: the position encodings are computed in float32 as the example computes them."""
    torch.manual_seed(0)
    model = build_model("transformer", **TINY, layers=2, heads=3, block=5).eval()
    x = torch.randint(4, 40, (3, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        h, att = model.encode_with_attention(x)
        assert_same_math(h, model.encode(x))
        blocks = [transformer_reference(model, x[:, s : s + 5])[1] for s in range(0, 12, 5)]
    assert att.shape == (3, 2, 3, 12, 12)
    for k, ref in enumerate(blocks):  # block k: rows and positions 5k .. 5k + 4
        part = slice(5 * k, 5 * k + ref.shape[-1])
        assert_same_math(att[..., part, part], ref)
    row_block = torch.arange(12) // 5
    outside = (row_block[:, None] != row_block[None, :]) | (torch.arange(12)[None, :] > torch.arange(12)[:, None])
    assert (att[..., outside] == 0).all()
    assert_same_math(att.sum(-1), torch.ones(3, 2, 3, 12, dtype=att.dtype))


def test_a_checkpoint_round_trip_gives_the_same_logits(tmp_path):
    torch.manual_seed(0)
    model = build_model("transformer", **TINY, heads=2, layers=2, block=6).eval()
    vocab = Vocab(["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(36)])
    save_checkpoint(tmp_path / "t", model, "transformer", vocab)
    ckpt = load_checkpoint(tmp_path / "t")
    x = torch.randint(4, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(ckpt.model(x).logits, model(x).logits)
    assert ckpt.model.config == model.config and not ckpt.has_attention


@pytest.mark.parametrize("values, needle", [({"emb_dim": 6, "heads": 4}, "multiple of heads"),
                                            ({"heads": 0}, "'heads'"), ({"block": 0}, "'block'")])
def test_a_config_it_cannot_build_is_refused(values, needle):
    with pytest.raises(ValueError, match=needle):
        check_config("transformer", values)
