"""On-disk cache for corpus statistics, keyed by checkpoint and corpus checksums.

Entries are JSON (never pickle) under :func:`vizlm.core.paths.cache_dir`; the
key is the sha256 of a canonical JSON of its parts, so changing a checkpoint's
weights, the corpus file, or any parameter gives a new entry.

The repository ships the entries of the bundled checkpoints on the bundled corpora
(:func:`vizlm.core.paths.shipped_stats_dir`, gzipped, read only; ``scripts/ship_stats.py``
writes them), so the app's corpus pages open at once on a cold cache. A lookup reads the
user's cache first, then the shipped entries; they are the same computation, keyed alike.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
from collections.abc import Callable

import torch

from vizlm.core import paths


def checkpoint_digest(ckpt) -> str:
    """sha256 of the checkpoint's files (set by the loader), or of its tensors and vocabulary when it has none."""
    if ckpt.digest:
        return ckpt.digest
    h = hashlib.sha256()
    h.update(ckpt.name.encode())
    for k, v in sorted(ckpt.model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().to(torch.float64).contiguous().numpy().tobytes())
    h.update(json.dumps(ckpt.vocab.itos, ensure_ascii=False).encode())
    ckpt.digest = h.hexdigest()
    return ckpt.digest


def key_of(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


SHIPPED_SUFFIX = ".json.gz"


def _read(path, opener) -> dict | None:
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            return json.load(f)["value"]
    except (json.JSONDecodeError, KeyError, TypeError, OSError, EOFError, UnicodeDecodeError):
        return None  # absent or damaged: recomputed


def lookup(parts: dict) -> dict | None:
    """The stored result for ``parts``: the user's cache, else the shipped entries; None when neither has it."""
    key = key_of(parts)
    value = _read(paths.cache_dir() / f"{key}.json", open)
    if value is None:
        value = _read(paths.shipped_stats_dir() / f"{key}{SHIPPED_SUFFIX}", gzip.open)
    return value


def stored(parts: dict) -> bool:
    """Whether :func:`lookup` finds an entry for ``parts`` without reading it (the user's cache or the shipped
    entries): what a caller asks before saying how long computing it would take."""
    key = key_of(parts)
    return (paths.cache_dir() / f"{key}.json").is_file() or (paths.shipped_stats_dir() / f"{key}{SHIPPED_SUFFIX}").is_file()


def store(parts: dict, value: dict) -> None:
    """Write ``value`` as the entry of ``parts`` in the user's cache (atomically)."""
    folder = paths.cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"parts": parts, "value": value}, f)
    os.replace(tmp, folder / f"{key_of(parts)}.json")


def cached(parts: dict, compute: Callable[[], dict], enabled: bool = True) -> dict:
    """Return the JSON-able result for ``parts`` (:func:`lookup`), computing and storing it once."""
    if not enabled:
        return compute()
    value = lookup(parts)
    if value is None:
        value = compute()
        store(parts, value)
    return value
