"""Where vizlm reads and writes: the one owner of every location.

- **data** (processed corpora for training and corpus statistics) and **checkpoints**
  live in a *home* folder: ``$VIZLM_HOME``; else the vizlm checkout this package is
  imported from (an editable install); else the checkout the current directory is in;
  else the current directory. So ``vizlm eval --checkpoint amsrn`` works from anywhere
  inside the repository, and a wheel installed elsewhere looks beside the user's files.
- Each can be set on its own: ``$VIZLM_DATA``, ``$VIZLM_CHECKPOINTS``, ``$VIZLM_CACHE``,
  or the CLI's ``--data`` / ``--checkpoints`` / ``--cache`` (:func:`set_overrides`; the app's
  ``--corpora`` / ``--checkpoints`` / ``--runs``).
- **Your corpora** (``vizlm prepare --corpus NAME --from FOLDER`` writes them) live in the user data
  folder (``platformdirs``: ``~/.local/share/vizlm/corpora`` on Linux), or ``$VIZLM_CORPORA`` / the
  CLI's ``--corpora`` / the app's ``--corpora``; every command finds them by name beside vizlm's own.
- ``runs/`` (``$VIZLM_RUNS``) holds the reproduction's runs that are not bundled.
- The **cache** of corpus statistics defaults to the user's cache folder
  (``platformdirs``), never inside the installed package; the statistics of the bundled
  checkpoints on the bundled corpora ship beside the corpora (``data/stats/``, read only), so the
  weights alone make up ``checkpoints/``.
- **Assets** (the POS tagger, the collocation table, example sentences) are what
  analysis needs at run time; they ship inside the package (``vizlm/assets/``), so an
  installed wheel can label cases without the repository.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from importlib.resources import files
from pathlib import Path

ASSETS = Path(str(files("vizlm") / "assets"))
TAGGER_FILE = "tagger.json"  # bigram HMM tagger counts, built from Brown train (vizlm.data.tagger)
COLLOCATIONS_FILE = "collocations.tsv"  # word pairs with PMI, built from Brown train (vizlm.data.resources)
EXAMPLES_FILE = "examples.json"  # example passages of the test splits (vizlm.data.prepare)
SHIPPED_STATS = "stats"  # the folder of the data folder holding the shipped statistics (not a corpus name)
EVIDENCE_FOLDER = "evidence"  # the checkout's folder of the runs' evidence, kept in the repository

_ENV = {"home": "VIZLM_HOME", "data": "VIZLM_DATA", "checkpoints": "VIZLM_CHECKPOINTS", "cache": "VIZLM_CACHE", "runs": "VIZLM_RUNS",
        "evidence": "VIZLM_EVIDENCE", "corpora": "VIZLM_CORPORA"}
COMMIT_ENV = "VIZLM_COMMIT"  # the commit a copy without .git was made from (commit())
_overrides: dict[str, Path] = {}


def set_overrides(data: Path | str | None = None, checkpoints: Path | str | None = None, cache: Path | str | None = None,
                  runs: Path | str | None = None, corpora: Path | str | None = None,
                  evidence: Path | str | None = None) -> None:
    """Command-line overrides (they win over the environment); ``None`` leaves a location as it is."""
    for key, value in (("data", data), ("checkpoints", checkpoints), ("cache", cache), ("runs", runs), ("corpora", corpora),
                       ("evidence", evidence)):
        if value is not None:
            _overrides[key] = Path(value).expanduser()


@contextlib.contextmanager
def overridden(**locations: Path | str | None) -> Iterator[None]:
    """Overrides (:func:`set_overrides`' keywords) for the length of a block; as they were afterwards."""
    saved = dict(_overrides)
    set_overrides(**locations)
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)


def clear_overrides() -> None:
    _overrides.clear()


def _is_checkout(folder: Path) -> bool:
    """A vizlm source checkout: its pyproject names the project and it has ``checkpoints/``."""
    try:
        return (folder / "checkpoints").is_dir() and 'name = "vizlm"' in (folder / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False


def home() -> Path:
    """The folder that holds ``data/`` and ``checkpoints/`` (see the module docstring)."""
    env = os.environ.get(_ENV["home"])
    if env:
        return Path(env).expanduser()
    package_parent = Path(__file__).resolve().parents[2]  # vizlm/core/paths.py -> the checkout
    if _is_checkout(package_parent):
        return package_parent
    cwd = Path.cwd()
    for folder in (cwd, *cwd.parents):
        if _is_checkout(folder):
            return folder
    return cwd


def _location(key: str, default: Callable[[], Path]) -> Path:
    """The override of ``key``, else its environment variable, else ``default()``: called only then, as finding
    :func:`home` reads files (a report asks for the evidence folder thousands of times under an override)."""
    if key in _overrides:
        return _overrides[key]
    env = os.environ.get(_ENV[key])
    return Path(env).expanduser() if env else default()


def data_dir() -> Path:
    """Processed corpora (``vizlm prepare`` writes them)."""
    return _location("data", lambda: home() / "data")


def _user_dir(kind: str) -> Path:
    """vizlm's user ``data`` or ``cache`` folder (``platformdirs``). Imported here, not with the module:
    a machine with PyTorch alone (a GPU node running training) lacks it and gets the XDG folders
    that ``platformdirs`` gives on Linux."""
    try:
        import platformdirs
    except ImportError:
        env, default = ("XDG_DATA_HOME", ".local/share") if kind == "data" else ("XDG_CACHE_HOME", ".cache")
        return Path(os.environ.get(env) or Path.home() / default) / "vizlm"
    return Path(platformdirs.user_data_dir("vizlm") if kind == "data" else platformdirs.user_cache_dir("vizlm"))


def corpora_dir() -> Path:
    """Your prepared corpora, one folder each with its card (``vizlm prepare --corpus NAME --from FOLDER``)."""
    return _location("corpora", lambda: _user_dir("data") / "corpora")


def checkpoints_dir() -> Path:
    """Bundled and trained checkpoints, one folder each."""
    return _location("checkpoints", lambda: home() / "checkpoints")


def commit() -> str | None:
    """The git commit of the vizlm checkout (``git rev-parse HEAD`` in :func:`home`), with
    ``+dirty`` when it has uncommitted changes to tracked files outside ``evidence/``: evidence is what runs
    write, never what they read, so a run that rewrites one evidence folder (``--force``) leaves the next run's
    code, data and manifest as committed. Outside a git checkout (a copy of the
    tree on a cluster node or a GPU machine, without ``.git``) it is ``$VIZLM_COMMIT`` when set (the
    commit the copy was made from: 7 to 40 hex digits, ``+dirty`` allowed), else None. A checkout's
    own commit wins over the variable."""
    import re
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(home()), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(home()), "status", "--porcelain", "--untracked-files=no", "--",
                                ".", f":(exclude){EVIDENCE_FOLDER}"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head = dirty = ""
    if head:
        return head + ("+dirty" if dirty else "")
    given = os.environ.get(COMMIT_ENV, "").strip()
    if not given:
        return None
    if not re.fullmatch(r"[0-9a-f]{7,40}(\+dirty)?", given):
        raise ValueError(f"${COMMIT_ENV} must be a git commit (7 to 40 lower-case hex digits, optionally +dirty), "
                         f"not {given[:60]!r}")
    return given


def shipped_stats_dir() -> Path:
    """Corpus statistics of the bundled checkpoints on the bundled corpora, shipped beside the corpora
    (``data/stats/``, read only): cache entries (:mod:`vizlm.inspect.cache`) the app need not compute. Keyed by
    checkpoint and corpus checksums, so an entry answers only for the very files it was computed from."""
    return data_dir() / SHIPPED_STATS


def runs_dir() -> Path:
    """Checkpoints of the reproduction's runs that are not bundled (``vizlm reproduce``)."""
    return _location("runs", lambda: home() / "runs")


def evidence_dir() -> Path:
    """The evidence of the reproduction's runs (:mod:`vizlm.reproduce.evidence`), kept in the repository."""
    return _location("evidence", lambda: home() / EVIDENCE_FOLDER)


def cache_dir() -> Path:
    """On-disk cache of corpus statistics (safe to delete)."""
    return _location("cache", lambda: _user_dir("cache"))


def asset(name: str) -> Path:
    """A file shipped inside the package (:data:`ASSETS`)."""
    return ASSETS / name
