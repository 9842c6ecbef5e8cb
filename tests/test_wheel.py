"""vizlm installed as a wheel (not editable) works outside the repository.

Builds the wheel, installs it into a fresh virtual environment in a temporary folder and runs
the CLI from another folder: ``analyze`` needs the tagger and collocations shipped as package
data, ``eval`` a checkpoint folder given by path and a corpus folder given by ``--data``. The
new environment reuses this one's installed dependencies (torch and friends) through a
``.pth`` line instead of downloading them again; vizlm itself (and its ``vizlm`` command)
comes from the wheel alone, installed by the new environment's own pip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

from vizlm.core import paths

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python of a fresh venv with the vizlm wheel installed, an environment for it, a work folder)."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIZLM_")}
    env["HOME"] = str(tmp / "home")  # the user cache dir lands here, never in site-packages
    src = tmp / "src"  # build from a copy: setuptools writes build/ beside the sources
    shutil.copytree(ROOT / "vizlm", src / "vizlm", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"), str(src)], tmp, env)
    wheel = next((tmp / "dist").glob("vizlm-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {"vizlm/assets/tagger.json", "vizlm/assets/collocations.tsv", "vizlm/assets/examples.json"} <= set(names)
    assert not any(n.startswith(("checkpoints/", "data/", "tests/")) for n in names)
    venv.create(tmp / "venv", with_pip=True)  # ensurepip: no network
    python = tmp / "venv" / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env).stdout.strip())
    (site / "_vizlm_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp, env)
    work = tmp / "elsewhere"
    work.mkdir()
    return python, env, work


def test_wheel_cli_runs_outside_the_repo(installed):
    python, env, work = installed
    probe = ("import vizlm, vizlm.core.paths as p; from vizlm.data.tagger import load_tagger; from vizlm.data.resources import load_collocations; "
             "print(vizlm.__file__); print(p.cache_dir()); print(load_tagger() is not None and load_collocations() is not None)")
    where = _run([str(python), "-c", probe], work, env).stdout.split("\n")
    assert not where[0].startswith(str(ROOT)), "vizlm was imported from the checkout, not from the wheel"
    assert where[1].startswith(env["HOME"]), f"cache outside the user cache dir: {where[1]}"
    assert where[2] == "True", "the tagger or the collocation table is not shipped in the wheel"
    vizlm = [str(python.parent / "vizlm")]
    lstm = ROOT / "checkpoints" / "lstm"
    doc = json.loads(_run(vizlm + ["analyze", "--checkpoint", str(lstm), "--text", "The dogs are barking .", "--json"], work, env).stdout)
    assert doc["tokens"] == ["The", "dogs", "are", "barking", "."] and doc["perplexity"] > 1
    amsrn = ROOT / "checkpoints" / "amsrn"
    doc = json.loads(_run(vizlm + ["analyze", "--checkpoint", str(amsrn), "--text", "The dogs saw the dogs .", "--top-k", "3", "--json"], work, env).stdout)
    assert ["trigger"] in [c["labels"] for t in doc["targets"] for c in t["cases"]]
    (work / "text.txt").write_text("The dogs are barking .\nThe owners are running .\n", encoding="utf-8")
    out = json.loads(_run(vizlm + ["eval", "--checkpoint", str(lstm), "--text-file", "text.txt", "--json"], work, env).stdout)
    assert out["sentences"] == 2 and out["perplexity"] > 1
    out = json.loads(_run(vizlm + ["--data", str(ROOT / "data"), "eval", "--checkpoint", str(lstm), "--corpus", "wsj", "--json"], work, env).stdout)
    stored = json.loads((lstm / "config.json").read_text(encoding="utf-8"))["metrics"]["wsj_perplexity"]
    assert out["perplexity"] == pytest.approx(stored, rel=1e-4)
    # names through --checkpoints (a folder of copies) and the corpora through --data without the statistics
    # shipped beside them (data/stats/), so they are computed; they are cached in the user cache dir only
    site = Path(where[0]).parent.parent
    for name in ("lstm", "amsrn"):
        shutil.copytree(ROOT / "checkpoints" / name, work / "mine" / name)
    (work / "corpora").mkdir()
    for entry in (ROOT / "data").iterdir():
        if entry.name != paths.SHIPPED_STATS:
            (work / "corpora" / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    out = json.loads(_run(vizlm + ["--data", str(work / "corpora"), "--checkpoints", str(work / "mine"), "compare",
                                   "--a", "lstm", "--b", "amsrn", "--corpus", "wsj", "--json"], work, env).stdout)
    assert out["summary"]["perplexity_a"] == pytest.approx(stored, rel=1e-4)
    assert list(Path(where[1]).glob("*.json")), "compare wrote no cache entry"
    assert not (site / ".cache").exists() and not list(site.rglob("*.tmp")), "something was written into site-packages"
