"""Model registry: one name per trainable model, each with its config dataclass.

>>> build_model("amsrn", vocab_size=100, selection="shared")  # doctest: +ELLIPSIS
AMSRN(...)
"""

from __future__ import annotations

import dataclasses

from torch import nn

from vizlm.models.amsrn import AMSRN, AMSRNConfig
from vizlm.models.base import BaseConfig, LMOutput, RecurrentLM
from vizlm.models.daniluk import DanilukConfig, DanilukLM, NGramConfig, NGramRNN
from vizlm.models.lstm import LSTMLM, LSTMConfig
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


__all__ = ["ATTENTION_MODELS", "REGISTRY", "LMOutput", "build_model", "make_config", "count_parameters", "lookup"]
