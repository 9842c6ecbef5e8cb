"""Checkpoints are data, not code: ``model.safetensors`` + ``config.json``.

``config.json`` holds the model name and its config dataclass (``asdict``), the
vocabulary, the training corpus with the sha256 of its split files, metrics and
the software version. :func:`load_checkpoint` is the one loader used by the CLI,
the app and the tests, and never unpickles anything.

Both files are untrusted (the app accepts uploads), so the loader refuses, with a
:class:`CheckpointError` meant for a user, anything it cannot vouch for, and does
so *before* allocating anything sized by the file:

1. ``config.json``: at most :data:`MAX_META_BYTES`, JSON nested at most
   :data:`MAX_JSON_DEPTH` deep (measured before parsing), the known top-level
   keys of the right types, every config field checked against
   :data:`vizlm.models.LIMITS` (type and range), the vocabulary a list of
   ``vocab_size`` unique, printable words.
2. The model is built on PyTorch's ``meta`` device (shapes only, no memory) to get
   the expected tensors. There is no fixed cap on the model's size: the bytes that loading
   will allocate (the file, the tensors read from it, the model) are checked against the
   memory this machine has available (:func:`check_memory`), with a clear message before
   anything is allocated; the weights file may be no larger than those tensors and a header.
3. The safetensors header (8-byte little-endian length, then JSON) is parsed here:
   the tensor names, dtypes and shapes must be exactly the expected ones (a float
   tensor may be stored as float16, :data:`STORED_FLOATS`), their byte ranges must
   tile the data section, which must end where the file ends.
4. Only then are the weights read; every float must be finite and within
   :data:`MAX_ABS_WEIGHT`, and the real model is built and filled.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn
from torch.overrides import TorchFunctionMode

from vizlm import __version__
from vizlm.core import files, paths
from vizlm.data.vocab import MAX_WORD_CHARS, WORD_RULE, Vocab, first_bad_word, is_word  # noqa: F401 - MAX_WORD_CHARS: read here too
from vizlm.core.errors import VizlmError
from vizlm.models import PluginError, build_model, check_config, lookup, plugin_of, plugins
from vizlm.models.base import BaseConfig
from vizlm.data.text import normalizer

FORMAT = "vizlm-checkpoint"
FORMAT_VERSION = 1
WEIGHTS, META = "model.safetensors", "config.json"
MAX_META_BYTES = 5 * 1024 * 1024  # config.json; the real ones are ~150 kB, mostly the 10k-word vocabulary
MAX_HEADER_BYTES = 100_000  # the safetensors header; ours are under 1.5 kB
MAX_JSON_DEPTH = 32  # config.json nests 3 deep, a safetensors header 3
# Loading holds a model's tensors about three times at its peak: the file's bytes, the tensors
# safetensors reads from them, and the model they are copied into.
LOAD_COPIES = 3
# Trained LM weights are of order 1-10 (the bundled ones peak at 9.5). Beyond 1e4 the
# forward pass could overflow float32 (a 1e38 weight gives an infinite logit and a NaN
# perplexity); within it, logits stay below ~1e12 for any config within LIMITS.
MAX_ABS_WEIGHT = 1e4

# safetensors dtype names -> torch dtypes, for the header check and its messages
_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}
# Float tensors may also be stored in these (bundled checkpoints: half the size, test perplexity
# within 0.1%, docs/RESULTS.md); the model computes in its own dtype.
STORED_FLOATS = (torch.float16,)
# Top-level keys of config.json besides format/model/config/vocab, and their types when present.
_OPTIONAL_KEYS = {
    "vizlm_version": str, "label": str, "parameters": int,
    "metrics": dict, "corpus": dict, "train": dict, "init_from": dict, "storage": dict,
    "imported": dict,  # where `vizlm import` took the model from (vizlm.modeling.importer)
    "plugin": dict,  # a plugin's model: its name, package and version (vizlm.models.plugins, docs/PLUGINS.md)
}
_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # a package name fit to print in a pip command


def _stored_as(got: torch.dtype, ref: torch.dtype) -> bool:
    """Whether a tensor of dtype ``ref`` may be stored as ``got``."""
    return got == ref or (ref.is_floating_point and got in STORED_FLOATS)


class CheckpointError(VizlmError, ValueError):
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


def save_checkpoint(folder: Path, model: nn.Module, name: str, vocab: Vocab, weights_dtype: torch.dtype | None = None,
                    **meta) -> Path:
    """Write ``folder/model.safetensors`` and ``folder/config.json``; ``weights_dtype`` (one of
    :data:`STORED_FLOATS`) stores the float tensors in that dtype."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if weights_dtype is not None:
        if weights_dtype not in STORED_FLOATS:
            raise ValueError(f"weights can be stored as {STORED_FLOATS}, not {weights_dtype}")
        state = {k: v.to(weights_dtype) if v.is_floating_point() else v for k, v in state.items()}
    files.write_bytes(folder / WEIGHTS, st_save(state, metadata={"format": FORMAT, "model": name}), force=True)
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "vizlm_version": __version__,
        "model": name,
        "config": asdict(model.config),
        **meta,
        **({"plugin": plugin.record()} if (plugin := plugin_of(name)) else {}),
        "vocab": vocab.itos,
    }
    files.write_text(folder / META, json.dumps(doc, indent=1, ensure_ascii=False) + "\n", force=True)
    return folder


# --------------------------------------------------------------------------- JSON
_BRACKET_STEP = np.zeros(256, dtype=np.int8)
_BRACKET_STEP[[ord("["), ord("{")]] = 1
_BRACKET_STEP[[ord("]"), ord("}")]] = -1
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


def json_depth(raw: bytes) -> int:
    """How deeply ``raw`` nests brackets outside strings, found without parsing (no recursion) in
    a few linear passes: a quote preceded by an odd run of backslashes is escaped, every other
    quote opens or closes a string, and brackets count only outside strings. (A regex over the
    strings backtracks: quadratic on an unterminated string of repeated ``\\"``.)"""
    a = np.frombuffer(raw, dtype=np.uint8)
    if not len(a):
        return 0
    idx = np.arange(len(a), dtype=np.int64)
    # the last position at or before i that is not a backslash (-1: none)
    last_plain = np.maximum.accumulate(np.where(a != _BACKSLASH, idx, -1))
    run_before = np.zeros(len(a), dtype=np.int64)  # backslashes right before position i
    run_before[1:] = idx[:-1] - last_plain[:-1]
    quotes = (a == _QUOTE) & (run_before % 2 == 0)
    outside = np.cumsum(quotes, dtype=np.int64) % 2 == 0  # a closing quote itself counts as outside: not a bracket
    step = np.where(outside, _BRACKET_STEP[a], 0)
    return int(np.cumsum(step, dtype=np.int64).max(initial=0))


def _no_duplicates(pairs: list) -> dict:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise CheckpointError(f"the key {dup[:40]!r} appears twice in one object")
    return doc


def _parse_json(raw: bytes, what: str, unique_keys: bool = False) -> object:
    """Parse untrusted JSON of bounded size: depth first, then ``json.loads``.

    ``unique_keys`` refuses an object with a repeated key (where another parser might take
    the other one); it costs a Python call per object, so it is for small documents only.
    """
    depth = json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise CheckpointError(f"{what} nests {depth} levels deep; the limit is {MAX_JSON_DEPTH}")
    try:
        text = raw.decode("utf-8")  # json.loads(bytes) would guess UTF-16 or UTF-32 too: JSON files are UTF-8
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{what} is not valid JSON: it is not UTF-8 text (byte {exc.start}); JSON must be "
                              "UTF-8, not UTF-16 or another encoding") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates if unique_keys else None)
    except CheckpointError as exc:
        raise CheckpointError(f"{what}: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{what} is not valid JSON ({exc})") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer of more than 4300 digits
        raise CheckpointError(f"{what} is not valid JSON ({str(exc)[:100]})") from None


# --------------------------------------------------------------------------- config.json
def parse_meta(raw: bytes | str) -> dict:
    """Parse and check ``config.json``'s structure; raise :class:`CheckpointError` with the reason.

    The config fields and the vocabulary are checked by :func:`checkpoint_from_bytes`.
    """
    if isinstance(raw, str):
        if len(raw) > MAX_META_BYTES:
            raise CheckpointError(f"config.json is larger than the limit of {MAX_META_BYTES // 2**20} MB")
        try:
            raw = raw.encode("utf-8")
        except UnicodeEncodeError:
            raise CheckpointError("config.json is not valid JSON (it is not valid UTF-8 text)") from None
    elif not isinstance(raw, (bytes, bytearray, memoryview)):
        raise CheckpointError("config.json must be given as bytes or text")
    raw = bytes(raw)
    if len(raw) > MAX_META_BYTES:
        raise CheckpointError(f"config.json is {len(raw) / 2**20:.1f} MB; the limit is {MAX_META_BYTES // 2**20} MB")
    doc = _parse_json(raw, "config.json", unique_keys=True)  # a repeated key: which one would count?
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"config.json is not a vizlm checkpoint (missing \"format\": \"{FORMAT}\")")
    version = doc.get("format_version", FORMAT_VERSION)
    if type(version) is int and version > FORMAT_VERSION:
        raise CheckpointError(f"checkpoint format {version} is newer than this vizlm ({FORMAT_VERSION})")
    if type(version) is not int or version < 1:
        raise CheckpointError(
            f"config.json: \"format_version\" must be an integer from 1 to {FORMAT_VERSION}, not {json.dumps(version)[:40]}"
        )
    for key, kind in (("model", str), ("config", dict), ("vocab", list)):
        if not isinstance(doc.get(key), kind):
            raise CheckpointError(f"config.json: {key!r} is missing or not a {kind.__name__}")
    for key, kind in _OPTIONAL_KEYS.items():
        if key in doc and not (isinstance(doc[key], kind) and not isinstance(doc[key], bool)):
            noun = {int: "an integer", str: "a string", dict: "an object"}[kind]
            raise CheckpointError(f"config.json: {key!r} must be {noun}, not {json.dumps(doc[key])[:40]}")
    return doc


def _bad_word(w) -> bool:
    return not is_word(w)  # the one rule (vizlm.data.vocab.is_word), also prepare's and import's


def _check_vocab(words: list, size: int) -> Vocab:
    if len(words) != size:
        raise CheckpointError(f"vocabulary has {len(words)} words but the config says {size}")
    i = first_bad_word(words)
    if i is not None:
        w = words[i]
        shown = json.dumps(w)[:40] if isinstance(w, (str, int, float, bool)) or w is None else type(w).__name__
        raise CheckpointError(f"vocabulary entry {i} is {shown}; every word must be a non-empty string: {WORD_RULE}")
    try:
        return Vocab(words)
    except ValueError as exc:
        raise CheckpointError(f"config.json: {exc}") from None


# --------------------------------------------------------------------------- weights
def _foreign_format(data: bytes) -> str | None:
    """The message for a file that is not safetensors but a format vizlm recognises and refuses."""
    if data[:2] == b"PK":
        return "this is a zip file (a PyTorch torch.save checkpoint?); vizlm loads only .safetensors weights"
    if data[:1] == b"\x80":
        return "this is a Python pickle; vizlm never unpickles files, it loads only .safetensors weights"
    return None


def _check_weights_bytes(data: bytes, max_bytes: int | None = None) -> tuple[dict, int]:
    """Parse the safetensors header, ``(header, data start)``; only a file that is not
    safetensors is then named by its foreign format.

    A safetensors file begins with its header's length as 8 little-endian bytes, so its first
    byte is anything: 0x80 for every header length of 128 mod 256, ``PK`` for 19,280 mod 65,536.
    Recognising pickle and zip by their first bytes *before* trying safetensors refused such valid
    files, so the header is tried first: a length that fits the file, then ``{``, then a JSON object.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise CheckpointError(f"weights file is {len(data) / 2**20:.1f} MB; the model needs at most "
                              f"{max_bytes / 2**20:.1f} MB")
    n = struct.unpack("<Q", data[:8])[0] if len(data) >= 8 else None
    if n is None or n > len(data) - 8 or data[8:9] != b"{":
        foreign = _foreign_format(data)
        if foreign:
            raise CheckpointError(foreign)
        if n is None:
            raise CheckpointError("weights file is truncated (shorter than a safetensors header)")
        raise CheckpointError("weights file is not valid safetensors (corrupt or truncated header)")
    if n > MAX_HEADER_BYTES:
        raise CheckpointError(f"the weights file's header is {n:,} bytes; the limit is {MAX_HEADER_BYTES:,}")
    # unique keys: safetensors' own parser must see the same tensors as this check
    try:
        header = _parse_json(bytes(data[8 : 8 + n]), "the weights file's header", unique_keys=True)
    except CheckpointError:
        if foreign := _foreign_format(data):
            raise CheckpointError(foreign) from None
        raise
    if not isinstance(header, dict):
        foreign = _foreign_format(data)
        raise CheckpointError(foreign or "weights file is not valid safetensors (its header is not an object)")
    extra = header.pop("__metadata__", {})
    if not isinstance(extra, dict) or not all(isinstance(v, str) for v in extra.values()):
        raise CheckpointError("weights file is not valid safetensors (its __metadata__ is not a map of strings)")
    return header, 8 + n


def _is_count(v) -> bool:
    return type(v) is int and v >= 0


def _check_header(header: dict, expected: dict[str, torch.Tensor], model: str, data_bytes: int) -> None:
    """The header must list exactly the expected tensors, and their data must tile the file."""
    missing = sorted(set(expected) - set(header))
    extra = sorted(set(header) - set(expected))
    if missing or extra:
        raise CheckpointError(
            f"weights do not match a {model} model: "
            f"missing {missing[:5]}, unexpected {[str(k)[:40] for k in extra[:5]]}"
        )
    spans = []
    for key, ref in expected.items():
        entry = header[key]
        if (
            not isinstance(entry, dict)
            or set(entry) != {"dtype", "shape", "data_offsets"}
            or not isinstance(entry["dtype"], str)
            or not isinstance(entry["shape"], list)
            or not all(_is_count(d) for d in entry["shape"])
            or not isinstance(entry["data_offsets"], list)
            or len(entry["data_offsets"]) != 2
            or not all(_is_count(o) for o in entry["data_offsets"])
        ):
            raise CheckpointError(f"weights file is corrupt: the header entry of tensor {key!r} is malformed")
        dtype, shape = _DTYPES.get(entry["dtype"], entry["dtype"][:20]), tuple(entry["shape"])
        if shape != tuple(ref.shape) or not isinstance(dtype, torch.dtype) or not _stored_as(dtype, ref.dtype):
            raise CheckpointError(f"tensor {key!r} is {shape} {dtype}; expected {tuple(ref.shape)} {ref.dtype}")
        begin, end = entry["data_offsets"]
        size = ref.numel() * dtype.itemsize
        if end - begin != size:
            raise CheckpointError(
                f"weights file is corrupt or truncated (tensor {key!r} has {end - begin} bytes of data; "
                f"its shape needs {size})"
            )
        spans.append((begin, end, key))
    pos = 0
    for begin, end, key in sorted(spans):
        if begin != pos:
            raise CheckpointError(
                f"weights file is corrupt or truncated (the data of tensor {key!r} overlaps another or leaves a gap)"
            )
        pos = end
    if pos != data_bytes:
        raise CheckpointError(
            f"weights file is corrupt or truncated (the header describes {pos:,} bytes of tensor data; "
            f"the file holds {data_bytes:,})"
        )


class _NoInit(TorchFunctionMode):
    """Skip random initialisation of a model whose weights come from a file. On the meta
    device there is nothing to fill, and the first such op there imports ``torch._dynamo``
    (~1.5 s); on the CPU it would be overwritten at once."""

    SKIP = frozenset({"uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_",
                      "xavier_uniform_", "xavier_normal_", "orthogonal_"})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) in self.SKIP:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


def available_memory() -> int | None:
    """Bytes of memory this machine can give a new allocation now (Linux's ``MemAvailable``,
    else the free physical pages); ``None`` where neither can be read."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(need: int, what: str, error: type[Exception] | None = None) -> None:
    """Refuse, before allocating, work that needs more bytes than this machine has available."""
    have = available_memory()
    if have is not None and need > have:
        raise (error or CheckpointError)(
            f"{what} needs about {need / 2**30:.1f} GiB of memory; this machine has {have / 2**30:.1f} GiB "
            "available"
        )


def tensor_bytes(tensors: dict[str, torch.Tensor]) -> int:
    """The bytes of a state dict's tensors in their own dtypes (meta tensors too)."""
    return sum(t.numel() * t.element_size() for t in tensors.values())


def max_weights_bytes(expected: dict[str, torch.Tensor]) -> int:
    """The largest a valid weights file for these tensors can be: the tensors in their own dtypes
    (float16 storage is smaller), the 8-byte length and a header of at most MAX_HEADER_BYTES."""
    return tensor_bytes(expected) + 8 + MAX_HEADER_BYTES


def _expected_tensors(name: str, config) -> dict[str, torch.Tensor]:
    """The state dict the config calls for, as meta tensors: shapes and dtypes, no memory."""
    with torch.device("meta"), _NoInit():
        model = build_model(name, config)
    expected = model.state_dict()
    total = sum(t.numel() for t in expected.values())
    check_memory(LOAD_COPIES * tensor_bytes(expected), f"loading this {name} model ({total:,} parameters)")
    return expected


def digest_of(weights: bytes, meta_raw: bytes | str) -> str:
    """sha256 of a checkpoint's two files (each length-prefixed, so the pair is unambiguous)."""
    meta_raw = meta_raw.encode("utf-8") if isinstance(meta_raw, str) else bytes(meta_raw)
    h = hashlib.sha256()
    for part in (bytes(weights), meta_raw):
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return h.hexdigest()


@dataclass
class _Plan:
    """What a checked ``config.json`` calls for; nothing sized by it is allocated yet."""

    doc: dict
    name: str
    config: BaseConfig
    vocab: Vocab
    expected: dict[str, torch.Tensor]  # meta tensors


def _require_model(name: str, record) -> None:
    """The model ``name`` exists here: a built-in family or an installed plugin; else a message that says
    which package to install (a plugin's checkpoint records it, ``config.json``'s ``plugin``)."""
    try:
        lookup(name)
    except PluginError as exc:  # installed, but vizlm skipped it
        raise CheckpointError(str(exc)) from None
    except ValueError as exc:
        package = record.get("distribution") if isinstance(record, dict) else None
        if not (isinstance(package, str) and _PACKAGE.fullmatch(package)):
            raise CheckpointError(f"config.json: {exc}") from None
        version = record.get("version")
        version = f" {version}" if isinstance(version, str) and _PACKAGE.fullmatch(version) else ""
        raise CheckpointError(
            f"this checkpoint's model {name[:40]!r} comes from the plugin package {package}{version}, which is not "
            f"installed here: pip install {package}, then load it again (docs/PLUGINS.md)") from None


def _plan(meta_raw: bytes | str) -> _Plan:
    doc = parse_meta(meta_raw)
    name = doc["model"]
    _require_model(name, doc.get("plugin"))
    try:
        config = check_config(name, doc["config"])
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"config.json: {exc}") from None
    vocab = _check_vocab(doc["vocab"], config.vocab_size)
    try:
        expected = _expected_tensors(name, config)
    except PluginError as exc:
        raise CheckpointError(str(exc)) from None
    return _Plan(doc, name, config, vocab, expected)


def checkpoint_from_bytes(weights: bytes, meta_raw: bytes | str) -> Checkpoint:
    """Build a model from the two files' contents, validating everything first."""
    return _build(_plan(meta_raw), weights, meta_raw)


def _build(plan: _Plan, weights: bytes, meta_raw: bytes | str) -> Checkpoint:
    if not isinstance(weights, (bytes, bytearray, memoryview)):
        raise CheckpointError("the weights must be given as bytes")
    weights = bytes(weights)
    name, expected = plan.name, plan.expected
    header, start = _check_weights_bytes(weights, max_weights_bytes(expected))
    _check_header(header, expected, name, len(weights) - start)
    # Everything the file claims is now known to match the config; only now read it.
    try:
        state = st_load(weights)
    except Exception as exc:  # noqa: BLE001 - safetensors raises several types
        raise CheckpointError(f"weights file is corrupt or truncated ({exc})") from None
    for key, ref in expected.items():
        got = state[key]
        if got.shape != ref.shape or not _stored_as(got.dtype, ref.dtype):  # the header said otherwise: a safetensors bug
            raise CheckpointError(
                f"tensor {key!r} is {tuple(got.shape)} {got.dtype}; expected {tuple(ref.shape)} {ref.dtype}"
            )
        if got.is_floating_point() and got.numel():
            low, high = (v.item() for v in torch.aminmax(got))  # one pass; NaN propagates
            peak = max(-low, high)
            if not math.isfinite(peak):
                raise CheckpointError(f"tensor {key!r} contains NaN or infinite values")
            if peak > MAX_ABS_WEIGHT:
                raise CheckpointError(
                    f"tensor {key!r} has a weight of magnitude {peak:.3g}; vizlm refuses weights beyond "
                    f"{MAX_ABS_WEIGHT:g} (trained models stay near 1-10, and such values overflow the forward pass)"
                )
    try:
        with _NoInit():  # every parameter is overwritten below (strictly: the names matched exactly)
            model = build_model(name, plan.config, contract=False)
        model.load_state_dict(state)
        model.eval()
        if plugin_of(name):  # with its weights in: a plugin's model must keep vizlm's contract
            plugins.check_contract(name, model)
            model = plugins.guard(name, model)  # and fails by name on longer input (its calls are watched)
    except PluginError as exc:
        raise CheckpointError(str(exc)) from None
    return Checkpoint(model, plan.vocab, name, plan.doc, digest=digest_of(weights, meta_raw))


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


def _read_inside(f: Path, folder: Path, limit: int) -> bytes:
    """The bytes of ``f``, a regular file of at most ``limit`` bytes inside ``folder``.

    A symlink may point within the folder (``model.safetensors -> best.safetensors``) but
    not out of it: a checkpoint folder someone else made (an unpacked archive, a shared
    runs directory) must not make the app read ``/etc/...`` or ``/dev/zero``. Sizes and
    the file type come from ``stat`` before anything is read.
    """
    try:
        real = f.resolve(strict=True)
        if not real.is_relative_to(folder.resolve(strict=True)):
            raise CheckpointError(f"{f} is a symbolic link out of its checkpoint folder; vizlm does not follow those")
        before = real.stat()
    except (OSError, RuntimeError):  # missing, a dangling link or a symlink loop
        raise CheckpointError(f"{f} not found") from None
    if not stat.S_ISREG(before.st_mode):
        raise CheckpointError(f"{f} is not a regular file")
    if before.st_size > limit:
        raise CheckpointError(f"{f} is {before.st_size / 2**20:.1f} MB; the limit is {limit / 2**20:g} MB")
    try:
        with open(real, "rb") as fh:
            now = os.fstat(fh.fileno())
            if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(now.st_mode):
                raise CheckpointError(f"{f} changed while it was being read; try again")
            data = fh.read(limit + 1)
    except OSError as exc:
        raise CheckpointError(f"{f} cannot be read ({exc.strerror or exc})") from None
    if len(data) > limit:  # it grew while we read it
        raise CheckpointError(f"{f} is larger than the limit of {limit / 2**20:g} MB")
    return data


def read_meta(path: Path | str) -> dict:
    """A checkpoint's ``config.json``, read and checked as :func:`load_checkpoint` does, without
    touching the weights (for listing checkpoints)."""
    weights, meta = resolve(path)
    return parse_meta(_read_inside(meta, weights.parent, MAX_META_BYTES))


def meta_corpus(meta: dict) -> str | None:
    """The corpus a checkpoint was trained on, from its ``config.json`` (None: not recorded)."""
    return (meta.get("corpus") or {}).get("name")


def meta_reader(meta: dict):
    """How a checkpoint reads typed words (:func:`vizlm.data.text.normalizer`): vizlm's rule, or the one an
    imported model's vocabulary asks for (``imported.reading``: keep case, keep digits), or a model trained
    on a prepared corpus (``corpus.reading``, from the corpus's card)."""
    rule = None
    for part in ("imported", "corpus"):
        if isinstance(meta.get(part), dict) and isinstance(meta[part].get("reading"), dict):
            rule = meta[part]["reading"]
            break
    if not isinstance(rule, dict):
        return normalizer()
    return normalizer(lowercase=rule.get("lowercase") is not False, numbers=rule.get("numbers") is not False)


def size_label(emb_dim: int, hidden_dim: int) -> str:
    """A model's size as its embedding and hidden sizes say: ``k = 300`` (the papers' notation), or ``embedding 50,
    hidden 42`` where they differ (a model matched to another's parameter count)."""
    return f"k = {hidden_dim}" if emb_dim == hidden_dim else f"embedding {emb_dim}, hidden {hidden_dim}"


def meta_size(meta: dict) -> str | None:
    """A checkpoint's size (:func:`size_label`) and parameter count from its ``config.json``: ``k = 300, 6.7 M
    parameters``; None when it records neither."""
    config = meta.get("config") or {}
    dims = [config.get(k) for k in ("emb_dim", "hidden_dim")]
    count = meta.get("parameters")
    parts = ([size_label(*dims)] if all(isinstance(d, int) and not isinstance(d, bool) for d in dims) else []) + (
        [f"{count / 1e6:.{1 if count >= 1e7 else 2}f} M parameters"]
        if isinstance(count, int) and not isinstance(count, bool) and count > 0 else [])
    return ", ".join(parts) or None


def meta_context(meta: dict) -> str:
    """How a checkpoint reads text, from its ``config.json`` (older ones: the config's default)."""
    return (meta.get("config") or {}).get("context", BaseConfig.context)


def load_checkpoint(path: Path | str) -> Checkpoint:
    """The one loader: a folder with ``model.safetensors`` + ``config.json`` (or a bundled name)."""
    weights, meta = resolve(path)
    folder = weights.parent
    meta_raw = _read_inside(meta, folder, MAX_META_BYTES)
    plan = _plan(meta_raw)  # the config is checked before the weights are read
    ckpt = _build(plan, _read_inside(weights, folder, max_weights_bytes(plan.expected)), meta_raw)
    ckpt.path = folder
    return ckpt


def bundled_dir() -> Path:
    """The checkpoints folder (:func:`vizlm.core.paths.checkpoints_dir`)."""
    return paths.checkpoints_dir()


def bundled_checkpoints() -> list[str]:
    """Names of the checkpoints shipped in ``checkpoints/``."""
    root = bundled_dir()
    return sorted(p.name for p in root.iterdir() if (p / WEIGHTS).is_file()) if root.is_dir() else []
