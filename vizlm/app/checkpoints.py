"""Which models the app can show, their metadata, and loading them once per process.

Models are named as in the URL: a checkpoint folder's name (``amsrn``) in one of the folders the app
lists (:func:`listing`: the checkpoints folder, :func:`vizlm.core.paths.checkpoints_dir`; the repository's
``checkpoints/`` when that is another folder; the finished runs in :func:`vizlm.core.paths.runs_dir`; the
folders of ``$VIZLM_EXTRA_CHECKPOINTS``, ``os.pathsep``-separated, for development), ``SOURCE:name``
when an earlier folder has that name already (``bundled:amsrn``), or ``upload:<label>`` for a checkpoint
uploaded in this browser session. Each is labelled by where it comes from (:data:`SOURCES`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from vizlm import api
from vizlm.core import paths
from vizlm.modeling.checkpoint import (
    META,
    WEIGHTS,
    Checkpoint,
    CheckpointError,
    checkpoint_from_bytes,
    meta_context,
    meta_corpus,
    meta_size,
    read_meta,
)
from vizlm.data.registry import CORPUS_LANGUAGE
from vizlm.data.vocab import Overlap, vocab_overlap
from vizlm.core.errors import VizlmError
from vizlm.models import ATTENTION_MODELS, SELF_ATTENTION_MODELS
from vizlm.reproduce.experiments import PAPERS, load_manifest, seed_groups
from vizlm.present.tables import BASELINE_FAMILY
from vizlm.data.text import han_share

UPLOAD_PREFIX = "upload:"
MAX_UPLOAD_MB = api.MAX_UPLOAD_MB  # weights; every bundled model is a few MB
# The model a page opens with, when bundled: the first of these (attention models, most telling first).
PREFERRED = ("amsrn", "kvp", "kv", "attention", "salton")


class UserError(VizlmError, ValueError):
    """Something the user can fix; shown as a message, never as a traceback."""


# Where a listed checkpoint comes from, as its label says: the repository's checkpoints/ (bundled), the user's
# checkpoints folder and $VIZLM_EXTRA_CHECKPOINTS (yours), a finished run in runs/ (run); uploads say "upload:".
SOURCES = ("bundled", "yours", "run")
UPLOAD_SOURCE = "upload"


@dataclass(frozen=True)
class Listing:
    """The checkpoints the app lists: name -> folder and name -> source, and a note per folder skipped."""

    folders: dict[str, Path] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _roots() -> list[tuple[Path, str]]:
    """The folders of checkpoint folders, in the order their names win: the checkpoints folder, the repository's
    ``checkpoints/`` (when the checkpoints folder is another), the runs."""
    own, repo = paths.checkpoints_dir(), paths.home() / "checkpoints"
    same = _same_folder(own, repo)
    return [(own, "bundled" if same else "yours"), *([] if same else [(repo, "bundled")]), (paths.runs_dir(), "run")]


def _stamps(root: Path) -> tuple[tuple[str, bool, bool, int], ...]:
    """(subfolder, has weights, has config, version) of each folder in ``root``: changes when one is added,
    removed or rewritten, so the cached scan follows the disk."""
    try:
        subs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    except OSError:
        return ()
    return tuple((p.name, (p / WEIGHTS).is_file(), (p / META).is_file(), _version(p)) for p in subs)


@st.cache_data(show_spinner=False, max_entries=32)
def _scan(root: str, source: str, stamps: tuple) -> tuple[list[str], list[str]]:
    """The checkpoint folders of ``root`` (names) and a note per broken one: weights without a config or a config
    without weights, a config that cannot be read; of the runs, only the finished ones (a test perplexity)."""
    found, notes = [], []
    for name, has_weights, has_meta, version in stamps:
        if not (has_weights or has_meta):
            continue  # not a checkpoint (a run's resume state alone: still training)
        where = Path(root) / name
        if not (has_weights and has_meta):
            notes.append(f"{where}: no {META if has_weights else WEIGHTS}")
            continue
        try:
            meta = _read_meta(str(where), version)
        except (OSError, ValueError) as exc:  # CheckpointError is a ValueError
            notes.append(f"{where}: {META} cannot be read ({str(exc)[:160]})")
            continue
        if source == "run" and "test_perplexity" not in (meta.get("metrics") or {}):
            continue  # a run still training (or cut): the Models page of a finished run only
        found.append(name)
    return found, notes


LISTING_TTL_S = 1.0  # a page run asks for the list dozens of times: it is read from disk at most this often
_listed: list = []  # [(key, time, Listing)]: the last listing


def _mtime(folder: Path) -> int:
    try:
        return folder.stat().st_mtime_ns
    except OSError:
        return 0


def listing() -> Listing:
    """Every checkpoint folder the app lists (module docstring), the first of a name keeping it plain. Read
    again when a listed folder gains or loses an entry or the folders change, else at most every
    :data:`LISTING_TTL_S` seconds (a checkpoint rewritten in place)."""
    roots = _roots()
    key = (tuple((str(r), src, _mtime(r)) for r, src in roots), os.environ.get("VIZLM_EXTRA_CHECKPOINTS", ""))
    if _listed and _listed[0][0] == key and time.monotonic() - _listed[0][1] < LISTING_TTL_S:
        return _listed[0][2]
    result = _read_listing(roots)
    _listed[:] = [(key, time.monotonic(), result)]
    return result


def _read_listing(roots: list[tuple[Path, str]]) -> Listing:
    folders, sources, skipped, seen = {}, {}, [], set()

    def add(name: str, folder: Path, source: str) -> None:
        real = folder.resolve()
        if real in seen:  # one folder reached twice (the checkpoints folder inside runs/, a repeated extra)
            return
        seen.add(real)
        key = name if name not in folders and not name.startswith(f"{UPLOAD_SOURCE}:") else f"{source}:{name}"
        if key not in folders:
            folders[key], sources[key] = folder, source

    for root, source in roots:
        stamps = _stamps(root)
        if not stamps:
            continue
        names, notes = _scan(str(root), source, stamps)
        skipped.extend(notes)
        for name in names:
            add(name, root / name, source)
    for entry in os.environ.get("VIZLM_EXTRA_CHECKPOINTS", "").split(os.pathsep):
        p = Path(entry) if entry else None
        if p and (p / WEIGHTS).is_file() and (p / META).is_file():
            add(p.name, p, "yours")
    return Listing(folders, sources, tuple(skipped))


def checkpoint_folders() -> dict[str, Path]:
    """Selectable checkpoints on disk, by name (:func:`listing`)."""
    return listing().folders


def source(name: str) -> str:
    """Where a model comes from: one of :data:`SOURCES`, or ``upload``."""
    if name in _uploads():
        return UPLOAD_SOURCE
    return listing().sources.get(name, "yours")


def skipped_notes() -> tuple[str, ...]:
    """A line per checkpoint folder the lists leave out because it is broken."""
    return listing().skipped


def _uploads() -> dict[str, dict]:
    return st.session_state.setdefault("_uploads", {})


OTHER_GROUP = "Other checkpoints"


@dataclass(frozen=True)
class BundledRun:
    """What ``experiments.toml`` says of a bundled checkpoint: the paper and protocol its run reproduces, the
    folder of the run's control where that is bundled too, and for a run that repeats a bundled one with
    another seed, that checkpoint's folder (``first_seed``)."""

    group: str
    control: str | None = None
    first_seed: str | None = None


@st.cache_data(show_spinner=False, ttl=60)
def _bundled_runs() -> dict[str, BundledRun]:
    """Checkpoint folder -> :class:`BundledRun` of its run in ``experiments.toml``."""
    try:
        runs = load_manifest()
    except (OSError, ValueError):
        return {}
    first = {}  # a bundled run -> the first bundled run of its seed group, when that is another
    for group in seed_groups(runs):
        bundled = [r for r in group if r.bundled]
        first.update({r.name: bundled[0].bundled for r in bundled[1:]})
    return {r.bundled: BundledRun(PAPERS[r.paper], runs[r.control].bundled if r.control else None, first.get(r.name))
            for r in runs.values() if r.bundled}


def _bundled_run(name: str) -> BundledRun:
    """:func:`_bundled_runs`' entry of a bundled checkpoint (by its folder's name); other models: none."""
    listed = listing()
    if listed.sources.get(name) != "bundled":
        return BundledRun(OTHER_GROUP)
    return _bundled_runs().get(listed.folders[name].name, BundledRun(OTHER_GROUP))


def model_group(name: str) -> str:
    """The paper and protocol a checkpoint reproduces, for grouping lists (yours, runs, uploads: other)."""
    return _bundled_run(name).group


def first_seed(name: str) -> str | None:
    """The bundled model that ``name`` repeats with another seed (``kv-doc`` for ``kv-doc-s2``: kept for the
    spread of attention across seeds), if it is one and that model is listed; else None."""
    folder = _bundled_run(name).first_seed
    return _bundled_names().get(folder) if folder else None


def _bundled_names() -> dict[str, str]:
    """A bundled checkpoint's folder name -> the name the app lists it by."""
    listed = listing()
    return {listed.folders[n].name: n for n in listed.folders if listed.sources[n] == "bundled"}


def model_seed(name: str) -> int | None:
    """The training seed a checkpoint records (None: not recorded)."""
    seed = (model_meta(name).get("train") or {}).get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def model_names() -> list[str]:
    """Every selectable model: the bundled ones grouped by paper and protocol (manifest order), then yours,
    then the runs (:data:`SOURCES`), then this session's uploads."""
    order = list(dict.fromkeys([*PAPERS.values(), OTHER_GROUP]))
    listed = listing()
    folders = sorted(listed.folders, key=lambda n: (SOURCES.index(listed.sources[n]), order.index(model_group(n))))
    return folders + list(_uploads())


def preferred_model(names: list[str]) -> str:
    """The model to open with: a preferred attention model, else any attention model, else the first."""
    return next((n for n in PREFERRED if n in names), next((n for n in names if has_attention(n)), names[0]))


def baseline_model(names: list[str], model: str | None = None) -> str | None:
    """What to compare ``model`` with: the control its run was measured against (the same start and
    training without attention, e.g. ``lstm-doc`` for ``kvp-doc``), else the LSTM baseline, if there is one trained
    on the same corpus."""
    control = _bundled_run(model).control if model is not None else None
    bundled = _bundled_names()
    own = trained_corpus(model) if model is not None else None
    return next((n for n in (bundled.get(control), bundled.get(BASELINE_FAMILY, BASELINE_FAMILY))
                 if n in names and n != model and (own is None or trained_corpus(n) == own)), None)


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


def self_attending(name: str) -> bool:
    """A Transformer: attention per layer and head, not in recurrent attention's slots (no slot effects)."""
    return family(name) in SELF_ATTENTION_MODELS


def attention_model_names(names: list[str] | None = None, self_attention: bool = False) -> list[str]:
    """The models with recurrent attention, and with ``self_attention`` the Transformers too."""
    return [n for n in (names if names is not None else model_names())
            if has_attention(n) or (self_attention and self_attending(n))]


def running_text_first(names: list[str]) -> list[str]:
    """Of ``names``, those that read running text (their windows reach across sentences, as in
    Daniluk et al.'s Fig. 3), else all of them."""
    return [n for n in names if context(n) == "document"] or names


def language(name: str) -> str | None:
    """The language a model reads: that of the corpus it was trained on (None: unknown)."""
    return CORPUS_LANGUAGE.get(meta_corpus(model_meta(name)))


def text_language(tokens: list[str]) -> str:
    """The language of ``tokens``: Chinese when most are Chinese characters (:func:`vizlm.data.text.han_share`), else
    English."""
    return "Chinese" if han_share(tokens) > 0.5 else "English"


def readers_of(tokens: list[str], names: list[str]) -> list[str]:
    """Of ``names``, the models in the language of ``tokens`` (Chinese when most are Chinese characters,
    :func:`vizlm.data.text.han_share`, else English), the one to open with (:func:`preferred_model`) first."""
    want = text_language(tokens)
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
    """How the model reads text: ``"sentence"`` or ``"document"`` (:data:`vizlm.inspect.reading.READINGS`)."""
    return meta_context(model_meta(name))


def window(name: str) -> int | None:
    """How many memory slots back the model may attend to (its window or memory), None: the whole sentence."""
    config = model_meta(name).get("config") or {}
    return config.get("window", config.get("memory"))


# The kinds a model list is grouped by, in its order: how a model reads English text, then the Chinese
# models and the runs beyond the papers. A select box shows each model as "name · kind" (model_label).
KINDS = ("sentences", "running text", "Chinese", "extension", "another seed")
KINDS_HELP = ("Grouped by kind: sentences (reads each sentence alone), running text (reads documents across "
              "sentence boundaries), Chinese, extension (runs beyond the papers; the Models page says how each reads), "
              "another seed (a bundled model trained again with another seed: how much its attention owes to the "
              "seed). A model that is not bundled says where it comes from: yours (your checkpoints folder) or run (a "
              "finished run in runs/). A long name is shown alone: this help says its kind and source.")


def model_kind(name: str) -> str:
    """The :data:`KINDS` entry of a model: another seed of a bundled model, Chinese (trained on Chinese text),
    an extension (a run of ``experiments.toml`` beyond the papers), else how it reads text; uploads and other
    checkpoints too."""
    if first_seed(name) is not None:
        return "another seed"
    if language(name) == "Chinese":
        return "Chinese"
    if model_group(name) == PAPERS["extension"]:
        return "extension"
    return "running text" if context(name) == "document" else "sentences"


def by_kind(names: list[str]) -> list[str]:
    """``names`` grouped by :func:`model_kind` (in :data:`KINDS` order), keeping their order within a kind."""
    return sorted(names, key=lambda n: KINDS.index(model_kind(n)))


# The characters a sidebar select box shows at the app's sidebar width (shell.SIDEBAR_PX): an option label
# longer than this is cut ("wikimini-kvp · yours · running te").
LABEL_CHARS = 38


def model_label(name: str) -> str:
    """``amsrn · sentences`` for select boxes: the name first, then its kind; a model that is not bundled says
    where it comes from between them (``wt2 · yours · running text``, ``· run ·``; an upload's name says it).
    When that is longer than a sidebar select box shows (:data:`LABEL_CHARS`), the name alone: its kind and
    source are in :func:`model_help` (with the perplexity), and the list keeps its grouping by kind. A
    multiselect chip shows the bare name (grouped in the same order)."""
    if not name:
        return "— none —"
    where = source(name)
    label = " · ".join([name, *([where] if where in SOURCES[1:] else []), model_kind(name)])
    return label if len(label) <= LABEL_CHARS else name


def model_help(name: str) -> str:
    """One line on a chosen model for a select box's help: its kind, where it comes from, its size (``k = 300,
    6.7 M parameters``) and headline perplexity."""
    if not name:
        return ""
    ppl = perplexity(name)
    size = meta_size(model_meta(name))
    folder = checkpoint_folders().get(name)
    where = {"bundled": "bundled", "yours": f"yours, {folder}", "run": f"a finished run, {folder}"}.get(source(name), "uploaded")
    kind = f"another seed of {first_seed(name)}" if first_seed(name) else model_kind(name)
    return (f"{name}: {kind} ({where})" + (f", {size}" if size else "")
            + (f", {ppl[0]} perplexity {ppl[1]:.1f} (lower is better)." if ppl else "."))


def trained_corpus(name: str) -> str | None:
    """The corpus a model was trained on (its ``config.json``), None when it does not say."""
    return meta_corpus(model_meta(name))


def corpus_overlap(name: str, corpus: str, split: str) -> Overlap:
    """The overlap of the model's vocabulary with a split (:func:`vizlm.data.vocab.vocab_overlap`, whose word counts
    are cached); :class:`UserError` when the model cannot be loaded."""
    return vocab_overlap(get_checkpoint(name).vocab, corpus, split)


_device = ["cpu"]  # where the server's models run: the app's --device (set_device), for every session


def set_device(device: str) -> None:
    """Run the server's models on ``device`` (``cpu``, ``cuda`` or ``auto``: :data:`vizlm.core.choices.DEVICES`);
    :class:`vizlm.core.errors.InputError` when this machine lacks it. Models load there from now on (the
    loaders' caches key on the device)."""
    _device[0] = str(api.check_device(device))


def device() -> str:
    """Where the server's models run (:func:`set_device`): ``cpu`` or ``cuda:N``."""
    return _device[0]


@st.cache_resource(show_spinner="Loading model…", max_entries=12)
def _load_folder(folder: str, version: int, device: str = "cpu") -> Checkpoint:
    ckpt = api.load(Path(folder)).checkpoint  # eval mode; never mutated per request
    ckpt.model.to(device)
    return ckpt


@st.cache_resource(show_spinner="Loading uploaded model…", max_entries=4)
def _load_upload(digest: str, _weights: bytes, _meta: bytes, device: str = "cpu") -> Checkpoint:
    ckpt = checkpoint_from_bytes(_weights, _meta)
    ckpt.model.to(device)
    return ckpt


def get_checkpoint(name: str) -> Checkpoint:
    """The loaded model ``name`` (once per process); :class:`UserError` if it cannot be loaded."""
    uploads = _uploads()
    if name in uploads:
        up = uploads[name]
        return _load_upload(up["digest"], up["weights"], up["meta_raw"], device())
    folder = checkpoint_folders().get(name)
    if folder is None:
        raise UserError(f"there is no model called {name!r}{api.known_models(name, model_names(), 'listed in the sidebar')}")
    try:
        return _load_folder(str(folder), _version(folder), device())
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
        ckpt = _load_upload(digest, weights, meta_raw, device())
    except CheckpointError as exc:
        raise UserError(f"this upload is not a usable vizlm checkpoint: {exc}") from None
    label = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(ckpt.meta.get("label") or ckpt.name))[:40]
    name = f"{UPLOAD_PREFIX}{label}-{digest[:6]}"
    meta = {k: v for k, v in ckpt.meta.items() if k != "vocab"}
    meta.update(vocab_size=len(ckpt.vocab), train_log=[], uploaded_as=[weights_name, meta_name])
    _uploads()[name] = {"digest": digest, "weights": weights, "meta_raw": meta_raw, "meta": meta}
    return name
