"""Figures of the faithfulness tests (:mod:`vizlm.inspect.faithfulness`): is attention an explanation?

Two kinds of input. Over a split, the dict of :func:`vizlm.inspect.faithfulness_corpus.corpus_faithfulness` (every statistic
with its 95% bootstrap interval): each ``*_frame`` function turns one test of it into a tidy frame (what a
chart draws and a CSV download holds) and each ``*_chart`` function draws that frame with its intervals. For
one predicted word (the Explorer), the frames of :func:`vizlm.inspect.faithfulness.adversarial_row` and
:func:`vizlm.inspect.faithfulness.two_paths`. Like :mod:`vizlm.present.charts`, nothing here displays a figure or calls a model.
"""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from vizlm.inspect.attribution import LABELS as METHOD_LABELS
from vizlm.inspect.faithfulness_corpus import MAX_DISTANCE
from vizlm.present.style import CATEGORICAL

# How people read each ranking of word slots (erasure, AOPC) and each side of an agreement pair.
RANKING_LABELS = {"attention": "attention weight", "gradient": "gradient wrt the weight", "random": "random",
                  **METHOD_LABELS}
# One colour per ranking on every chart of a page: attention first, random last (the floor).
RANKING_ORDER = ("attention", "gradient", "slot-effect", "gradient-x-input", "integrated-gradients", "occlusion",
                 "random")
RANKING_COLOURS = dict(zip(RANKING_ORDER, (CATEGORICAL[0], CATEGORICAL[1], CATEGORICAL[2], CATEGORICAL[3],
                                           CATEGORICAL[4], CATEGORICAL[5], "#888888")))
WIDTH, HEIGHT = 420, 260  # half a page: two charts side by side


def _num(x) -> float:
    """A statistic read back from a cached result: None (JSON's null) as NaN."""
    return math.nan if x is None else float(x)


def _ci(d: dict | None) -> dict:
    d = d or {}
    return {"value": _num(d.get("value")), "lo": _num(d.get("lo")), "hi": _num(d.get("hi"))}


def _label(ranking: str) -> str:
    return RANKING_LABELS.get(ranking, ranking)


def _ranking_colour(rankings: list[str], legend: bool = True) -> alt.Color:
    labels = [_label(r) for r in rankings]
    return alt.Color("label:N", title="ranking", sort=labels, legend=alt.Legend(symbolOpacity=1) if legend else None,
                     scale=alt.Scale(domain=labels, range=[RANKING_COLOURS.get(r, "#000000") for r in rankings]))


def _ordered(rankings) -> list[str]:
    rankings = list(rankings)
    return sorted(rankings, key=lambda r: RANKING_ORDER.index(r) if r in RANKING_ORDER else len(RANKING_ORDER))


def _title(head: str, sub: str) -> alt.Title:
    return alt.Title(head, subtitle=sub, anchor="start")


# --------------------------------------------------------------------------- erasure curves
def erasure_frame(result: dict) -> pd.DataFrame:
    """Serrano & Smith's erasure curves: one row per (ranking, k): ``ranking``, ``label``, ``k``, ``dlogp``
    (mean change of log P(target), nats) with ``dlogp_lo``, ``dlogp_hi``, and ``flip`` (share of predictions
    whose most likely word changed) with ``flip_lo``, ``flip_hi``."""
    rows = []
    for ranking in _ordered(result.get("erasure", {})):
        e = result["erasure"][ranking]
        for i, k in enumerate(e["k"]):
            d, f = _ci(e["dlogp"][i]), _ci(e["flip"][i])
            rows.append({"ranking": ranking, "label": _label(ranking), "k": int(k),
                         "dlogp": d["value"], "dlogp_lo": d["lo"], "dlogp_hi": d["hi"],
                         "flip": f["value"], "flip_lo": f["lo"], "flip_hi": f["hi"]})
    return pd.DataFrame(rows, columns=["ranking", "label", "k", "dlogp", "dlogp_lo", "dlogp_hi", "flip", "flip_lo",
                                       "flip_hi"])


def erasure_chart(frame: pd.DataFrame, measure: str = "dlogp") -> alt.LayerChart:
    """Erasure curves: the top ``k`` word slots of each ranking dropped, ``measure`` (``dlogp`` or ``flip``)
    against k, one line per ranking with its 95% band. A faithful attention drops faster than random and
    close to the gradient's ranking."""
    if measure not in ("dlogp", "flip"):
        raise ValueError(f"measure must be dlogp or flip, not {measure!r}")
    if frame.empty:
        raise ValueError("erasure_chart: no erasure statistics in this frame")
    y_title = "mean Δ log P(word) (nats)" if measure == "dlogp" else "top-1 prediction changed"
    fmt = ".3f" if measure == "dlogp" else ".1%"
    colour = _ranking_colour(list(dict.fromkeys(frame["ranking"])))
    base = alt.Chart(frame).encode(x=alt.X("k:Q", title="word slots dropped (k)", axis=alt.Axis(tickMinStep=1, format="d")),
                                   color=colour)
    band = base.mark_area(opacity=0.15).encode(y=f"{measure}_lo:Q", y2=f"{measure}_hi:Q")
    line = base.mark_line(point=True, strokeWidth=2).encode(
        y=alt.Y(f"{measure}:Q", title=y_title, scale=alt.Scale(zero=True),
                axis=alt.Axis(format=".0%") if measure == "flip" else alt.Axis()),
        tooltip=[alt.Tooltip("label:N", title="ranking"), alt.Tooltip("k:Q"),
                 alt.Tooltip(f"{measure}:Q", title=y_title, format=fmt),
                 alt.Tooltip(f"{measure}_lo:Q", title="95% low", format=fmt),
                 alt.Tooltip(f"{measure}_hi:Q", title="95% high", format=fmt)])
    head = "Erasure curves" if measure == "dlogp" else "Erasure: predictions changed"
    sub = ("log P(word) as read minus with the top k slots dropped; 95% band" if measure == "dlogp"
           else "share of words whose most likely next word changed; 95% band")
    return alt.layer(band, line).properties(width=WIDTH, height=HEIGHT, title=_title(head, sub))


# --------------------------------------------------------------------------- comprehensiveness / sufficiency
def aopc_frame(result: dict) -> pd.DataFrame:
    """ERASER's AOPC per ranking: ``ranking``, ``label``, ``measure`` (comprehensiveness, sufficiency),
    ``value``, ``lo``, ``hi`` (nats, the mean over the fractions of each row's change, 95% interval)."""
    rows = []
    for ranking in _ordered(result.get("aopc", {})):
        for measure in ("comprehensiveness", "sufficiency"):
            rows.append({"ranking": ranking, "label": _label(ranking), "measure": measure,
                         **_ci(result["aopc"][ranking][measure])})
    return pd.DataFrame(rows, columns=["ranking", "label", "measure", "value", "lo", "hi"])


def aopc_chart(frame: pd.DataFrame) -> alt.FacetChart:
    """Comprehensiveness (higher: the ranking found what mattered) and sufficiency (lower: its top slots
    suffice) of each ranking, a point with its 95% interval, side by side."""
    if frame.empty:
        raise ValueError("aopc_chart: no AOPC statistics in this frame")
    rankings = list(dict.fromkeys(frame["ranking"]))
    labels = [_label(r) for r in rankings]
    base = alt.Chart().encode(y=alt.Y("label:N", title=None, sort=labels),
                              color=_ranking_colour(rankings, legend=False))  # the axis names the rankings
    rule = base.mark_rule(strokeWidth=2).encode(x=alt.X("lo:Q", title="AOPC (nats)"), x2="hi:Q")
    point = base.mark_point(filled=True, size=70).encode(
        x="value:Q", tooltip=[alt.Tooltip("label:N", title="ranking"), alt.Tooltip("measure:N"),
                              alt.Tooltip("value:Q", title="AOPC (nats)", format=".3f"),
                              alt.Tooltip("lo:Q", title="95% low", format=".3f"),
                              alt.Tooltip("hi:Q", title="95% high", format=".3f")])
    zero = alt.Chart().mark_rule(color="#888", strokeDash=[4, 4]).encode(x=alt.datum(0))
    # one panel under the other: two side by side do not fit half a page beside the rankings' names
    return alt.layer(zero, rule, point, data=frame).properties(width=WIDTH - 170, height=22 * len(rankings)).facet(
        row=alt.Row("measure:N", title=None, sort=["comprehensiveness", "sufficiency"],
                    header=alt.Header(labelFontSize=12, labelFontWeight="bold", labelAngle=0, labelAlign="left",
                                      labelOrient="top", labelAnchor="start")),
    ).resolve_scale(x="independent").properties(title=_title("Comprehensiveness and sufficiency (AOPC)",
                              "mean over 1–50% of a row's word slots; 95% interval"))


# --------------------------------------------------------------------------- Jain & Wallace's permutations
def permutation_frame(result: dict) -> pd.DataFrame:
    """Jain & Wallace's permutations binned by the row's largest word-slot weight: ``bin`` (``"0.25–0.50"``),
    ``lo_weight``, ``hi_weight``, ``rows``, ``measure`` (TVD, JSD), ``value`` (the median over the bin's rows
    of each row's median over its shuffles), ``lo``, ``hi`` (95% interval)."""
    rows = []
    for b in (result.get("permutations") or {}).get("bins", []):
        name = f"{b['lo']:.2f}–{b['hi']:.2f}"
        for measure, key in (("TVD", "median_tvd"), ("JSD", "median_jsd")):
            rows.append({"bin": name, "lo_weight": b["lo"], "hi_weight": b["hi"], "rows": int(b["rows"]),
                         "measure": measure, **_ci(b[key])})
    return pd.DataFrame(rows, columns=["bin", "lo_weight", "hi_weight", "rows", "measure", "value", "lo", "hi"])


def permutation_chart(frame: pd.DataFrame) -> alt.FacetChart:
    """Median change of the next-word distribution when a row's weights are shuffled over its word slots, by the
    row's largest weight, with 95% intervals (Jain & Wallace 2019, Fig. 4): a panel for the total variation
    distance and one for the Jensen-Shannon divergence, each on its own scale (a JSD is a tenth of a TVD or
    less). Bins without rows are left out."""
    df = frame[frame["rows"] > 0]
    if df.empty:
        raise ValueError("permutation_chart: no row with two word slots in this frame")
    bins = list(dict.fromkeys(frame["bin"]))
    colour = alt.Color("measure:N", legend=None, scale=alt.Scale(domain=["TVD", "JSD"],
                                                                 range=[CATEGORICAL[0], CATEGORICAL[1]]))
    base = alt.Chart().encode(x=alt.X("bin:O", title="largest weight", sort=bins,
                                      axis=alt.Axis(labelAngle=-45)), color=colour)  # four bins in 120 px
    bar = base.mark_bar(opacity=0.8).encode(
        y=alt.Y("value:Q", title="median over rows", scale=alt.Scale(zero=True)),
        tooltip=[alt.Tooltip("bin:N", title="largest weight"), alt.Tooltip("measure:N"),
                 alt.Tooltip("value:Q", title="median", format=".4f"),
                 alt.Tooltip("lo:Q", title="95% low", format=".4f"), alt.Tooltip("hi:Q", title="95% high", format=".4f"),
                 alt.Tooltip("rows:Q", title="rows", format=",")])
    err = base.mark_rule(color="#333", strokeWidth=1.5).encode(y="lo:Q", y2="hi:Q")
    return alt.layer(bar, err, data=df).properties(width=120, height=HEIGHT - 40).facet(  # two fit half a page
        column=alt.Column("measure:N", title=None, sort=["TVD", "JSD"],
                          header=alt.Header(labelFontSize=12, labelFontWeight="bold")),
    ).resolve_scale(y="independent").properties(title=_title(
        "Shuffled attention", "median TVD / JSD (nats) of 100 shuffles; 95% interval"))


# --------------------------------------------------------------------------- agreement and its ceiling
def agreement_frame(result: dict) -> pd.DataFrame:
    """Kendall τ-b per pair: ``pair`` (``"attention ~ gradient × input"``), ``a``, ``b``, ``ceiling`` (True for
    a pair of methods: how far two explanations agree with each other), ``value``, ``lo``, ``hi``; attention's
    pairs first."""
    a = result.get("agreement") or {}
    ceiling = set(a.get("ceiling", []))
    rows = []
    for pair, stat in (a.get("kendall_tau") or {}).items():
        left, right = pair.split("~", 1)
        rows.append({"pair": f"{_label(left)} ~ {_label(right)}", "a": left, "b": right, "ceiling": pair in ceiling,
                     **_ci(stat)})
    frame = pd.DataFrame(rows, columns=["pair", "a", "b", "ceiling", "value", "lo", "hi"])
    return frame.sort_values("ceiling", kind="stable", ignore_index=True)


def agreement_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Mean Kendall τ-b of each pair with its 95% interval: attention against each method, and the methods
    against each other (the ceiling: attention cannot be expected to agree better than they do)."""
    if frame.empty:
        raise ValueError("agreement_chart: no agreement statistics in this frame")
    df = frame.assign(kind=frame["ceiling"].map({False: "attention vs a method", True: "ceiling: method vs method"}))
    colour = alt.Color("kind:N", title=None, legend=alt.Legend(orient="bottom"),
                       scale=alt.Scale(domain=["attention vs a method", "ceiling: method vs method"],
                                       range=[CATEGORICAL[0], "#888888"]))
    base = alt.Chart(df).encode(y=alt.Y("pair:N", title=None, sort=list(df["pair"]), axis=alt.Axis(labelLimit=240)),
                                color=colour)
    rule = base.mark_rule(strokeWidth=2).encode(x=alt.X("lo:Q", title="mean Kendall τ-b", scale=alt.Scale(domain=[-1, 1])),
                                                x2="hi:Q")
    point = base.mark_point(filled=True, size=70).encode(
        x="value:Q", tooltip=[alt.Tooltip("pair:N"), alt.Tooltip("value:Q", title="τ-b", format="+.3f"),
                              alt.Tooltip("lo:Q", title="95% low", format="+.3f"),
                              alt.Tooltip("hi:Q", title="95% high", format="+.3f")])
    zero = alt.Chart(pd.DataFrame({"x": [0.0]})).mark_rule(color="#888", strokeDash=[4, 4]).encode(x="x:Q")
    return alt.layer(zero, rule, point).properties(width=WIDTH - 220, height=22 * len(df), title=_title(
        "Agreement of the rankings", "per row over the words both cover; 95% interval"))


# --------------------------------------------------------------------------- uniform and frozen attention
def uniform_frame(result: dict) -> pd.DataFrame:
    """Wiegreffe & Pinter's baselines: ``attention`` (the model's own, uniform, another seed's), ``nll`` (nats per
    word) with ``nll_lo``, ``nll_hi``, ``perplexity`` (its exponential) with ``ppl_lo``, ``ppl_hi``, and
    ``change`` (NLL minus the model's own: what the model's own weights gain) with ``change_lo``, ``change_hi``."""
    u = result.get("uniform") or {}
    if not u:
        return pd.DataFrame(columns=["attention", "nll", "nll_lo", "nll_hi", "perplexity", "ppl_lo", "ppl_hi",
                                     "change", "change_lo", "change_hi"])
    rows = []
    for name, nll, change in (("own", "nll", None), ("uniform", "uniform_nll", "uniform_minus_own"),
                              ("another seed's", "frozen_nll", "frozen_minus_own")):
        if nll not in u:
            continue
        n = _ci(u[nll])
        c = _ci(u[change]) if change else {"value": 0.0, "lo": 0.0, "hi": 0.0}
        rows.append({"attention": name, "nll": n["value"], "nll_lo": n["lo"], "nll_hi": n["hi"],
                     "perplexity": math.exp(n["value"]), "ppl_lo": math.exp(n["lo"]), "ppl_hi": math.exp(n["hi"]),
                     "change": c["value"], "change_lo": c["lo"], "change_hi": c["hi"]})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- the two paths
def paths_frame(result: dict) -> pd.DataFrame:
    """The two paths by distance (1..:data:`~vizlm.inspect.faithfulness_corpus.MAX_DISTANCE`, then beyond): ``distance``
    (label), ``order``, ``read_share`` (the read's share of ``|read| + |state|``) with ``share_lo``,
    ``share_hi``, and the mean ``|read|``, ``|state|``, ``|total|`` (nats) with their intervals."""
    p = result.get("paths") or {}
    rows = []
    for i, d in enumerate(p.get("distance", [])):
        s = _ci(p["read_share"][i])
        row = {"distance": str(d), "order": i, "read_share": s["value"], "share_lo": s["lo"], "share_hi": s["hi"]}
        for c in ("read", "state", "total"):
            v = _ci(p[c][i])
            row |= {c: v["value"], f"{c}_lo": v["lo"], f"{c}_hi": v["hi"]}
        rows.append(row)
    return pd.DataFrame(rows, columns=["distance", "order", "read_share", "share_lo", "share_hi", "read", "read_lo",
                                       "read_hi", "state", "state_lo", "state_hi", "total", "total_lo", "total_hi"])


def paths_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """The attention read's share of a word's effect on the prediction (|read| / (|read| + |state|)) by its
    distance from the predicted word, with its 95% band; the rest travels through the recurrent state. The
    nearest words on the right, as on the position charts."""
    df = frame[frame["read_share"].notna()]
    if df.empty:
        raise ValueError("paths_chart: no distance with an effect in this frame")
    order = list(frame["distance"])
    x = alt.X("distance:O", sort=list(reversed(order)), axis=alt.Axis(labelAngle=0),
              title=f"distance from the predicted word (1 = the word just read; >{MAX_DISTANCE}: further back)")
    base = alt.Chart(df).encode(x=x)
    band = base.mark_area(opacity=0.2, color=CATEGORICAL[0]).encode(y="share_lo:Q", y2="share_hi:Q")
    line = base.mark_line(point=True, strokeWidth=2, color=CATEGORICAL[0]).encode(
        y=alt.Y("read_share:Q", title="share through the attention read", scale=alt.Scale(domain=[0, 1]),
                axis=alt.Axis(format=".0%")),
        tooltip=[alt.Tooltip("distance:N"), alt.Tooltip("read_share:Q", title="read's share", format=".1%"),
                 alt.Tooltip("share_lo:Q", title="95% low", format=".1%"),
                 alt.Tooltip("share_hi:Q", title="95% high", format=".1%"),
                 alt.Tooltip("read:Q", title="mean |read| (nats)", format=".4f"),
                 alt.Tooltip("state:Q", title="mean |state| (nats)", format=".4f")])
    return alt.layer(band, line).properties(width=WIDTH, height=HEIGHT, title=_title(
        "The two paths by distance", "the read's share of |read| + |state|; 95% band"))


# --------------------------------------------------------------------------- one predicted word (the Explorer)
def adversarial_row_chart(frame: pd.DataFrame, title: str | None = None) -> alt.Chart:
    """The model's own weights over a row's slots beside the adversarial ones
    (:func:`vizlm.inspect.faithfulness.adversarial_row`): two bars per slot, the slots in order."""
    if frame.empty:
        raise ValueError("adversarial_row_chart: the row has no slot")
    labels = [f"{s} {w}" for s, w in zip(frame["slot"], frame["word"])]
    df = pd.DataFrame({"slot": labels * 2, "weights": ["own"] * len(frame) + ["adversarial"] * len(frame),
                       "weight": list(frame["weight"]) + list(frame["adversarial"])})
    colour = alt.Color("weights:N", title=None, scale=alt.Scale(domain=["own", "adversarial"],
                                                                range=[CATEGORICAL[0], CATEGORICAL[5]]))
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("slot:N", title="memory slot", sort=labels, axis=alt.Axis(labelAngle=-45, labelLimit=120)),
        xOffset=alt.XOffset("weights:N", sort=["own", "adversarial"]),
        y=alt.Y("weight:Q", title="attention weight", scale=alt.Scale(domain=[0, 1])), color=colour,
        tooltip=[alt.Tooltip("slot:N"), alt.Tooltip("weights:N"), alt.Tooltip("weight:Q", format=".3f")],
    ).properties(width=max(200, min(560, 36 * len(frame))), height=180,
                 title=_title(title or "Own and adversarial attention", "as far as it goes with P(word) kept"))


def row_paths_chart(frame: pd.DataFrame, title: str | None = None) -> alt.Chart:
    """One predicted word's two paths (:func:`vizlm.inspect.faithfulness.two_paths` of that row): per earlier word, by
    distance, the change of log P(word) (nats) through the attention read and through the recurrent state."""
    if frame.empty:
        raise ValueError("row_paths_chart: the row has read no earlier word")
    df = frame.melt(id_vars=["distance"], value_vars=["read", "state"], var_name="path", value_name="nats")
    order = sorted(frame["distance"].unique(), reverse=True)
    colour = alt.Color("path:N", title=None, scale=alt.Scale(domain=["read", "state"],
                                                             range=[CATEGORICAL[0], CATEGORICAL[1]]))
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("distance:O", sort=order, title="distance from the predicted word (1 = the word just read)",
                axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("path:N", sort=["read", "state"]),
        y=alt.Y("nats:Q", title="Δ log P(word) (nats)"), color=colour,
        tooltip=[alt.Tooltip("distance:O"), alt.Tooltip("path:N"), alt.Tooltip("nats:Q", format="+.4f")],
    ).properties(width=max(200, min(560, 30 * len(frame))), height=180,
                 title=_title(title or "The two paths of this word", "each earlier word occluded: through the read, "
                                                                    "through the state"))
