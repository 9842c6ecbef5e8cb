"""Sidebar pickers, widget defaults, messages, charts and download buttons shared by the pages."""

from __future__ import annotations

import re
from collections.abc import Callable

import streamlit as st

from vizlm.app.checkpoints import (
    KINDS_HELP,
    MAX_UPLOAD_MB,
    UserError,
    attention_model_names,
    by_kind,
    corpus_overlap,
    first_seed,
    language,
    one_language,
    register_upload,
    trained_corpus,
)
from vizlm.inspect.analysis import head_words
from vizlm.inspect.case_rules import LABELS
from vizlm.inspect.highlight import Setting
from vizlm.modeling.checkpoint import MAX_META_BYTES
from vizlm.data.registry import CORPORA, CORPUS_LANGUAGE, CORPUS_TITLES, HELD_OUT, DataError, corpus_card, user_corpora
from vizlm.present.export import FORMATS, MIME, chart_bytes, export_analysis, export_frame, safe_filename
from vizlm.present.links import CompareState, ExplorerState, head_code, parse_compare_query, parse_head_code
from vizlm.present.style import CATEGORICAL
from vizlm.present.tables import card_line

# Streamlit badge colours per case label (distinct hues; the label is always written out too).
LABEL_BADGES = dict(zip(LABELS, ("blue", "orange", "green", "violet")))
SAMPLE_SIZES = {"first 200 sentences": 200, "first 1,000 sentences": 1000, "whole split": None}

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>$:=])")
# Streamlit's Markdown shows a free-standing "--", "->", "<-", "<->", ">=", "<=", "~=" as "—", "→", "←", "↔",
# "≥", "≤", "≈", after unescaping, so a backslash does not keep them: the Brown token "--" read "—" in the word
# picker and "--" in the running text and the heat map. An invisible word joiner between the two characters does.
_MD_TYPOGRAPHY = re.compile(r"(?<=[-<>~])(?=[->=])")


def md_escape(text: str) -> str:
    """Escape Markdown (and the colon of Streamlit's ``:icon:`` syntax, and its typographic replacements)
    so text shows literally: a token reads the same in Markdown as in the running text and the heat map."""
    return _MD_SPECIAL.sub(r"\\\1", _MD_TYPOGRAPHY.sub("\u2060", str(text)))


def unique_labels(labels: list[str]) -> list[str]:
    """``labels`` made distinct by invisible word joiners (U+2060), the n-th repeat getting n of them.

    Streamlit's pills and select boxes send the chosen option's label back and look the option up
    by it: with two equal labels ("the" twice in a text) a click on the first selects the last one,
    and a selection set in code (a link's ``?target=``) comes back as the last one on the next run."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        out.append(label + "\u2060" * seen.get(label, 0))
        seen[label] = seen.get(label, 0) + 1
    return out


def label_badge(label: str) -> str:
    """A case label as a coloured Streamlit Markdown badge."""
    return f":{LABEL_BADGES.get(label, 'gray')}-badge[{md_escape(label)}]"


def show_error(exc: BaseException | str) -> None:
    """A message for the user instead of a traceback (an error, or its words)."""
    st.error(str(exc) or exc.__class__.__name__, icon=":material/error:")


def show_chart(chart, width: str = "content") -> None:
    """Draw an Altair chart as designed (``theme=None``): Streamlit's theme squashes charts with a
    fixed height, and without it the screen matches the PNG / SVG / HTML downloads."""
    st.altair_chart(chart, width=width, theme=None)


def download_row(items: list[tuple[str, Callable[[], bytes] | bytes, str, str]], key: str) -> None:
    """One row of download buttons: ``(label, data or a callable making it, file name, mime)``.

    Callables run only when the button is clicked, so PNG/SVG rendering costs nothing up front.
    """
    with st.container(horizontal=True, gap="small"):
        for label, data, fname, mime in items:
            st.download_button(label, data=data, file_name=fname, mime=mime, key=f"dl_{key}_{label}",
                               icon=":material/download:", on_click="ignore", help=f"download {fname}")


def chart_downloads(chart, stem: str, key: str, frame=None, title: str = "vizlm") -> None:
    """PNG / SVG / standalone HTML of an Altair chart (+ CSV / JSON of ``frame``), made on click."""
    items = [(fmt.upper(), (lambda f=fmt: chart_bytes(chart, f, title=title)), f"{stem}.{fmt}", MIME[fmt]) for fmt in ("png", "svg", "html")]
    if frame is not None:
        items += [(fmt.upper(), (lambda f=fmt: export_frame(frame, f)), f"{stem}.{fmt}", MIME[fmt]) for fmt in ("csv", "json")]
    download_row(items, key)


def analysis_downloads(sa, highlight: Setting, key: str, measure: str = "weight",
                       full: Callable | None = None, rows: tuple[int, int] | None = None,
                       selected: int | None = None) -> None:
    """The five export formats of one analysis (:func:`vizlm.present.export.export_analysis`); the pictures
    are the heat map coloured by ``measure`` (``rows``: the window shown, ``selected``: the outlined
    row). ``full()``, if given, returns the analysis to export (e.g. ``sa`` with every slot effect),
    made only when a button is clicked."""
    stem = safe_filename(f"{sa.model}-{'effects-' if measure == 'effect' else ''}{sa.text[:30]}")
    full = full or (lambda: sa)
    def make(fmt: str) -> bytes:
        return export_analysis(full(), fmt, highlight, measure=measure, rows=rows,
                               selected=selected)

    download_row([(fmt.upper(), (lambda f=fmt: make(f)), f"{stem}.{fmt}", MIME[fmt]) for fmt in FORMATS], key)


def write_explorer_query(state: ExplorerState) -> None:
    """Mirror the Explorer's state into the URL (only when it changed, so history stays clean)."""
    _write_query(state.query(), "_qs_written")


def _write_query(q: dict[str, str], written: str) -> None:
    """Put ``q`` in the URL when it differs, and remember it in Session State ``written``: a page
    tells a link opened from the URL it wrote itself."""
    if st.query_params.to_dict() != q:
        st.query_params.from_dict(q)
    st.session_state[written] = q


def read_compare_query(names: list[str], default_a: str, default_b: str) -> list[str]:
    """Set Compare perplexity's model pair, corpus and sample from a link that is not the URL this page wrote
    (:func:`vizlm.present.links.parse_compare_query`; back from another page via the menu: this session's view);
    the notes on what the link had wrong. Values the link leaves out keep this session's choices."""
    params = st.query_params.to_dict()
    last = st.session_state.get("_cmp_qs_written")
    if params == last:
        return []
    if not params and last:
        params = last
    current = [st.session_state.get(k) if st.session_state.get(k) in names else d
               for k, d in (("cmp_a", default_a), ("cmp_b", default_b))]
    state, notes = parse_compare_query(params, names, *current, corpora={**CORPORA, **user_corpora()})
    if params.keys() & {"a", "b"}:
        st.session_state.update(cmp_a=state.a, cmp_b=state.b)
    if "n" in params and sample_label(params["n"]):
        st.session_state["cmp_sample"] = sample_label(params["n"])
    elif "n" in params:
        notes.append(f"the sample n={params['n']!r} in the link is not one of "
                     f"{', '.join(map(sample_slug, SAMPLE_SIZES.values()))}")
    if state.corpus:
        options = corpus_splits([state.a, state.b])
        label = linked_corpus(options, state.corpus, state.split)
        if label:
            st.session_state["cmp_corpus"] = label
        else:
            asked = " ".join(filter(None, (state.corpus, state.split)))
            notes.append(f"{asked!r} in the link is not a held-out split that {state.a} and {state.b} read"
                         + (f"; using {next(iter(options))}" if options else ""))
    return notes


def write_compare_query(state: CompareState, limit: int | None) -> None:
    """Mirror Compare perplexity's view (and its sample, ``n``) into the URL."""
    _write_query(state.query() | {"n": sample_slug(limit)}, "_cmp_qs_written")


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


# --------------------------------------------------------------------------- pickers
USER_CORPUS_MARK = "yours"  # how a picker names your corpus (`vizlm prepare --corpus`, `vizlm import`): "wikitext2 test · yours"


def corpus_splits(models: list[str] | None = None) -> dict[str, tuple[str, str]]:
    """Picker label -> (corpus, split): the held-out splits of every processed corpus in the language
    the ``models`` were trained on (a model scores text of another language as one unknown word after
    another; its perplexity there means nothing), and of every corpus of yours, prepared or imported (its language
    is not recorded: the page shows how much of it a model's vocabulary covers); none when the models read
    different languages. The corpora the models were trained on come first (the first is the default)."""
    languages = {language(m) for m in models or []} - {None}
    if len(languages) > 1:
        return {}
    out = {}
    for corpus, splits in CORPORA.items():
        if languages and CORPUS_LANGUAGE[corpus] not in languages:
            continue
        shown = [s for s in HELD_OUT if s in splits]
        for split in shown:
            out[CORPUS_TITLES[corpus] if len(shown) == 1 else f"{CORPUS_TITLES[corpus]} {split}"] = (corpus, split)
    for corpus, splits in user_corpora().items():
        for split in (s for s in HELD_OUT if s in splits):
            out[f"{corpus} {split} · {USER_CORPUS_MARK}"] = (corpus, split)
    own = list(dict.fromkeys(c for c in map(trained_corpus, models or []) if c))
    return dict(sorted(out.items(), key=lambda item: own.index(item[1][0]) if item[1][0] in own else len(own)))


def corpus_picker(key: str = "corpus", models: list[str] | None = None, help: str | None = None) -> tuple[str, str, str]:
    """Sidebar select box of the processed splits the ``models`` can read: (label, corpus, split). The default is
    the first, a held-out split of the corpus the models were trained on; when the models change and so does
    that default, a picker still on the old default follows it. Stops the page, with a message, when no corpus
    suits them all."""
    options = corpus_splits(models)
    if not options:
        st.error("These models were trained on different languages; no corpus suits them all. Pick models of one language.",
                 icon=":material/translate:")
        st.stop()
    labels = list(options)
    wanted = st.query_params.get("corpus")  # ?corpus=wsj&split=test, for a shared link
    if key not in st.session_state and wanted and (label := linked_corpus(options, wanted, st.query_params.get("split"))):
        st.session_state[key] = label
    last_default = st.session_state.get(f"_{key}_default")
    if last_default is not None and last_default != labels[0] and st.session_state.get(key) == last_default:
        st.session_state[key] = labels[0]  # other models, trained on another corpus: their own corpus
    st.session_state[f"_{key}_default"] = labels[0]
    keep_choice(key, labels, labels[0])
    label = st.selectbox("Corpus", labels, key=key,
                         help=help or "Held-out text: the models' own corpus first; Brown test/valid are held-out "
                                      "documents of the bundled models' training corpus, WSJ is out of domain, and "
                                      f"'{USER_CORPUS_MARK}' marks the corpora you prepared or imported. A model scored on "
                                      "a corpus it was not trained on gets a warning with its vocabulary's overlap.")
    corpus, split = options[label]
    if corpus not in CORPORA and (card := _card(corpus)):
        st.caption(md_escape(card_line(card, split)))  # your corpus's card, in a line (`vizlm corpora NAME`: all of it)
    return (label, corpus, split)


def _card(corpus: str) -> dict | None:
    try:
        return corpus_card(corpus)
    except DataError:
        return None


def off_corpus_warning(models: list[str], corpus: str, split: str) -> bool:
    """Above a corpus page's result: for each of ``models`` not trained on ``corpus``, the share of the split's
    tokens outside its vocabulary (:func:`vizlm.data.vocab.vocab_overlap`), in one warning. Returns whether it warned."""
    lines = []
    for name in models:
        trained = trained_corpus(name)
        if trained == corpus:
            continue
        try:
            ov = corpus_overlap(name, corpus, split)
        except (UserError, DataError, OSError) as exc:
            lines.append(f"**{md_escape(name)}**: its vocabulary's overlap cannot be measured ({md_escape(str(exc))})")
            continue
        where = f"trained on {md_escape(CORPUS_TITLES.get(trained, trained))}" if trained else "its training corpus is not recorded"
        lines.append(f"**{md_escape(name)}** ({where}): **{ov.oov_rate:.1%}** of the tokens of {md_escape(corpus)} "
                     f"{split} are outside its vocabulary ({ov.oov_tokens:,} of {ov.tokens:,}; {ov.oov_types:,} of "
                     f"{ov.types:,} distinct words) and are read as {md_escape('<unk>')}")
    if lines:
        st.warning("**Scored on a corpus a model was not trained on.** Every word outside a model's vocabulary is read, "
                   f"and predicted, as {md_escape('<unk>')}: its numbers here are not those of text like its own corpus, "
                   "and the more unknown words, the less they say.\n\n" + "\n".join(f"- {line}." for line in lines),
                   icon=":material/warning:")
    return bool(lines)


def linked_corpus(options: dict[str, tuple[str, str]], corpus: str, split: str | None) -> str | None:
    """The picker label (of :func:`corpus_splits`) of a link's corpus and split, its first offered split when
    the link names none; None when the picker does not offer it."""
    return next((label for label, (c, s) in options.items() if c == corpus and split in (None, s)), None)


def sample_slug(limit: int | None) -> str:
    """How a link writes a sample size: ``n=200``, ``1000``, ``all``."""
    return str(limit or "all")


def sample_label(slug: str | None) -> str | None:
    """The sentences picker's label (:data:`SAMPLE_SIZES`) of a link's ``n``; None when it offers no such size."""
    return {sample_slug(v): label for label, v in SAMPLE_SIZES.items()}.get(slug)


def sample_picker(key: str = "sample", default: str = "whole split") -> int | None:
    """How many sentences of the split to use (the whole split is computed once, then cached)."""
    labels = list(SAMPLE_SIZES)
    wanted = sample_label(st.query_params.get("n"))  # ?n=200 / 1000 / all, for a shared link
    if key not in st.session_state and wanted:
        st.session_state[key] = wanted
    keep_choice(key, labels, default)
    label = st.selectbox("Sentences", labels, key=key,
                         help="The whole split takes a while the first time (progress is shown), then comes from the cache.")
    return SAMPLE_SIZES[label]


def attention_models_picker(title: str, key: str, none_message: str,
                            first: Callable[[list[str]], list[str]] | None = None,
                            self_attention: bool = False) -> list[str]:
    """Sidebar header and a multiselect of the attention models; stops the page if there are none.
    At first: the models trained on a corpus of yours when there are some (those of the first such corpus: the
    page opens on it), else those in the language of the first (one corpus scores them all), narrowed by
    ``first``, as many as a chart has colours for (:data:`vizlm.present.style.CATEGORICAL`). With
    ``self_attention`` the Transformers are offered too (a page that reads their heads)."""
    attn = by_kind(attention_model_names(self_attention=self_attention))
    st.header(title, anchor=False)
    if not attn:
        st.error(none_message, icon=":material/error:")
        st.stop()
    yours = [n for n in attn if trained_corpus(n) is not None and trained_corpus(n) not in CORPORA]
    start = [n for n in yours if trained_corpus(n) == trained_corpus(yours[0])] if yours else one_language(attn)
    start = [n for n in start if first_seed(n) is None] or start  # another seed of a listed model: on request
    keep_choices(key, attn, (first(start) if first else start)[: len(CATEGORICAL)])
    # chips show the bare name (a chip holds about 20 characters; "name · kind" was cut); the order and the help
    # say the kinds
    return st.multiselect("Models", attn, key=key, help=KINDS_HELP)


def upload_widget() -> None:
    """Sidebar expander: upload a checkpoint pair; errors are shown, never raised."""
    with st.sidebar.expander("Upload a checkpoint", icon=":material/upload:"):
        st.caption(
            f"A `model.safetensors` + `config.json` pair written by `vizlm train` "
            f"(at most {MAX_UPLOAD_MB} MB). Nothing is unpickled; every tensor is checked."
        )
        w = st.file_uploader("Weights (.safetensors)", key="up_weights", max_upload_size=MAX_UPLOAD_MB + 1)
        m = st.file_uploader("Config (.json)", key="up_meta", max_upload_size=MAX_META_BYTES // 2**20)
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


def head_select(name: str, layers: int, heads: int, key: str, default: tuple[int, int | None],
                wanted: str | None = None, means: bool = True) -> tuple[int, int | None]:
    """A Transformer's layer and head (or a layer's heads together) in a sidebar select box: (layer, head) counted
    from 0, head None for the mean (not offered without ``means``). ``wanted``: a
    :func:`~vizlm.present.links.head_code` from a link, taken when it is one of the model's (else a note says so)."""
    options = [head_code((layer, h)) for layer in range(layers) for h in ((None,) if means else ()) + tuple(range(heads))]
    if wanted is not None:
        if wanted in options:
            st.session_state[key] = wanted
        else:
            st.info(f"The head {wanted!r} in the link is not one of {name}'s {layers} layers × {heads} heads; showing "
                    "its default.", icon=":material/link_off:")
    if st.session_state.get(key) not in options:
        st.session_state[key] = head_code(default)

    with st.sidebar:
        code = st.selectbox(f"{name}: self-attention", options, key=key,
                            format_func=lambda c: head_words(parse_head_code(c), heads),
                            help=f"{name} is a Transformer: each of its {layers} layers has {heads} attention heads, each "
                                 "attending to the words read so far, the word just read included. The highlights, "
                                 "the heat map, the effects and the cases are of the head picked here, or of a layer's "
                                 "heads together (their mean weights, rows still summing to 1; their effects: every "
                                 "head of the layer at once).")
    return parse_head_code(code)
