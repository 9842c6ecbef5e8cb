"""Charts of results over a corpus or a sentence: attention and attribution by position, the comparison of two
models, surprisal, gates, training curves and case counts. Return Altair charts; never display, never call a model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd

from vizlm.inspect.analysis import SentenceAnalysis, distance
from vizlm.inspect.attribution import LABELS as METHOD_LABELS
from vizlm.inspect.case_rules import LABELS
from vizlm.present.style import (
    CATEGORICAL,
    MAX_LABEL_PX,
    MEASURES,
    SCATTER_OPACITY,
    SCHEME,
    WEIGHT_DOMAIN,
    categorical,
    cell_sizes,
    format_prob,
    require_columns,
    short_text,
    target_axis_labels,
    unique_names,
    word_axis,
)


def _distance_x(current: bool = True, ordinal: bool = False, short: bool = False) -> alt.X:
    """The x axis of every chart by position: the distance from the predicted word (:data:`vizlm.inspect.analysis.DISTANCE_NOTE`), the
    nearest word on the right, where the text would go on. ``short``: a title for a small panel."""
    note = ("1 = the word just before it, the word just read; 2 = the newest memory slot" if current
            else "2 = the newest memory slot")
    title = (f"distance ({'1 = the word just read' if current else '2 = the newest slot'})" if short
             else f"distance from the predicted word ({note})")
    return alt.X(f"distance:{'O' if ordinal else 'Q'}", title=title,
                 scale=alt.Scale(reverse=True), axis=alt.Axis(tickMinStep=1, format="d", labelAngle=0))


OVERLAY_MODELS = 3  # positions_chart draws up to this many models in one panel, more as small multiples
FACET_COLUMNS = 4  # small multiples a row: eight models are two rows of a page's width at 1440 px


def positions_chart(frame: pd.DataFrame, title: str | None = None,
                    measure: str = "weight") -> alt.LayerChart | alt.FacetChart:
    """Mean attention weight by relative position, one line per model (Daniluk et al. 2017, Fig. 3);
    with ``measure="effect"`` the mean slot effect (bits) at each position instead.

    ``frame`` columns: model, offset, mean, lo, hi, count (and effect, effect_lo, effect_hi
    for effects); ``offset`` 1 is the most recent memory slot (a Transformer's layers, :func:`vizlm.inspect.corpus_stats.layer_label`,
    start at 0, the word just read). The x axis shows the distance from the predicted
    word (:func:`vizlm.inspect.analysis.distance`: the newest slot holds the word 2 before it), nearest on the right,
    and the band spans the 95% confidence interval of the mean.

    Up to :data:`OVERLAY_MODELS` models share one panel, as in the paper; more get a panel each (small
    multiples, :data:`FACET_COLUMNS` a row, one y scale, each titled with its model and drawn in its colour):
    eight lines in one panel crowd it, and lines that sit on 0 hide one another.
    """
    if measure not in MEASURES:
        raise ValueError(f"measure must be one of {', '.join(MEASURES)}, not {measure!r}")
    effect_mode = measure == "effect"
    need = ["model", "offset", "mean", "lo", "hi", "count"] + (["effect", "effect_lo", "effect_hi"] if effect_mode else [])
    require_columns(frame, need, "positions_chart")
    df = frame.copy()
    if effect_mode:
        df = df[np.isfinite(df["effect"].astype(float))]
        if df.empty:
            raise ValueError("positions_chart: no slot effects in this frame")
    df["distance"] = distance(df["offset"].astype(int))
    models = list(dict.fromkeys(df["model"].astype(str)))
    facets = len(models) > OVERLAY_MODELS
    colour = alt.Color("model:N", title="model", scale=alt.Scale(domain=models, range=categorical(len(models))),
                       legend=None if facets else alt.Legend())
    x = _distance_x(current=bool((df["distance"] == 1).any()), short=facets)  # a Transformer reads the word just read
    value, lo, hi = ("effect", "effect_lo", "effect_hi") if effect_mode else ("mean", "lo", "hi")
    tooltip = [
        alt.Tooltip("model:N"),
        alt.Tooltip("distance:Q", title="distance"),
        alt.Tooltip("mean:Q", title="mean weight", format=".3f"),
        alt.Tooltip(f"{lo}:Q", title="band low", format=".3f"),
        alt.Tooltip(f"{hi}:Q", title="band high", format=".3f"),
        alt.Tooltip("count:Q", title="rows", format=","),
    ]
    if "effect" in df.columns:
        tooltip.insert(3, alt.Tooltip("effect:Q", title="mean effect (bits)", format="+.4f"))
    base = (alt.Chart() if facets else alt.Chart(df)).encode(x=x, color=colour)
    band = base.mark_area(opacity=0.2).encode(y=f"{lo}:Q", y2=f"{hi}:Q")
    y_title = "mean slot effect (bits)" if effect_mode else "mean attention weight"
    line = base.mark_line(point=True, strokeWidth=2).encode(
        y=alt.Y(f"{value}:Q", title=y_title, scale=alt.Scale(zero=True)),
        strokeDash=alt.StrokeDash("model:N", legend=None),
        tooltip=tooltip,
    )
    layers = [band, line]
    if effect_mode:  # no effect: the line the means sit on when the attention does nothing
        rule = alt.Chart() if facets else alt.Chart(pd.DataFrame({"y": [0.0]}))
        layers.insert(0, rule.mark_rule(color="#888", strokeDash=[4, 4]).encode(y=alt.datum(0.0) if facets else "y:Q"))
    if effect_mode:
        head = title or "Mean slot effect by relative position"
        sub = "log₂ P(word) minus the same without that slot"  # half a page wide: the caption says more
    else:
        head, sub = title or "Mean attention by relative position", "cf. Daniluk et al. (2017), Fig. 3"
    heading = alt.Title(head, subtitle=sub, anchor="start")
    if not facets:
        return alt.layer(*layers).properties(width=480, height=300, title=heading)
    # one y scale, so the panels compare; the axes' titles once, on the left column and the bottom row
    header = alt.Header(title=None, labelFontWeight="bold", labelFontSize=12, labelAnchor="start")
    return alt.layer(*layers, data=df).properties(width=170, height=110).facet(
        facet=alt.Facet("model:N", sort=models, header=header), columns=FACET_COLUMNS, title=heading)


ATTRIBUTION_POSITION_COLUMNS = ["model", "method", "offset", "mean", "lo", "hi", "count", "attention"]


def _number(x) -> float:
    """A statistic read back from a cached result: None (JSON's null) as NaN."""
    return math.nan if x is None else float(x)


def attribution_positions_frame(results: Sequence[dict], window: int | None = None) -> pd.DataFrame:
    """One row per (model, offset) of :func:`vizlm.inspect.attribution_corpus.corpus_attribution` results (its ``positions``
    part), offsets ``0..window`` (every one it kept without ``window``), the models in the given order (their
    colours in :func:`attribution_positions_chart`, as in :func:`positions_chart`).

    Columns: model (the result's label, as the position statistics name it), method, offset (0 = the word just
    read, 1 = the word before it: the attention's most recent slot), mean (share of a predicted word's
    ``|attribution|`` at that many words back, over the words whose reading reaches it), lo, hi (its 95%
    interval), count (those words), attention (the mean attention weight there; NaN without attention, and at
    offset 0, which no memory slot holds).
    """
    rows = []
    for res in results:
        p = res["positions"]
        attention = p.get("attention")
        for i, offset in enumerate(p["offset"]):
            if window is not None and offset > window:
                continue
            rows.append({"model": str(res["model"]), "method": res.get("method"), "offset": int(offset),
                         "mean": _number(p["mean"][i]), "lo": _number(p["lo"][i]), "hi": _number(p["hi"][i]),
                         "count": int(p["count"][i]),
                         "attention": _number(attention[i]) if attention is not None else math.nan})
    return pd.DataFrame.from_records(rows, columns=ATTRIBUTION_POSITION_COLUMNS)


def attribution_positions_chart(frame: pd.DataFrame, title: str | None = None, current: bool = True) -> alt.LayerChart:
    """Attribution by distance: the mean share of a predicted word's ``|attribution|`` at each position back,
    one line per model with its 95% band, drawn like :func:`positions_chart` (same x axis, same colours in
    the same model order) so that where the attention looks sits beside where the prediction depends.

    ``frame``: :func:`attribution_positions_frame`. With ``current`` the word just read (offset 0, at distance 1
    on the x axis, marked) is drawn too: the prediction depends on it most, and no attention slot holds it.
    Positions no word reaches (NaN) are left out.
    """
    require_columns(frame, ["model", "offset", "mean", "lo", "hi", "count"], "attribution_positions_chart")
    df = frame[np.isfinite(frame["mean"].astype(float))].copy()
    if not current:
        df = df[df["offset"].astype(int) >= 1]
    if df.empty:
        raise ValueError("attribution_positions_chart: no position in this frame has an attribution")
    df["distance"] = distance(df["offset"].astype(int))
    models = list(dict.fromkeys(df["model"].astype(str)))
    colour = alt.Color("model:N", title="model", scale=alt.Scale(domain=models, range=categorical(len(models))))
    x = _distance_x(current=current)
    tooltip = [
        alt.Tooltip("model:N"),
        alt.Tooltip("distance:Q", title="distance"),
        alt.Tooltip("mean:Q", title="share of |attribution|", format=".1%"),
        alt.Tooltip("lo:Q", title="band low", format=".1%"),
        alt.Tooltip("hi:Q", title="band high", format=".1%"),
        alt.Tooltip("count:Q", title="words", format=","),
    ]
    if "attention" in df.columns and np.isfinite(df["attention"].astype(float)).any():
        tooltip.insert(3, alt.Tooltip("attention:Q", title="mean attention weight", format=".3f"))
    base = alt.Chart(df).encode(x=x, color=colour)
    band = base.mark_area(opacity=0.2).encode(y="lo:Q", y2="hi:Q")
    line = base.mark_line(point=True, strokeWidth=2).encode(
        y=alt.Y("mean:Q", title="share of |attribution|", scale=alt.Scale(zero=True), axis=alt.Axis(format=".0%")),
        strokeDash=alt.StrokeDash("model:N", legend=None),
        tooltip=tooltip,
    )
    layers: list[alt.Chart] = [band, line]
    if current:  # the word just read is no memory slot: a rule and a label say what distance 1 is
        mark = alt.Chart(pd.DataFrame({"distance": [distance(0)], "label": ["word just read"]}))
        layers.insert(0, mark.mark_rule(color="#888", strokeDash=[4, 4]).encode(x=alt.X("distance:Q")))
        layers.append(mark.mark_text(align="right", baseline="top", dx=-4, dy=4, color="#555")
                      .encode(x=alt.X("distance:Q"), y=alt.value(0), text="label:N"))
    methods = list(dict.fromkeys(frame["method"].dropna().astype(str))) if "method" in frame.columns else []
    method = METHOD_LABELS.get(methods[0], methods[0]) if len(methods) == 1 else "attribution"
    return alt.layer(*layers).properties(
        width=480,
        height=300,
        title=alt.Title(title or "Attribution by distance",
                        subtitle=f"{method}: mean share of a predicted word's |attribution|, 95% band", anchor="start"),
    )


def comparison_scatter(table: pd.DataFrame, name_a: str, name_b: str) -> alt.LayerChart:
    """Per-sentence perplexity of model A (x) against model B (y), log axes, with the line y = x.

    ``table`` columns: sentence_id, text, length, ppl_a, ppl_b, difference, log_ratio.
    Points below the diagonal are sentences where B is better. Rows with a
    non-finite or non-positive perplexity cannot sit on a log axis and are dropped.
    The points are translucent and the larger group is drawn first: drawn in sentence order at a
    high opacity, one group's points covered the other's (a split B improved in 53% looked mostly
    like A's colour).
    """
    require_columns(table, ["sentence_id", "text", "length", "ppl_a", "ppl_b", "difference", "log_ratio"],
             "comparison_scatter")
    df = table.copy()
    ok = np.isfinite(df["ppl_a"].astype(float)) & np.isfinite(df["ppl_b"].astype(float))
    df = df[ok & (df["ppl_a"] > 0) & (df["ppl_b"] > 0)].copy()
    df["sentence"] = df["text"].astype(str).map(lambda t: short_text(t, 120))
    better_a, better_b = f"{name_a} lower", f"{name_b} lower"
    df["better"] = np.where(df["ppl_a"] < df["ppl_b"], better_a, np.where(df["ppl_b"] < df["ppl_a"], better_b, "equal"))
    size = df.groupby("better")["better"].transform("size")  # (n,) the size of each point's group
    df = df.assign(size=size).sort_values("size", ascending=False, kind="stable").drop(columns="size")  # drawn in this order
    if len(df):
        lo, hi = float(min(df["ppl_a"].min(), df["ppl_b"].min())), float(max(df["ppl_a"].max(), df["ppl_b"].max()))
    else:
        lo, hi = 1.0, 10.0
    diag = pd.DataFrame({"v": [lo, hi]})
    lo, hi = lo / 1.15, hi * 1.15  # a margin so points on the edge are not cut
    scale = alt.Scale(type="log", domain=[lo, hi], nice=False)
    points = alt.Chart(df).mark_circle(size=36, opacity=SCATTER_OPACITY).encode(
        x=alt.X("ppl_a:Q", title=f"perplexity: {name_a}", scale=scale),
        y=alt.Y("ppl_b:Q", title=f"perplexity: {name_b}", scale=scale),
        color=alt.Color("better:N", title="", scale=alt.Scale(domain=[better_a, better_b, "equal"],
                                                                range=[CATEGORICAL[0], CATEGORICAL[1], "#999999"])),
        tooltip=[
            alt.Tooltip("sentence_id:N", title="sentence"),
            alt.Tooltip("sentence:N", title="text"),
            alt.Tooltip("length:Q", title="words"),
            alt.Tooltip("ppl_a:Q", title=f"ppl {name_a}", format=".1f"),
            alt.Tooltip("ppl_b:Q", title=f"ppl {name_b}", format=".1f"),
            alt.Tooltip("difference:Q", title="difference", format=".1f"),
            alt.Tooltip("log_ratio:Q", title="log ratio", format=".3f"),
        ],
    )
    line = alt.Chart(diag).mark_line(color="#555555", strokeDash=[4, 4]).encode(x="v:Q", y="v:Q")
    return alt.layer(line, points).properties(
        width=420,
        height=420,
        title=alt.Title(f"Per-sentence perplexity: {name_a} vs {name_b}", subtitle="dashed line: equal perplexity",
                        anchor="start"),
    )


def surprisal_chart(analyses: Sequence[SentenceAnalysis], title: str | None = None) -> alt.Chart:
    """Surprisal (bits) of each predicted word, bars grouped by model (one or more analyses)."""
    if not analyses:
        raise ValueError("surprisal_chart needs at least one analysis")
    first = analyses[0]
    words = [t if r < len(first.tokens) else "</s>" for r, t in enumerate(first.tokens + ["</s>"])]
    labels = [f"{r + 2} {w}" for r, w in enumerate(words)]
    names = unique_names([sa.model for sa in analyses])
    frames = []
    for name, sa in zip(names, analyses):
        T = len(sa.targets)
        n = min(T, len(labels))
        unk = list(sa.unk) + [False]
        frames.append(pd.DataFrame({
            "model": name,
            "word": labels[:n],
            "predicted": sa.targets[:n],
            "prob": [format_prob(p) for p in sa.probs[:n].tolist()],  # the tooltip's text
            "surprisal": sa.surprisal[:n],
            "unk": ["yes" if u else "no" for u in unk[:n]],
        }))
    df = pd.concat(frames, ignore_index=True)
    df["surprisal"] = df["surprisal"].where(np.isfinite(df["surprisal"]), None)
    cell, font, angle = cell_sizes(len(labels))
    # with grouped bars a plain step would size each model's bar; "for: position" sizes each word's group
    step = max(12, min(36, cell + 4)) if len(names) == 1 else max(16, min(60, round(cell * 1.6)))
    chart = alt.Chart(df).mark_bar().encode(
        x=alt.X("word:N", title="predicted word", scale=alt.Scale(domain=labels),
                axis=word_axis(angle, font)),
        y=alt.Y("surprisal:Q", title="surprisal (bits)"),
        color=alt.Color("model:N", title="model", scale=alt.Scale(domain=names, range=categorical(len(names)))),
        tooltip=[
            alt.Tooltip("model:N"),
            alt.Tooltip("predicted:N", title="predicted"),
            alt.Tooltip("prob:N", title="probability"),
            alt.Tooltip("surprisal:Q", title="surprisal (bits)", format=".2f"),
            alt.Tooltip("unk:N", title="<unk>"),
        ],
    )
    if len(names) > 1:
        chart = chart.encode(xOffset=alt.XOffset("model:N", scale=alt.Scale(domain=names)))
    return chart.properties(
        width=alt.Step(step, **{"for": "position"}),
        height=220,
        title=alt.Title(title or "Surprisal per word", subtitle=short_text(first.text), anchor="start"),
    )


def gates_chart(sa: SentenceAnalysis, dims: bool = False) -> alt.Chart:
    """AMSRN selection gate g1 (Liu & Lee) per predicted word.

    Default: the mean gate value of each target row as bars (in [0, 1], coloured on
    the attention scale), with the spread in the tooltip. ``dims=True`` draws the
    full [T, d] gate matrix as a heat map instead. Raises ``ValueError`` without gates.
    """
    if sa.gates is None:
        raise ValueError(f"model {sa.model!r} has no selection gates")
    g = np.asarray(sa.gates, dtype=float)  # (T, d)
    T, d = g.shape
    labels = target_axis_labels(sa)[:T]
    cell, font, angle = cell_sizes(T)
    title = alt.Title(f"{sa.model}: memory selection gate", subtitle=short_text(sa.text), anchor="start")
    colour_scale = alt.Scale(scheme=SCHEME, domain=list(WEIGHT_DOMAIN))
    if dims:
        rr, dd = np.meshgrid(np.arange(T), np.arange(d), indexing="ij")
        df = pd.DataFrame({"target": [labels[r] for r in rr.ravel()], "dim": dd.ravel(), "gate": g.ravel()})
        return alt.Chart(df).mark_rect().encode(
            x=alt.X("dim:O", title="hidden unit", axis=alt.Axis(labelOverlap=True, labelFontSize=8)),
            y=alt.Y("target:N", title="predicted word", scale=alt.Scale(domain=labels),
                    axis=alt.Axis(labelFontSize=font, labelLimit=MAX_LABEL_PX)),
            color=alt.Color("gate:Q", title="gate", scale=colour_scale),
            tooltip=[alt.Tooltip("target:N"), alt.Tooltip("dim:O", title="unit"),
                     alt.Tooltip("gate:Q", format=".3f")],
        ).properties(width=alt.Step(max(2, min(12, 600 // max(d, 1)))), height=alt.Step(cell), title=title)
    df = pd.DataFrame({
        "target": labels,
        "mean": g.mean(1),
        "std": g.std(1),
        "open": (g > 0.5).mean(1),
    })
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("target:N", title="predicted word", scale=alt.Scale(domain=labels),
                axis=word_axis(angle, font)),
        y=alt.Y("mean:Q", title="mean gate value", scale=alt.Scale(domain=list(WEIGHT_DOMAIN))),
        color=alt.Color("mean:Q", title="gate", scale=colour_scale),
        tooltip=[
            alt.Tooltip("target:N", title="predicted"),
            alt.Tooltip("mean:Q", title="mean", format=".3f"),
            alt.Tooltip("std:Q", title="std", format=".3f"),
            alt.Tooltip("open:Q", title="units > 0.5", format=".0%"),
        ],
    ).properties(width=alt.Step(max(12, cell)), height=200, title=title)


def training_curve_chart(name: str, log: list[dict]) -> alt.LayerChart | alt.Chart:
    """Train and validation perplexity per epoch from ``train_log.jsonl`` (log scale)."""
    rows = [{"epoch": e.get("epoch"), "split": split, "perplexity": e.get(f"{split}_perplexity")}
            for e in log for split in ("train", "valid")]
    df = pd.DataFrame(rows, columns=["epoch", "split", "perplexity"]).dropna()
    df = df.drop_duplicates(["epoch", "split"], keep="last")  # a resumed run logs an epoch again
    # fit the axis to the data: a run started from a trained model moves only a few points
    domain = [float(df["perplexity"].min()) * 0.97, float(df["perplexity"].max()) * 1.03] if len(df) else None
    lines = alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("epoch:Q", title="epoch", axis=alt.Axis(tickMinStep=1, format="d")),
        y=alt.Y("perplexity:Q", title="perplexity", scale=alt.Scale(type="log", domain=domain, nice=False) if domain else alt.Scale(type="log")),
        color=alt.Color("split:N", title=None, scale=alt.Scale(domain=["train", "valid"], range=list(CATEGORICAL[:2])),
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


CASES_CHART_PX = 260  # the case counts' plot: with its axis, two fifths of the Cases page at 1440 px, beside the tables


def case_counts_chart(frame: pd.DataFrame) -> alt.Chart:
    """Grouped horizontal bars: share of highlighted pairs per case label, one colour per model (more
    models make the chart taller, never wider than its column).

    ``frame``: model, label, count, share (rows labelled ``unlabelled`` are left out).
    """
    frame = frame[frame["label"] != "unlabelled"]
    models = list(dict.fromkeys(frame["model"].astype(str)))
    return alt.Chart(frame).mark_bar().encode(
        y=alt.Y("label:N", title=None, sort=list(LABELS), axis=alt.Axis(labelFontSize=12, labelOverlap=False)),
        yOffset=alt.YOffset("model:N", sort=models),
        x=alt.X("share:Q", title="share of highlighted pairs", axis=alt.Axis(format="%", tickCount=5)),
        color=alt.Color("model:N", scale=alt.Scale(domain=models, range=categorical(len(models))), title="model",
                        legend=alt.Legend(orient="bottom", columns=2)),
        tooltip=["model:N", "label:N", alt.Tooltip("count:Q", format=",", title="pairs"),
                 alt.Tooltip("share:Q", format=".1%", title="share of pairs")],
    ).properties(width=CASES_CHART_PX, height=alt.Step(max(40, 12 * len(models)), **{"for": "position"}),
                 # the plot is CASES_CHART_PX wide and the axes and key come on top, in the app as in the downloads
                 # (Streamlit's default, "fit", would squeeze all of it into that width)
                 autosize=alt.AutoSizeParams(type="pad", contains="padding"),
                 title=alt.Title("Case labels per model", subtitle="share of each model's highlighted pairs", anchor="start"))


def sentence_positions_chart(frame: pd.DataFrame, name: str, text: str) -> alt.Chart:
    """One sentence: attention weight at each distance from the predicted word (x, nearest right) for every
    predicted word (y).

    ``frame`` is :func:`vizlm.inspect.corpus_stats.sentence_positions` (target, word, offset, weight, attended),
    coloured on the attention scale.
    """
    df = frame.copy()
    df["distance"] = distance(df["offset"].astype(int))
    df["row"] = [f"{t + 2} {w}" for t, w in zip(df["target"], df["word"])]
    rows = list(dict.fromkeys(df["row"]))
    return alt.Chart(df).mark_rect().encode(
        x=_distance_x(current=False, ordinal=True),
        y=alt.Y("row:N", title="predicted word", sort=rows),
        color=alt.Color("weight:Q", title="attention", scale=alt.Scale(scheme=SCHEME, domain=list(WEIGHT_DOMAIN))),
        tooltip=[alt.Tooltip("word:N", title="predicting"), alt.Tooltip("attended:N", title="attended word"),
                 alt.Tooltip("distance:Q", title="distance"), alt.Tooltip("weight:Q", format=".3f")],
    ).properties(width=alt.Step(28), height=alt.Step(16),
                 title=alt.Title(f"{name}: attention by position, word by word", subtitle=short_text(text, 60), anchor="start"))
