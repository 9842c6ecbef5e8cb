"""The Explorer's glue: its URL state, the example picker, the selected word, and a model's panel.

``pages/explorer.py`` lays the page out and calls these; the numbers come from the API
(:class:`vizlm.api.Analysis`, through :mod:`vizlm.app.results`).
"""

from __future__ import annotations

import hashlib
import math

import streamlit as st

from vizlm.inspect.analysis import DISTANCE_NOTE, LN2
from vizlm.api import ATTENTION_OFF, MAX_TOKENS, READINGS, Analysis
from vizlm.api import compare as compare_models
from vizlm.app import checkpoints as ck
from vizlm.app import faithfulness, jobs, results
from vizlm.app import widgets as ui
from vizlm.inspect.attribution import TEXT_METHODS
from vizlm.inspect.highlight import DEFAULT, Setting, Share, TopK
from vizlm.modeling.checkpoint import meta_corpus
from vizlm.data.examples import example_passages, example_sentences
from vizlm.data.registry import CORPORA, CORPUS_LANGUAGE, CORPUS_TITLES, user_corpora
from vizlm.present.word_view import WordView, default_target, word_view
from vizlm.present.links import DEFAULT_TEXT, DEFAULT_TEXTS, EXPLORER_MEASURES, MAX_TOP_K, MEASURE_LABELS, parse_query
from vizlm.present.fragments import attention_key_html, attribution_html, attribution_key_html, highlighted_html, sentence_strip_html, text_span
from vizlm.present.heatmap import heatmap_rows
from vizlm.present.style import attribution_scale, format_prob
from vizlm.data.text import tokenize

UNKNOWN_WARNING = 0.5  # share of out-of-vocabulary words above which a model is said not to read the text
ATTRIBUTION_ROWS = 12  # words of the selected word's reading listed by attribution (the heat map shows them all)
EXAMPLE_LABEL_CHARS = 42  # what a third of the page's select box shows (about 330 px)


def defaults(names: list[str]) -> tuple[str, str | None]:
    """The model to open with and the one to compare it with."""
    model = ck.preferred_model(names)
    return model, ck.baseline_model(names, model)


def seed_from_url(names: list[str]) -> None:
    """Copy the query string into the widgets' state when it changed outside this session."""
    params = st.query_params.to_dict()
    last = st.session_state.get("_qs_written")
    if params == last:
        return
    if not params and last:  # back from another page via the menu: restore this session's view
        params = last
    model, compare = defaults(names)
    state, notes = parse_query(params, names, model, compare, DEFAULT_TEXT)
    st.session_state.update(
        model=state.model,
        compare=state.compare or "",
        text=state.text,
        mode="Top-k" if isinstance(state.highlight, TopK) else "Threshold",
        threshold=state.highlight.share if isinstance(state.highlight, Share) else DEFAULT.share,
        topk=state.highlight.k if isinstance(state.highlight, TopK) else 3,
        measure=state.measure,
        _target_url=state.target,
        _head_url=state.head,
        _url_notes=notes,
        example=None,
    )


def follow_language(names: list[str]) -> None:
    """The model picked is of another language than the text or the model compared with: bring that language's
    text (:data:`vizlm.present.links.DEFAULT_TEXTS`) and its comparison model (:func:`vizlm.app.checkpoints.baseline_model`),
    so the view does not open on words the model cannot read."""
    model = st.session_state["model"]
    want = ck.language(model)
    if want is None:  # a corpus of yours: its language is not known
        return
    compare = st.session_state.get("compare")
    if compare and ck.language(compare) not in (None, want):
        st.session_state["compare"] = ck.baseline_model(names, model) or ""
    text = st.session_state.get("text") or ""
    if want in DEFAULT_TEXTS and text.strip() and ck.text_language([t.text for t in tokenize(text)]) != want:
        st.session_state["text"] = DEFAULT_TEXTS[want]
        st.session_state["example"] = None


def use_example() -> None:
    choice = st.session_state.get("example")
    if choice:
        st.session_state["text"] = st.session_state["_examples"][choice]


def examples_corpus(model: str) -> str | None:
    """The corpus the Explorer's examples come from for ``model``: its own when it is yours (``vizlm prepare
    --corpus`` or ``vizlm import`` wrote it) and has a test split, else None (the shipped examples of Brown and WSJ)."""
    corpus = ck.trained_corpus(model)
    return corpus if corpus not in CORPORA and "test" in user_corpora().get(corpus, ()) else None


def example_options(model: str, compare: str) -> dict[str, str]:
    """``{"<group> · <sentence id>": text}`` for the example picker: passages first, then sentences; of the test
    split of the model's corpus when it is yours (:func:`examples_corpus`), else the shipped
    ones of Brown and WSJ."""
    own = examples_corpus(model)
    opts = {}
    if own:
        opts = {f"{own} passage · {sid}": text for sid, text in example_passages(own, "test")}
        opts |= {f"{own} · {sid}": text for sid, text in example_sentences(own, "test")}
    if not opts and ck.language(model) in (None, "English"):  # the shipped examples are English
        opts = {f"{name} passage · {sid}": text for corpus, name in (("brown", "Brown"), ("wsj", "WSJ"))
                for sid, text in example_passages(corpus, "test")}
        opts |= {f"WSJ · {sid}": text for sid, text in example_sentences("wsj", "test")}
        opts |= {f"Brown · {sid}": text for sid, text in example_sentences("brown", "test")}
    improved = st.session_state.get("_improved", {}).get((compare, model))
    if improved:
        opts = {f"improved by {model} · {sid}": text for sid, text in improved} | opts
    st.session_state["_examples"] = opts
    return opts


def example_label(key: str, text: str) -> str:
    """``Brown passage · The jurors said the…``: the example's group and its first words, cut at a word
    so the whole label fits the picker."""
    head = key.split(" · ")[0] + " · "
    words, shown = text.split(), ""
    for w in words:
        if len(head) + len(shown) + len(w) + 2 > EXAMPLE_LABEL_CHARS:
            return head + (shown or w[: EXAMPLE_LABEL_CHARS - len(head) - 1]) + "…"
        shown = f"{shown} {w}" if shown else w
    return head + shown


def example_labels(examples: dict[str, str]) -> dict[str, str]:
    """:func:`example_label` of every example, the sentence id added where two would read the same (two Brown
    passages of one document start alike)."""
    labels = {k: example_label(k, text) for k, text in examples.items()}
    counts: dict[str, int] = {}
    for label in labels.values():
        counts[label] = counts.get(label, 0) + 1
    return {k: label if counts[label] == 1 else f"{label} ({k.split(' · ', 1)[-1]})" for k, label in labels.items()}


def find_improved(model: str, compare: str) -> bool:
    """Rank the Brown test sentences by how much ``model`` improves on ``compare`` (:func:`vizlm.compare` in
    the background, the job the Compare page shares; progress bar; cached)."""
    try:
        result = jobs.result(("compare", ck.model_key(compare), ck.model_key(model), "brown", "test", None),
                             compare_models, ck.get_checkpoint(compare), ck.get_checkpoint(model), "brown", "test",
                             text=f"Scoring Brown test with {compare} and {model}").result
    except (ValueError, ck.UserError) as exc:  # e.g. different vocabularies
        ui.show_error(exc)
        return False
    rows = []
    for sid in result.most_improved(10, min_length=8)["sentence_id"].astype(str):
        idx = results.sentence_index("brown", "test", sid)
        if idx is not None:
            rows.append((sid, results.sentence_text("brown", "test", idx)))
    st.session_state.setdefault("_improved", {})[(compare, model)] = rows
    if not rows:
        st.session_state["_improved_none"] = (compare, model)  # said after the rerun that lists the examples
    else:  # the rerun opens the most improved sentence, picked in the list, and says where the others are
        st.session_state["_improved_pick"] = (f"improved by {model} · {rows[0][0]}", rows[0][1], len(rows))
    return True


def warn_unknown(analyses: dict[str, Analysis], names: list[str]) -> None:
    """One warning naming each model that reads most of the text as ``<unk>`` (e.g. Chinese for an English
    model), and the models to choose instead."""
    lines, instead = [], ""
    for name, a in analyses.items():
        unknown = sum(a.unk) / max(1, len(a.unk))
        if unknown <= UNKNOWN_WARNING:
            continue
        corpus = meta_corpus(ck.model_meta(name))
        trained = f" {CORPUS_LANGUAGE[corpus]}-only: it was trained on {CORPUS_TITLES[corpus]}" if corpus in CORPUS_LANGUAGE else ""
        readers = ck.readers_of(a.tokens, names)  # the models in this text's language
        if readers and name not in readers:
            lang = ck.language(readers[0])
            instead = f" Choose {'an' if lang[0] in 'AEIOU' else 'a'} {lang} model instead: {', '.join(readers)}."
        lines.append(f"{unknown:.0%} of these words are not in {name}'s vocabulary ({name} is"
                     f"{trained or ' not trained on text like this'}).")
    if lines:
        who = "It reads them as <unk>, so its" if len(lines) == 1 else "Each reads them as <unk>, so their"
        st.warning(" ".join(lines) + f" {who} attention and probabilities say little about this text.{instead}",
                   icon=":material/translate:")


def target_key(sa: Analysis, text: str, highlight: Setting) -> str:
    """The Session State key of the word picker for this text (a new text forgets the old selection),
    holding the word the link asks for, else the one already picked, else :meth:`Analysis.default_target`."""
    T = len(sa.targets)
    key = "target:" + hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    old = st.session_state.get("_target_key")
    if old != key:
        st.session_state.pop(old, None)
        st.session_state["_target_key"] = key
    wanted = st.session_state.pop("_target_url", None)
    if wanted is not None and 0 <= wanted < T:
        st.session_state[key] = wanted
    elif wanted is not None:
        st.warning(f"The link selects word {wanted}, but this text has {T} predicted words (0 to {T - 1}); picking one.",
                   icon=":material/link:")
    if st.session_state.get(key) not in range(T):
        st.session_state[key] = default_target(sa, highlight)
    return key


def word_label(sa: Analysis, r: int) -> str:
    word = sa.tokens[r] if r < len(sa.tokens) else "</s>"
    label = ui.md_escape(word)
    return f":orange[{label} ?]" if r < len(sa.unk) and sa.unk[r] else label


def _bits(x: float) -> str:
    text = f"{x:+.2f} bits"
    return "+0.00 bits" if text == "-0.00 bits" else text


def model_panel(name: str, sa: Analysis, r: int, highlight: Setting, text: str,
                measure: str = EXPLORER_MEASURES[0]) -> None:
    """One model's column: its reading, the word's numbers, the running text with its attention (or, for an
    attribution ``measure``, with what the prediction depended on, beside the attention), the memory slots by
    effect, the labelled cases and the top predictions (:func:`vizlm.present.word_view.word_view` of word ``r``)."""
    attention_panel = measure not in TEXT_METHODS and sa.attention is not None
    # the slot effects of this word, computed for it alone if need be (the attention panel's table and cases)
    effect_bits = results.row_effect_bits(name, text, r, sa.head) if attention_panel else None
    t = word_view(sa, r, highlight, results.case_map(name, text, highlight, sa.head), effect_bits)
    ppl = ck.perplexity(name)
    st.subheader(name, anchor=False, help=f"{ck.family(name)} checkpoint" + (f"; {ppl[0]} perplexity {ppl[1]:.1f}" if ppl else ""))
    several = " (one sentence: both readings agree)" if not sa.boundaries else ""
    st.caption(f":material/menu_book: **{sa.context}-level checkpoint**: {READINGS[sa.context]}{several}.")
    with st.container(horizontal=True, wrap=True, gap="medium"):  # wraps instead of cutting numbers off
        st.metric("P(word)", format_prob(t.prob), help="probability the model gave the actual next word",
                  width="content")
        st.metric("Surprisal", f"{t.surprisal_bits:.1f} bits", help="−log₂ P(word); lower is better", width="content")
        if t.read_effect_bits is not None:
            st.metric("Attention effect", _bits(t.read_effect_bits), width="content",
                      help=("log₂ P(word) minus the same with the head's output zeroed at every position (a layer's "
                            "heads together for their mean): how much this prediction needs what the head reads. "
                            if sa.self_attention else
                            "log₂ P(word) with the attention read minus without it (the read set to zero): how much "
                            "the attention changed this prediction. ") + "+1 bit = twice as likely with the attention.")
        st.metric("Perplexity", f"{sa.perplexity:.0f}", help="perplexity of the whole text", width="content")
    if measure in TEXT_METHODS:
        _attribution_panel(name, sa, r, highlight, text, measure)
    elif sa.attention is None:
        st.html(sentence_strip_html(sa, selected=r, span=text_span(sa, r)))
        st.caption(f"{name} has no attention: it predicts from its recurrent state alone. Each word shows the "
                   "probability this model gave it; the bar colour is its surprisal. Pick an attribution measure in the "
                   "sidebar to see which earlier words its prediction depended on.")
    else:
        _attention_panel(sa, t, highlight, effect_bits)
    if sa.gates is not None:
        st.caption(f"AMSRN selection gate g₁ for this step: mean {t.gate_mean:.2f} over {sa.gates.shape[1]} units (see the Gates tab).")
    st.dataframe(
        {"next word": [w for w, _ in t.top], "probability": [format_prob(p) for _, p in t.top]},
        column_config={"next word": st.column_config.TextColumn("next word", width="small"),
                       "probability": st.column_config.TextColumn("probability", width="small")},
        hide_index=True, width="stretch", height=213,
    )
    if sa.attention is not None and not sa.self_attention:
        faithfulness.word_panel(name, text, r)  # on request: one word's adversary and two paths (recurrent attention)
    elif sa.self_attention and sa.head[1] is not None:  # one head of a Transformer: its adversary
        faithfulness.word_panel(name, text, r, sa.head)


def _attribution_panel(name: str, sa: Analysis, r: int, highlight: Setting, text: str, method: str) -> None:
    """What row ``r``'s prediction depended on (``method``), the running text highlighted by it, a table of
    the words read with their attribution and, for an attention model, their weight and the agreement."""
    # the window of rows the heat map shows around this word: a long text costs that window, not every row
    attr = results.attribution(name, text, method, heatmap_rows(sa, r))
    if sa.head is not None:  # a Transformer: beside the head shown
        attr = attr.at_head(*sa.head)
    span = text_span(sa, r)
    st.html(attribution_html(attr, r, highlight, span=span)
            + attribution_key_html(attribution_scale(attr, [r]), method))
    frame = attr.row_frame(r)
    if frame.empty:
        st.caption(f"{name} has read no word of this text before this one (only the start of its reading): "
                   "there is nothing to attribute.")
        return
    if attr.convergence_delta is not None:
        gap = (attr.logprobs[r] - attr.baseline_logprobs[r]) / LN2
        st.caption(f"Integrated gradients ({int(attr.steps[r])} steps): the attributions sum to log₂ P(word) minus "
                   f"the same with every word's embedding zero ({gap:+.2f} bits) up to a convergence delta of "
                   f"{attr.convergence_delta[r] / LN2:+.3f} bits ({attr.relative_delta[r]:.1%}).")
    if attr.attention is not None:
        agree = attr.row_agreement(r)
        if agree["positions"] >= 2:
            with st.container(horizontal=True, wrap=True, gap="medium"):
                st.metric("Kendall τ", "–" if agree["kendall_tau"] != agree["kendall_tau"] else f"{agree['kendall_tau']:+.2f}",
                          width="content", help="Rank correlation of attention weight and |attribution| over the words both "
                                                "cover (the words in this word's memory): +1 the same order, 0 unrelated.")
                st.metric("Top-1 agrees", "yes" if agree["top1"] == 1 else "no", width="content",
                          help="Is the most attended word the one the prediction depended on most?")
                st.metric("Top-3 overlap", f"{agree['top_k_overlap']:.0%}", width="content",
                          help="Share of the three most attended words among the three most important ones.")
        else:
            st.caption("This word has fewer than two earlier words in its memory: its attention chooses nothing to agree with.")
    shown = frame.head(ATTRIBUTION_ROWS)
    table = {"word read": [f"{p + 1} {w}" for p, w in zip(shown.position, shown.input)],
             "distance": shown.distance, "bits": shown.attribution_bits, "share": 100 * shown.share}
    config = {
        "distance": st.column_config.NumberColumn("distance", width="small", help=DISTANCE_NOTE),
        "bits": st.column_config.NumberColumn(
            "bits", format="%+.3f", width="small",
            help="this word's attribution: its part of log₂ P(word), in bits (+ it raised the probability, − it lowered it)"),
        "share": st.column_config.ProgressColumn("share", format="%.0f%%", min_value=0.0, max_value=100.0, width="small",
                                                 help="its share of the total |attribution| of this prediction"),
    }
    if attr.attention is not None:
        # text, not numbers: a missing number would be written "None"; a dash where the word has no memory slot
        table["weight"] = ["–" if math.isnan(w) else f"{w:.3f}" for w in shown.attention]
        config["weight"] = st.column_config.TextColumn(
            "weight", width="small",
            help="the attention weight on this word's memory slot (–: not in memory, e.g. the word just read)")
    st.caption("The words read before this one, **largest |attribution| first**"
               + (f" (the first {ATTRIBUTION_ROWS} of {len(frame)})" if len(frame) > ATTRIBUTION_ROWS else "") + ".")
    st.dataframe(table, column_config=config, hide_index=True, width="stretch")


def _attention_panel(sa: Analysis, t: WordView, highlight: Setting, effect_bits) -> None:
    r = t.row
    st.html(highlighted_html(sa, r, highlight, span=text_span(sa, r)) + attention_key_html())
    if (t.start_weight or 0) >= ATTENTION_OFF:
        st.caption(f":material/power_settings_new: **Attention mostly off for this word:** {t.start_weight:.0%} of the "
                   "weight is on the empty start slot (a zero vector), so the read adds little to the prediction.")
    if sa.self_attention:
        which = "these heads' outputs" if sa.head[1] is None else "this head's output"
        st.caption(f":material/hub: **Self-attention, {sa.head_label}**: this word attends to the words read so far, "
                   "itself included (pick another layer or head in the sidebar). "
                   + ("" if t.read_effect_bits is None else
                      f"**Without it** ({which} zeroed at every position), P(word) would be "
                      f"{format_prob(t.prob_without_read)} instead of {format_prob(t.prob)}: "
                      f"{_bits(t.read_effect_bits)}."))
    else:
        st.caption(f"**Attention changed log₂ P(word) by {_bits(t.read_effect_bits)}**: without its read, "
                   f"P(word) would be {format_prob(t.prob_without_read)} instead of {format_prob(t.prob)}.")
    slots = sa.slot_table(r, effect_bits, setting=highlight)
    first = "word read" if sa.self_attention else "memory slot"
    st.caption(f"{'Words read by' if sa.self_attention else 'Memory slots of'} this word, **largest |effect| first** "
               "(then by weight): the highlighted ones and the three whose effect is largest.")
    st.dataframe(
        {first: [f"{sa.slot_number(e['slot'])} {e['word']}" for e in slots], "weight": [e["weight"] for e in slots],
         "effect (bits)": [e["effect_bits"] for e in slots]},
        column_config={
            "weight": st.column_config.ProgressColumn("weight", format="%.3f", min_value=0.0, max_value=1.0),
            "effect (bits)": st.column_config.NumberColumn(
                "effect (bits)", format="%+.3f",
                help="log₂ P(word) minus the same with this slot dropped from this word's row (the other weights "
                     "renormalised; a Transformer's: of the head shown, the other positions read as computed): "
                     "+ the slot helped, − it hurt"),
        },
        hide_index=True, width="stretch",
    )
    cases = [c for c in t.cases if c.get("labels")]  # with their slot effects, computed for this word if need be
    cases.sort(key=lambda c: (c.get("effect") is None, -(c.get("effect") or 0.0)))  # most helpful first
    if cases:
        for c in cases:
            effect = "" if c.get("effect") is None else f" · effect {_bits(c['effect'])}"
            for lab in c["labels"]:
                why = c["evidence"].get(lab, "") if isinstance(c["evidence"], dict) else c["evidence"]
                st.markdown(f"{ui.label_badge(lab)} **{ui.md_escape(c['attended'])}** → "
                            f"**{ui.md_escape(t.word)}** · weight {c['weight']:.2f}{effect}  \n"
                            f":small[{ui.md_escape(why)}]")
        if len(cases) > 1:
            st.caption("Cases ranked by effect: the pair whose slot helped the prediction most first.")
    elif t.highlights:
        st.caption("The attended words above match no trigger / causal / phrase / grammar rule.")
    else:
        st.caption("No earlier word reaches the threshold for this word; lower it or use top-k.")


def sidebar() -> tuple[list[str], str, str, Setting, str]:
    """The sidebar: the upload, the model and the one to compare it with, the measure and the highlight
    setting. Returns (every model name, model, compare ("" for none), the highlight setting, measure)."""
    models_box = st.sidebar.container()
    ui.upload_widget()
    names = ck.model_names()  # an upload may have added one
    with models_box:
        st.header("Models", anchor=False)
        if st.session_state.get("model") not in names:
            st.session_state["model"] = defaults(names)[0]
        listed = ck.by_kind(names)
        model = st.selectbox("Model", listed, key="model", format_func=ck.model_label, on_change=follow_language,
                             args=(names,),
                             help=f"{ck.KINDS_HELP} {ck.model_help(st.session_state['model'])}")
        others = [""] + [n for n in listed if n != model]
        if st.session_state.get("compare") not in others:
            st.session_state["compare"] = ""
        compare = st.selectbox("Compare with", others, key="compare", format_func=ck.model_label,
                               help="A second model shown side by side. It opens with the control the model's run was "
                                    "measured against (the same training without attention, see Models), else the LSTM. "
                                    + ck.model_help(st.session_state["compare"]))
    with st.sidebar:
        st.header("Highlight", anchor=False)
        st.session_state.setdefault("measure", EXPLORER_MEASURES[0])
        measure = st.selectbox(
            "Measure", EXPLORER_MEASURES, key="measure", format_func=MEASURE_LABELS.get,
            help="What the highlights and the heat map show. Attention weight: where the model looked (the heat map "
                 "can show its effect: whether dropping that memory slot changes P(word)). Gradient × input, "
                 "integrated gradients, occlusion: what the prediction actually depended on, through the recurrent "
                 "state too, for every model (the LSTM included), in bits of log₂ P(word); beside the attention, "
                 "they say whether the attention agrees.")
        attributed = measure in TEXT_METHODS
        mode = st.segmented_control("Mode", ["Threshold", "Top-k"], key="mode", required=True,
                                    help="Highlight every earlier word with at least this share (of the attention, or of "
                                         "the largest |attribution| of the word's reading: the same on a sentence and a "
                                         "long passage), or the k largest.")
        if mode == "Top-k":
            highlight = TopK(st.slider("Words to highlight", 1, MAX_TOP_K, key="topk"))
        else:
            highlight = Share(st.slider("Share of the largest |attribution|" if attributed else "Attention threshold",
                                        0.0, 1.0, step=0.01, key="threshold"))
    return names, model, compare, highlight, measure


def head_picker(name: str, text: str, sa: Analysis, main: bool) -> Analysis:
    """A Transformer's layer and head to show (:func:`vizlm.app.widgets.head_select`; the main model's choice is
    in the URL): ``sa`` showing that head, or a layer's heads together. ``sa`` itself for other models."""
    if sa.heads is None:
        return sa
    wanted = st.session_state.pop("_head_url", None) if main else None
    head = ui.head_select(name, sa.layers, sa.heads_per_layer, f"head_{name}", sa.head, wanted)
    return results.analyze_text(name, text, head)


def text_input(model: str, compare: str) -> str:
    """The title, the text box and the example picker (with "Most improved"); returns the text."""
    st.title("Explorer", anchor=False)
    st.caption(f"Type a sentence or a passage (up to {MAX_TOKENS} words; a line break, . ! ? before a capital or 。！？ ends a "
               "sentence). Each model reads it left to right, a document-level model as running text, a sentence-level "
               "model a sentence at a time; pick a word to see which earlier words the model attended to while "
               "predicting it, how sure it was, and why the attention may have helped.")
    for note in st.session_state.pop("_url_notes", []):
        st.warning(note, icon=":material/link:")
    pick = st.session_state.pop("_improved_pick", None)  # "Most improved" was clicked: show what it found
    if pick is not None:
        st.session_state["text"] = pick[1]
        st.success(f"Added the {pick[2]} Brown test sentences whose perplexity {model} lowers most relative to {compare} "
                   "to the examples (first in the list); showing the first.", icon=":material/trending_down:")
    left, right = st.columns([2, 1], vertical_alignment="bottom")
    with right:
        examples = example_options(model, compare)
        if pick is not None and pick[0] in examples:
            st.session_state["example"] = pick[0]
        if st.session_state.get("example") not in examples:  # another model's corpus: other examples
            st.session_state["example"] = None
        st.selectbox("Or pick an example", list(examples), key="example",
                     placeholder="Passages and sentences…", on_change=use_example,
                     format_func=example_labels(examples).__getitem__,
                     help="Passages and single sentences of the test split of the model's corpus when `vizlm "
                          "import` wrote it, else of Brown test documents and of the WSJ sample; and the "
                          "sentences the model improves most (after “Most improved”).")
        can_rank = compare and ck.has_attention(model) and (compare, model) not in st.session_state.get("_improved", {})
        clicked = can_rank and st.button(
            f"Most improved by {model}", icon=":material/trending_down:", width="stretch", key="rank_improved",
            help=f"Scores the Brown test split with both models once (cached), then lists the 10 "
                 f"sentences whose perplexity {model} lowers most relative to {compare}.")
        if clicked and find_improved(model, compare):
            st.rerun()
        if compare and st.session_state.get("_improved_none") == (compare, model):
            st.info(f"{model} lowers the perplexity of none of Brown test's sentences of 8 words or more relative to "
                    f"{compare}: no example to add.", icon=":material/trending_flat:")
    with left:
        text = st.text_area("Sentence or passage", key="text", height=96,
                            placeholder="Type or paste English text: a sentence, or several…")
    return text


def word_picker(sa: Analysis, text: str, highlight: Setting) -> int:
    """The predicted word to look at (a row of ``sa``), picked among the words of the text."""
    T = len(sa.targets)
    tkey = target_key(sa, text, highlight)
    if sa.boundaries:
        documents = f" in {len(sa.breaks) + 1} documents (a blank line ends one)" if sa.breaks else ""
        st.caption(f"A passage of {len(sa.boundaries) + 1} sentences{documents}, {T} predicted words (each sentence "
                   "ends with </s>). Dashed lines in the heat map and bars in the running text mark where a sentence "
                   "begins.")
    labels = ui.unique_labels([word_label(sa, i) for i in range(T)])
    # long texts: the word picker scrolls instead of pushing everything down
    with st.container(height=220 if T > 60 else "content", border=False):
        r = st.pills("Predicted word — click one", list(range(T)), key=tkey, required=True,
                     format_func=labels.__getitem__,
                     help="Pick the word being predicted: the model has read every word before it. "
                          "Orange words marked ? are outside the vocabulary (read as <unk>).")
    return r
