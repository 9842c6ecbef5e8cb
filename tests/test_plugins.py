"""Plugins (vizlm.models.plugins, docs/PLUGINS.md): the example package ``examples/plugin`` (model
``selfattn``) is found through its entry point and goes through the CLI, the loader, the analysis
and the effects like a built-in family; plugins that break the contract, or cannot be imported,
get a message naming them, never a traceback.

The example must be installed (``bash scripts/setup.sh test`` does: ``pip install -e examples/plugin``);
the broken plugins are classes of this file, registered in-process by replacing the entry points.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from conftest import TINY, assert_no_future, assert_same_math
from torch import nn

import vizlm
from vizlm import cli
from vizlm.modeling.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from vizlm.data.vocab import SPECIALS, Vocab
from vizlm.models import ATTENTION_MODELS, Limit, Plugin, PluginError, build_model, lookup, names, plugin_of, plugins
from vizlm.models import effects as fx
from vizlm.models.base import AttentionLM, BaseConfig, Readout, masked_softmax, memory_of, slot_mask

PACKAGE = "vizlm-selfattn"  # examples/plugin
SETUP = "the example plugin is not installed: `bash scripts/setup.sh test` installs it (pip install -e examples/plugin)"


def example_installed() -> bool:
    try:
        importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


needs_example = pytest.mark.skipif(not example_installed(), reason=SETUP)


@pytest.fixture(autouse=True)
def fresh_discovery():
    """Every test reads the entry points anew, and leaves them to be read again."""
    plugins.reset()
    yield
    plugins.reset()


def tiny_selfattn(**kw) -> nn.Module:
    torch.manual_seed(0)
    return build_model("selfattn", **{**TINY, "key_dim": 4, "init_range": 0.5, **kw}).double().eval()  # weights big enough to matter


def vocab40() -> Vocab:
    return Vocab(list(SPECIALS) + [f"w{i}" for i in range(36)])


# --------------------------------------------------------------------------- the example plugin
def test_the_example_plugin_is_discovered(capsys):
    assert example_installed(), SETUP
    assert "selfattn" in names() and names()[: len(vizlm.models.REGISTRY)] == list(vizlm.models.REGISTRY)
    assert "selfattn" not in vizlm.models.REGISTRY  # the built-in families stay what they are
    assert "selfattn" in ATTENTION_MODELS and "lstm" not in ATTENTION_MODELS
    found = plugin_of("selfattn")
    assert found.distribution == PACKAGE and found.version == importlib.metadata.version(PACKAGE)
    assert found.entry_point == "vizlm_selfattn:PLUGIN"
    assert cli.main(["plugins"]) == 0
    assert f"selfattn         {PACKAGE} {found.version}  attention" in capsys.readouterr().out


@needs_example
def test_train_through_the_cli_save_load_and_analyse(tmp_path, capsys):
    """3 batches (--dry-run), the checkpoint records the plugin, and it loads and analyses like any model."""
    out = tmp_path / "sa"
    args = ["train", "--model", "selfattn", "--dry-run", "--emb-dim", "8", "--hidden-dim", "8", "--window", "3",
            "--out", str(out)]
    assert cli.main(args) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["model"] == "selfattn" and math.isfinite(printed["test_perplexity"])
    meta = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert meta["model"] == "selfattn" and meta["config"]["window"] == 3 and meta["config"]["key_dim"] == 16
    assert meta["plugin"] == {"name": "selfattn", "distribution": PACKAGE, "version": importlib.metadata.version(PACKAGE),
                              "entry_point": "vizlm_selfattn:PLUGIN"}
    model = vizlm.load(out)
    assert type(model.checkpoint.model).__name__ == "SelfAttnLM" and model.checkpoint.has_attention
    a = model.analyze("the jury said it was fine .")
    att = a.attention  # (T, S): every row sums to 1, nothing on a later slot or beyond the window of 3
    T = att.shape[0]
    assert att.shape == (T, T) and T == 7 + 1  # 7 words, </s>
    assert abs(att.sum(1) - 1).max() < 1e-5
    assert (att[~slot_mask(T, 3).numpy()] == 0).all()
    assert a.read_effect is not None and a.read_effect.shape == (T,)
    assert a.slot_effects is not None and (a.slot_effects[~slot_mask(T, 3).numpy()] == 0).all()


def reference(model, inputs: torch.Tensor, weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (B, T, V), attention (B, T, T)) one step at a time, from the equations of vizlm_selfattn's
    docstring: row t reads slots max(0, t - L + 1) .. t (slot 0 the zero start state, slot j = h_j).
    ``weights`` (B, T, T) replace each row's softmax (the effects' recomputation)."""
    h = model.encode(inputs)  # (B, T, d)
    B, T, _ = h.shape
    L, dk = model.config.window, model.config.key_dim
    logits, att = [], torch.zeros(B, T, T, dtype=h.dtype)
    for t in range(T):
        first = max(0, t - L + 1)
        slots = [torch.zeros_like(h[:, 0]) if j == 0 else h[:, j - 1] for j in range(first, t + 1)]  # (B, d) each
        mem = torch.stack(slots, 1)  # (B, n, d)
        q = h[:, t] @ model.query.weight.T  # (B, d_k)
        scores = torch.einsum("bk,bnk->bn", q, mem @ model.key.weight.T) / math.sqrt(dk)  # (B, n)
        a = scores.softmax(-1) if weights is None else weights[:, t, first : t + 1]
        att[:, t, first : t + 1] = a
        read = torch.einsum("bn,bnd->bd", a, mem @ model.value.weight.T)  # (B, d)
        o = torch.tanh(torch.cat([h[:, t], read], -1) @ model.combine.weight.T + model.combine.bias)
        logits.append(o @ model.decoder.weight.T + model.decoder.bias)
    return torch.stack(logits, 1), att


WINDOWS = [{"window": 1}, {"window": 3}, {"window": 30}, {"window": 3, "layers": 2}]


@needs_example
@pytest.mark.parametrize("kw", WINDOWS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_fast_equals_the_step_by_step_reference(kw, batch):
    model = tiny_selfattn(**kw)
    with torch.no_grad():
        out = model(batch)
        ref_logits, ref_att = reference(model, batch)
    assert_same_math(out.logits, ref_logits)
    assert_same_math(out.attention, ref_att)


@needs_example
@pytest.mark.parametrize("kw", WINDOWS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_no_prediction_sees_a_future_token(kw, batch):
    assert_no_future(tiny_selfattn(**kw), batch)


@needs_example
@pytest.mark.parametrize("kw", WINDOWS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_read_and_slot_effects_equal_a_slow_reference(kw, batch):
    """The effects (vizlm.models.effects, batched) == the reference with the read removed, or one slot
    dropped and the row renormalised, one (row, slot) pair at a time; float64, tolerance 1e-10 nats."""
    model = tiny_selfattn(**kw)
    targets = torch.cat([batch[:, 1:], torch.full_like(batch[:, :1], 2)], 1)
    with torch.no_grad():
        h = model.encode(batch)
        read = fx.read_effect(model, h, targets)
        slots = fx.slot_effects(model, h, targets)
        logits, att = reference(model, batch)
        base = logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0]  # (B, T)

        def logp(w):
            return reference(model, batch, weights=w)[0].log_softmax(-1).gather(-1, targets[..., None])[..., 0]

        ref_read = base - logp(torch.zeros_like(att))
        ref_slots = torch.zeros_like(att)
        _, T, S = att.shape
        for t in range(T):
            for j in range(S):
                if not (att[:, t, j] > 0).any():
                    continue
                w = att.clone()
                w[:, t, j] = 0.0
                rest = w[:, t].sum(-1, keepdim=True)
                w[:, t] = torch.where(rest > 0, w[:, t] / rest.clamp_min(1e-300), torch.zeros_like(w[:, t]))
                ref_slots[:, t, j] = torch.where(att[:, t, j] > 0, base[:, t] - logp(w)[:, t], 0.0)
    torch.testing.assert_close(read, ref_read, atol=1e-10, rtol=0)
    torch.testing.assert_close(slots, ref_slots, atol=1e-10, rtol=0)
    assert read.abs().max() > 1e-5 and slots.abs().max() > 1e-5  # the read does something


@needs_example
def test_a_document_read_in_segments_equals_it_read_whole(batch):
    """Document context: the state carries the window's slots across segments (the base class's forward)."""
    model = tiny_selfattn(window=3, context="document")
    x = batch[:2]
    with torch.no_grad():
        whole = model(x)
        first = model(x[:, :4], model.initial_state(2))
        second = model(x[:, 4:], first.state)
    assert_same_math(torch.cat([first.logits, second.logits], 1), whole.logits)


# --------------------------------------------------------------------------- broken plugins
@dataclass
class ToyConfig(BaseConfig):
    window: int = 3


class Toy(AttentionLM):
    """Uniform attention over the window (all scores 0), the read added to the LSTM output."""

    def __init__(self, config: ToyConfig):
        super().__init__(config)
        self.decoder = nn.Linear(config.hidden_dim, config.vocab_size)
        self.reset_parameters()

    def memory_size(self) -> int:
        return self.config.window

    def window_size(self) -> int:
        return self.config.window

    def slots(self, h, memory, valid):
        T = h.shape[1]
        if memory is None:
            return memory_of(h), slot_mask(T, self.window_size(), h.device)  # (B, S, d), (T, S)
        return torch.cat([memory, h[:, :-1]], 1), slot_mask(T, self.window_size(), h.device, memory.shape[1], valid)

    def attend(self, h, memory=None, valid=None, weights=None):
        mem, mask = self.slots(h, memory, valid)
        if weights is None:
            alpha = masked_softmax(h.new_zeros(h.shape[0], h.shape[1], mem.shape[1]), mask)  # (B, T, S)
        else:
            alpha = weights.masked_fill(~mask, 0.0)
        return alpha @ mem, alpha, {}  # (B, T, d)

    def output_layer(self, h, read):
        return Readout(h + read, self.decoder.weight, self.decoder.bias)


class WrongShape(Toy):
    def attend(self, h, memory=None, valid=None, weights=None):
        read, alpha, extras = super().attend(h, memory, valid, weights)
        return read, alpha[..., 1:], extras  # one slot short


class HalfRows(Toy):
    def attend(self, h, memory=None, valid=None, weights=None):
        read, alpha, extras = super().attend(h, memory, valid, weights)
        return read / 2, alpha / 2, extras  # rows sum to 0.5


class FutureSlot(Toy):
    def slots(self, h, memory, valid):
        mem, mask = super().slots(h, memory, valid)
        return memory_of(h) if memory is None else mem, torch.ones_like(mask)  # no mask: later slots too


class WrongLogits(Toy):
    def output_layer(self, h, read):
        return Readout(h + read, self.decoder.weight[:-1], self.decoder.bias[:-1])  # a word short


class IgnoresWeights(Toy):
    def attend(self, h, memory=None, valid=None, weights=None):
        return super().attend(h, memory, valid)  # no no-read path: given weights are not used


class Crashes(Toy):
    def output_layer(self, h, read):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")


@dataclass
class UnlimitedConfig(ToyConfig):
    petals: int = 2  # a field vizlm has no limit for, and the plugin gives none


class EntryPoint:
    """An installed entry point, in-process: its object, or the error importing it raises."""

    def __init__(self, name: str, obj=None, error: Exception | None = None):
        self.name, self.value, self.obj, self.error = name, f"broken_pkg:{name}", obj, error
        self.dist = SimpleNamespace(name="broken-pkg", version="0.0.1", metadata={"Name": "broken-pkg"})

    def load(self):
        if self.error is not None:
            raise self.error
        return self.obj


def toy(model=Toy, config=ToyConfig, **kw) -> Plugin:
    return Plugin(config=config, model=model, **kw)


@pytest.fixture
def install(monkeypatch):
    """install(*entry_points): these become the installed plugins (the real ones again after the test)."""

    def install(*eps):
        monkeypatch.setattr(plugins, "entry_points", lambda: list(eps))
        plugins.reset()

    return install


def test_a_good_in_process_plugin_builds_trains_saves_and_loads(install, tmp_path, batch):
    install(EntryPoint("toy", toy()))
    model = build_model("toy", **TINY)
    assert type(model) is Toy and "toy" in ATTENTION_MODELS
    save_checkpoint(tmp_path / "toy", model, "toy", vocab40())
    ckpt = load_checkpoint(tmp_path / "toy")
    model, ckpt.model = model.double(), ckpt.model.double()
    assert ckpt.meta["plugin"] == {"name": "toy", "distribution": "broken-pkg", "version": "0.0.1",
                                   "entry_point": "broken_pkg:toy"}
    with torch.no_grad():
        assert torch.equal(ckpt.model(batch).logits, model(batch).logits)  # a save / load round trip


BROKEN = [
    (WrongShape, r"its attention has shape \(2, 7, 6\); it must be \(B, T, S\) = \(2, 7, 7\)"),
    (HalfRows, r"attention rows must sum to 1 \(within 0.0001\); row 0 of sentence 0 sums to 0.5"),
    (FutureSlot, r"row 0 puts weight 0.143 on slot 1, a later slot"),
    (WrongLogits, r"its logits have shape \(2, 7, 39\); .* must be \(B, T, V\) = \(2, 7, 40\)"),
    (IgnoresWeights, r"head\(h, weights=0\) must return the \(zero\) weights"),
    (Crashes, r"it raised RuntimeError \(mat1 and mat2 shapes cannot be multiplied\)"),
]


@pytest.mark.parametrize("cls,message", BROKEN, ids=[c.__name__ for c, _ in BROKEN])
def test_a_plugin_that_breaks_the_contract_is_named_when_built_and_loaded(cls, message, install, tmp_path):
    install(EntryPoint("broken", toy(cls)))
    who = "the plugin 'broken' (package broken-pkg 0.0.1) breaks vizlm's model contract: "
    with pytest.raises(PluginError, match=r"^" + who.replace("(", r"\(").replace(")", r"\)") + message):
        build_model("broken", **TINY)
    save_checkpoint(tmp_path / "b", build_model("broken", contract=False, **TINY), "broken", vocab40())
    with pytest.raises(CheckpointError, match=message):  # the loader checks it once its weights are in
        load_checkpoint(tmp_path / "b")
    with pytest.raises(CheckpointError, match="plugin 'broken'"):
        vizlm.load(tmp_path / "b")


def test_a_row_within_the_stated_tolerance_passes(install):
    class AlmostOne(Toy):
        def attend(self, h, memory=None, valid=None, weights=None):
            read, alpha, extras = super().attend(h, memory, valid, weights)
            return read, alpha * (1 + plugins.ROW_TOLERANCE / 2), extras

    install(EntryPoint("almost", toy(AlmostOne)))
    build_model("almost", **TINY)


SKIPPED = [
    (EntryPoint("noimport", error=ModuleNotFoundError("No module named 'missing_dep'")),
     r"it cannot be imported \(ModuleNotFoundError: No module named 'missing_dep'\)"),
    (EntryPoint("exits", error=SystemExit(3)), r"it calls sys.exit\(3\) when imported"),
    (EntryPoint("baseexc", error=GeneratorExit("odd")), r"it cannot be imported \(GeneratorExit: odd\)"),
    (EntryPoint("lstm", toy()), r"'lstm' is a built-in model family; a plugin must choose another name"),
    (EntryPoint("notaplugin", Toy), r"its entry point names a type, not a vizlm.models.Plugin"),
    (EntryPoint("badmodel", toy(model=nn.Linear)), r"its model 'Linear' is not a class subclassing vizlm.models.base.RecurrentLM"),
    (EntryPoint("badconfig", toy(config=dict)), r"its config 'dict' is not a dataclass subclassing"),
    (EntryPoint("nolimit", toy(config=UnlimitedConfig)), r"config field 'petals' has no limit"),
    (EntryPoint("takenlimit", toy(limits={"window": Limit(1, 5)})), r"it gives limits for \['window'\], which vizlm defines"),
]


@pytest.mark.parametrize("ep,why", SKIPPED, ids=[ep.name for ep, _ in SKIPPED])
def test_a_plugin_that_cannot_be_used_is_skipped_with_a_message_naming_it(ep, why, install, tmp_path, capsys):
    install(ep, EntryPoint("toy", toy()))
    with pytest.warns(plugins.PluginWarning, match=r"vizlm skipped the plugin '" + ep.name + r"' \(package broken-pkg 0.0.1\): " + why):
        listed = names()
    assert "toy" in listed  # the others still work
    if ep.name == "lstm":
        assert lookup("lstm")[1].__name__ == "LSTMLM"  # never shadowed
        return
    assert ep.name not in listed
    with pytest.raises(PluginError, match=f"the plugin '{ep.name}' is installed but vizlm skipped it: {why}"):
        lookup(ep.name)
    with pytest.raises(SystemExit, match="2"):  # argparse's own exit on a bad --model
        cli.main(["train", "--model", ep.name, "--dry-run", "--out", str(tmp_path / "x")])
    assert f"argument --model: the plugin '{ep.name}' is installed but vizlm skipped it" in capsys.readouterr().err
    assert cli.main(["plugins"]) == 0
    shown = capsys.readouterr().out
    assert f"{ep.name:<16} skipped: " in shown and "toy              broken-pkg 0.0.1  attention" in shown


def test_a_plugin_that_exits_on_import_stops_no_other(install, tmp_path, capsys):
    """sys.exit in one plugin's import would end vizlm (SystemExit is no Exception): it is skipped, named, and a
    healthy plugin still trains; the user's Ctrl-C still stops discovery."""
    install(EntryPoint("exits", error=SystemExit(3)), EntryPoint("toy", toy()))
    with pytest.warns(plugins.PluginWarning, match=r"the plugin 'exits' \(package broken-pkg 0.0.1\): it calls sys.exit"):
        args = cli.build_parser().parse_args(["train", "--model", "toy", "--out", str(tmp_path / "t")])
    assert args.model == "toy" and type(build_model("toy", **TINY)) is Toy
    install(EntryPoint("stop", error=KeyboardInterrupt()), EntryPoint("toy", toy()))
    with pytest.raises(KeyboardInterrupt):
        names()


def test_the_app_names_a_skipped_plugin_in_its_sidebar(install):
    from conftest import ROOT
    from streamlit.testing.v1 import AppTest

    install(EntryPoint("exits", error=SystemExit(3)), EntryPoint("toy", toy()))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["text"] = "a b"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(e.label == "1 plugin skipped" for e in at.sidebar.expander)
    assert any(c.value.startswith("exits") and "sys" in c.value and "exit" in c.value for c in at.sidebar.caption)


class LongFails(Toy):
    """Passes the contract check (7 tokens), raises on longer input."""

    def output_layer(self, h, read):
        if h.shape[1] > plugins.CHECK_STEPS:
            raise RuntimeError("index out of range in self")
        return super().output_layer(h, read)


class LongNaN(Toy):
    """Passes the contract check (7 tokens), NaN on longer input."""

    def output_layer(self, h, read):
        out = super().output_layer(h, read)
        if h.shape[1] > plugins.CHECK_STEPS:
            out.features = out.features * math.nan
        return out


class NaNGradient(Toy):
    """Finite outputs, NaN gradients (torch.where's other branch): attribution has no number to show."""

    def output_layer(self, h, read):
        out = super().output_layer(h, read)
        f = out.features
        out.features = torch.where(f > 1e30, torch.sqrt(-f.abs() - 1), f)
        return out


LONG = "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12"  # 13 targets: longer than the contract check's 7 tokens
FAILS_LONG = [(LongFails, r"failed on 1 sequence of 13 tokens: RuntimeError \(index out of range in self\)"),
              (LongNaN, r"gave output features that are not finite \(NaN or infinite\) on 1 sequence of 13 tokens")]


@pytest.mark.parametrize("cls,why", FAILS_LONG, ids=[c.__name__ for c, _ in FAILS_LONG])
def test_a_plugin_that_fails_on_longer_input_is_named_where_it_is_called(cls, why, install, tmp_path, capsys):
    install(EntryPoint("long", toy(cls)))
    save_checkpoint(tmp_path / "long", build_model("long", **TINY), "long", vocab40())
    model = vizlm.load(tmp_path / "long")
    assert type(model.checkpoint.model).__name__ == cls.__name__
    model.analyze("w1 w2 w3", effects=False)  # a short text works
    who = r"the plugin 'long' \(package broken-pkg 0.0.1\) "
    with pytest.raises(PluginError, match=who + why):
        model.analyze(LONG)
    with pytest.raises(PluginError, match=who + why):
        model.attribute(LONG, method="gradient-x-input")
    (tmp_path / "t.txt").write_text(LONG + "\nw3 w4\n", encoding="utf-8")
    for argv in (["analyze", "--checkpoint", str(tmp_path / "long"), "--text", LONG],
                 ["attribute", "--checkpoint", str(tmp_path / "long"), "--text", LONG, "--method", "gradient-x-input"],
                 ["cases", "--checkpoint", str(tmp_path / "long"), "--text-file", str(tmp_path / "t.txt")]):
        assert cli.main(argv) == 2
        captured = capsys.readouterr()
        assert "the plugin 'long'" in captured.err and "nan" not in captured.out and len(captured.err.splitlines()) == 1


def test_an_attribution_that_is_not_finite_is_refused_naming_the_model(install, tmp_path):
    install(EntryPoint("nangrad", toy(NaNGradient)))
    save_checkpoint(tmp_path / "ng", build_model("nangrad", **TINY), "nangrad", vocab40())
    model = vizlm.load(tmp_path / "ng")
    assert math.isfinite(model.analyze("w1 w2 w3").perplexity)
    with pytest.raises(vizlm.VizlmError, match=r"^ng: its gradient-x-input attribution is not finite \(NaN or infinite\)"):
        model.attribute("w1 w2 w3", method="gradient-x-input")


def test_a_checkpoint_of_a_missing_or_skipped_plugin_says_what_to_install(install, tmp_path):
    install(EntryPoint("ghost", toy()))
    save_checkpoint(tmp_path / "g", build_model("ghost", **TINY), "ghost", vocab40())
    install()  # the package is uninstalled
    with pytest.raises(CheckpointError, match=r"model 'ghost' comes from the plugin package broken-pkg 0.0.1, which is "
                                              r"not installed here: pip install broken-pkg"):
        load_checkpoint(tmp_path / "g")
    install(EntryPoint("ghost", error=ImportError("cannot import name 'x'")))
    with pytest.warns(plugins.PluginWarning), pytest.raises(
            CheckpointError, match=r"the plugin 'ghost' is installed but vizlm skipped it: it cannot be imported"):
        load_checkpoint(tmp_path / "g")
    meta = json.loads((tmp_path / "g" / "config.json").read_text(encoding="utf-8"))
    meta["plugin"]["distribution"] = "pkg; rm -rf /"  # never printed as a command
    (tmp_path / "g" / "config.json").write_text(json.dumps(meta), encoding="utf-8")
    install()
    with pytest.raises(CheckpointError, match=r"^config.json: unknown model 'ghost'; valid models: lstm, amsrn"):
        load_checkpoint(tmp_path / "g")


def test_nothing_is_read_until_a_name_is_unknown(monkeypatch):
    calls = []
    monkeypatch.setattr(plugins, "entry_points", lambda: calls.append(1) or [])
    plugins.reset()
    build_model("lstm", **TINY)
    assert "amsrn" in ATTENTION_MODELS and not calls  # built-in names never read the entry points
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        lookup("nope")
    lookup("lstm")
    assert "nope" not in ATTENTION_MODELS
    assert calls == [1]  # read once


def test_a_failing_plugin_model_is_named_and_the_others_go_on_in_positions(install, tmp_path, capsys):
    """Attention by position over several models: the plugin model that breaks on longer input is named (API:
    ``failed``; CLI: one line on stderr, exit 1) and the healthy model's statistics are there."""
    install(EntryPoint("long", toy(LongFails)), EntryPoint("toy", toy()))
    save_checkpoint(tmp_path / "long", build_model("long", **TINY), "long", vocab40())
    save_checkpoint(tmp_path / "good", build_model("toy", **TINY), "toy", vocab40())
    sentences = [LONG.split(), "w3 w4 w5".split()]
    result = vizlm.positions([tmp_path / "long", tmp_path / "good"], sentences=sentences, ids=["d:0", "d:1"])
    assert list(result.failed) == ["long"] and "the plugin 'long'" in result.failed["long"]
    assert set(result.frame()["model"]) == {"good"}
    with pytest.raises(PluginError, match="the plugin 'long'"):  # alone, it fails as before
        vizlm.positions([tmp_path / "long"], sentences=sentences, ids=["d:0", "d:1"])
    (tmp_path / "t.txt").write_text(LONG + "\nw3 w4 w5\n", encoding="utf-8")
    code = cli.main(["positions", "--checkpoint", str(tmp_path / "long"), str(tmp_path / "good"),
                     "--text-file", str(tmp_path / "t.txt"), "--no-effects"])
    captured = capsys.readouterr()
    assert code == 1 and "good" in captured.out
    assert captured.err.strip().splitlines() == [captured.err.strip()] and "vizlm positions: long failed" in captured.err
