"""Attention by position: where in the past do the attention models look?

Daniluk et al. (2017, Fig. 3) average the attention weight at each relative position
over a whole test set and find it concentrated on the last few words. This page draws
that plot for the attention models (at first those reading running text, as theirs did),
with confidence bands and mean entropy, plus the same view for a single sentence; on request, beside
it, where the predictions' dependence actually is (attribution by distance, every model, the LSTM
included). Thin page: inputs -> :mod:`vizlm.inspect.corpus_stats` / :meth:`vizlm.Model.corpus_attribution` -> render.
"""

from __future__ import annotations

import streamlit as st

import vizlm
from vizlm.inspect import corpus_stats as vc
from vizlm.inspect.reading import READINGS, split_at_boundaries
from vizlm.app import checkpoints as ck
from vizlm.app import jobs, results, views
from vizlm.app import widgets as ui
from vizlm.app.shell import EXPLORER, page_setup
from vizlm.inspect.attribution_corpus import BY_DISTANCE
from vizlm.data.examples import example_sentences
from vizlm.present.export import safe_filename
from vizlm.present.links import explorer_query
from vizlm.present.charts import positions_chart, sentence_positions_chart

page_setup()

DEFAULT_WINDOW = 10  # the window slider's, when the models have no window of their own up to vc.MAX_WINDOW


def corpus_positions(models: tuple[str, ...], keys: tuple[str, ...], corpus: str, split: str, window: int, limit: int | None):
    """vizlm.positions (the whole split disk-cached, or its first ``limit`` sentences), in the background
    for every session (vizlm.app.jobs)."""
    version = results.corpus_version(corpus, split)  # a corpus prepared again is read again
    return jobs.result(("positions", keys, corpus, split, version, window, limit), vizlm.positions,
                       [ck.get_checkpoint(m) for m in models], corpus, split, window=window, limit=limit,
                       text=f"Averaging attention of {', '.join(models)} over {corpus}/{split}").result


def corpus_attributions(models: list[str], corpus: str, split: str, limit: int | None) -> list[dict]:
    """Model.corpus_attribution (gradient × input, disk-cached) of each model, in the background for every
    session (vizlm.app.jobs): one job per model, so a model in two sessions' choices is attributed once, and
    the window changes nothing (the result keeps every offset the attribution statistics keep)."""
    version = results.corpus_version(corpus, split)
    return [jobs.result(("attribution", ck.model_key(m), corpus, split, version, limit),
                        vizlm.Model(ck.get_checkpoint(m)).corpus_attribution, corpus, split, limit=limit,
                        **BY_DISTANCE, text=f"Attributing {m}'s predictions over {corpus}/{split} (gradient × input)")
            for m in models]


@st.cache_data(show_spinner=False, max_entries=64)
def one_text(models: tuple[str, ...], keys: tuple[str, ...], text: str, window: int):
    """The corpus statistics restricted to one typed text (one document), and its word-by-word offsets per model."""
    sas = {m: results.analyze_text(m, text) for m in models}
    sentences = split_at_boundaries(sas[models[0]].norms)
    stats = vc.attention_by_position([ck.get_checkpoint(m) for m in models], sentences, window=window,
                                     ids=[f"text:{i}" for i in range(len(sentences))])
    return stats, {m if sa.head is None else f"{m} · {sa.head_label}": vc.sentence_positions(sa, window)
                   for m, sa in sas.items()}


with st.sidebar:
    # at first the models that read running text: the paper's setting
    models = ui.attention_models_picker("Attention by position", "pos_models", "None of the checkpoints has attention.",
                                        first=ck.running_text_first, self_attention=True)
    own = [ck.window(m) for m in models]  # the models' own windows: the paper draws each model's window
    ui.keep_choice("pos_window", list(range(1, vc.MAX_WINDOW + 1)),
                   max(own) if own and all(w is not None and w <= vc.MAX_WINDOW for w in own) else DEFAULT_WINDOW)
    window = st.slider("Window (memory slots)", 1, vc.MAX_WINDOW, key="pos_window",
                       help="How many memory slots to show, at distances 2 to the window + 1 from the predicted word "
                            "(distance 1 is the word just read); at first the models' own window, when every one has one. KVP's own window is a property of the checkpoint; beyond it its "
                            "weights are zero.")
    label, corpus, split = ui.corpus_picker("pos_corpus", models)
    limit = ui.sample_picker("pos_sample")

st.title("Attention by position", anchor=False)
st.caption("Mean attention weight at each distance from the predicted word (1 = the word just before it, the word just "
           "read, which no memory slot holds; 2 = the newest memory slot), "
           "averaged over every prediction of the sentences read (the Sentences picker), with a 95% band over their documents — Daniluk et al. (2017), Fig. 3. "
           "A model that only looks at the last few words has its mass on the right (the nearest words). Beside it, the mean **effect** of the "
           "slot at each position (bits): whether that attention changed the predictions.")
if not models:
    st.info("Pick at least one attention model in the sidebar.", icon=":material/info:")
    st.stop()


keys = tuple(ck.model_key(m) for m in models)
readings = {c: [m for m in models if ck.context(m) == c] for c in READINGS}
WHAT = {"document": "positions reach across sentence boundaries, up to the model's own window",
        "sentence": "the first words of a sentence have fewer positions behind them"}
def _windows(ms: list[str]) -> str:
    """`` (a 1, b 10)``: each document model's own window, in one bracket."""
    sized = [f"{ui.md_escape(m)} {ck.window(m)}" for m in ms if ck.window(m)]
    return f" ({', '.join(sized)})" if sized else ""


st.caption(" ".join(
    f"**{', '.join(ui.md_escape(m) for m in ms)}** {READINGS[c]} — {WHAT[c]}"
    + (_windows(ms) if c == "document" else "") + "."
    for c, ms in readings.items() if ms))
if any(ck.self_attending(m) for m in models):
    st.caption("A Transformer gets a line per layer (the mean over its heads). Its self-attention reads the word just "
               "read too (distance 1), and only the words of its block (the length it was trained on): a word of an "
               "earlier block has weight 0 there, as a word beyond a windowed model's window does. It has no slot "
               "effects.")


def corpus_view() -> None:
    ui.off_corpus_warning(models, corpus, split)  # a model not trained on this corpus: its overlap, above the result
    try:
        stats = corpus_positions(tuple(models), keys, corpus, split, window, limit)
    except (ValueError, ck.UserError) as exc:
        ui.show_error(exc)
        return
    views.render_position_stats(stats, positions_chart, f"positions-{corpus}-{split}-w{window}", "pos_corpus")
    st.caption("Daniluk et al. found their models' attention concentrated on the last ~5 words. A windowed model "
               "(kvp) has no weight beyond its window; a whole-sentence model (amsrn) can also rest on the start state.")
    attribution_view()


def attribution_view() -> None:
    """On request (minutes over a whole split): attribution by distance of the chosen models and, at first,
    their controls without attention, beside the attention plot."""
    if not st.toggle("Attribution by distance", key="pos_attribution",
                     help="Where each prediction's dependence actually is: the mean share of a predicted word's "
                          "|attribution| (gradient × input) at each position back, and the share beyond the model's "
                          "attention window. The bundled models' are shipped for their own corpus's test split, so "
                          "they show at once; any other model or split is read again with gradients the first time "
                          "(the estimate is said before it starts), then it comes from the disk cache. The "
                          "Sentences picker in the sidebar limits it."):
        return
    lang = ck.language(models[0])
    others = ck.by_kind([n for n in ck.model_names() if not ck.has_attention(n) and ck.language(n) == lang])
    ui.keep_choices("pos_attribution_others", others,
                    list(dict.fromkeys(b for m in models if (b := ck.baseline_model(others, m)))))
    extra = st.multiselect("Beside them, without attention", others, key="pos_attribution_others",
                           help="Models without attention attributed the same way (at first the chosen models' "
                                "controls: the same training without attention, else the LSTM): does a plain "
                                "recurrent model depend on words further back than the attention's window?")
    size = len(results.load_corpus_cached(corpus, split).sentences)
    if estimate := views.attribution_estimate([*models, *extra], corpus, split, limit, min(size, limit or size)):
        st.caption(estimate)  # said before it starts
    try:
        attributed = corpus_attributions([*models, *extra], corpus, split, limit)
    except (ValueError, ck.UserError) as exc:
        ui.show_error(exc)
        return
    views.render_attribution_positions(attributed, window, f"attribution-positions-{corpus}-{split}-w{window}",
                                       "pos_attribution")


def sentence_view() -> None:
    examples = example_sentences("brown", "test")
    st.session_state.setdefault("pos_text", examples[0][1] if examples else "")
    text = st.text_area("Sentence or passage", key="pos_text",
                        help="The same statistics for the predictions of one text, read by each model in its context.")
    if not text.strip():
        st.info("Type a sentence or a passage to see its attention by position.", icon=":material/edit:")
        return
    try:
        one, per_word = one_text(tuple(models), keys, text, window)
    except (ValueError, ck.UserError) as exc:
        ui.show_error(exc)
        return
    views.render_position_stats(one, positions_chart, "positions-sentence", "pos_sentence")
    st.caption("Word by word: each row is one predicted word, each column a position back; "
               "the plot above averages these rows.")
    cols = st.columns(min(2, max(1, len(per_word))))
    for i, (name, frame) in enumerate(per_word.items()):
        if frame.empty:
            continue
        with cols[i % len(cols)]:
            chart = sentence_positions_chart(frame, name, text)
            ui.show_chart(chart)
            ui.chart_downloads(chart, f"positions-{safe_filename(name)}-sentence", f"pos_words_{name}", frame)
    st.page_link(EXPLORER, label="Open this text in the Explorer", icon=":material/open_in_new:",
                 query_params=explorer_query(models[0], text))


# Only the open tab runs, so the other view's work is not done unseen.
tabs = st.tabs([f"Whole split: {label}", "One text"], key="pos_view", on_change="rerun")
for tab, view in zip(tabs, (corpus_view, sentence_view)):
    if tab.open:
        with tab:
            view()
