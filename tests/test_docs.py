"""The documentation: README.md is a front page, every relative link of the Markdown pages names a file
that exists, and the site (mkdocs.yml: docs/ as pages, the reference generated from the docstrings)
builds with warnings as errors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

README_LIMIT = 10_000  # bytes: what it is, how to start, a map of the docs; the rest lives in docs/
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *(p / "README.md" for p in (ROOT / "tests", ROOT / "data", ROOT / "evidence", ROOT / "benchmarks")
              if (p / "README.md").is_file())]


def test_the_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= README_LIMIT, f"README.md is {len(readme.encode()):,} bytes: move detail into docs/"
    assert "bash scripts/test.sh" in readme and "bash scripts/app.sh" in readme  # the two commands
    linked = {m for m in re.findall(r"\]\(docs/([A-Z_]+\.md)\)", readme)}
    assert {p.name for p in (ROOT / "docs").glob("*.md")} <= linked, "a page of docs/ the README's map leaves out"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_that_exists(page):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # not in code blocks
    broken = []
    for a, b in LINK.findall(text):
        target = (a or b).split("#")[0]
        if not target or re.match(r"[a-z]+:", target):  # an anchor on the page, or a URL
            continue
        if not (page.parent / target).exists():
            broken.append(a or b)
    assert not broken, f"{page.relative_to(ROOT)} links to files that do not exist: {broken}"


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    """`mkdocs build --strict`: a broken link between pages, a missing anchor, a docstring the reference
    cannot render fail it."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Quick start" in index and 'href="APP/"' in index  # the README, its links into docs/ rewritten
    reference = (tmp_path / "site" / "REFERENCE" / "index.html").read_text(encoding="utf-8")
    assert "corpus_attribution" in reference and "prepare_corpus" in reference  # generated from the docstrings


DOTTED = re.compile(r"\bvizlm(?:\.[A-Za-z_]\w*)+")


def _resolves(dotted: str) -> bool:
    """Whether ``vizlm.a.b.c`` is a module, or a name reached from the longest module prefix that imports."""
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if name in getattr(obj, "__dataclass_fields__", {}):  # a dataclass field: documented, not a class attribute
                return True
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_dotted_name_in_the_docs_and_docstrings_exists():
    """A page or a docstring naming ``vizlm.x.y`` names something that exists (after code moves, the names follow)."""
    places = [*pages(), *sorted((ROOT / "vizlm").rglob("*.py")), ROOT / "experiments.toml"]
    stale = sorted({(str(p.relative_to(ROOT)), name) for p in places
                    for name in (m.group(0) for m in DOTTED.finditer(p.read_text(encoding="utf-8")))
                    if not _resolves(name)})
    assert not stale, f"names of nothing: {stale}"
