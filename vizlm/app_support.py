"""Streamlit glue shared by the app's pages: cached loaders, URL state, uploads, downloads.

UI glue only. Every number the app shows comes from :mod:`vizlm.analysis`,
:mod:`vizlm.corpus`, :mod:`vizlm.cases`, :mod:`vizlm.plots` and :mod:`vizlm.export`;
this module loads checkpoints once per process (``st.cache_resource``), caches
results per input (``st.cache_data``), reads and writes the Explorer's query
string, validates uploads and draws download buttons.

Models are named as in the URL: a bundled checkpoint's folder name (``amsrn``),
a folder from ``$VIZLM_EXTRA_CHECKPOINTS`` (``os.pathsep``-separated checkpoint
folders, for development), or ``upload:<label>`` for a checkpoint uploaded in
this browser session.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from vizlm.checkpoint import (
    META,
    WEIGHTS,
    Checkpoint,
    CheckpointError,
    bundled_checkpoints,
    bundled_dir,
    checkpoint_from_bytes,
    load_checkpoint,
)
from vizlm.models import ATTENTION_MODELS
from vizlm.plots import CATEGORICAL

# Families whose models return an attention matrix (lstm and ngram do not).
UPLOAD_PREFIX = "upload:"
EXPLORER = "pages/explorer.py"  # for st.page_link / st.switch_page
MAX_UPLOAD_MB = 50  # weights; every bundled model is a few MB
MAX_META_MB = 5  # config.json holds the 10k-word vocabulary (~150 kB)
MAX_TEXT_CHARS = 5000  # the Explorer's text box; analysis itself stops at 400 tokens
# One colour per model, in order: the Okabe & Ito (2008) colour-blind-safe palette of the plots.
MODEL_COLOURS = list(CATEGORICAL)
CORPORA = {  # label -> (corpus, split)
    "Brown test": ("brown", "test"),
    "Brown valid": ("brown", "valid"),
    "WSJ sample (out of domain)": ("wsj", "test"),
    "Sinica test (Chinese characters)": ("sinica", "test"),
}
# Published test perplexities, for the Models page (different corpora from ours:
# Liu & Lee use Penn Treebank with 50-unit models, Daniluk et al. 7,500 Wikipedia articles).
PAPER_RESULTS = [
    {"paper": "Liu & Lee (AMSRN)", "corpus": "Penn Treebank", "model": "LSTM", "family": "lstm", "test_perplexity": 143.31},
    {"paper": "Liu & Lee (AMSRN)", "corpus": "Penn Treebank", "model": "+ attention", "family": "amsrn", "test_perplexity": 134.09},
    {"paper": "Liu & Lee (AMSRN)", "corpus": "Penn Treebank", "model": "+ attention + selection", "family": "amsrn", "test_perplexity": 133.36},
    {"paper": "Liu & Lee (AMSRN)", "corpus": "Penn Treebank", "model": "+ att. + sel. + entropy", "family": "amsrn", "test_perplexity": 131.43},
    {"paper": "Daniluk et al.", "corpus": "Wikipedia (7.5k articles)", "model": "LSTM", "family": "lstm", "test_perplexity": 85.2},
    {"paper": "Daniluk et al.", "corpus": "Wikipedia (7.5k articles)", "model": "Attention", "family": "attention", "test_perplexity": 82.0},
    {"paper": "Daniluk et al.", "corpus": "Wikipedia (7.5k articles)", "model": "Key-Value", "family": "kv", "test_perplexity": 78.2},
    {"paper": "Daniluk et al.", "corpus": "Wikipedia (7.5k articles)", "model": "Key-Value-Predict", "family": "kvp", "test_perplexity": 75.8},
    {"paper": "Daniluk et al.", "corpus": "Wikipedia (7.5k articles)", "model": "4-gram RNN", "family": "ngram", "test_perplexity": 75.9},
]


class UserError(ValueError):
    """Something the user can fix; shown as a message, never as a traceback."""


# --------------------------------------------------------------------------- navigation
def route_through_app() -> None:
    """Call first in every ``pages/*.py``: make sure the page runs inside ``app.py``'s ``st.navigation``.

    A folder called ``pages/`` beside the main script makes Streamlit start in its old
    multipage mode, in which the first request of a fresh server for ``/compare`` (and
    every run of ``AppTest`` on a page) executes ``pages/compare.py`` alone: no menu of
    ours, no page config. Here we switch that mode off and run ``app.py`` in place of
    this execution: its ``st.navigation`` runs this same page, within the same script
    run (widget events such as a click are kept), and the outer execution stops.
    ``PagesManager`` is internal to Streamlit; without it nothing happens.
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
        from streamlit.runtime.scriptrunner import get_script_run_ctx
    except ImportError:  # pragma: no cover - a future Streamlit without them
        return
    ctx = get_script_run_ctx()
    if not PagesManager.uses_pages_directory or ctx is None:
        return
    PagesManager.uses_pages_directory = False
    import runpy

    runpy.run_path(ctx.main_script_path, run_name="__main__")
    st.stop()


# --------------------------------------------------------------------------- checkpoints
def checkpoint_folders() -> dict[str, Path]:
    """Selectable checkpoints on disk: bundled ones, then ``$VIZLM_EXTRA_CHECKPOINTS``."""
    folders = {name: bundled_dir() / name for name in bundled_checkpoints()}
    for entry in os.environ.get("VIZLM_EXTRA_CHECKPOINTS", "").split(os.pathsep):
        p = Path(entry) if entry else None
        if p and (p / WEIGHTS).is_file() and (p / META).is_file():
            folders.setdefault(p.name, p)
    return folders


def _uploads() -> dict[str, dict]:
    return st.session_state.setdefault("_uploads", {})


def model_names() -> list[str]:
    """Every selectable model: checkpoints on disk, then this session's uploads."""
    return list(checkpoint_folders()) + list(_uploads())


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
    doc = json.loads((Path(folder) / META).read_text(encoding="utf-8"))
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
    except (OSError, json.JSONDecodeError):
        return {}


def family(name: str) -> str:
    return model_meta(name).get("model", "?")


def has_attention(name: str) -> bool:
    return family(name) in ATTENTION_MODELS


def perplexity(name: str) -> tuple[str, float] | None:
    """The headline perplexity of a checkpoint: (split, value), test preferred."""
    metrics = model_meta(name).get("metrics", {})
    for key in ("test_perplexity", "valid_perplexity"):
        v = metrics.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v):
            return key.split("_")[0], float(v)
    return None


def model_label(name: str) -> str:
    """``amsrn · test ppl 140.3`` for select boxes."""
    if not name:
        return "— none —"
    ppl = perplexity(name)
    tag = " (uploaded)" if name.startswith(UPLOAD_PREFIX) else ""
    return f"{name}{tag} · {ppl[0]} ppl {ppl[1]:.1f}" if ppl else f"{name}{tag}"


@st.cache_resource(show_spinner="Loading model…", max_entries=12)
def _load_folder(folder: str, version: int) -> Checkpoint:
    return load_checkpoint(folder)  # eval mode; never mutated per request


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


# --------------------------------------------------------------------------- uploads
def register_upload(weights_name: str, weights: bytes, meta_name: str, meta_raw: bytes) -> str:
    """Validate an uploaded ``.safetensors`` + ``config.json`` pair and make it selectable.

    Returns the model's name (``upload:<label>``); raises :class:`UserError` with the reason.
    """
    if not weights_name.lower().endswith(".safetensors"):
        raise UserError(f"{weights_name!r} is not a .safetensors file; vizlm loads weights only in that format")
    if not meta_name.lower().endswith(".json"):
        raise UserError(f"{meta_name!r} is not a .json file; upload the checkpoint's config.json")
    if len(weights) > MAX_UPLOAD_MB * 2**20:
        raise UserError(f"the weights file is {len(weights) / 2**20:.0f} MB; uploads are limited to {MAX_UPLOAD_MB} MB")
    if len(meta_raw) > MAX_META_MB * 2**20:
        raise UserError(f"the JSON file is {len(meta_raw) / 2**20:.0f} MB; it is limited to {MAX_META_MB} MB")
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


def upload_widget() -> None:
    """Sidebar expander: upload a checkpoint pair; errors are shown, never raised."""
    with st.sidebar.expander("Upload a checkpoint", icon=":material/upload:"):
        st.caption(
            f"A `model.safetensors` + `config.json` pair written by `vizlm train` "
            f"(at most {MAX_UPLOAD_MB} MB). Nothing is unpickled; every tensor is checked."
        )
        w = st.file_uploader("Weights (.safetensors)", key="up_weights", max_upload_size=MAX_UPLOAD_MB + 1)
        m = st.file_uploader("Config (.json)", key="up_meta", max_upload_size=MAX_META_MB)
        if w is None or m is None:
            return
        sig = (w.file_id, m.file_id)
        if st.session_state.get("_upload_sig") == sig:
            result = st.session_state.get("_upload_result")
        else:
            try:
                result = ("ok", register_upload(w.name, w.getvalue(), m.name, m.getvalue()))
            except UserError as exc:
                result = ("error", str(exc))
            st.session_state["_upload_sig"], st.session_state["_upload_result"] = sig, result
        if result and result[0] == "ok":
            st.success(f"Loaded as **{md_escape(result[1])}**; pick it in the model list.", icon=":material/check:")
        elif result:
            st.error(result[1], icon=":material/error:")


# --------------------------------------------------------------------------- cached results
@st.cache_data(show_spinner=False, max_entries=256)
def _analyze_text(name: str, key: str, text: str):
    from vizlm.analysis import analyze

    return analyze(get_checkpoint(name), text)


def analyze_text(name: str, text: str):
    """:func:`vizlm.analysis.analyze` through the cache; :class:`UserError` for bad input."""
    from vizlm.analysis import AnalysisError

    try:
        return _analyze_text(name, model_key(name), text)
    except AnalysisError as exc:
        raise UserError(str(exc)) from None


@st.cache_data(show_spinner=False, max_entries=1024)
def _analyze_corpus_sentence(name: str, key: str, corpus: str, split: str, index: int):
    from vizlm.analysis import analyze_tokens

    c = load_corpus_cached(corpus, split)
    surfaces = [w.replace("_", " ") for w in c.originals[index]]
    return analyze_tokens(get_checkpoint(name), c.sentences[index], surfaces, tags=c.tags[index])


def analyze_corpus_sentence(name: str, corpus: str, split: str, index: int):
    """:func:`vizlm.analysis.analyze_tokens` on sentence ``index`` of a split (gold tags), cached."""
    return _analyze_corpus_sentence(name, model_key(name), corpus, split, index)


@st.cache_resource(show_spinner="Reading corpus…")
def load_corpus_cached(corpus: str, split: str):
    from vizlm.data import load_corpus

    return load_corpus(corpus, split)


def sentence_text(corpus: str, split: str, index: int) -> str:
    """A corpus sentence as readable text: its original tokens, space-separated, with the corpus's
    ````/``''`` quote tokens written as ``"`` glued to their word, so the tokenizer reads them back
    as the same tokens."""
    out: list[str] = []
    opening = False
    for w in load_corpus_cached(corpus, split).originals[index]:
        if w == "``":
            opening = True  # glued to the next word: "Nobody
        elif w == "''" and out:
            out[-1] += '"'  # glued to the previous word: evacuate."
        else:
            out.append(('"' if opening else "") + w.replace("_", " "))
            opening = False
    return " ".join(out)


@st.cache_data(show_spinner=False)
def example_sentences(corpus: str, split: str, count: int = 12, min_len: int = 8, max_len: int = 25) -> list[tuple[str, str]]:
    """The first ``count`` sentences of a split with ``min_len..max_len`` tokens: ``[(id, text)]``."""
    c = load_corpus_cached(corpus, split)
    out = []
    for i, words in enumerate(c.originals):
        if min_len <= len(words) <= max_len:
            out.append((c.ids[i], sentence_text(corpus, split, i)))
            if len(out) == count:
                break
    return out


def sentence_index(corpus: str, split: str, sentence_id: str) -> int | None:
    ids = load_corpus_cached(corpus, split).ids
    lookup = st.session_state.setdefault(f"_ids_{corpus}_{split}", {})
    if not lookup:
        lookup.update({sid: i for i, sid in enumerate(ids)})
    return lookup.get(sentence_id)


class StreamlitProgress:
    """A ``progress(fraction)`` callback (as :mod:`vizlm.corpus` takes) drawing a progress bar."""

    def __init__(self, text: str):
        self.text = text
        self.bar = None

    def __call__(self, fraction: float) -> None:
        frac = min(1.0, max(0.0, float(fraction)))
        label = f"{self.text} · {frac:.0%}"
        if self.bar is None:
            self.bar = st.progress(frac, text=label)
        else:
            self.bar.progress(frac, text=label)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.empty()


# --------------------------------------------------------------------------- Explorer URL state
@dataclass
class ExplorerState:
    model: str
    compare: str | None
    text: str
    threshold: float
    top_k: int | None
    target: int | None

    def query(self) -> dict[str, str]:
        q = {"model": self.model}
        if self.compare:
            q["compare"] = self.compare
        q["text"] = self.text[:MAX_TEXT_CHARS]
        if self.top_k:
            q["topk"] = str(self.top_k)
        else:
            q["threshold"] = f"{self.threshold:g}"
        if self.target is not None:
            q["target"] = str(self.target)
        return q


def explorer_query(model: str, text: str, compare: str | None = None, target: int | None = None, threshold: float = 0.2) -> dict[str, str]:
    """Query parameters that open ``text`` in the Explorer (for ``st.page_link``)."""
    return ExplorerState(model, compare, text, threshold, None, target).query()


def parse_query(params: dict, names: list[str], default_model: str, default_compare: str | None, default_text: str) -> tuple[ExplorerState, list[str]]:
    """Validate the Explorer's query string; unknown or malformed values fall back, with a note each."""
    notes = []
    model = params.get("model", default_model)
    if model not in names:
        notes.append(f"model {model!r} in the link is not available here; showing {default_model}")
        model = default_model
    compare = params.get("compare", default_compare if "model" not in params else None)
    if compare in ("", "none"):
        compare = None
    if compare is not None and (compare not in names or compare == model):
        if compare not in names:
            notes.append(f"comparison model {compare!r} in the link is not available here")
        compare = None
    text = params.get("text", default_text)
    if len(text) > MAX_TEXT_CHARS:
        notes.append(f"the text in the link was cut to {MAX_TEXT_CHARS:,} characters")
        text = text[:MAX_TEXT_CHARS]
    threshold, top_k, target = 0.2, None, None
    try:
        threshold = min(1.0, max(0.0, float(params.get("threshold", 0.2))))
        if not math.isfinite(threshold):
            raise ValueError
    except ValueError:
        notes.append("the threshold in the link is not a number between 0 and 1; using 0.2")
        threshold = 0.2
    if "topk" in params:
        try:
            top_k = min(10, max(1, int(params["topk"])))
        except ValueError:
            notes.append("top-k in the link is not a whole number; using the threshold")
    if "target" in params:
        try:
            target = max(0, int(params["target"]))
        except ValueError:
            notes.append("the selected word in the link is not a number; picking one")
    return ExplorerState(model, compare, text, threshold, top_k, target), notes


# --------------------------------------------------------------------------- rendering helpers
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>$:=])")


def md_escape(text: str) -> str:
    """Escape Markdown (and the colon of Streamlit's ``:icon:`` syntax) so text shows literally."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))


def esc(text) -> str:
    return html.escape(str(text), quote=True)




def download_row(items: list[tuple[str, Callable[[], bytes] | bytes, str, str]], key: str) -> None:
    """One row of download buttons: ``(label, data or a callable making it, file name, mime)``.

    Callables run only when the button is clicked, so PNG/SVG rendering costs nothing up front.
    """
    with st.container(horizontal=True, gap="small"):
        for label, data, fname, mime in items:
            st.download_button(label, data=data, file_name=fname, mime=mime, key=f"dl_{key}_{label}",
                               icon=":material/download:", on_click="ignore", help=f"download {fname}")


def safe_filename(text: str, default: str = "vizlm") -> str:
    stem = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:40]
    return stem or default


def show_error(exc: BaseException) -> None:
    """A message for the user instead of a traceback."""
    st.error(str(exc) or exc.__class__.__name__, icon=":material/error:")




def write_explorer_query(state: ExplorerState) -> None:
    """Mirror the Explorer's state into the URL (only when it changed, so history stays clean)."""
    q = state.query()
    if st.query_params.to_dict() != q:
        st.query_params.from_dict(q)
    st.session_state["_qs_written"] = q


@st.cache_data(show_spinner=False, max_entries=256)
def _analysis_dict(name: str, key: str, text: str, threshold: float | None, top_k: int | None) -> dict:
    from vizlm.export import analysis_dict as export_dict

    return export_dict(_analyze_text(name, key, text), threshold=threshold, top_k=top_k)


def analysis_dict(name: str, text: str, threshold: float | None, top_k: int | None) -> dict:
    """``SentenceAnalysis.to_dict`` (highlights and case labels for every target), cached."""
    return _analysis_dict(name, model_key(name), text, threshold, top_k)


# --------------------------------------------------------------------------- charts and downloads
def show_chart(chart, width: str = "content") -> None:
    """Draw an Altair chart as designed (``theme=None``): Streamlit's theme squashes charts with a
    fixed height, and without it the screen matches the PNG / SVG / HTML downloads."""
    st.altair_chart(chart, width=width, theme=None)


def chart_downloads(chart, stem: str, key: str, frame=None, title: str = "vizlm") -> None:
    """PNG / SVG / standalone HTML of an Altair chart (+ CSV / JSON of ``frame``), made on click."""
    from vizlm.export import MIME, chart_bytes, export_frame

    items = [(fmt.upper(), (lambda f=fmt: chart_bytes(chart, f, title=title)), f"{stem}.{fmt}", MIME[fmt]) for fmt in ("png", "svg", "html")]
    if frame is not None:
        items += [(fmt.upper(), (lambda f=fmt: export_frame(frame, f)), f"{stem}.{fmt}", MIME[fmt]) for fmt in ("csv", "json")]
    download_row(items, key)


def analysis_downloads(sa, threshold: float | None, top_k: int | None, key: str) -> None:
    """The five export formats of one analysis (:func:`vizlm.export.export_analysis`)."""
    from vizlm.export import FORMATS, MIME, export_analysis

    stem = safe_filename(f"{sa.model}-{sa.text[:30]}")
    download_row([(fmt.upper(), (lambda f=fmt: export_analysis(sa, f, threshold=threshold, top_k=top_k)), f"{stem}.{fmt}", MIME[fmt])
                  for fmt in FORMATS], key)


def highlight_page(sa, target: int, threshold: float | None, top_k: int | None) -> bytes:
    """A standalone HTML page: the highlighted sentence above the attention heat map."""
    from vizlm.export import chart_html
    from vizlm.plots import attention_heatmap, highlighted_html

    return chart_html(attention_heatmap(sa, threshold=threshold, top_k=top_k), title=f"vizlm: {sa.model}",
                      body_html=highlighted_html(sa, target, threshold=threshold, top_k=top_k)).encode("utf-8")


def render_heatmaps(analyses: dict, threshold: float | None, top_k: int | None) -> None:
    from vizlm.plots import attention_heatmap

    shown = {n: sa for n, sa in analyses.items() if sa.attention is not None}
    if not shown:
        st.info("None of the chosen models has attention (LSTM and N-gram RNN predict from their state alone).", icon=":material/info:")
        return
    st.caption("Rows: the word being predicted; columns: the memory slots it may attend to (the start state and every earlier "
               "word). Brighter = more attention; outlined cells are the highlighted ones. Hover a cell for its weight. "
               "Both models use the same colour scale.")
    cols = st.columns(len(shown))
    for col, (name, sa) in zip(cols, shown.items()):
        with col:
            show_chart(attention_heatmap(sa, threshold=threshold, top_k=top_k))
            analysis_downloads(sa, threshold, top_k, key=f"heat_{name}")


def render_surprisal(analyses: dict) -> None:
    import pandas as pd

    from vizlm.plots import surprisal_chart

    sas = list(analyses.values())
    st.caption("Surprisal = −log₂ P(word): how unexpected each word was to each model (lower is better). "
               "Where the attention model's bar is shorter, reading earlier words helped.")
    chart = surprisal_chart(sas)
    show_chart(chart)
    frame = pd.DataFrame({"position": range(len(sas[0].targets)), "word": sas[0].targets})
    for name, sa in analyses.items():
        if len(sa.targets) == len(frame):
            frame[f"surprisal_bits_{name}"] = sa.surprisal
    chart_downloads(chart, safe_filename("surprisal-" + sas[0].text[:30]), "surprisal", frame)


def render_gates(analyses: dict) -> None:
    import pandas as pd

    from vizlm.plots import gates_chart

    gated = {n: sa for n, sa in analyses.items() if sa.gates is not None}
    if not gated:
        st.info("Only AMSRN models have memory-selection gates. Pick an `amsrn` checkpoint to see them.", icon=":material/info:")
        return
    st.caption("AMSRN's selection gate g₁ (Liu & Lee) decides which hidden units of each memory slot take part in "
               "the attention score: values near 1 keep a unit, near 0 mask it.")
    dims = st.toggle("Show every hidden unit", key="gate_dims")
    for name, sa in gated.items():
        chart = gates_chart(sa, dims=dims)
        show_chart(chart)
        frame = pd.DataFrame(sa.gates, columns=[f"unit_{i}" for i in range(sa.gates.shape[1])])
        frame.insert(0, "predicted", sa.targets[: len(frame)])
        chart_downloads(chart, safe_filename(f"gates-{name}-{sa.text[:20]}"), f"gates_{name}", frame)


def render_data(analyses: dict, docs: dict, target: int, threshold: float | None, top_k: int | None) -> None:
    from vizlm.plots import sentence_strip_html

    st.caption("Every predicted word with its probability (bar colour: surprisal, brighter = more surprising). "
               "Downloads: the attention heat map (PNG, SVG, standalone HTML) and all numbers (CSV, JSON).")
    for name, sa in analyses.items():
        st.markdown(f"**{md_escape(name)}** · perplexity {sa.perplexity:.1f}")
        st.html(sentence_strip_html(sa, selected=target))
        analysis_downloads(sa, threshold, top_k, key=f"data_{name}")
        if sa.attention is not None:
            st.download_button("Highlighted sentence + heat map (standalone HTML)", data=lambda sa=sa: highlight_page(sa, target, threshold, top_k),
                               file_name=safe_filename(f"{name}-highlight-{sa.text[:20]}") + ".html", mime="text/html",
                               key=f"dl_hl_{name}", icon=":material/download:", on_click="ignore")

# Streamlit badge colours per case label (distinct hues; the label is always written out too).
LABEL_COLOURS = {"trigger": "blue", "causal": "orange", "phrase": "green", "grammar": "violet"}


# --------------------------------------------------------------------------- Models page
def training_curve_chart(name: str, log: list[dict]):
    """Train and validation perplexity per epoch from ``train_log.jsonl`` (log scale)."""
    import altair as alt
    import pandas as pd

    rows = [{"epoch": e.get("epoch"), "split": split, "perplexity": e.get(f"{split}_perplexity")}
            for e in log for split in ("train", "valid")]
    df = pd.DataFrame(rows).dropna()
    df = df.drop_duplicates(["epoch", "split"], keep="last")  # a resumed run logs an epoch again
    # fit the axis to the data: a run started from a trained model moves only a few points
    domain = [float(df["perplexity"].min()) * 0.97, float(df["perplexity"].max()) * 1.03] if len(df) else None
    lines = alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("epoch:Q", title="epoch", axis=alt.Axis(tickMinStep=1, format="d")),
        y=alt.Y("perplexity:Q", title="perplexity", scale=alt.Scale(type="log", domain=domain, nice=False) if domain else alt.Scale(type="log")),
        color=alt.Color("split:N", title=None, scale=alt.Scale(domain=["train", "valid"], range=MODEL_COLOURS[:2]),
                        legend=alt.Legend(orient="right", title=None)),
        strokeDash=alt.StrokeDash("split:N", legend=None),
        tooltip=["epoch:Q", "split:N", alt.Tooltip("perplexity:Q", format=".1f")],
    )
    # a log that continues an earlier run marks its epochs with "stage": draw where it starts
    starts = [{"epoch": e["epoch"] - 0.5, "stage": str(e["stage"])} for prev, e in zip([{}] + log, log)
              if e.get("stage") and e.get("stage") != prev.get("stage") and isinstance(e.get("epoch"), (int, float))]
    if starts:
        rule = alt.Chart(pd.DataFrame(starts)).mark_rule(strokeDash=[2, 2], color="#888").encode(
            x="epoch:Q", tooltip=[alt.Tooltip("stage:N", title="from here")])
        lines = lines + rule
    return lines.properties(width="container", height=180, padding={"top": 10, "left": 5, "right": 5, "bottom": 5},
                            title=alt.Title(f"{name}: training curve", anchor="start"))


def models_frame(names: list[str]):
    """One row per checkpoint: family, corpus, parameters, perplexities and the ratio to the LSTM."""
    import pandas as pd

    rows = []
    for name in names:
        meta = model_meta(name)
        m = meta.get("metrics", {})
        rows.append({
            "model": name,
            "family": meta.get("model", "?"),
            "corpus": (meta.get("corpus") or {}).get("name", "?"),
            "parameters": meta.get("parameters"),
            "epochs": m.get("epochs_trained"),
            "valid ppl": m.get("valid_perplexity"),
            "test ppl": m.get("test_perplexity"),
            "WSJ ppl": m.get("wsj_perplexity"),
        })
    df = pd.DataFrame(rows)
    base = df.loc[df["family"] == "lstm", "test ppl"].dropna()
    df["test ppl vs LSTM"] = df["test ppl"] / base.iloc[0] - 1 if len(base) else None
    return df


def paper_frame():
    """The papers' test perplexities with each model's change relative to the paper's own LSTM."""
    import pandas as pd

    df = pd.DataFrame(PAPER_RESULTS)
    lstm = df[df["family"] == "lstm"].set_index("paper")["test_perplexity"]
    df["vs LSTM"] = df["test_perplexity"] / df["paper"].map(lstm) - 1
    return df


# --------------------------------------------------------------------------- widget defaults
def keep_choice(key: str, options: list, default) -> None:
    """Give widget ``key`` its default through Session State (never both a default and a state,
    which Streamlit warns about), and reset it when its value is no longer among ``options``."""
    if st.session_state.get(key) not in options:
        st.session_state[key] = default


def keep_choices(key: str, options: list, default: list) -> None:
    """:func:`keep_choice` for multi-selects: drop values that are no longer options."""
    if key not in st.session_state:
        st.session_state[key] = list(default)
    else:
        st.session_state[key] = [v for v in st.session_state[key] if v in options]


# --------------------------------------------------------------------------- corpus pages
def corpus_picker(key: str = "corpus", default: str = "Brown test", help: str | None = None) -> tuple[str, str, str]:
    """Sidebar select box of the processed splits: (label, corpus, split)."""
    labels = list(CORPORA)
    wanted = st.query_params.get("corpus")  # e.g. ?corpus=wsj-test, for a shared link
    by_slug = {f"{c}-{s}": lab for lab, (c, s) in CORPORA.items()}
    if key not in st.session_state and wanted in by_slug:
        st.session_state[key] = by_slug[wanted]
    keep_choice(key, labels, default)
    label = st.selectbox("Corpus", labels, key=key,
                         help=help or "Brown test/valid: held-out documents of the training corpus; WSJ: out of domain.")
    return (label, *CORPORA[label])


SAMPLE_SIZES = {"first 200 sentences": 200, "first 1,000 sentences": 1000, "whole split": None}


def sample_picker(key: str = "sample", default: str = "whole split") -> int | None:
    """How many sentences of the split to use (the whole split is computed once, then cached)."""
    labels = list(SAMPLE_SIZES)
    wanted = st.query_params.get("n")  # ?n=200 / 1000 / all, for a shared link
    by_n = {str(v or "all"): lab for lab, v in SAMPLE_SIZES.items()}
    if key not in st.session_state and wanted in by_n:
        st.session_state[key] = by_n[wanted]
    keep_choice(key, labels, default)
    label = st.selectbox("Sentences", labels, key=key,
                         help="The whole split takes a while the first time (progress is shown), then comes from the cache.")
    return SAMPLE_SIZES[label]


def with_progress(fn: Callable, *args, text: str, **kwargs):
    """Call a corpus function with a progress bar if it takes ``progress=``, else under a spinner."""
    import inspect

    if "progress" in inspect.signature(fn).parameters:
        bar = StreamlitProgress(text + " (first time only: the result is cached)")
        bar(0.0)  # show the bar at once: the first step can take a while
        try:
            return fn(*args, progress=bar, **kwargs)
        finally:
            bar.close()
    with st.spinner(text + " (first time only: the result is cached)…", show_time=True):
        return fn(*args, **kwargs)


def attention_model_names(names: list[str] | None = None) -> list[str]:
    return [n for n in (names if names is not None else model_names()) if has_attention(n)]


def attention_models_picker(title: str, key: str, none_message: str) -> list[str]:
    """Sidebar header and a multiselect of the attention models (all chosen at first); stops the page if none."""
    attn = attention_model_names()
    st.header(title, anchor=False)
    if not attn:
        st.error(none_message, icon=":material/error:")
        st.stop()
    keep_choices(key, attn, attn)
    return st.multiselect("Models", attn, key=key, format_func=model_label)


def case_counts_chart(frame):
    """Grouped bars: share of highlighted pairs per case label, one colour per model.

    ``frame``: model, label, count, share (rows labelled ``unlabelled`` are left out).
    """
    import altair as alt

    frame = frame[frame["label"] != "unlabelled"]
    models = list(dict.fromkeys(frame["model"]))
    labels = ["trigger", "causal", "phrase", "grammar"]
    return alt.Chart(frame).mark_bar().encode(
        x=alt.X("label:N", title=None, sort=labels, axis=alt.Axis(labelAngle=0, labelFontSize=12, labelOverlap=False)),
        xOffset=alt.XOffset("model:N", sort=models),
        y=alt.Y("share:Q", title="share of highlighted pairs", axis=alt.Axis(format="%")),
        color=alt.Color("model:N", scale=alt.Scale(domain=models, range=MODEL_COLOURS[: len(models)]), title="model"),
        tooltip=["model:N", "label:N", alt.Tooltip("count:Q", format=",", title="pairs"),
                 alt.Tooltip("share:Q", format=".1%", title="share of pairs")],
    ).properties(width=alt.Step(max(64, 28 * len(models)), **{"for": "position"}), height=260,
                 title=alt.Title("Case labels per model", subtitle="share of each model's highlighted pairs", anchor="start"))


def render_position_stats(stats, chart_fn, stem: str, key: str) -> None:
    """The Daniluk-style plot of a :mod:`vizlm.corpus` position result, its entropy, and downloads."""
    if stats.skipped:
        st.caption("Without attention, left out: " + ", ".join(md_escape(n) for n in stats.skipped))
    if stats.frame.empty:
        st.info("None of the chosen models has attention.", icon=":material/info:")
        return
    cols = st.columns(min(4, max(1, len(stats.entropy))))
    for i, (name, value) in enumerate(stats.entropy.items()):
        beyond = stats.beyond.get(name)
        beyond = None if beyond is None else max(0.0, beyond)  # float noise must not print as "-0%"
        cols[i % len(cols)].metric(
            f"{name}: attention entropy", f"{value:.2f} nats",
            delta=f"{beyond:.0%} of the weight beyond the window" if beyond is not None else None, delta_color="off",
            delta_arrow="off",
            help="Mean entropy of the attention rows: 0 = all weight on one slot, log(n) = spread evenly over n slots. "
                 "Below: the weight that falls further back than the window shown.")
    chart = chart_fn(stats.frame)
    st.html(legend_html(list(dict.fromkeys(stats.frame["model"].astype(str)))))
    show_chart(chart)
    chart_downloads(chart, stem, key, stats.frame)


def sentence_positions_chart(frame, name: str, text: str):
    """One sentence: attention weight at each offset back (x, most recent right) for every predicted word (y).

    ``frame`` is :func:`vizlm.corpus.sentence_positions` (target, word, offset, weight, attended);
    colours on the attention scale of :mod:`vizlm.plots`.
    """
    import altair as alt

    from vizlm.plots import SCHEME, WEIGHT_DOMAIN

    df = frame.copy()
    df["position"] = -df["offset"].astype(int)
    df["row"] = [f"{t + 2} {w}" for t, w in zip(df["target"], df["word"])]
    rows = list(dict.fromkeys(df["row"]))
    return alt.Chart(df).mark_rect().encode(
        x=alt.X("position:O", title="position relative to the predicted word (−1 = most recent)"),
        y=alt.Y("row:N", title="predicted word", sort=rows),
        color=alt.Color("weight:Q", title="attention", scale=alt.Scale(scheme=SCHEME, domain=list(WEIGHT_DOMAIN))),
        tooltip=[alt.Tooltip("word:N", title="predicting"), alt.Tooltip("attended:N", title="attended word"),
                 alt.Tooltip("offset:Q", title="words back"), alt.Tooltip("weight:Q", format=".3f")],
    ).properties(width=alt.Step(28), height=alt.Step(16),
                 title=alt.Title(f"{name}: attention by position, word by word",
                                 subtitle=text if len(text) <= 60 else text[:59] + "…", anchor="start"))


def legend_html(models: list[str]) -> str:
    """A one-line colour key for charts that colour models in order (:data:`vizlm.plots.CATEGORICAL`)."""
    from vizlm.plots import CATEGORICAL

    items = "".join(
        f'<span style="margin-right:1.2em"><span style="display:inline-block;width:.8em;height:.8em;border-radius:50%;'
        f'background:{CATEGORICAL[i % len(CATEGORICAL)]};margin-right:.35em;vertical-align:middle"></span>{esc(m)}</span>'
        for i, m in enumerate(models))
    return f'<div style="font-size:.9em;color:#444">{items}</div>'
