"""Model families from other packages: plugins of the entry point group ``vizlm.models``.

A plugin package declares, in its ``pyproject.toml`` (docs/PLUGINS.md)::

    [project.entry-points."vizlm.models"]
    selfattn = "vizlm_selfattn:PLUGIN"

where ``PLUGIN = Plugin(config=SelfAttnConfig, model=SelfAttnLM)``: a config dataclass subclassing
:class:`~vizlm.models.base.BaseConfig` and a model subclassing :class:`~vizlm.models.base.RecurrentLM`
(:class:`~vizlm.models.base.AttentionLM` for a model with attention), the contract every built-in
family meets. The name then works wherever a family's does: ``vizlm train --model selfattn``,
:func:`vizlm.models.build_model`, checkpoints, :func:`vizlm.load`, the analysis, the effects, the app.

Entry points are read once, lazily: on the first lookup of a name vizlm does not know, or when the
models are listed (:func:`vizlm.models.names`), never at import. A broken plugin never breaks vizlm:
one that cannot be imported (an exception, or even ``sys.exit``; only Ctrl-C goes through), takes a
built-in family's name (or another plugin's), or is not a :class:`Plugin` of proper classes is skipped
with a :class:`PluginWarning` naming it, and :func:`skipped` (``vizlm plugins``, the app's sidebar)
says why; the other plugins load as usual, and a checkpoint of it says so when loaded.

**Contract check.** A plugin model is checked when it is built (:func:`vizlm.models.build_model`)
and when a checkpoint of it is loaded (after its weights are in), by :func:`check_contract`: a
forward pass on :data:`CHECK_BATCH` sentences of :data:`CHECK_STEPS` tokens (a fixed size, so the
cost does not grow with anything), then

* the logits are (B, T, V) and finite, and ``head(encode(x))`` gives ``forward(x)`` (the analysis
  reads a model that way);
* attention (a model with ``has_attention``): (B, T, S) with S = T slots, finite, >= 0, rows summing
  to 1 within :data:`ROW_TOLERANCE` (0 for a row with no slot), no weight on a later slot (the
  shared slot layout: row ``r`` may use slots ``0..r``) or outside the model's window;
* the effects' path (:mod:`vizlm.models.effects`): ``head(h, weights=w)`` with its own weights gives
  its own logits, and with all-zero weights (the no-read path) logits of the same shape;
* no prediction sees a later token: changing the last token changes no earlier row;
* a document-context model also reads a segment after :meth:`~RecurrentLM.initial_state`.

A violation raises :class:`PluginError` (a :class:`~vizlm.core.errors.VizlmError`) naming the plugin, its
package and what is wrong.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
import threading
import typing
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from vizlm.core.errors import VizlmError
from vizlm.models.base import AttentionLM, BaseConfig, LMOutput, Readout, RecurrentLM, State, slot_mask

GROUP = "vizlm.models"  # the entry point group plugins register under
NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")  # a plugin's name: it appears in URLs, file names and the CLI
CHECK_BATCH, CHECK_STEPS = 2, 7  # the contract check's input: 2 sentences of 7 tokens
ROW_TOLERANCE = 1e-4  # |row sum - 1| allowed: float32 softmax rounding over a few slots is ~1e-7
CLOSE = {"rtol": 1e-4, "atol": 1e-5}  # two computations of one output (head(encode(x)) vs forward(x)), float32
FIELD_TYPES = (int, float, str, bool)  # what check_config can validate in a config.json


class PluginError(VizlmError, ValueError):
    """A plugin that breaks vizlm's model contract or cannot be used, with a message naming it."""


class PluginWarning(UserWarning):
    """A plugin skipped at discovery (it cannot be imported, its name is taken, it is not a Plugin)."""


@dataclass(frozen=True)
class Plugin:
    """What a plugin's entry point names: its config class, its model class and the limits of the
    config fields vizlm does not know (``{"key_dim": Limit(1, 4096)}``; a field named like one of
    :data:`vizlm.models.LIMITS` shares that limit)."""

    config: type
    model: type
    limits: Mapping = field(default_factory=dict)  # field name -> vizlm.models.Limit
    description: str = ""  # one line for `vizlm plugins`


@dataclass(frozen=True)
class Installed:
    """A registered plugin: its name, what it gives and the package that installed it."""

    name: str
    plugin: Plugin
    distribution: str | None = None  # e.g. "vizlm-selfattn"; None: registered in-process
    version: str | None = None
    entry_point: str | None = None  # "vizlm_selfattn:PLUGIN"

    @property
    def label(self) -> str:
        """``plugin 'selfattn' (package vizlm-selfattn 0.1.0)``: how messages name it."""
        pkg = f" (package {self.distribution}{' ' + self.version if self.version else ''})" if self.distribution else ""
        return f"plugin {self.name!r}{pkg}"

    def record(self) -> dict:
        """What a checkpoint of it records (``config.json``'s ``plugin``)."""
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "entry_point": self.entry_point}


_loaded: dict[str, Installed] = {}
_skipped: dict[str, str] = {}  # name -> why it was skipped
_read = False  # whether the entry points have been read
_lock = threading.RLock()  # the app's sessions run in threads: one reads, the others wait for it (re-entrant:
# a plugin that looks a model up while it is imported)


def entry_points() -> list:
    """The installed entry points of :data:`GROUP` (tests replace this to register plugins in-process)."""
    return list(importlib.metadata.entry_points(group=GROUP))


def reset() -> None:
    """Forget what was read: the next lookup reads the entry points again (tests)."""
    global _read
    with _lock:
        _loaded.clear()
        _skipped.clear()
        _read = False


def _distribution(ep) -> tuple[str | None, str | None]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None, None
    try:
        return dist.metadata["Name"] or dist.name, dist.version
    except Exception:  # noqa: BLE001 - broken metadata must not break discovery
        return getattr(dist, "name", None), None


def _skip(name: str, who: str, why: str) -> None:
    _skipped[name] = why
    warnings.warn(f"vizlm skipped the {who}: {why}", PluginWarning, stacklevel=3)


class Rules(typing.NamedTuple):
    """What a plugin's config is checked against, given by :mod:`vizlm.models` (:func:`use_rules`): the limits
    of the known config fields, the limit type, and the config check a ``config.json`` gets. Given, not
    imported: the package imports this module, so this module never imports the package."""

    limits: Mapping
    limit_type: type
    check_config: typing.Callable


_RULES: list[Rules] = []


def use_rules(limits: Mapping, limit_type: type, check_config: typing.Callable) -> None:
    """Called once by :mod:`vizlm.models` when it is initialised, before any plugin is read."""
    _RULES[:] = [Rules(limits, limit_type, check_config)]


def _rules() -> Rules:
    if not _RULES:
        raise RuntimeError("vizlm.models has not given the plugin loader its rules (import vizlm.models first)")
    return _RULES[0]


def discover(reserved: typing.Collection[str]) -> None:
    """Read the entry points once (``reserved``: the built-in families' names, which no plugin may take)."""
    with _lock:
        _discover(reserved)


def _discover(reserved: typing.Collection[str]) -> None:
    global _read
    if _read:
        return
    _read = True  # first: a plugin that looks a model up while it is imported must not read them again
    try:
        found = entry_points()
    except Exception as exc:  # noqa: BLE001 - broken package metadata must not break vizlm
        warnings.warn(f"vizlm could not read the {GROUP!r} entry points: {exc}", PluginWarning, stacklevel=2)
        return
    for ep in found:
        name = str(getattr(ep, "name", "?"))
        dist, version = _distribution(ep)
        who = Installed(name, Plugin(object, object), dist, version).label
        if name in _loaded or name in _skipped:  # the first package to give a name keeps it
            first = f"the {_loaded[name].label}" if name in _loaded else "another plugin (skipped)"
            warnings.warn(f"vizlm skipped the {who}: the name {name!r} is already taken by {first}", PluginWarning,
                          stacklevel=2)
            continue
        try:
            obj = ep.load()
        except KeyboardInterrupt:  # the user's Ctrl-C is theirs, not the plugin's
            raise
        except BaseException as exc:  # noqa: BLE001 - any error in a plugin's import, sys.exit included
            _skip(name, who, _import_failure(exc))
            continue
        try:
            register(name, obj, reserved, dist, version, getattr(ep, "value", None))
        except PluginError as exc:
            _skip(name, who, exc.reason)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - the plugin's own code (a property, a metaclass) failed
            _skip(name, who, f"checking it raised {type(exc).__name__} ({str(exc)[:200]})")


def _import_failure(exc: BaseException) -> str:
    """Why a plugin's import failed, in words: an exception, or ``sys.exit`` (which would end vizlm)."""
    if isinstance(exc, SystemExit):
        return f"it calls sys.exit({exc.code!r}) when imported"
    return f"it cannot be imported ({type(exc).__name__}: {str(exc)[:200]})"


def register(name: str, obj, reserved: typing.Collection[str], distribution: str | None = None,
             version: str | None = None, entry_point: str | None = None) -> Installed:
    """Check ``obj`` (a :class:`Plugin`) and add it as model ``name``; :class:`PluginError` says what is wrong."""
    limits, limit_type, check_config = _rules()

    inst = Installed(name, obj if isinstance(obj, Plugin) else Plugin(object, object), distribution, version, entry_point)

    def refuse(why: str) -> typing.NoReturn:
        err = PluginError(f"the {inst.label} cannot be used: {why}")
        err.reason = why
        raise err

    if not isinstance(name, str) or not NAME.fullmatch(name):
        refuse("a model name is 1 to 40 lowercase letters, digits, '_' or '-', starting with a letter")
    if name in reserved:
        refuse(f"{name!r} is a built-in model family; a plugin must choose another name")
    if name in _loaded:
        refuse(f"the name {name!r} is already taken by the {_loaded[name].label}")
    if not isinstance(obj, Plugin):
        refuse(f"its entry point names a {type(obj).__name__}, not a vizlm.models.Plugin(config=..., model=...)")
    cfg, model = obj.config, obj.model
    if not (isinstance(cfg, type) and dataclasses.is_dataclass(cfg) and issubclass(cfg, BaseConfig)):
        refuse(f"its config {getattr(cfg, '__name__', cfg)!r} is not a dataclass subclassing vizlm.models.base.BaseConfig")
    if not (isinstance(model, type) and issubclass(model, RecurrentLM)):
        refuse(f"its model {getattr(model, '__name__', model)!r} is not a class subclassing "
               "vizlm.models.base.RecurrentLM (AttentionLM for a model with attention)")
    if model.has_attention and not issubclass(model, AttentionLM):
        refuse(f"{model.__name__} says has_attention but does not subclass vizlm.models.base.AttentionLM")
    if not isinstance(obj.limits, Mapping) or not all(isinstance(v, limit_type) for v in obj.limits.values()):
        refuse("its limits must map config field names to vizlm.models.Limit")
    if taken := sorted(set(obj.limits) & set(limits)):
        refuse(f"it gives limits for {taken}, which vizlm defines (vizlm.models.LIMITS); leave those out")
    try:
        hints = typing.get_type_hints(cfg)
    except Exception as exc:  # noqa: BLE001
        refuse(f"the types of {cfg.__name__}'s fields cannot be read ({exc})")
    for f in dataclasses.fields(cfg):
        kind = hints.get(f.name)
        args = [k for k in typing.get_args(kind) if k is not type(None)]
        if kind not in FIELD_TYPES and not (type(None) in typing.get_args(kind) and len(args) == 1 and args[0] in FIELD_TYPES):
            refuse(f"config field {f.name!r} has type {kind}; a checkpoint's config.json can hold int, float, str, "
                   "bool (or one of them | None)")
        if f.name not in limits and f.name not in obj.limits:
            refuse(f"config field {f.name!r} has no limit: give one in Plugin(limits={{{f.name!r}: Limit(...)}})")
    _loaded[name] = inst
    try:
        check_config(name, {})  # the defaults must pass the checks a config.json gets
    except Exception as exc:  # noqa: BLE001
        del _loaded[name]
        refuse(f"its default config does not pass vizlm's checks: {exc}")
    return inst


def find(name: str, reserved: typing.Collection[str]) -> Installed | None:
    """The plugin called ``name`` (reading the entry points on first use); None if there is none.
    Raises :class:`PluginError` when a plugin of that name is installed but was skipped."""
    if name not in _loaded:
        discover(reserved)
    if name in _skipped and name not in _loaded:
        raise PluginError(f"the plugin {name!r} is installed but vizlm skipped it: {_skipped[name]}")
    return _loaded.get(name)


def installed(reserved: typing.Collection[str]) -> dict[str, Installed]:
    """Every plugin that loaded, by name (reading the entry points on first use)."""
    discover(reserved)
    return dict(sorted(_loaded.items()))


def skipped(reserved: typing.Collection[str]) -> dict[str, str]:
    """Plugins that were skipped, with the reason."""
    discover(reserved)
    return dict(sorted(_skipped.items()))


# --------------------------------------------------------------------------- a loaded model's calls
_GUARDED: dict[type, type] = {}  # a plugin's model class -> its guarded subclass (one per class)
_WATCHED = ("forward", "encode", "head", "readout")  # the calls into a model that vizlm makes (the effects: readout)


def guard(name: str, model: RecurrentLM) -> RecurrentLM:
    """``model`` (plugin ``name``'s, loaded for analysis) with its calls watched: an error its code
    raises, or outputs that are not finite (in eval mode), become a :class:`PluginError` naming the
    plugin and the input's size, where the model is called. The contract check reads 2 sentences of 7
    tokens; a text is longer, and a model that fails on it must fail alone, by name (the Cases page,
    the CLI), not as a traceback or as NaN in a table. Its class is a subclass of the plugin's with
    the same name (``type(model).__name__``); the weights and the module tree are unchanged."""
    cls = type(model)
    if cls not in _GUARDED:
        _GUARDED[cls] = type(cls.__name__, (cls,), {
            "__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
            **{what: _watched(getattr(cls, what), what) for what in _WATCHED if hasattr(cls, what)},
            "_vizlm_plugin": name})
    model.__class__ = _GUARDED[cls]
    return model


def _watched(method, what: str):
    def call(self, *args, **kwargs):
        inputs = args[0] if args else next(iter(kwargs.values()), None)  # ids (B, T) or outputs h (B, T, D)
        try:
            out = method(self, *args, **kwargs)
        except (VizlmError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the plugin's code raises on this input
            raise PluginError(f"the {_label(self)} failed on {_size(inputs)}: {type(exc).__name__} "
                              f"({str(exc)[:200]})") from None
        if not self.training:  # a diverging training says so itself (vizlm.modeling.train)
            bad = _not_finite(out)
            if bad:
                raise PluginError(f"the {_label(self)} gave {bad} that are not finite (NaN or infinite) on "
                                  f"{_size(inputs)}; vizlm cannot show them")
        return out

    call.__name__ = call.__qualname__ = what
    return call


def _label(model) -> str:
    name = getattr(model, "_vizlm_plugin", "?")
    return _loaded[name].label if name in _loaded else f"plugin {name!r}"


def _size(inputs) -> str:
    """``2 sentences of 40 tokens``: the shape of what a model was called with (ids (B, T) or outputs (B, T, D))."""
    shape = tuple(getattr(inputs, "shape", ()))
    if len(shape) < 2:
        return "this input"
    return f"{shape[0]} sequence{'s' if shape[0] != 1 else ''} of {shape[1]} token{'s' if shape[1] != 1 else ''}"


def _not_finite(out) -> str | None:
    """What of a model's output (LMOutput, or encode's outputs) holds NaN or an infinity; None: all finite."""
    if isinstance(out, torch.Tensor):
        return "outputs" if out.is_floating_point() and not bool(torch.isfinite(out).all()) else None
    if isinstance(out, LMOutput):
        if isinstance(out.readout, Readout) and not bool(torch.isfinite(out.readout.features).all()):
            return "output features"
        if out.attention is not None and not bool(torch.isfinite(out.attention).all()):
            return "attention weights"
    return None


# --------------------------------------------------------------------------- the contract check
def check_contract(name: str, model: RecurrentLM) -> None:
    """Run the contract check (module docstring) on ``model``, an instance of plugin ``name``, in eval
    mode; raises :class:`PluginError` naming the plugin and the first thing that is wrong."""
    inst = _loaded.get(name) or Installed(name, Plugin(type(getattr(model, "config", None)), type(model)))

    def fail(what: str) -> typing.NoReturn:
        raise PluginError(f"the {inst.label} breaks vizlm's model contract: {what} (see docs/PLUGINS.md)")

    training = model.training
    model.eval()  # dropout would make two reads of one input differ
    try:
        with torch.no_grad():
            _check(model, fail)
    except PluginError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the plugin's code raises
        fail(f"it raised {type(exc).__name__} ({str(exc)[:200]}) on {CHECK_BATCH} sentences of {CHECK_STEPS} tokens")
    finally:
        model.train(training)


def _close(a, b) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and bool(torch.allclose(a, b, **CLOSE))


def _check(model: RecurrentLM, fail) -> None:
    config = getattr(model, "config", None)
    if not isinstance(config, BaseConfig):
        fail("the model must keep its config as `self.config` (checkpoints store it)")
    B, T, V = CHECK_BATCH, CHECK_STEPS, config.vocab_size
    weight = next(model.parameters(), None)
    device = weight.device if weight is not None else torch.device("cpu")
    x = torch.randint(min(4, V - 1), V, (B, T), generator=torch.Generator().manual_seed(0)).to(device)
    x[:, 0] = 1  # <s>
    out = model(x)
    if not isinstance(out, LMOutput) or not isinstance(out.readout, Readout):
        fail(f"forward() returned {type(out).__name__}; it must return an LMOutput of a Readout")
    logits = out.logits
    if tuple(logits.shape) != (B, T, V):
        fail(f"its logits have shape {tuple(logits.shape)}; for {B} sentences of {T} tokens and {V} words they must "
             f"be (B, T, V) = {(B, T, V)}")
    if not torch.isfinite(logits).all():
        fail("its logits are not finite (NaN or infinite)")
    h = model.encode(x)
    if not isinstance(h, torch.Tensor) or h.dim() != 3 or tuple(h.shape[:2]) != (B, T):
        fail(f"encode() must return outputs (B, T, D) = ({B}, {T}, D), not {getattr(h, 'shape', type(h).__name__)}")
    again = model.head(h)
    if not _close(again.logits, logits):
        fail("head(encode(x)) does not give the logits of forward(x); the analysis and the effects read a model that way")
    att = out.attention
    if not model.has_attention:
        if att is not None:
            fail(f"it returns attention weights but {type(model).__name__}.has_attention is False; subclass AttentionLM")
    else:
        _check_attention(model, att, T, model.allowed_slots(T, device=device), 1, fail)
        if not _close(again.attention, att):
            fail("head(encode(x)) does not give the attention of forward(x)")
        given = model.head(h, weights=att)
        if not _close(given.logits, logits):
            fail("head(h, weights=w) with its own weights w does not give its own logits; the effects recompute a "
                 "prediction from other weights that way")
        zero = model.head(h, weights=torch.zeros_like(att))  # the no-read path: nothing read
        if tuple(zero.logits.shape) != (B, T, V) or not torch.isfinite(zero.logits).all():
            fail("the no-read path, head(h, weights=0), must give finite logits (B, T, V): the read effect compares with it")
        if zero.attention is None or bool((zero.attention != 0).any()):
            fail("head(h, weights=0) must return the (zero) weights it was given")
    y = x.clone()
    y[:, -1] = torch.where(x[:, -1] == V - 1, V - 2, V - 1)  # another last token
    later = model(y)
    if not _close(later.logits[:, :-1], logits[:, :-1]) or (att is not None and not _close(later.attention[:, :-1], att[:, :-1])):
        fail("a prediction sees a later token: changing the last token changes the rows before it")
    if config.context == "document":
        state = model.initial_state(B)
        doc = model(x, state)
        M = state.memory.shape[1]
        if tuple(doc.logits.shape) != (B, T, V) or not isinstance(doc.state, State):
            fail("in document context, forward(x, state) must give logits (B, T, V) and the state after the segment")
        if model.has_attention:
            _check_attention(model, doc.attention, M + T - 1, model.allowed_slots(T, state, device), M, fail)


def _check_attention(model, att, S: int, allowed: torch.Tensor, carried: int, fail) -> None:
    """Weights (B, T, S): shape, finite, >= 0, nothing on a later slot or outside the window, rows summing to 1."""
    B, T = CHECK_BATCH, CHECK_STEPS
    if not isinstance(att, torch.Tensor):
        fail("it has attention (has_attention) but forward() returned no attention weights")
    if tuple(att.shape) != (B, T, S):
        fail(f"its attention has shape {tuple(att.shape)}; it must be (B, T, S) = {(B, T, S)}: a row per step, a column "
             "per memory slot (slot 0 the zero start state, slot j the output after token j)")
    if not torch.isfinite(att).all() or bool((att < 0).any()):
        fail("its attention weights must be finite and >= 0")
    later = ~slot_mask(T, None, att.device, carried)  # (T, S) slots after each row's newest
    if bool((att[:, later] != 0).any()):
        b, r, j = (int(v) for v in (att * later).nonzero()[0])
        fail(f"row {r} puts weight {float(att[b, r, j]):.3g} on slot {j}, a later slot (it holds what was read "
             f"after the word row {r} predicts); row {r} may use slots up to {carried - 1 + r}")
    outside = ~allowed.expand(B, T, S)
    if bool((att[outside] != 0).any()):
        b, r, j = (int(v) for v in (att * outside).nonzero()[0])
        fail(f"row {r} puts weight {float(att[b, r, j]):.3g} on slot {j}, outside its memory "
             f"(window_size() = {model.window_size()}; allowed_slots() says which slots a row may use)")
    want = allowed.expand(B, T, S).any(-1).to(att.dtype)  # (B, T): 1, or 0 for a row with no slot
    off = (att.sum(-1) - want).abs()
    if bool((off > ROW_TOLERANCE).any()):
        b, r = (int(v) for v in (off > ROW_TOLERANCE).nonzero()[0])
        fail(f"attention rows must sum to 1 (within {ROW_TOLERANCE:g}); row {r} of sentence {b} sums to "
             f"{float(att[b, r].sum()):.6g}")


__all__ = [
    "GROUP",
    "ROW_TOLERANCE",
    "Installed",
    "Plugin",
    "PluginError",
    "PluginWarning",
    "check_contract",
    "discover",
    "find",
    "guard",
    "installed",
    "register",
    "reset",
    "skipped",
]
