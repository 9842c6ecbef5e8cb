"""The layers of docs/ARCHITECTURE.md hold: import-linter's contracts in pyproject.toml, run here,
fail on an upward import or a cycle (imports inside functions count), and every module is in a layer."""

from __future__ import annotations

import ast

import pytest
from conftest import ROOT

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")
importlinter_cli = pytest.importorskip("importlinter.cli", reason="pip install import-linter (in the [test] extra)")
PACKAGE = ROOT / "vizlm"


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def test_import_contracts_are_kept():
    code = importlinter_cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    assert code == 0, "an import breaks a layer of docs/ARCHITECTURE.md: run `lint-imports` for the details"


def test_every_module_has_a_layer_and_is_described():
    """A new module or package must be placed in the layers (else no contract would look at it) and in ARCHITECTURE.md:
    the packages and top-level modules in the first contract, each layer package's modules in its own."""
    contracts = [c for c in _contracts() if c["type"] == "layers"]

    def placed(contract):
        return {name.strip() for layer in contract["layers"] for name in layer.split("|")}

    top = {f"vizlm.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    top |= {f"vizlm.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    coarse = next(c for c in contracts if "containers" not in c)
    assert placed(coarse) == top, f"not in a layer: {sorted(top - placed(coarse))}; no such module: {sorted(placed(coarse) - top)}"
    modules = set(top)
    for contract in (c for c in contracts if "containers" in c):
        (container,) = contract["containers"]
        folder = PACKAGE / container.split(".", 1)[1]
        inside = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        assert placed(contract) == inside, f"{container}: not in a layer: {sorted(inside - placed(contract))}"
        assert (folder / "__init__.py").read_text(encoding="utf-8").startswith('"""'), f"{container} has no docstring"
        modules |= {f"{container}.{m}" for m in inside}
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = [m for m in sorted(modules) if f"`{m.replace('.', '/')}" not in doc]
    assert not missing, f"docs/ARCHITECTURE.md does not describe {missing}"


def _imports(path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_pages_are_thin_and_start_inside_the_app():
    """Pages import the library and the app package (never torch or a model) and call page_setup() first."""
    pages = sorted((ROOT / "pages").glob("*.py"))
    assert pages
    for page in pages:
        mods = _imports(page)
        assert "vizlm.app.shell" in mods, page.name
        assert not {m for m in mods if m.split(".")[0] == "torch" or m.startswith("vizlm.models")}, page.name
        tree = ast.parse(page.read_text(encoding="utf-8"))
        calls = [n for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
        assert calls and getattr(calls[0].value.func, "id", None) == "page_setup", f"{page.name}: page_setup() is not its first call"


def test_no_private_streamlit_api():
    """No ``streamlit.runtime`` internals (or any other private module) anywhere in the app."""
    for path in [ROOT / "app.py", *(ROOT / "pages").glob("*.py"), *PACKAGE.rglob("*.py")]:
        for mod in _imports(path):
            if mod.startswith("streamlit"):
                assert mod in ("streamlit", "streamlit.testing.v1"), f"{path.relative_to(ROOT)} imports {mod}"


def test_the_speed_benchmark_times_every_model_family():
    """benchmarks/train_speed.py holds every family to the anchor's speed: a new family joins it."""
    import importlib.util

    from vizlm.models import REGISTRY

    spec = importlib.util.spec_from_file_location("train_speed", ROOT / "benchmarks" / "train_speed.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert set(REGISTRY) <= set(bench.FAMILIES)


LOADERS_AND_ANALYSES = {
    "vizlm.modeling.checkpoint": {"load_checkpoint", "checkpoint_from_bytes"},
    "vizlm.inspect.analysis": {"analyze", "analyze_tokens", "analyze_sentences", "analyze_batch"},
    "vizlm.present.serialize": None,  # the whole module: an analysis's JSON comes from vizlm.api
}


def test_pages_load_and_analyse_through_the_api():
    """A page loads models and analyses texts through vizlm.app (which calls vizlm.api), never with the
    loader or the analysis functions themselves, and never serialises an analysis itself (import-linter
    cannot see pages/, which are not a package)."""
    for page in [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]:
        tree = ast.parse(page.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in LOADERS_AND_ANALYSES:
                banned = LOADERS_AND_ANALYSES[node.module]
                names = {a.name for a in node.names}
                assert banned is not None and not names & banned, f"{page.name} imports {node.module}: {names}"
            if isinstance(node, ast.Import):
                assert not {a.name for a in node.names} & set(LOADERS_AND_ANALYSES), page.name
