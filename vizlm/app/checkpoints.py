"""Which models the app can show, their metadata, and loading them once per process.

Models are named as in the URL: a checkpoint folder's name (``amsrn``) under
:func:`vizlm.paths.checkpoints_dir`, a folder from ``$VIZLM_EXTRA_CHECKPOINTS``
(``os.pathsep``-separated checkpoint folders, for development), or ``upload:<label>``
for a checkpoint uploaded in this browser session.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import streamlit as st

from vizlm import api, paths
from vizlm.checkpoint import (
    META,
    WEIGHTS,
    Checkpoint,
    CheckpointError,
    checkpoint_from_bytes,
    meta_context,
    meta_corpus,
    read_meta,
)
from vizlm.data import CORPUS_LANGUAGE
from vizlm.errors import VizlmError
from vizlm.models import ATTENTION_MODELS
from vizlm.reproduce import PAPERS, load_manifest
from vizlm.tables import BASELINE_FAMILY
from vizlm.text import han_share

UPLOAD_PREFIX = "upload:"
MAX_UPLOAD_MB = api.MAX_UPLOAD_MB  # weights; every bundled model is a few MB
# The model a page opens with, when bundled: the first of these (attention models, most telling first).
PREFERRED = ("amsrn", "kvp", "kv", "attention", "salton")


class UserError(VizlmError, ValueError):
    """Something the user can fix; shown as a message, never as a traceback."""


def checkpoint_folders() -> dict[str, Path]:
    """Selectable checkpoints on disk: those :func:`vizlm.load` finds by name (:func:`vizlm.api.checkpoint_folders`:
    the checkpoints folder, then ``$VIZLM_EXTRA_CHECKPOINTS``)."""
    return api.checkpoint_folders()


def _uploads() -> dict[str, dict]:
    return st.session_state.setdefault("_uploads", {})


OTHER_GROUP = "Other checkpoints"


@st.cache_data(show_spinner=False, ttl=60)
def _bundled_runs() -> dict[str, tuple[str, str | None]]:
    """Checkpoint folder -> the paper and protocol of its run in ``experiments.toml`` and the
    folder of the run's control where that is bundled too (if any)."""
    try:
        runs = load_manifest()
    except (OSError, ValueError):
        return {}
    return {r.bundled: (PAPERS[r.paper], runs[r.control].bundled if r.control else None)
            for r in runs.values() if r.bundled}


def model_group(name: str) -> str:
    """The paper and protocol a checkpoint reproduces, for grouping lists (uploads: other)."""
    return _bundled_runs().get(name, (OTHER_GROUP, None))[0]


def model_names() -> list[str]:
    """Every selectable model, grouped by paper and protocol (manifest order), then this session's uploads."""
    order = list(dict.fromkeys([*PAPERS.values(), OTHER_GROUP]))
    folders = sorted(checkpoint_folders(), key=lambda n: order.index(model_group(n)))
    return folders + list(_uploads())


def preferred_model(names: list[str]) -> str:
    """The model to open with: a preferred attention model, else any attention model, else the first."""
    return next((n for n in PREFERRED if n in names), next((n for n in names if has_attention(n)), names[0]))


def baseline_model(names: list[str], model: str | None = None) -> str | None:
    """What to compare ``model`` with: the control its run was measured against (the same start and
    training without attention, e.g. ``lstm-doc`` for ``kvp-doc``), else the LSTM baseline, if there is one."""
    control = _bundled_runs().get(model, (None, None))[1]
    return next((n for n in (control, BASELINE_FAMILY) if n in names and n != model), None)


def missing_run_folders(command: str) -> list[str]:
    """Folders a stored training command starts from (``--init-from X``) that are not on this machine."""
    words = command.split()
    wanted = dict.fromkeys(words[i + 1] for i, w in enumerate(words[:-1]) if w == "--init-from")
    return [w for w in wanted if not (paths.home() / w).exists()]


def _version(path: Path) -> int:
    """Changes whenever a checkpoint is rewritten (training saves the best epoch in place)."""
    try:
        return (path / WEIGHTS).stat().st_mtime_ns ^ (path / META).stat().st_mtime_ns
    except OSError:
        return 0


def model_key(name: str) -> str:
    """A cache key that changes when the model's files change."""
    if name in _uploads():
        return name + "@" + _uploads()[name]["digest"]
    folder = checkpoint_folders().get(name)
    return f"{name}@{folder}@{_version(folder)}" if folder else name


@st.cache_data(show_spinner=False, max_entries=64)
def _read_meta(folder: str, version: int) -> dict:
    doc = read_meta(folder)
    doc["vocab_size"] = len(doc.pop("vocab", []))
    log = Path(folder) / "train_log.jsonl"
    doc["train_log"] = []
    if log.is_file():
        for line in log.read_text(encoding="utf-8").splitlines():
            try:
                doc["train_log"].append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line being written right now
    return doc


def model_meta(name: str) -> dict:
    """``config.json`` without the vocabulary (plus ``vocab_size`` and ``train_log``); {} if unreadable."""
    if name in _uploads():
        return _uploads()[name]["meta"]
    folder = checkpoint_folders().get(name)
    if folder is None:
        return {}
    try:
        return _read_meta(str(folder), _version(folder))
    except (OSError, CheckpointError):
        return {}


def family(name: str) -> str:
    return model_meta(name).get("model", "?")


def has_attention(name: str) -> bool:
    return family(name) in ATTENTION_MODELS


def attention_model_names(names: list[str] | None = None) -> list[str]:
    return [n for n in (names if names is not None else model_names()) if has_attention(n)]


def running_text_first(names: list[str]) -> list[str]:
    """Of ``names``, those that read running text (their windows reach across sentences, as in
    Daniluk et al.'s Fig. 3), else all of them."""
    return [n for n in names if context(n) == "document"] or names


def language(name: str) -> str | None:
    """The language a model reads: that of the corpus it was trained on (None: unknown)."""
    return CORPUS_LANGUAGE.get(meta_corpus(model_meta(name)))


def readers_of(tokens: list[str], names: list[str]) -> list[str]:
    """Of ``names``, the models in the language of ``tokens`` (Chinese when most are Chinese characters,
    :func:`vizlm.text.han_share`, else English), the one to open with (:func:`preferred_model`) first."""
    want = "Chinese" if han_share(tokens) > 0.5 else "English"
    fits = [n for n in names if language(n) == want]
    return sorted(fits, key=lambda n: n != preferred_model(fits)) if fits else []


def one_language(names: list[str]) -> list[str]:
    """``names`` in the language of the first of them: models shown together score one corpus."""
    if not names:
        return []
    first = language(names[0])
    return [n for n in names if language(n) == first]


def perplexity(name: str) -> tuple[str, float] | None:
    """The headline perplexity of a checkpoint: (split, value), test preferred."""
    metrics = model_meta(name).get("metrics", {})
    for key in ("test_perplexity", "valid_perplexity"):
        v = metrics.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v):
            return key.split("_")[0], float(v)
    return None


def context(name: str) -> str:
    """How the model reads text: ``"sentence"`` or ``"document"`` (:data:`vizlm.analysis.READINGS`)."""
    return meta_context(model_meta(name))


def window(name: str) -> int | None:
    """How many memory slots back the model may attend to (its window or memory), None: the whole sentence."""
    config = model_meta(name).get("config") or {}
    return config.get("window", config.get("memory"))


# The kinds a model list is grouped by, in its order: how a model reads English text, then the Chinese
# models and the runs beyond the papers. A select box shows each model as "name · kind" (model_label).
KINDS = ("sentences", "running text", "Chinese", "extension")
KINDS_HELP = ("Grouped by kind: sentences (reads each sentence alone), running text (reads documents across "
              "sentence boundaries), Chinese, extension (runs beyond the papers; the Models page says how each reads).")


def model_kind(name: str) -> str:
    """The :data:`KINDS` entry of a model: Chinese (trained on Chinese text), an extension (a run of
    ``experiments.toml`` beyond the papers), else how it reads text; uploads and other checkpoints too."""
    if language(name) == "Chinese":
        return "Chinese"
    if model_group(name) == PAPERS["extension"]:
        return "extension"
    return "running text" if context(name) == "document" else "sentences"


def by_kind(names: list[str]) -> list[str]:
    """``names`` grouped by :func:`model_kind` (in :data:`KINDS` order), keeping their order within a kind."""
    return sorted(names, key=lambda n: KINDS.index(model_kind(n)))


def model_label(name: str) -> str:
    """``amsrn · sentences`` for select boxes: the name first, then its kind. A sidebar select box shows
    about 33 characters, so nothing else fits (the perplexity is in :func:`model_help`); a multiselect
    chip holds about 20, so the multiselects show bare names (grouped in the same order)."""
    return f"{name} · {model_kind(name)}" if name else "— none —"


def model_help(name: str) -> str:
    """One line on a chosen model for a select box's help: its kind and headline perplexity."""
    if not name:
        return ""
    ppl = perplexity(name)
    return f"{name}: {model_kind(name)}" + (f", {ppl[0]} perplexity {ppl[1]:.1f} (lower is better)." if ppl else ".")


@st.cache_resource(show_spinner="Loading model…", max_entries=12)
def _load_folder(folder: str, version: int) -> Checkpoint:
    return api.load(Path(folder)).checkpoint  # eval mode; never mutated per request


@st.cache_resource(show_spinner="Loading uploaded model…", max_entries=4)
def _load_upload(digest: str, _weights: bytes, _meta: bytes) -> Checkpoint:
    return checkpoint_from_bytes(_weights, _meta)


def get_checkpoint(name: str) -> Checkpoint:
    """The loaded model ``name`` (once per process); :class:`UserError` if it cannot be loaded."""
    uploads = _uploads()
    if name in uploads:
        up = uploads[name]
        return _load_upload(up["digest"], up["weights"], up["meta_raw"])
    folder = checkpoint_folders().get(name)
    if folder is None:
        raise UserError(f"there is no model called {name!r}; available: {', '.join(model_names()) or 'none'}")
    try:
        return _load_folder(str(folder), _version(folder))
    except CheckpointError as exc:
        raise UserError(f"the {name} checkpoint cannot be loaded: {exc} (if it is being retrained, try again in a minute)") from None


def register_upload(weights_name: str, weights: bytes, meta_name: str, meta_raw: bytes) -> str:
    """Validate an uploaded ``.safetensors`` + ``config.json`` pair and make it selectable.

    Returns the model's name (``upload:<label>``); raises :class:`UserError` with the reason.
    """
    try:
        api.check_upload(weights_name, weights, meta_name, meta_raw, max_mb=MAX_UPLOAD_MB)
    except CheckpointError as exc:
        raise UserError(str(exc)) from None
    digest = hashlib.sha256(weights + b"\0" + meta_raw).hexdigest()[:16]
    try:
        ckpt = _load_upload(digest, weights, meta_raw)
    except CheckpointError as exc:
        raise UserError(f"this upload is not a usable vizlm checkpoint: {exc}") from None
    label = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(ckpt.meta.get("label") or ckpt.name))[:40]
    name = f"{UPLOAD_PREFIX}{label}-{digest[:6]}"
    meta = {k: v for k, v in ckpt.meta.items() if k != "vocab"}
    meta.update(vocab_size=len(ckpt.vocab), train_log=[], uploaded_as=[weights_name, meta_name])
    _uploads()[name] = {"digest": digest, "weights": weights, "meta_raw": meta_raw, "meta": meta}
    return name
