"""Checkpoints are data, not code: ``model.safetensors`` + ``config.json``.

``config.json`` holds the model name and its config dataclass (``asdict``), the
vocabulary, the training corpus with the sha256 of its split files, metrics and
the software version. :func:`load_checkpoint` is the one loader used by the CLI,
the app and the tests. It validates the JSON and every tensor's name, shape and
dtype before building the model, and never unpickles anything.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn

from vizlm import __version__
from vizlm.data import Vocab
from vizlm.models import build_model, make_config

FORMAT = "vizlm-checkpoint"
FORMAT_VERSION = 1
WEIGHTS, META = "model.safetensors", "config.json"
MAX_BYTES = 200 * 1024 * 1024  # nothing we train is near this; refuse anything larger


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded, with a message meant for the user."""


@dataclass
class Checkpoint:
    model: nn.Module  # in eval mode
    vocab: Vocab
    name: str  # registry name, e.g. "amsrn"
    meta: dict = field(default_factory=dict)  # exactly the saved config.json, nothing added
    path: Path | None = None  # the folder it was loaded from; None for uploads and in-memory models
    digest: str | None = None  # sha256 of the weights and config.json bytes (see cache.checkpoint_digest)

    @property
    def label(self) -> str:
        """How results name this model: its folder (``kvp-scratch``), else the registry name."""
        return self.meta.get("label") or (self.path.name if self.path else self.name)

    @property
    def has_attention(self) -> bool:
        """Whether the model returns attention weights."""
        return self.model.has_attention


def save_checkpoint(folder: Path, model: nn.Module, name: str, vocab: Vocab, **meta) -> Path:
    """Write ``folder/model.safetensors`` and ``folder/config.json``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    (folder / WEIGHTS).write_bytes(st_save(state, metadata={"format": FORMAT, "model": name}))
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "vizlm_version": __version__,
        "model": name,
        "config": asdict(model.config),
        **meta,
        "vocab": vocab.itos,
    }
    (folder / META).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return folder


def _check_weights_bytes(data: bytes) -> None:
    """Recognise foreign formats before handing bytes to safetensors."""
    if len(data) > MAX_BYTES:
        raise CheckpointError(f"weights file is {len(data) / 2**20:.0f} MB; the limit is {MAX_BYTES // 2**20} MB")
    if data[:2] == b"PK":
        raise CheckpointError("this is a zip file (a PyTorch torch.save checkpoint?); vizlm loads only .safetensors weights")
    if data[:1] == b"\x80":
        raise CheckpointError("this is a Python pickle; vizlm never unpickles files, it loads only .safetensors weights")
    if len(data) < 8:
        raise CheckpointError("weights file is truncated (shorter than a safetensors header)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8 or data[8:9] != b"{":
        raise CheckpointError("weights file is not valid safetensors (corrupt or truncated header)")


def parse_meta(raw: bytes | str) -> dict:
    """Parse and check ``config.json``; raise :class:`CheckpointError` with the reason."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"config.json is not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"config.json is not a vizlm checkpoint (missing \"format\": \"{FORMAT}\")")
    if doc.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(f"checkpoint format {doc['format_version']} is newer than this vizlm ({FORMAT_VERSION})")
    for key, kind in (("model", str), ("config", dict), ("vocab", list)):
        if not isinstance(doc.get(key), kind):
            raise CheckpointError(f"config.json: {key!r} is missing or not a {kind.__name__}")
    return doc


def digest_of(weights: bytes, meta_raw: bytes | str) -> str:
    """sha256 of a checkpoint's two files (each length-prefixed, so the pair is unambiguous)."""
    meta_raw = meta_raw.encode("utf-8") if isinstance(meta_raw, str) else bytes(meta_raw)
    h = hashlib.sha256()
    for part in (bytes(weights), meta_raw):
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return h.hexdigest()


def checkpoint_from_bytes(weights: bytes, meta_raw: bytes | str) -> Checkpoint:
    """Build a model from the two files' contents, validating everything first."""
    doc = parse_meta(meta_raw)
    try:
        config = make_config(doc["model"], **doc["config"])
        vocab = Vocab(doc["vocab"])
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"config.json: {exc}") from None
    if len(vocab) != config.vocab_size:
        raise CheckpointError(f"vocabulary has {len(vocab)} words but the config says {config.vocab_size}")
    _check_weights_bytes(weights)
    try:
        state = st_load(weights)
    except Exception as exc:  # noqa: BLE001 - safetensors raises several types
        raise CheckpointError(f"weights file is corrupt or truncated ({exc})") from None
    model = build_model(doc["model"], config)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing or extra:
        raise CheckpointError(
            f"weights do not match a {doc['model']} model: missing {missing[:5]}, unexpected {extra[:5]}"
        )
    for key, ref in expected.items():
        got = state[key]
        if got.shape != ref.shape or got.dtype != ref.dtype:
            raise CheckpointError(
                f"tensor {key!r} is {tuple(got.shape)} {got.dtype}; expected {tuple(ref.shape)} {ref.dtype}"
            )
        if got.is_floating_point() and not torch.isfinite(got).all():
            raise CheckpointError(f"tensor {key!r} contains NaN or infinite values")
    model.load_state_dict(state)
    model.eval()
    return Checkpoint(model, vocab, doc["model"], doc, digest=digest_of(weights, meta_raw))


def resolve(path: Path | str) -> tuple[Path, Path]:
    """(weights, meta) paths for a checkpoint folder, its .safetensors file, or a bundled name."""
    p = Path(path)
    if not p.exists() and not p.suffix and (bundled_dir() / str(path)).is_dir():
        p = bundled_dir() / str(path)
    if p.is_dir():
        return p / WEIGHTS, p / META
    if p.suffix == ".safetensors":
        beside = p.with_suffix(".json")
        return p, beside if beside.exists() else p.parent / META
    raise CheckpointError(f"{path}: expected a checkpoint folder or a .safetensors file")


def load_checkpoint(path: Path | str) -> Checkpoint:
    """The one loader: a folder with ``model.safetensors`` + ``config.json`` (or a bundled name)."""
    weights, meta = resolve(path)
    for f in (weights, meta):
        if not f.is_file():
            raise CheckpointError(f"{f} not found")
    if weights.stat().st_size > MAX_BYTES:
        raise CheckpointError(f"{weights} is larger than {MAX_BYTES // 2**20} MB")
    ckpt = checkpoint_from_bytes(weights.read_bytes(), meta.read_bytes())
    ckpt.path = weights.parent
    return ckpt


def bundled_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "checkpoints"


def bundled_checkpoints() -> list[str]:
    """Names of the checkpoints shipped in ``checkpoints/``."""
    root = bundled_dir()
    return sorted(p.name for p in root.iterdir() if (p / WEIGHTS).is_file()) if root.is_dir() else []
