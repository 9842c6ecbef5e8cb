"""Model registry: one name per trainable model, each with its config dataclass.

>>> build_model("amsrn", vocab_size=100, selection="shared")  # doctest: +ELLIPSIS
AMSRN(...)
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from vizlm.models.amsrn import AMSRN, AMSRNConfig
from vizlm.models.base import BaseConfig, LMOutput, RecurrentLM
from vizlm.models.daniluk import DanilukConfig, DanilukLM, NGramConfig, NGramRNN
from vizlm.models.lstm import LSTMConfig, LSTMLM
from vizlm.models.salton import SaltonConfig, SaltonLM

# name -> (config class, model class, fixed config fields)
REGISTRY: dict[str, tuple[type[BaseConfig], type[RecurrentLM], dict]] = {
    "lstm": (LSTMConfig, LSTMLM, {}),
    "amsrn": (AMSRNConfig, AMSRN, {}),
    "attention": (DanilukConfig, DanilukLM, {"variant": "attention"}),
    "kv": (DanilukConfig, DanilukLM, {"variant": "kv"}),
    "kvp": (DanilukConfig, DanilukLM, {"variant": "kvp"}),
    "ngram": (NGramConfig, NGramRNN, {}),
    "salton": (SaltonConfig, SaltonLM, {}),
}


# the models whose forward() returns attention weights
ATTENTION_MODELS = frozenset(name for name, (_, cls, _) in REGISTRY.items() if cls.has_attention)


def lookup(name: str) -> tuple[type[BaseConfig], type[RecurrentLM], dict]:
    if name not in REGISTRY:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def make_config(name: str, **kwargs) -> BaseConfig:
    """The config for model ``name``; unknown fields raise with the valid ones listed."""
    config_cls, _, fixed = lookup(name)
    valid = {f.name for f in dataclasses.fields(config_cls)}
    unknown = set(kwargs) - valid
    if unknown:
        raise ValueError(f"{name} has no option(s) {sorted(unknown)}; valid: {sorted(valid)}")
    return config_cls(**{**kwargs, **fixed})


def build_model(name: str, config: BaseConfig | None = None, **kwargs) -> nn.Module:
    """Instantiate model ``name`` from a config (or keyword arguments for one)."""
    _, model_cls, _ = lookup(name)
    return model_cls(config if config is not None else make_config(name, **kwargs))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def parameter_count(name: str, **kwargs) -> int:
    """Parameters of model ``name`` built from ``kwargs``, without allocating them (meta tensors)."""
    with torch.device("meta"):
        return count_parameters(build_model(name, **kwargs))


MATCH_FIELDS = ("vocab_size", "emb_dim", "hidden_dim")  # what the reference model shares with the matched one


def match_parameters(name: str, kwargs: dict, reference: str = "lstm", tolerance: float = 0.02) -> dict:
    """The ``hidden_dim`` (part size for kv / kvp / ngram) that gives model ``name`` the total
    parameter count closest to ``reference``'s (Daniluk et al. match every model to the LSTM).

    The reference is built with the ``vocab_size``, ``emb_dim`` and ``hidden_dim`` of ``kwargs``
    (defaults otherwise); ``name`` with all of ``kwargs`` but ``hidden_dim``. Raises
    ``ValueError`` when no size comes within ``tolerance`` (relative). Returns what a
    checkpoint records: reference, its size and count, the chosen size, count and ratio.
    """
    ref_kwargs = {k: v for k, v in kwargs.items() if k in MATCH_FIELDS}
    ref_hidden = make_config(reference, **ref_kwargs).hidden_dim
    target = parameter_count(reference, **ref_kwargs)

    def count(k: int) -> int:
        return parameter_count(name, **{**kwargs, "hidden_dim": k})

    hi = 1
    while count(hi) < target:  # the count grows with hidden_dim: double, then bisect
        hi *= 2
    lo = hi // 2 + 1 if hi > 1 else 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if count(mid) < target else (lo, mid)
    best = min((k for k in (hi - 1, hi) if k >= 1), key=lambda k: (abs(count(k) - target), k))
    n = count(best)
    if abs(n / target - 1) > tolerance:
        raise ValueError(
            f"cannot match {name} to {reference} ({target:,} parameters at hidden_dim {ref_hidden}) within "
            f"±{tolerance:.0%}: the closest, hidden_dim {best}, has {n:,} ({n / target - 1:+.1%})"
        )
    return {"reference": reference, "reference_hidden_dim": ref_hidden, "reference_parameters": target,
            "hidden_dim": best, "parameters": n, "ratio": n / target}


__all__ = ["ATTENTION_MODELS", "REGISTRY", "LMOutput", "build_model", "make_config", "count_parameters",
           "lookup", "match_parameters", "parameter_count"]
