"""Shared fixtures: tiny models of every family, in float64 for exact comparisons."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vizlm.models import REGISTRY, build_model

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
ATTENTION_MODELS = ["amsrn", "attention", "kv", "kvp", "salton", "rm"]
TINY = {"vocab_size": 40, "emb_dim": 6, "hidden_dim": 5}
VARIANTS = {  # every configuration a test should see
    "lstm": [{}],
    "amsrn": [{"selection": s} for s in ("none", "independent", "shared", "complementary")]
    + [{"selection": "shared", "start_slot": False}],
    "attention": [{"window": 1}, {"window": 3}],
    "kv": [{"window": 4}],
    "kvp": [{"window": 5}, {"window": 30}],
    "ngram": [{"n": 2}, {"n": 4}],
    "salton": [{"score": "single"}, {"score": "combined"}],
    "rm": [{"window": 1}, {"window": 4}],
}
assert set(VARIANTS) == set(REGISTRY)


def tiny_model(name: str, **kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(name, **TINY, **kwargs).double().eval()
    if name == "amsrn":  # W_pr starts at zero; give it weight so the read path is tested
        torch.nn.init.uniform_(model.read_proj.weight, -0.3, 0.3)
    return model


def all_variants(names=None):
    return [
        pytest.param(name, kw, id=f"{name}-" + "-".join(f"{k}={v}" for k, v in kw.items()) if kw else name)
        for name in (names or REGISTRY)
        for kw in VARIANTS[name]
    ]


@pytest.fixture
def batch() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(4, 40, (3, 9), generator=g)
    x[:, 0] = 1  # <s>
    x[2, 6:] = 0  # a padded sentence
    return x
