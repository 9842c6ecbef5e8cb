"""Model registry: one name per trainable model, each with its config dataclass.

>>> build_model("amsrn", vocab_size=100, selection="shared")  # doctest: +ELLIPSIS
AMSRN(...)
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Set as AbstractSet

import torch
from torch import nn

from vizlm.models import plugins
from vizlm.models.amsrn import AMSRN, SELECTIONS, AMSRNConfig
from vizlm.models.base import CELLS, CONTEXTS, BaseConfig, LMOutput, RecurrentLM
from vizlm.models.daniluk import VARIANTS, DanilukConfig, DanilukLM, NGramConfig, NGramRNN
from vizlm.models.lstm import LSTMLM, LSTMConfig
from vizlm.models.plugins import Plugin, PluginError
from vizlm.models.rm import RMLM, RMConfig
from vizlm.models.salton import SCORES, SaltonConfig, SaltonLM
from vizlm.models.transformer import TransformerConfig, TransformerLM

# name -> (config class, model class, fixed config fields)
REGISTRY: dict[str, tuple[type[BaseConfig], type[RecurrentLM | TransformerLM], dict]] = {
    "lstm": (LSTMConfig, LSTMLM, {}),
    "amsrn": (AMSRNConfig, AMSRN, {}),
    "attention": (DanilukConfig, DanilukLM, {"variant": "attention"}),
    "kv": (DanilukConfig, DanilukLM, {"variant": "kv"}),
    "kvp": (DanilukConfig, DanilukLM, {"variant": "kvp"}),
    "ngram": (NGramConfig, NGramRNN, {}),
    "salton": (SaltonConfig, SaltonLM, {}),
    "rm": (RMConfig, RMLM, {}),
    "transformer": (TransformerConfig, TransformerLM, {}),  # not recurrent: RecurrentLM's reading calls
}


# Model families from installed packages (entry point group "vizlm.models", docs/PLUGINS.md) are not
# entries of REGISTRY, which stays the built-in families whatever is installed: lookup(), names() and
# ATTENTION_MODELS find them, reading the entry points on first need (vizlm.models.plugins).
_BUILTIN_ATTENTION = frozenset(name for name, (_, cls, _) in REGISTRY.items() if cls.has_attention)


class _AttentionModels(AbstractSet):
    """The names of the models whose forward() returns attention weights (each class's flag): the
    built-in families', and installed plugins' (looked up when asked about)."""

    def __contains__(self, name) -> bool:
        if name in _BUILTIN_ATTENTION or not isinstance(name, str) or name in REGISTRY:
            return name in _BUILTIN_ATTENTION
        try:
            found = plugins.find(name, REGISTRY)
        except PluginError:  # installed but skipped: not usable
            return False
        return found is not None and found.plugin.model.has_attention

    def __iter__(self):
        return iter([n for n in names() if n in self])

    def __len__(self) -> int:
        return len(list(iter(self)))


# the models whose forward() returns attention weights
ATTENTION_MODELS: AbstractSet = _AttentionModels()
# the built-in families with self-attention per layer and head (encode_with_attention; vizlm.inspect.reading)
SELF_ATTENTION_MODELS = frozenset(name for name, (_, cls, _) in REGISTRY.items() if getattr(cls, "self_attention", False))


def names() -> list[str]:
    """Every model name: the built-in families, then installed plugins (read on first use)."""
    return [*REGISTRY, *plugins.installed(REGISTRY)]


def lookup(name: str) -> tuple[type[BaseConfig], type[RecurrentLM], dict]:
    """(config class, model class, fixed config fields) of model ``name``, a built-in family or a plugin.
    Raises :class:`ValueError` with the valid names (:class:`PluginError` for a plugin vizlm skipped)."""
    if name in REGISTRY:
        return REGISTRY[name]
    found = plugins.find(name, REGISTRY) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(names())}")
    return found.plugin.config, found.plugin.model, {}


def plugin_of(name: str) -> plugins.Installed | None:
    """The installed plugin that gives model ``name`` (its package, version, entry point); None for a
    built-in family or an unknown name."""
    if not isinstance(name, str) or name in REGISTRY:
        return None
    try:
        return plugins.find(name, REGISTRY)
    except PluginError:
        return None


def _limits(name: str) -> dict:
    """The limits of model ``name``'s config fields: :data:`LIMITS`, and a plugin's own."""
    return LIMITS if name in REGISTRY else {**LIMITS, **plugins.find(name, REGISTRY).plugin.limits}


def make_config(name: str, **kwargs) -> BaseConfig:
    """The config for model ``name``; unknown fields raise with the valid ones listed."""
    config_cls, _, fixed = lookup(name)
    valid = {f.name for f in dataclasses.fields(config_cls)}
    unknown = set(kwargs) - valid
    if unknown:
        raise ValueError(f"{name} has no option(s) {sorted(unknown)}; valid: {sorted(valid)}")
    return config_cls(**{**kwargs, **fixed})


@dataclasses.dataclass(frozen=True)
class Limit:
    """The allowed values of one config field: a range (``lo <= v <= hi``, or ``< hi``) or choices
    (strings, or ``(False, True)`` for a boolean)."""

    lo: float | None = None
    hi: float | None = None
    hi_open: bool = False
    choices: tuple[str | bool, ...] = ()

    def describe(self, kind: type) -> str:
        if kind is bool:
            return "true or false"
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if kind is int:
            return f"an integer from {self.lo:,} to {self.hi:,}"
        return f"a number from {self.lo:g} to {self.hi:g}" + (f" (less than {self.hi:g})" if self.hi_open else "")

    def allows(self, value) -> bool:
        if self.choices:
            return value in self.choices
        return self.lo <= value and (value < self.hi if self.hi_open else value <= self.hi)


# The one table of what a config may hold, keyed by field name (a name means the same in
# every family). Every field of every registered config needs an entry: check_config
# refuses to validate a field it has no limit for, and tests/test_checkpoint.py checks
# the table covers the registry. The bounds are far beyond anything this project trains
# (50-d embeddings, 10k words, windows of 5) yet small enough that no accepted config
# can ask for an absurd allocation; the total parameter count is capped separately by
# the checkpoint loader.
LIMITS: dict[str, Limit] = {
    "vocab_size": Limit(4, 1_000_000),  # the 4 special tokens at least
    "emb_dim": Limit(1, 4096),
    "hidden_dim": Limit(1, 4096),
    "dropout": Limit(0.0, 1.0, hi_open=True),
    "init_range": Limit(0.0, 10.0),
    "entropy_weight": Limit(0.0, 1000.0),
    "window": Limit(1, 100),  # the attention band costs batch x length x window x hidden floats
    "n": Limit(2, 16),
    "selection": Limit(choices=SELECTIONS),
    "variant": Limit(choices=tuple(VARIANTS)),
    "score": Limit(choices=SCORES),
    "context": Limit(choices=CONTEXTS),
    "memory": Limit(1, 10_000),  # carried states (B x M x hidden floats); None: the whole sentence
    "start_slot": Limit(choices=(False, True)),
    "layers": Limit(1, 16),  # stacked recurrent layers (pytorch/examples trains 2)
    "rnn": Limit(choices=CELLS),
    "tie": Limit(choices=(False, True)),
    "heads": Limit(1, 64),  # attention heads per Transformer layer
    "block": Limit(1, 100_000),  # tokens a Transformer reads as one context (block x block attention)
}


def _show(value, typed: bool = True) -> str:
    """A short, safe rendering of an untrusted JSON value for a message (with its JSON type)."""
    if isinstance(value, bool):
        return ("true" if value else "false") + (" (a boolean)" if typed else "")
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"{value[:40]!r}{'...' if len(value) > 40 else ''}" + (" (a string)" if typed else "")
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    text = repr(value)
    return text if len(text) <= 40 else text[:20] + "..." + text[-8:]


def check_config(name: str, values: dict) -> BaseConfig:
    """The config for model ``name`` from untrusted values (e.g. a ``config.json``).

    Unlike :func:`make_config` every value is checked against :data:`LIMITS` first:
    ints must be JSON integers (not booleans or floats), floats finite numbers, strings
    one of their choices, booleans JSON ``true`` or ``false`` (not 0 or 1). Raises
    :class:`ValueError` with a message naming the field, the value and what is allowed;
    nothing is built before everything passes.
    """
    config_cls, _, fixed = lookup(name)
    if not isinstance(values, dict):
        raise TypeError("the config must be an object")
    limits = _limits(name)
    hints = typing.get_type_hints(config_cls)
    valid = [f.name for f in dataclasses.fields(config_cls)]
    unknown = sorted(set(values) - set(valid), key=str)
    if unknown:
        raise ValueError(f"{name} has no option(s) {[str(u)[:40] for u in unknown[:5]]}; valid: {sorted(valid)}")
    clean = {}
    for key, value in values.items():
        kind, limit = hints[key], limits.get(key)
        if limit is None:  # pragma: no cover - a new config field without a limit
            raise ValueError(f"{key!r} has no validation rule; add it to vizlm.models.LIMITS")
        optional = type(None) in typing.get_args(kind)  # e.g. memory: int | None
        if optional:
            kind = next(k for k in typing.get_args(kind) if k is not type(None))
            if value is None:
                clean[key] = None
                continue
        wrong = f"{key!r} must be {limit.describe(kind)}{' or null' if optional else ''}, not {_show(value)}"
        if kind is int:
            if type(value) is not int:
                raise ValueError(wrong)
        elif kind is float:
            if type(value) not in (int, float) or not math.isfinite(value):
                raise ValueError(wrong)
            value = float(value)
        elif kind is str:
            if type(value) is not str:
                raise ValueError(wrong)
        elif kind is bool:
            if type(value) is not bool:
                raise ValueError(wrong)
        else:  # pragma: no cover - only int, float, str and bool fields exist
            raise ValueError(f"{key!r} has a type ({kind}) the loader cannot check")
        if not limit.allows(value):
            if limit.choices:  # the wording the config classes use
                raise ValueError(f"unknown {key} {_show(value, False)}; it must be {limit.describe(kind)}")
            raise ValueError(f"{key!r} is {_show(value, False)}; it must be {limit.describe(kind)}")
        clean[key] = value
    for key, value in fixed.items():
        if key in clean and clean[key] != value:
            raise ValueError(f"{key!r} is {_show(clean[key], False)}, but a {name} model has {key} {value!r}")
    return config_cls(**{**clean, **fixed})


def build_model(name: str, config: BaseConfig | None = None, *, contract: bool = True, **kwargs) -> nn.Module:
    """Instantiate model ``name`` from a config (or keyword arguments for one).

    A plugin's model gets the contract check (:func:`vizlm.models.plugins.check_contract`) unless it is
    built on the ``meta`` device or ``contract=False`` (the checkpoint loader checks it once its weights
    are in); a plugin whose class cannot be built raises :class:`PluginError` naming it.
    """
    _, model_cls, _ = lookup(name)
    config = config if config is not None else make_config(name, **kwargs)
    if name in REGISTRY:
        return model_cls(config)
    try:
        model = model_cls(config)
    except Exception as exc:  # noqa: BLE001 - whatever the plugin's constructor raises
        label = plugins.find(name, REGISTRY).label
        raise PluginError(f"the {label} cannot build its model: {type(exc).__name__} ({str(exc)[:200]})") from None
    if contract and not any(p.is_meta for p in model.parameters()):
        plugins.check_contract(name, model)
    return model


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


plugins.use_rules(LIMITS, Limit, check_config)  # what a plugin's config is checked against (no import cycle)

__all__ = [
    "ATTENTION_MODELS", "SELF_ATTENTION_MODELS", "LIMITS", "REGISTRY", "LMOutput", "Limit", "Plugin", "PluginError",
    "build_model", "check_config", "count_parameters", "lookup", "make_config", "match_parameters",
    "names", "parameter_count", "plugin_of",
]
