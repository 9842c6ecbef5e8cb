"""Shared fixtures: tiny models of every family, in float64, and the rule for comparing numbers.

Comparing two computations (tests/README.md says the same):

- Two *different* computations of one quantity (fused vs step by step, batched vs one at a
  time, chunked vs whole, another BLAS kernel, thread count or batch shape) agree within the
  stated tolerance of their dtype, :data:`TOLERANCE` through :func:`assert_same_math`, never
  bit for bit: on another machine the kernels round differently (a float64 difference of 1e-17
  between ``model(x)`` and ``model.decoder(h)`` failed a suite once).
- Bit-exactness (``torch.equal``, ``atol=0, rtol=0``) only where it is the claim: the same
  kernel on the same input (determinism), a save/load or resume round trip, a token that
  cannot reach a prediction (causality: a later token changes nothing, not merely little),
  a masked slot whose content never counts, frozen weights that do not move.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

from vizlm.models import REGISTRY, build_model

# Your corpora folder (vizlm.core.paths.corpora_dir) is the user's data folder: the suite never reads or writes
# it. Every test process (and the CLI processes it starts) gets an empty one; a test that prepares a
# corpus sets its own with monkeypatch.
os.environ["VIZLM_CORPORA"] = tempfile.mkdtemp(prefix="vizlm-test-corpora-")
# Likewise the runs folder (vizlm.core.paths.runs_dir): a checkout that has trained runs lists them in the app, so
# the suite sees what a fresh clone sees, an empty one; a test that trains sets its own.
os.environ["VIZLM_RUNS"] = tempfile.mkdtemp(prefix="vizlm-test-runs-")

# Under pytest-xdist every worker has a core of its own (scripts/test.sh starts one per core): one intra-op thread
# each, in the worker and in the CLI processes it starts. Torch's default (a thread per core in every process)
# oversubscribes the machine, and the suite's tiny matrices then spend their time waiting (a 7 s test took 70 s).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
ATTENTION_MODELS = ["amsrn", "attention", "kv", "kvp", "salton", "rm"]
TINY = {"vocab_size": 40, "emb_dim": 6, "hidden_dim": 5}
VARIANTS = {  # every configuration a test should see
    "lstm": [{}, {"rnn": "gru"}, {"rnn": "rnn_tanh", "layers": 2}, {"rnn": "rnn_relu"},
             {"layers": 3, "tie": True, "emb_dim": 5}],
    "amsrn": [{"selection": s} for s in ("none", "independent", "shared", "complementary")]
    + [{"selection": "shared", "start_slot": False}, {"selection": "shared", "layers": 2, "init_range": 0.5}],
    "attention": [{"window": 1}, {"window": 3}],
    "kv": [{"window": 4}],
    "kvp": [{"window": 5}, {"window": 30}, {"window": 3, "layers": 2, "init_range": 0.5}],
    "ngram": [{"n": 2}, {"n": 4}, {"n": 3, "layers": 2}],
    "salton": [{"score": "single"}, {"score": "combined"}, {"score": "combined", "layers": 2, "init_range": 0.5}],
    "rm": [{"window": 1}, {"window": 4}, {"window": 4, "layers": 2, "init_range": 0.5}],
    "transformer": [{}, {"layers": 2, "heads": 3, "block": 4}],
}
assert set(VARIANTS) == set(REGISTRY)

# Tolerance per dtype for two different computations of the same numbers (see the docstring).
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-6}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}


def assert_same_math(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """``actual`` and ``expected``, two different computations, agree within their dtype's :data:`TOLERANCE`."""
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    torch.testing.assert_close(actual, expected, **TOLERANCE[expected.dtype])


def tiny_model(name: str, **kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(name, **{**TINY, **kwargs}).double().eval()
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


def assert_no_future(model: torch.nn.Module, batch: torch.Tensor) -> None:
    """Changing the token at position p changes no row before p (logits and attention, bit for bit: the same
    kernels on the same earlier inputs), and does change the rows from p on."""
    T = batch.shape[1]
    with torch.no_grad():
        base = model(batch)
        for p in range(1, T):
            changed = batch.clone()
            changed[:, p] = (changed[:, p] + 7) % 36 + 4
            out = model(changed)
            # rows 0..p-1 read inputs 0..p-1 only
            torch.testing.assert_close(out.logits[:, :p], base.logits[:, :p], atol=0, rtol=0)
            if out.attention is not None:
                torch.testing.assert_close(out.attention[:, :p], base.attention[:, :p], atol=0, rtol=0)
            assert not torch.equal(out.logits[:, p:], base.logits[:, p:])


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line when the browser tests were skipped (no Chromium), so a green run never hides them."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "e2e" in getattr(r, "keywords", {})]
    if skipped:
        reason = skipped[0].longrepr[2] if isinstance(skipped[0].longrepr, tuple) else str(skipped[0].longrepr)
        terminalreporter.write_line(
            f"{len(skipped)} browser test(s) skipped: {reason.removeprefix('Skipped: ')} "
            "(Debian: apt-get install chromium; .ci/run installs it)", yellow=True)


def vega_colours(values: list[float], scale) -> list[tuple[int, int, int]]:
    """The colour Vega draws for each of ``values`` on the Altair ``scale`` (one rect each, rendered to SVG):
    what the Python palettes of :mod:`vizlm.present.style` must match."""
    import re

    import altair as alt
    import pandas as pd

    from vizlm.present import export

    df = pd.DataFrame({"x": [str(v) for v in values], "v": values})
    chart = alt.Chart(df).mark_rect().encode(x=alt.X("x:N", sort=None), color=alt.Color("v:Q", scale=scale, legend=None))
    svg = export.chart_bytes(chart, "svg").decode()
    drawn = [tuple(map(int, m)) for m in re.findall(r'fill="rgb\((\d+), (\d+), (\d+)\)"', svg)]
    assert len(drawn) == len(values)
    return drawn


@pytest.fixture(scope="module")
def one_thread():
    """Tiny matrices: one thread is faster than several, and far faster on a busy machine (a module's tests ask
    for it with ``pytestmark = pytest.mark.usefixtures("one_thread")``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
