"""On-disk cache for corpus statistics, keyed by checkpoint and corpus checksums.

Entries are JSON (never pickle) under :func:`vizlm.paths.cache_dir`; the
key is the sha256 of a canonical JSON of its parts, so changing a checkpoint's
weights, the corpus file, or any parameter gives a new entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable

import torch

from vizlm import paths


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


def cached(parts: dict, compute: Callable[[], dict], enabled: bool = True) -> dict:
    """Return the JSON-able result for ``parts``, computing and storing it once."""
    if not enabled:
        return compute()
    folder = paths.cache_dir()
    path = folder / f"{key_of(parts)}.json"
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))["value"]
        except (json.JSONDecodeError, KeyError, OSError):
            pass  # a damaged entry is recomputed
    value = compute()
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"parts": parts, "value": value}, f)
    os.replace(tmp, path)
    return value
