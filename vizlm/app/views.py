"""Views shared by pages: the Explorer's tabs (heat maps, surprisal, gates, data) and the
position statistics of the Attention-by-position page (attention, and attribution by distance)."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from vizlm.inspect.analysis import distance
from vizlm.inspect.effects import with_slot_effects
from vizlm.app.checkpoints import get_checkpoint, has_attention
from vizlm.app.results import attribution, attribution_spec, heatmap_spec
from vizlm.inspect.attribution import LABELS as METHOD_LABELS
from vizlm.inspect.attribution import TEXT_METHODS
from vizlm.inspect.attribution_corpus import BY_DISTANCE, is_stored
from vizlm.inspect.highlight import Setting
from vizlm.app.widgets import analysis_downloads, chart_downloads, download_row, md_escape, show_chart, show_error
from vizlm.present.export import FORMATS, MIME, chart_html, export_attribution, safe_filename
from vizlm.present.charts import OVERLAY_MODELS, attribution_positions_chart, attribution_positions_frame, gates_chart, surprisal_chart
from vizlm.present.fragments import highlighted_html, legend_html, sentence_strip_html, text_span
from vizlm.present.heatmap import attention_heatmap, heatmap_rows
from vizlm.present.style import WINDOW_ROWS


def highlight_page(sa, target: int, highlight: Setting) -> bytes:
    """A standalone HTML page: the highlighted text above the attention heat map, as the page shows
    them (a long passage: the sentences around the word, the heat map rows around it)."""
    chart = attention_heatmap(sa, highlight, rows=heatmap_rows(sa, target), selected=target)
    body = highlighted_html(sa, target, highlight, span=text_span(sa, target))
    return chart_html(chart, title=f"vizlm: {sa.model}", body_html=body).encode("utf-8")


def _with_effects(name: str, sa):
    """For a download: ``sa`` with every slot effect, computed when the button is clicked (the page
    itself computes the selected word's only)."""
    ckpt = get_checkpoint(name)
    return lambda: with_slot_effects(ckpt, sa)


HEATMAP_VIEWS = {"window": f"{WINDOW_ROWS} rows around the selected word", "all": "Every row"}  # a long text's heat map


def _rows_view(T: int) -> str:
    """``"window"`` or ``"all"``: a long text's heat map shows the rows around the selected word or every row."""
    if T <= WINDOW_ROWS:
        return "all"
    st.session_state.setdefault("heat_rows", "window")  # a passage: the window keeps cells big enough to read
    return st.segmented_control("Rows", list(HEATMAP_VIEWS), key="heat_rows", required=True, format_func=HEATMAP_VIEWS.get,
                                help="A long text's map has a row and a column per word: around the selected word its "
                                     "cells stay readable; every row makes a large map that scrolls.")


def render_attribution_maps(analyses: dict, text: str, method: str, highlight: Setting,
                            target: int) -> None:
    """Every model's attribution heat map (the LSTM's too) with its downloads: pictures of what is shown,
    every (word, word read) pair as CSV / JSON."""
    view = _rows_view(len(next(iter(analyses.values())).targets))
    st.caption(f"Rows: the word being predicted; columns: the words read before it. Each cell is that word's part of "
               f"log₂ P(word) by {METHOD_LABELS[method]}, in bits: **blue: it raised the probability, red: it lowered it.** "
               "Outlined cells are the highlighted ones; hover a cell for its numbers (and the attention weight on it).")
    for name, sa in analyses.items():
        rows = heatmap_rows(sa, target) if view == "window" else None
        spec = attribution_spec(name, text, method, highlight, rows, target, sa.head)  # only these rows are attributed
        st.vega_lite_chart(spec, width="content", theme=None)
        attr = attribution(name, text, method, rows)
        stem = safe_filename(f"{name}-{method}-{sa.text[:30]}")
        # each callback binds this model's rows: a download runs after the loop, when `rows` is the last model's
        download_row([(fmt.upper(), (lambda f=fmt, a=attr, r=rows: export_attribution(a, f, highlight, r, target)),
                       f"{stem}.{fmt}", MIME[fmt]) for fmt in FORMATS], f"attr_{name}")


def render_heatmaps(analyses: dict, text: str, highlight: Setting, target: int,
                    measure: str = "weight") -> None:
    if measure in TEXT_METHODS:
        render_attribution_maps(analyses, text, measure, highlight, target)
        return
    shown = {n: sa for n, sa in analyses.items() if sa.attention is not None}
    if not shown:
        st.info("None of the chosen models has attention (LSTM and N-gram RNN predict from their state alone). Pick an "
                "attribution measure in the sidebar to see what their predictions depended on.", icon=":material/info:")
        return
    view = _rows_view(len(next(iter(shown.values())).targets))
    if measure == "effect":
        st.caption("Rows: the word being predicted; columns: the memory slots. Each cell is the effect of that slot in bits: "
                   "log₂ P(word) as computed minus the same without the slot. **Blue: the slot helped, red: it hurt, white: it "
                   "did not matter, whatever its weight.** The colours are clipped at ±1 bit (twice or half as likely); "
                   "hover a cell for its weight and effect. Outlined cells are the highlighted ones (by weight).")
    else:
        st.caption("Rows: the word being predicted; columns: the memory slots it may attend to (the start state and every "
                   "earlier word"
                   + ("; a Transformer's: the words read so far, the word just read included, its block only" if
                      any(sa.self_attention for sa in shown.values()) else "")
                   + "). Brighter = more attention; outlined cells are the highlighted ones. Hover a cell for its "
                   "weight. Both models use the same colour scale; a map wider than the page scrolls sideways.")
    for name, sa in shown.items():  # one under the other: two side by side do not fit a column
        rows = heatmap_rows(sa, target) if view == "window" else None
        if measure == "effect" and sa.slot_effects is None:  # every slot's effect, once per text (cached)
            with st.spinner(f"Computing the effect of every memory slot for {name}…", show_time=True):
                spec = heatmap_spec(name, text, highlight, measure, rows, target, sa.head)
        else:
            spec = heatmap_spec(name, text, highlight, measure, rows, target, sa.head)
        st.vega_lite_chart(spec, width="content", theme=None)
        analysis_downloads(sa, highlight, key=f"heat_{name}", measure=measure, full=_with_effects(name, sa),
                           rows=rows, selected=target)


def render_surprisal(analyses: dict) -> None:
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
        frame.insert(0, "position", range(len(frame)))  # the row of the heat map / the word picker
        chart_downloads(chart, safe_filename(f"gates-{name}-{sa.text[:20]}"), f"gates_{name}", frame)


def render_data(analyses: dict, target: int, highlight: Setting) -> None:
    st.caption("Every predicted word with its probability (bar colour: surprisal, brighter = more surprising). "
               "Downloads: the attention heat map (PNG, SVG, standalone HTML) and all numbers (CSV, JSON).")
    for name, sa in analyses.items():
        st.markdown(f"**{md_escape(name)}** · perplexity {sa.perplexity:.1f}")
        st.html(sentence_strip_html(sa, selected=target))
        analysis_downloads(sa, highlight, key=f"data_{name}", full=_with_effects(name, sa))
        if sa.attention is not None:
            st.download_button("Highlighted text + heat map (standalone HTML)", data=lambda sa=sa: highlight_page(sa, target, highlight),
                               file_name=safe_filename(f"{name}-highlight-{sa.text[:20]}") + ".html", mime="text/html",
                               key=f"dl_hl_{name}", icon=":material/download:", on_click="ignore")


def render_position_stats(stats, chart_fn, stem: str, key: str) -> None:
    """The Daniluk-style plot of a :mod:`vizlm.inspect.corpus_stats` position result, its entropy, the effects
    (mean slot effect by position beside the weight, share of words the read moves by > 1 bit), and downloads."""
    if stats.skipped:
        st.caption("Without attention, left out: " + ", ".join(md_escape(n) for n in stats.skipped))
    for name, why in stats.failed.items():  # a model that failed alone: the others are shown
        show_error(f"{name}: {why}")
    if stats.frame.empty:
        st.info("None of the chosen models has attention.", icon=":material/info:")
        return
    # A heading per measure and the model's name as each metric's label: a label of a quarter page holds
    # about 30 characters, so the details are in the delta (short) and the help.
    ncols = min(4, max(1, len(stats.entropy)))
    st.markdown("**Attention entropy** (0 = all weight on one slot)")
    cols = st.columns(ncols)
    for i, (name, value) in enumerate(stats.entropy.items()):
        beyond = max(0.0, stats.beyond[name])  # float noise must not print as "-0%"
        cols[i % len(cols)].metric(
            md_escape(name), f"{value:.2f} nats",
            delta=f"largest {stats.peak[name]:.2f} · {beyond:.0%} beyond", delta_color="off",
            delta_arrow="off",
            help="Mean entropy of the attention rows: 0 = all weight on one slot, log(n) = spread evenly over n slots. "
                 "Below: the mean largest weight of a row (1/n for weights spread evenly over n slots; a flat average "
                 "by position with a large value here means sharp rows that pick different positions), and the share "
                 "of the weight that falls further back than the window shown.")
    if stats.effects:
        st.markdown("**Words the attention moves by > 1 bit**")
        cols = st.columns(ncols)
    for i, (name, e) in enumerate(stats.effects.items()):
        cols[i % len(cols)].metric(
            md_escape(name), f"{e['share_over_1_bit']:.1%}",
            delta=f"mean |effect| {e['mean_abs_read_bits']:.2f} bits", delta_color="off", delta_arrow="off",
            help="Read effect: log₂ P(word) with the attention read minus without it (the read set to zero). "
                 "Share of the predicted words where it is more than 1 bit either way (twice or half as likely); "
                 f"below, the mean size of the effect ({e['mean_abs_read_bits']:.3f} bits) over all "
                 f"{e['tokens']:,} predicted words.")
    st.html(legend_html(list(dict.fromkeys(stats.frame["model"].astype(str)))))
    effects = bool(stats.effects) and stats.frame["effect"].notna().any()
    # side by side while each is one panel; small multiples (more models than OVERLAY_MODELS) one under the other
    beside = effects and stats.frame["model"].nunique() <= OVERLAY_MODELS
    left, right = st.columns(2, gap="large") if beside else (st.container(), st.container() if effects else None)
    width = "stretch" if beside else "content"  # half a page: fit the column, axes included
    with left:
        chart = chart_fn(stats.frame)
        show_chart(chart, width)
        chart_downloads(chart, stem, key, stats.frame)
    if right is not None:
        with right:
            chart = chart_fn(stats.frame, measure="effect")
            show_chart(chart, width)
            chart_downloads(chart, stem + "-effect", key + "_effect", stats.frame)
        st.caption(f"{'Right' if beside else 'Below'}: the mean effect of the slot at each position, in bits — how much log₂ P(word) drops when that "
                   "slot is dropped from the memory (the other weights renormalised). A position can carry much weight "
                   "and little effect.")
    st.caption(f"Bands: {stats.band_note(md_escape)}")


def _share(x) -> str:
    """A share of |attribution| for a metric; a dash where no word gave one (NaN, or JSON's null)."""
    return "—" if x is None or not math.isfinite(x) else f"{max(0.0, x):.1%}"  # float noise must not print "-0.0%"


# Attribution by distance (BY_DISTANCE: gradient x input, no permutation test), the first time (then the disk cache):
# seconds per 1,000 sentences per model on one core, the median of the bundled models over their whole test splits
# (scripts/ship_stats.py's log, one thread on a busy 2-core machine: about twice a quiet core's time).
ATTRIBUTION_SECONDS = {"attention": 30, "plain": 20}


def attribution_estimate(models: list[str], corpus: str, split: str, limit: int | None, sentences: int) -> str | None:
    """What attributing ``models`` over the first ``limit`` sentences (``sentences`` of them) of ``corpus``/``split``
    costs, written for people and said before it starts: only the models whose result is neither in the disk cache
    nor shipped count; None when every one of them is."""
    todo = [m for m in models if not is_stored(get_checkpoint(m), corpus, split, limit=limit, **BY_DISTANCE)]
    if not todo:
        return None
    seconds = sum(ATTRIBUTION_SECONDS["attention" if has_attention(m) else "plain"] for m in todo) * sentences / 1000
    when = f"about {seconds / 60:.0f} minutes" if seconds >= 90 else f"about {max(1, round(seconds))} seconds"
    kept = len(models) - len(todo)
    return (f"Attributing {len(todo)} model{'s' if len(todo) != 1 else ''} over {sentences:,} sentences takes "
            f"{when} the first time on one core (then it comes from the disk cache)"
            + (f"; {kept} more {'is' if kept == 1 else 'are'} read from the cache" if kept else "")
            + "; the Sentences picker in the sidebar limits it.")


def render_attribution_positions(results: list[dict], window: int, stem: str, key: str) -> None:
    """Attribution by distance (:func:`vizlm.inspect.attribution_corpus.corpus_attribution`'s ``positions`` per model, in
    the order of the attention plot's models so the colours match): the chart of the share of |attribution|
    at distances 1..``window + 1`` (:func:`vizlm.inspect.analysis.distance`) beside, per model, the share beyond its attention window; downloads."""
    frame = attribution_positions_frame(results, window)
    left, right = st.columns(2, gap="large")
    with left:
        chart = attribution_positions_chart(frame)
        show_chart(chart, "stretch")
        chart_downloads(chart, stem, key, frame)
    with right:
        st.markdown("**Attribution beyond the attention window**")
        cols = st.columns(2)  # half a page: two metrics a row
        for i, res in enumerate(results):
            p = res["positions"]
            inside, beyond = p["beyond_window"], p["beyond"]
            last = max(p["offset"])
            name = md_escape(res["model"])
            if inside is None:  # no window: what lies past the furthest position kept instead
                value, delta = "no window", f"{_share(beyond['value'])} past distance {distance(last)}"
                info = (f"{name} attends to every earlier word of its reading (or has no attention): it has no "
                        f"window to look beyond. The share of |attribution| at a distance of more than {distance(last)} is "
                        f"{_share(beyond['value'])} (95% interval {_share(beyond['lo'])}–{_share(beyond['hi'])}).")
            else:
                value, delta = _share(inside["value"]), f"95% {_share(inside['lo'])}–{_share(inside['hi'])}"
                info = (f"Mean share of a predicted word's |attribution| on words at a distance of more than "
                        f"{distance(p['window'])}, "
                        f"where {name}'s attention cannot look: what its prediction depends on that reaches it "
                        f"only through the recurrent state. 95% bootstrap interval over {res['resampled']}; "
                        f"{res['targets']:,} predicted words.")
            cols[i % len(cols)].metric(name, value, delta=delta, delta_color="off",
                                       delta_arrow="off", help=info)
        st.caption("Left: the mean share of a predicted word's |attribution| (gradient × input) at each distance "
                   "(1: the word just before it, the word just read), 95% band. Read it beside the attention plot: mass at a position with "
                   "little attention means the prediction depends on a word the attention does not pick; it "
                   "reaches the prediction through the recurrent state.")
