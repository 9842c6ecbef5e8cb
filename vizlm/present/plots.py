"""Figures for one sentence or one corpus: Altair charts and small HTML fragments.

Every function takes plain results (:class:`~vizlm.inspect.analysis.SentenceAnalysis`,
data frames) and returns a figure object or an HTML string. Nothing here
displays a figure or calls a model (style.md, item 5); :mod:`vizlm.present.export`
turns charts into PNG / SVG / HTML with vl-convert, without a browser.

One colour scale for attention everywhere: :data:`SCHEME` over the fixed domain
:data:`WEIGHT_DOMAIN`, so heat maps of two models side by side, and the
highlighted text, read on the same scale. Viridis is perceptually uniform and
stays ordered for the common colour-vision deficiencies and in greyscale.
Slot effects (``measure="effect"``) use one diverging scale, :data:`EFFECT_SCHEME`
over ``±EFFECT_DOMAIN_BITS``, centred at 0.

Labels. Slot ``j`` is labelled ``"j word"`` (``"0 <s>"``, ``"1 <s>"``, ``"2 the"``).
A target row is labelled with the number its word gets once it is in memory
(row ``r`` predicts ``w_{r+1}``, later held by slot ``r + 2``), so one word has
one number on both axes: for "the dogs ..." the first rows read ``"2 the"``,
``"3 dogs"``. The last word of a sentence read alone is never held: its number is the next
sentence's start slot, ``<s>``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd

from vizlm.inspect.analysis import DEFAULT_THRESHOLD, SentenceAnalysis, distance
from vizlm.inspect.reading import BOUNDARY
from vizlm.inspect.attribution import LABELS as METHOD_LABELS
from vizlm.inspect.attribution import DEFAULT_SHARE, Attribution
from vizlm.inspect.case_rules import LABELS
from vizlm.data.text import clean_text

SCHEME = "viridis"  # Vega scheme name used by every attention colour scale
WEIGHT_DOMAIN = (0.0, 1.0)  # fixed, so charts of different models share one scale
# Slot effects (bits) on a diverging scale centred at 0: blue where the slot helped the prediction,
# red where it hurt, white where it changed nothing. Fixed at +-1 bit (clipped beyond) for every model,
# so that tiny effects look tiny: a busy weight map can be a blank effect map. Red-blue stays readable
# under the common red-green colour-vision deficiencies.
EFFECT_SCHEME = "redblue"
EFFECT_DOMAIN_BITS = 1.0
MEASURES = ("weight", "effect")  # what a heat map colours
SURPRISAL_MAX_BITS = 16.0  # top of the surprisal colour scale (clipped above); 2^16 ~ 1 in 65k
# Viridis sampled at 0, 0.1, ..., 1 (matplotlib's table, which Vega's "viridis" also follows): colours the
# HTML text like the charts. Change it together with SCHEME; tests/test_export.py checks that they agree.
_VIRIDIS = (
    "#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c",
    "#22a884", "#44bf70", "#7ad151", "#bddf26", "#fde725",
)  # fmt: skip
# Vega's "redblue" (ColorBrewer RdBu as a smooth ramp, red at the low end) sampled at 0, 0.1, ..., 1, as Vega draws
# it: colours effects in HTML like the heat map's EFFECT_SCHEME. Change it together with EFFECT_SCHEME;
# tests/test_api.py checks that they agree.
_REDBLUE = (
    "#8c0d25", "#bf363a", "#df745e", "#f4ae91", "#fbdbc9", "#f2efee",
    "#d2e5ef", "#9dcae1", "#5da2cb", "#2f78b3", "#134b85",
)  # fmt: skip
# Okabe & Ito (2008) categorical palette: distinguishable under the common colour-vision deficiencies.
CATEGORICAL = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
# More models than that: Vega's "tableau20" (ten hues, each dark and light), so that no two share a colour.
CATEGORICAL_WIDE = (
    "#4c78a8", "#9ecae9", "#f58518", "#ffbf79", "#54a24b", "#88d27a", "#b79a20", "#f2cf5b", "#439894", "#83bcb6",
    "#e45756", "#ff9d98", "#79706e", "#bab0ac", "#d67195", "#fcbfd2", "#b279a2", "#d6a5c9", "#9e765f", "#d8b5a5",
)  # fmt: skip
UNK_TITLE = "not in vocabulary (read as <unk>)"
HIGHLIGHT_MIN_ALPHA = 0.3  # the faintest highlight in running text (weight 0) is 30% colour, 70% white
_MAX_LABEL_PX = 140  # long tokens are cut with an ellipsis on axes
WINDOW_ROWS = 40  # rows of a heat map window around the selected word (heatmap_rows): a long passage stays readable
OUTLINE_COLOUR, OUTLINE_HALO = "#000000", "#ffffff"  # a highlighted cell of a heat map (_outlines)
SELECTED_COLOUR = "#d55e00"  # the outline of the predicted word, in the running text and the heat map
SCATTER_OPACITY = 0.35  # thousands of sentences overlap: where both groups lie, both colours show


# --------------------------------------------------------------------------- colours


def _distance_x(current: bool = True, ordinal: bool = False, short: bool = False) -> alt.X:
    """The x axis of every chart by position: the distance from the predicted word (:data:`vizlm.inspect.analysis.DISTANCE_NOTE`), the
    nearest word on the right, where the text would go on. ``short``: a title for a small panel."""
    note = ("1 = the word just before it, the word just read; 2 = the newest memory slot" if current
            else "2 = the newest memory slot")
    title = (f"distance ({'1 = the word just read' if current else '2 = the newest slot'})" if short
             else f"distance from the predicted word ({note})")
    return alt.X(f"distance:{'O' if ordinal else 'Q'}", title=title,
                 scale=alt.Scale(reverse=True), axis=alt.Axis(tickMinStep=1, format="d", labelAngle=0))


def palette(value: float, vmin: float = WEIGHT_DOMAIN[0], vmax: float = WEIGHT_DOMAIN[1],
            table: Sequence[str] = _VIRIDIS) -> str:
    """Hex colour of ``value`` on the :data:`SCHEME` scale (or another sampled ``table``) over
    ``[vmin, vmax]`` (clipped)."""
    if value is None or not math.isfinite(value):
        return "#ffffff"
    t = min(1.0, max(0.0, (value - vmin) / (vmax - vmin) if vmax > vmin else 0.0))
    pos = t * (len(table) - 1)
    i = min(int(pos), len(table) - 2)
    a, b = _rgb(table[i]), _rgb(table[i + 1])
    f = pos - i
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b))


def effect_colour(bits: float) -> str:
    """Hex colour of a slot effect on the :data:`EFFECT_SCHEME` scale over ``±EFFECT_DOMAIN_BITS``
    (clipped), centred at 0 as the heat map's: blue where the slot helped, red where it hurt."""
    return palette(bits, -EFFECT_DOMAIN_BITS, EFFECT_DOMAIN_BITS, _REDBLUE)


def highlight_colour(value: float) -> str:
    """Background of an attended word in running text: the :data:`SCHEME` colour of ``value``, faded
    towards white as the weight falls, so a light touch reads lighter than a strong one (on its own,
    viridis is darkest at zero)."""
    alpha = HIGHLIGHT_MIN_ALPHA + (1 - HIGHLIGHT_MIN_ALPHA) * min(1.0, max(0.0, value if math.isfinite(value) else 0.0))
    return "#" + "".join(f"{round(255 + (c - 255) * alpha):02x}" for c in _rgb(palette(value)))


def attention_key_html(weights: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9)) -> str:
    """A colour key for :func:`highlighted_html`: a swatch per weight, coloured the same way."""
    swatches = "".join(
        f'<span style="{_SPAN}background:{highlight_colour(w)};color:{text_colour(highlight_colour(w))};'
        f'min-width:2.4em;text-align:center">{w:.1f}</span>'
        for w in weights
    )
    return (f'<div class="vizlm-key" style="font-size:0.8em;color:#555">attention weight {swatches}'
            f' <span style="{_MARKER}">outlined</span> = the predicted word</div>')


def text_colour(background: str) -> str:
    """Black or white, whichever reads better on ``background`` (WCAG relative luminance)."""
    lin = [c / 255 for c in _rgb(background)]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in lin]
    lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "#000000" if lum > 0.179 else "#ffffff"


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


# --------------------------------------------------------------------------- labels and numbers


def format_prob(p: float) -> str:
    """A probability for people, the one format of the app, the plots and the exports: three decimals
    from 0.01 (``0.103``, ``0.032``), two significant digits below (``4.1e-4``), so a small probability
    is never shown as 0 and two of them stay apart (``0.0004`` would hide a 0.16-bit effect); "–" for NaN."""
    if not math.isfinite(p):
        return "–"
    if p >= 0.01 or p == 0:
        return f"{p:.3f}"
    mantissa, exponent = f"{p:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def slot_axis_labels(sa: SentenceAnalysis) -> list[str]:
    """[S] ``"j word"`` for each memory slot."""
    return [f"{j} {w}" for j, w in enumerate(sa.slot_labels)]


def target_axis_labels(sa: SentenceAnalysis) -> list[str]:
    """[T] ``"k word"`` for each target row, ``k`` being the slot the word will occupy (``r + 2``), the word as
    read (:attr:`SentenceAnalysis.norms`, as the slot and position axes write it: an out-of-vocabulary word too,
    not ``<unk>``)."""
    return [f"{r + 2} {sa.norms[r] if r < len(sa.norms) else w}" for r, w in enumerate(sa.targets)]


def _sizes(n: int) -> tuple[int, int, int]:
    """(cell px, font px, x label angle) for an ``n`` x ``n`` grid: small grids get big cells."""
    cell = int(min(30, max(9, 640 // max(n, 1))))
    font = int(min(12, max(8, round(cell * 0.6))))
    angle = -45 if cell >= 1.5 * font else -90
    return cell, font, angle


def _x_axis(angle: int, font: int) -> alt.Axis:
    """Word labels under a grid. At -45 degrees the cells are wide enough for every label
    (see :func:`_sizes`), and Vega's overlap test, which uses the rotated labels' upright
    bounding boxes, would hide most of them; at -90 degrees the test is exact."""
    return alt.Axis(
        labelAngle=angle,
        labelFontSize=font,
        labelLimit=_MAX_LABEL_PX,
        labelOverlap=angle == -90,
        labelAlign="right",
        labelBaseline="middle" if angle == -90 else "top",
    )


def _subtitle(text: str, limit: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- charts


def heatmap_rows(sa: SentenceAnalysis, selected: int, size: int | None = None) -> tuple[int, int]:
    """The rows ``(first, end)`` of a heat map window of ``size`` rows (default :data:`WINDOW_ROWS`)
    around the ``selected`` one; every row when the text has no more."""
    size = size or WINDOW_ROWS
    T = len(sa.targets)
    if T <= size:
        return 0, T
    first = min(max(0, selected - size // 2), T - size)
    return first, first + size


def window_slots(allowed: np.ndarray, rows: tuple[int, int]) -> list[int]:
    """The slots a heat map of ``rows`` shows: the start slot if any row may use it, and the slots from
    the oldest other one a row may use to the newest (gaps stay blank), at most as many as there are rows:
    the newest ones. A window of a long passage whose model reaches far back (a memory of 100) would
    otherwise open on slots a hundred words old, the selected row's recent ones off to the right."""
    r0, r1 = rows
    used = np.flatnonzero(allowed[r0:r1].any(0))  # (n,)
    later = used[used >= 1]
    start = [0] if len(used) and used[0] == 0 else []
    if not len(later):
        return start
    newest = int(later[-1])
    return start + list(range(max(int(later[0]), newest + 1 - (r1 - r0)), newest + 1))


def _selected_row(ylab: list[str], row_domain: list[str], selected: int | None,
                  rows: tuple[int, int]) -> list[alt.Chart]:
    """The selected word's row of a heat map, outlined like in the running text (none when it is not drawn)."""
    if selected is None or not rows[0] <= selected < rows[1]:
        return []
    return [alt.Chart(pd.DataFrame({"target": [ylab[selected]]})).mark_rect(
        filled=False, stroke=SELECTED_COLOUR, strokeWidth=2,
    ).encode(y=alt.Y("target:N", scale=alt.Scale(domain=row_domain)))]


def _outlines(base: alt.Chart, cell: int, tooltip: list) -> list[alt.Chart]:
    """The outline of a heat map's highlighted cells: a black line inside a white halo, the same on every
    cell. One colour that shows on the whole scale: black on the light cells, the halo on the dark ones
    and where a cell borders the blank (white) part of the map, where a white outline alone vanished."""
    width = max(1.5, cell / 10)
    marked = base.transform_filter(alt.datum.highlighted)
    return [marked.mark_rect(filled=False, stroke=OUTLINE_HALO, strokeWidth=width + 2),
            marked.mark_rect(filled=False, stroke=OUTLINE_COLOUR, strokeWidth=width).encode(tooltip=tooltip)]


def _window_subtitle(sa: SentenceAnalysis, rows: tuple[int, int]) -> str:
    """A heat map's first subtitle: the text, and which of its words the rows are when they are a window."""
    (r0, r1), T = rows, len(sa.targets)
    if (r0, r1) == (0, T):
        return _subtitle(sa.text)
    return f"words {r0 + 2} to {r1 + 1} of {T + 1} (a window) · " + _subtitle(sa.text, 70)


def _boundary_rules(sa: SentenceAnalysis, ylab: list[str], xlab: list[str], rows: list[str],
                    slots: list[str]) -> list[alt.Chart]:
    """Grey lines between two sentences of a passage: above the row predicting a sentence's first
    word, and left of the slot that starts it (the start slot of a sentence read afresh, the first word
    in running text)."""
    restarts = set(sa.restarts)  # boundary token b: start slot b + 1 (a restart), its next word b + 3
    starts = [b + (1 if b in restarts else 3) for b in sa.boundaries]
    row_lines = [ylab[b + 1] for b in sa.boundaries if ylab[b + 1] in rows]
    slot_lines = [xlab[j] for j in starts if j < len(xlab) and xlab[j] in slots]
    style = {"color": "#888888", "strokeDash": [4, 3], "strokeWidth": 1.5}
    out = []
    if slot_lines:
        out.append(alt.Chart(pd.DataFrame({"slot": slot_lines})).mark_rule(**style).encode(
            x=alt.X("slot:N", scale=alt.Scale(domain=slots), bandPosition=0)))
    if row_lines:
        out.append(alt.Chart(pd.DataFrame({"target": row_lines})).mark_rule(**style).encode(
            y=alt.Y("target:N", scale=alt.Scale(domain=rows), bandPosition=0)))
    return out


def attention_heatmap(
    sa: SentenceAnalysis,
    threshold: float | None = None,
    title: str | None = None,
    top_k: int | None = None,
    values: bool | None = None,
    measure: str = "weight",
    rows: tuple[int, int] | None = None,
    selected: int | None = None,
) -> alt.LayerChart:
    """Targets (rows, top to bottom) x memory slots (columns); colour = attention weight, or with
    ``measure="effect"`` the slot effect in bits (:attr:`SentenceAnalysis.slot_effects`: how much
    log2 P(word) drops without that slot), on a diverging scale centred at 0.

    Masked cells (future slots, slots outside a window, another sentence read alone; in effect
    mode also effects not computed) are left blank. With ``threshold`` or ``top_k``, the cells
    :meth:`SentenceAnalysis.highlights` picks (the same ones :func:`highlighted_html`
    colours) get an outline. ``values`` writes the weight (effect) in each cell (default:
    only when the cells are big enough). ``rows`` ``(first, end)`` draws those rows only, and the
    newest slots they may use, as many as rows (:func:`heatmap_rows`: a window around a word of a long
    passage, square, ending at the newest slot, so the selected row's recent slots are in view);
    ``selected`` outlines a row. Dashed lines separate the sentences of a passage. Raises
    ``ValueError`` for models without attention, and in effect mode for an analysis without
    slot effects.
    """
    if measure not in MEASURES:
        raise ValueError(f"measure must be one of {', '.join(MEASURES)}, not {measure!r}")
    if sa.attention is None:
        raise ValueError(f"model {sa.model!r} has no attention to plot")
    effect_mode = measure == "effect"
    if effect_mode and sa.slot_effects is None:
        raise ValueError(f"the analysis of {sa.model!r} has no slot effects (too long a text: compute them first)")
    att = np.asarray(sa.attention, dtype=float)  # (T, S)
    T, S = att.shape
    r0, r1 = rows if rows is not None else (0, T)
    if not 0 <= r0 < r1 <= T:
        raise ValueError(f"rows {r0}..{r1} are not rows of this text (0..{T})")
    allowed = sa.allowed()
    columns = window_slots(allowed, (r0, r1))
    mask = np.zeros_like(allowed)  # (T, S) the cells drawn: the window's rows and columns
    mask[r0:r1, columns] = allowed[r0:r1, columns]
    effects = None if sa.slot_effects is None else np.asarray(sa.slot_effect_bits, dtype=float)  # (T, S) bits
    if effect_mode:
        mask &= np.isfinite(effects)
    ylab, xlab = target_axis_labels(sa), slot_axis_labels(sa)
    row_domain, slot_domain = ylab[r0:r1], [xlab[j] for j in columns]
    rows_, cols = np.nonzero(mask)
    marked = set()
    if threshold is not None or top_k is not None:
        window = range(r0, r1)
        marked = {(r, h.slot) for r, hs in zip(window, sa.highlights(threshold, top_k, rows=window)) for h in hs}
    labels, inputs = sa.slot_labels, sa.input_labels
    df = pd.DataFrame({
        "target": [ylab[r] for r in rows_],
        "slot": [xlab[j] for j in cols],
        "predicting": [sa.targets[r] for r in rows_],
        "current": [inputs[r] for r in rows_],
        "attended": [labels[j] for j in cols],
        "weight": att[rows_, cols],
        "highlighted": [(int(r), int(j)) in marked for r, j in zip(rows_, cols)],
    })
    if effects is not None:
        eff = effects[rows_, cols]
        df["effect"] = np.where(np.isfinite(eff), eff, None)
    T, S = r1 - r0, len(columns)
    cell, font, angle = _sizes(max(T, S))
    if values is None:
        values = cell >= 28
    x = alt.X(
        "slot:N",
        title="memory slot (attended word)",
        scale=alt.Scale(domain=slot_domain),
        axis=_x_axis(angle, font),
    )
    y = alt.Y(
        "target:N",
        title="predicted word",
        scale=alt.Scale(domain=row_domain),
        axis=alt.Axis(labelFontSize=font, labelLimit=_MAX_LABEL_PX, labelOverlap=True),
    )
    tooltip = [
        alt.Tooltip("predicting:N", title="predicting"),
        alt.Tooltip("current:N", title="after reading"),
        alt.Tooltip("attended:N", title="attended word"),
        alt.Tooltip("slot:N", title="slot"),
        alt.Tooltip("weight:Q", title="weight", format=".3f"),
    ]
    if effects is not None:
        tooltip.append(alt.Tooltip("effect:Q", title="effect (bits)", format="+.3f"))
    base = alt.Chart(df).encode(x=x, y=y)
    legend = alt.Legend(gradientLength=min(200, max(80, cell * T // 2)), format="+.1f" if effect_mode else ".1f")
    if effect_mode:
        lim = EFFECT_DOMAIN_BITS
        colour = alt.Color("effect:Q", title=["slot effect", "(bits)"], legend=legend,
                           scale=alt.Scale(scheme=EFFECT_SCHEME, domain=[-lim, lim], domainMid=0, clamp=True))
        # dark cells (|effect| near the ends of the scale) get white marks, pale ones black
        dark = (alt.datum.effect >= 0.6 * lim) | (alt.datum.effect <= -0.6 * lim)
    else:
        colour = alt.Color("weight:Q", title="attention", legend=legend,
                           scale=alt.Scale(scheme=SCHEME, domain=list(WEIGHT_DOMAIN)))
        dark = alt.datum.weight < 0.6  # viridis is dark at the low end
    rect = base.mark_rect().encode(color=colour, tooltip=tooltip)
    layers: list[alt.Chart] = [rect]
    if marked:
        layers += _outlines(base, cell, tooltip)
    if values:
        # effect mode: no "+0.00" in the cells that do not matter (|effect| < 0.005 bits), so the ones that do stand out
        texts = base.transform_filter(alt.expr.abs(alt.datum.effect) >= 0.005) if effect_mode else base
        layers.append(
            texts.mark_text(fontSize=max(7, font - 3))
            .encode(
                text=alt.Text("effect:Q" if effect_mode else "weight:Q", format="+.2f" if effect_mode else ".2f"),
                color=alt.condition(dark, alt.value("#ffffff"), alt.value("#000000")),
                tooltip=tooltip,
            )
        )
    if effect_mode:
        head = title or f"{sa.model}: effect of each memory slot on P(word), in bits"
    else:
        head = title or f"{sa.model}: attention over memory"
    if top_k is not None:
        head += f" (outlined: top {top_k} by weight)" if effect_mode else f" (outlined: top {top_k})"
    elif threshold is not None:
        head += f" (outlined: weight ≥ {threshold:g})"
    layers += _boundary_rules(sa, ylab, xlab, row_domain, slot_domain)
    layers += _selected_row(ylab, row_domain, selected, (r0, r1))
    subtitle = [_window_subtitle(sa, (r0, r1))]
    if effect_mode:
        biggest = float(np.nanmax(np.abs(effects[mask]))) if mask.any() else 0.0
        subtitle.append(f"log-probability minus the same with the slot dropped · blue: the slot helped, red: it hurt "
                        f"(clipped at ±{EFFECT_DOMAIN_BITS:g} bit) · largest here {biggest:.2g} bits")
    return alt.layer(*layers).properties(
        width=alt.Step(cell),
        height=alt.Step(cell),
        title=alt.Title(head, subtitle=subtitle if effect_mode else subtitle[0], anchor="start"),
    )


def position_axis_labels(attr: Attribution) -> list[str]:
    """[T] ``"j word"`` for each input position ``p``, numbered ``j = p + 1`` as the memory slot that holds it
    (:func:`slot_axis_labels`), so an attribution heat map and an attention heat map share their columns."""
    return [f"{p + 1} {w}" for p, w in enumerate(attr.inputs)]


HEATMAP_SCALE_QUANTILE = 0.95  # an attribution heat map's colours end here: the current word's few large cells clip


def attribution_scale(attr: Attribution, rows: Sequence[int] | None = None, quantile: float = 1.0) -> float:
    """The colour scale's end, in bits: that ``quantile`` of the ``|attribution|`` of ``rows`` (every row by
    default; 1.0: the largest, so the strongest word shown gets the full colour; larger values clip);
    1 bit where nothing is attributed."""
    rows = list(range(len(attr.targets)) if rows is None else rows)
    bits = np.abs(attr.bits[rows])[attr.covered[rows]]
    bits = bits[bits > 0]
    top = float(np.quantile(bits, quantile)) if bits.size else 0.0
    return top if top > 0 else 1.0


def attribution_heatmap(
    attr: Attribution,
    threshold: float | None = None,
    top_k: int | None = None,
    rows: tuple[int, int] | None = None,
    selected: int | None = None,
    title: str | None = None,
) -> alt.LayerChart:
    """Targets (rows) x input positions (columns): the attribution of each predicted word's log2 P(word) to
    each word read before it (:class:`vizlm.inspect.attribution.Attribution`, in bits), on a diverging scale centred
    at 0 over ± the largest ``|attribution|`` shown (blue: the word raised P(word), red: lowered it).

    Only the positions of each row's reading up to it are drawn (no later word, no other sentence read
    alone). With ``threshold`` / ``top_k`` the positions :meth:`Attribution.highlights` picks are outlined;
    ``rows`` ``(first, end)`` draws those rows and the positions they read, at most as many as rows, the
    newest; ``selected`` outlines a row. Dashed lines separate the sentences of a passage."""
    sa = attr.analysis
    T = len(attr.targets)
    r0, r1 = rows if rows is not None else (0, T)
    if not 0 <= r0 < r1 <= T:
        raise ValueError(f"rows {r0}..{r1} are not rows of this text (0..{T})")
    used = np.flatnonzero(attr.covered[r0:r1].any(0))  # (n,) the positions the rows read
    columns = [int(p) for p in used[-(r1 - r0):]] if len(used) else []
    mask = np.zeros_like(attr.covered)
    mask[r0:r1, columns] = attr.covered[r0:r1, columns]
    ylab, xlab = target_axis_labels(sa), position_axis_labels(attr)
    row_domain, col_domain = ylab[r0:r1], [xlab[p] for p in columns]
    rows_, cols = np.nonzero(mask)
    marked = set()
    if threshold is not None or top_k is not None:
        marked = {(r, p) for r in range(r0, r1) for p in attr.highlights(r, threshold, top_k)}
    bits = attr.bits
    lim = attribution_scale(attr, range(r0, r1), HEATMAP_SCALE_QUANTILE)
    df = pd.DataFrame({
        "target": [ylab[r] for r in rows_],
        "position": [xlab[p] for p in cols],
        "predicting": [attr.targets[r] for r in rows_],
        "input": [attr.inputs[p] for p in cols],
        "distance": distance(rows_ - cols).astype(int),
        "attribution": bits[rows_, cols],
        "highlighted": [(int(r), int(p)) in marked for r, p in zip(rows_, cols)],
    })
    tooltip = [alt.Tooltip("predicting:N", title="predicting"), alt.Tooltip("input:N", title="word read"),
               alt.Tooltip("distance:Q", title="distance"),
               alt.Tooltip("attribution:Q", title="attribution (bits)", format="+.3f")]
    if attr.attention is not None:
        df["weight"] = np.where(attr.attended[rows_, cols], attr.attention[rows_, cols], np.nan)  # NaN: no slot
        tooltip.append(alt.Tooltip("weight:Q", title="attention weight", format=".3f"))
    n = max(r1 - r0, len(columns))
    cell, font, angle = _sizes(n)
    base = alt.Chart(df).encode(
        x=alt.X("position:N", title="word read (input position)", scale=alt.Scale(domain=col_domain),
                axis=_x_axis(angle, font)),
        y=alt.Y("target:N", title="predicted word", scale=alt.Scale(domain=row_domain),
                axis=alt.Axis(labelFontSize=font, labelLimit=_MAX_LABEL_PX, labelOverlap=True)),
    )
    legend = alt.Legend(gradientLength=min(200, max(80, cell * (r1 - r0) // 2)), format="+.2g")
    colour = alt.Color("attribution:Q", title=["attribution", "(bits)"], legend=legend,
                       scale=alt.Scale(scheme=EFFECT_SCHEME, domain=[-lim, lim], domainMid=0, clamp=True))
    dark = (alt.datum.attribution >= 0.6 * lim) | (alt.datum.attribution <= -0.6 * lim)
    layers: list[alt.Chart] = [base.mark_rect().encode(color=colour, tooltip=tooltip)]
    if marked:
        layers += _outlines(base, cell, tooltip)
    if cell >= 28:
        layers.append(base.transform_filter(alt.expr.abs(alt.datum.attribution) >= 0.005)
                      .mark_text(fontSize=max(7, font - 3))
                      .encode(text=alt.Text("attribution:Q", format="+.2f"),
                              color=alt.condition(dark, alt.value("#ffffff"), alt.value("#000000")), tooltip=tooltip))
    head = title or f"{attr.model}: what each prediction depended on ({METHOD_LABELS.get(attr.method, attr.method)})"
    if top_k is not None:
        head += f" (outlined: top {top_k})"
    elif threshold is not None:
        head += f" (outlined: ≥ {threshold:g} of the row's largest |attribution|)"
    # the same sentence lines as the attention's map: its slot j is this map's position j - 1, labelled alike
    slot_like = ["0 <s>"] + xlab
    layers += _boundary_rules(sa, ylab, slot_like, row_domain, col_domain)
    layers += _selected_row(ylab, row_domain, selected, (r0, r1))
    subtitle = [_window_subtitle(sa, (r0, r1))]
    subtitle.append(f"attribution of log₂ P(word) to each word read · blue: raised P(word), red: lowered it · "
                    f"clipped at ±{lim:.2g} bits ({HEATMAP_SCALE_QUANTILE:.0%} of the cells shown are within)")
    return alt.layer(*layers).properties(width=alt.Step(cell), height=alt.Step(cell),
                                         title=alt.Title(head, subtitle=subtitle, anchor="start"))


OVERLAY_MODELS = 3  # positions_chart draws up to this many models in one panel, more as small multiples
FACET_COLUMNS = 4  # small multiples a row: eight models are two rows of a page's width at 1440 px


def positions_chart(frame: pd.DataFrame, title: str | None = None,
                    measure: str = "weight") -> alt.LayerChart | alt.FacetChart:
    """Mean attention weight by relative position, one line per model (Daniluk et al. 2017, Fig. 3);
    with ``measure="effect"`` the mean slot effect (bits) at each position instead.

    ``frame`` columns: model, offset, mean, lo, hi, count (and effect, effect_lo, effect_hi
    for effects); ``offset`` 1 is the most recent memory slot. The x axis shows the distance from the predicted
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
    _require(frame, need, "positions_chart")
    df = frame.copy()
    if effect_mode:
        df = df[np.isfinite(df["effect"].astype(float))]
        if df.empty:
            raise ValueError("positions_chart: no slot effects in this frame")
    df["distance"] = distance(df["offset"].astype(int))
    models = list(dict.fromkeys(df["model"].astype(str)))
    facets = len(models) > OVERLAY_MODELS
    colour = alt.Color("model:N", title="model", scale=alt.Scale(domain=models, range=_categorical(len(models))),
                       legend=None if facets else alt.Legend())
    x = _distance_x(current=False, short=facets)
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
    _require(frame, ["model", "offset", "mean", "lo", "hi", "count"], "attribution_positions_chart")
    df = frame[np.isfinite(frame["mean"].astype(float))].copy()
    if not current:
        df = df[df["offset"].astype(int) >= 1]
    if df.empty:
        raise ValueError("attribution_positions_chart: no position in this frame has an attribution")
    df["distance"] = distance(df["offset"].astype(int))
    models = list(dict.fromkeys(df["model"].astype(str)))
    colour = alt.Color("model:N", title="model", scale=alt.Scale(domain=models, range=_categorical(len(models))))
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
    _require(table, ["sentence_id", "text", "length", "ppl_a", "ppl_b", "difference", "log_ratio"],
             "comparison_scatter")
    df = table.copy()
    ok = np.isfinite(df["ppl_a"].astype(float)) & np.isfinite(df["ppl_b"].astype(float))
    df = df[ok & (df["ppl_a"] > 0) & (df["ppl_b"] > 0)].copy()
    df["sentence"] = df["text"].astype(str).map(lambda t: _subtitle(t, 120))
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
    names = _unique([sa.model for sa in analyses])
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
    cell, font, angle = _sizes(len(labels))
    # with grouped bars a plain step would size each model's bar; "for: position" sizes each word's group
    step = max(12, min(36, cell + 4)) if len(names) == 1 else max(16, min(60, round(cell * 1.6)))
    chart = alt.Chart(df).mark_bar().encode(
        x=alt.X("word:N", title="predicted word", scale=alt.Scale(domain=labels),
                axis=_x_axis(angle, font)),
        y=alt.Y("surprisal:Q", title="surprisal (bits)"),
        color=alt.Color("model:N", title="model", scale=alt.Scale(domain=names, range=_categorical(len(names)))),
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
        title=alt.Title(title or "Surprisal per word", subtitle=_subtitle(first.text), anchor="start"),
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
    cell, font, angle = _sizes(T)
    title = alt.Title(f"{sa.model}: memory selection gate", subtitle=_subtitle(sa.text), anchor="start")
    colour_scale = alt.Scale(scheme=SCHEME, domain=list(WEIGHT_DOMAIN))
    if dims:
        rr, dd = np.meshgrid(np.arange(T), np.arange(d), indexing="ij")
        df = pd.DataFrame({"target": [labels[r] for r in rr.ravel()], "dim": dd.ravel(), "gate": g.ravel()})
        return alt.Chart(df).mark_rect().encode(
            x=alt.X("dim:O", title="hidden unit", axis=alt.Axis(labelOverlap=True, labelFontSize=8)),
            y=alt.Y("target:N", title="predicted word", scale=alt.Scale(domain=labels),
                    axis=alt.Axis(labelFontSize=font, labelLimit=_MAX_LABEL_PX)),
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
                axis=_x_axis(angle, font)),
        y=alt.Y("mean:Q", title="mean gate value", scale=alt.Scale(domain=list(WEIGHT_DOMAIN))),
        color=alt.Color("mean:Q", title="gate", scale=colour_scale),
        tooltip=[
            alt.Tooltip("target:N", title="predicted"),
            alt.Tooltip("mean:Q", title="mean", format=".3f"),
            alt.Tooltip("std:Q", title="std", format=".3f"),
            alt.Tooltip("open:Q", title="units > 0.5", format=".0%"),
        ],
    ).properties(width=alt.Step(max(12, cell)), height=200, title=title)


# --------------------------------------------------------------------------- HTML fragments

_SPAN = "display:inline-block;margin:1px 0;padding:0 3px;border-radius:3px;line-height:1.7;"
_MARKER = "font-size:0.7em;color:#666;vertical-align:middle;border:1px solid #bbb;border-radius:3px;padding:0 3px;"
_BREAK = "border-left:3px solid #888;margin-left:2px;"  # a sentence read alone starts here


def _esc(text: object) -> str:
    return html.escape(clean_text(str(text)), quote=True)


def _gaps(sa: SentenceAnalysis) -> list[str]:
    """[n] text before each token (from ``offsets``), or single spaces if offsets don't fit ``text``."""
    n = len(sa.tokens)
    try:
        spans = [(int(s), int(e)) for s, e in sa.offsets]
        ok = len(spans) == n and all(0 <= s <= e <= len(sa.text) for s, e in spans)
        ok = ok and all(spans[i][1] <= spans[i + 1][0] for i in range(n - 1))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        return [""] + [" "] * (n - 1) if n else []
    gaps, prev = [], spans[0][0] if n else 0
    for s, e in spans:
        gap = sa.text[prev:s]  # untokenised text between two tokens, whitespace runs squashed
        core = " ".join(gap.split())
        lead = " " if gap[:1].isspace() else ""
        gaps.append(lead + core + (" " if core and gap[-1:].isspace() else ""))
        prev = e
    return gaps


def _token_start(i: int, target: int, outline: str) -> tuple[str, list[str], list[str], bool]:
    """``(style, classes, tips, decided)`` of token ``i`` in a running text for row ``target``, as every running
    text draws it: the predicted word outlined, a word not read yet faded (``decided``: nothing else applies)."""
    if i == target:
        return _SPAN + outline + "font-weight:600;", ["vz-tok", "vz-target"], ["predicted word"], True
    if i > target:
        return _SPAN + "opacity:0.45;", ["vz-tok", "vz-future"], ["not read yet"], True
    return _SPAN, ["vz-tok"], [], False


def _token_end(sa: SentenceAnalysis, i: int, tok: str, style: str, classes: list[str], tips: list[str]) -> str:
    """Token ``i``'s span, a word outside the vocabulary underlined (its tooltip says so)."""
    if i < len(sa.unk) and sa.unk[i]:
        classes = [*classes, "vz-unk"]
        style += f"text-decoration:underline dashed {SELECTED_COLOUR};text-underline-offset:3px;"
        tips = [*tips, UNK_TITLE]
    return f'<span class="{" ".join(classes)}" style="{style}" title="{_esc(" · ".join(tips))}">{_esc(tok)}</span>'


def _restart_title(sa: SentenceAnalysis, boundary: int) -> str:
    """The tooltip of the ``<s>`` where ``sa``'s model reads the text after token ``boundary`` afresh."""
    what = "sentence" if boundary not in sa.breaks else "document (after a blank line)"
    return f"start of a {what}: {sa.model} reads it afresh, from a zero state"


def highlighted_html(
    sa: SentenceAnalysis,
    target: int,
    threshold: float | None = DEFAULT_THRESHOLD,
    top_k: int | None = None,
    caption: bool = True,
    span: tuple[int, int] | None = None,
) -> str:
    """The running text with attention for one target row as an HTML fragment (inline styles only).

    Attended words (weight >= ``threshold``, or the ``top_k`` heaviest) get a
    background on the :data:`SCHEME` scale; every word in memory has its weight in
    a tooltip; the predicted word is outlined, words not read yet are faded, words read but
    not in the row's memory (outside its window, or another sentence read alone) are grey, and
    ``<unk>`` words have a dashed underline. Sentence boundaries of a passage are markers:
    ``</s>`` in running text, ``</s>`` then a bar and the next sentence's ``<s>`` where the model
    starts afresh (each sentence read alone; a new document). ``span`` ``(first, end)`` shows those tokens only (with "…" where
    text is left out). All text is escaped.
    """
    T = len(sa.targets)
    if not 0 <= target < T:
        raise IndexError(f"target {target} out of range: the text has {T} predicted words (0..{T - 1})")
    first, end = span if span is not None else (0, len(sa.tokens))
    att = None if sa.attention is None else np.asarray(sa.attention, dtype=float)
    mask = sa.allowed()
    lit = {h.slot: h.weight for h in sa.highlights(threshold, top_k, rows=[target])[0]}
    labels = sa.slot_labels

    def weight_of(slot: int) -> float | None:
        if att is None or mask is None or slot >= att.shape[1] or not mask[target, slot]:
            return None
        return float(att[target, slot])

    def style_for(weight: float) -> str:
        bg = highlight_colour(weight)
        return f"background:{bg};color:{text_colour(bg)};"

    def slot_style(slot: int, tips: list[str]) -> tuple[str, list[str]]:
        """Background and classes of a slot's marker or word: coloured when highlighted."""
        w = weight_of(slot)
        if w is None:
            return "", []
        tips.append(f"attention {w:.3f}")
        return (style_for(w), ["vz-attended"]) if slot in lit else ("", [])

    def start_marker(start: int, what: str, style: str) -> str:
        """A reading's ``<s>``: its start slot (the zero start state) and the next (after reading
        ``<s>``) share one marker."""
        tips = [f"slot {j} ({name}): {w:.3f}" for j, name in ((start, "start state"), (start + 1, "<s>"))
                if (w := weight_of(j)) is not None]
        shown = [lit[j] for j in (start, start + 1) if j in lit]
        bg = style_for(min(1.0, sum(shown))) if shown else ""
        title = _esc(what + (": " + "; ".join(tips) if tips else ""))
        return f'<span class="vz-start" style="{style}{bg}" title="{title}">&lt;s&gt;</span> '

    parts = [start_marker(0, "sentence start", _MARKER)]
    if first > 0:
        parts.append(f'<span style="{_MARKER}" title="{first} earlier tokens left out">…</span> ')
    gaps = _gaps(sa)
    target_outline = f"outline:2px solid {SELECTED_COLOUR};outline-offset:1px;"
    for i in range(first, end):
        tok, slot = sa.tokens[i], i + 2  # token i is held by slot i + 2
        # the last word of a text, or of a sentence read alone, is not (slot i + 2 is the next one's start slot)
        held = slot < T and sa.slot_token(slot) == i
        parts.append(_esc(gaps[i]) if i > first else "")
        if sa.norms[i] == BOUNDARY:  # the end of a sentence: the row i predicts </s>, slot i + 2 holds it
            tips = ["sentence end: </s>" + (" (predicted word)" if i == target else "")]
            own = target_outline if i == target else ""
            if labels[slot] == BOUNDARY:  # running text: the </s> read is a memory slot of later words
                bg, cls = slot_style(slot, tips)
                parts.append(f' <span class="vz-boundary {" ".join(cls)}" style="{_MARKER}{own}{bg}" '
                             f'title="{_esc(" · ".join(tips))}">&lt;/s&gt;</span> ')
                continue
            parts.append(f' <span class="vz-boundary" style="{_MARKER}{own}" title="{_esc(tips[0])}">&lt;/s&gt;</span> ')
            parts.append(start_marker(i + 1, _restart_title(sa, i), _MARKER + _BREAK))
            continue
        style, classes, tips, decided = _token_start(i, target, target_outline)
        if not decided and i == target - 1:
            tips.append("read just now: the attention's query")
        elif not decided and att is not None and not (held and mask[target, slot]):
            classes.append("vz-outside")
            style += "color:#8a8a8a;"
            tips.append("not in this word's memory")
        bg, cls = slot_style(slot, tips) if held else ("", [])
        if i < len(sa.targets):
            tips.append(f"P = {format_prob(float(sa.probs[i]))}")
        parts.append(_token_end(sa, i, tok, style + bg, classes + cls, tips))
    if end == len(sa.tokens):
        end_style = _MARKER + (target_outline if target == T - 1 else "")
        parts.append(f' <span class="vz-end" style="{end_style}" title="sentence end">&lt;/s&gt;</span>')
        if sa.truncated:
            more = _esc(f"{sa.truncated} more tokens not analysed")
            parts.append(f' <span style="{_MARKER}" title="{more}">…</span>')
    else:
        parts.append(f' <span style="{_MARKER}" title="later text left out">…</span>')
    body = "".join(parts)
    head = ""
    if caption:
        cut = threshold if threshold is not None else DEFAULT_THRESHOLD
        rule = f"top {top_k}" if top_k is not None else f"weight ≥ {cut:g}"
        if att is None:
            what = f"{_esc(sa.model)} has no attention"
        else:
            what = f"highlighted: {_esc(rule)} ({len(lit)} slot{'s' if len(lit) != 1 else ''})"
        head = (
            f'<div style="font-size:0.85em;color:#555;margin-bottom:4px">predicting '
            f"<b>{_esc(sa.targets[target])}</b> after “{_esc(sa.current_word(target))}” · {what}</div>"
        )
    return f'<div class="vizlm-highlight" style="font-size:1.05em;line-height:2">{head}{body}</div>'


def attribution_colour(bits: float, lim: float) -> str:
    """Background of a word in running text by its attribution: the :data:`EFFECT_SCHEME` colour of
    ``bits`` over ``±lim`` (blue: raised P(word), red: lowered it), as :func:`attribution_heatmap` draws it."""
    return palette(bits, -lim, lim, _REDBLUE)


def attribution_html(
    attr: Attribution,
    target: int,
    threshold: float | None = None,
    top_k: int | None = None,
    span: tuple[int, int] | None = None,
    caption: bool = True,
) -> str:
    """The running text with what row ``target``'s prediction depended on, as an HTML fragment (inline
    styles only): the words :meth:`Attribution.highlights` picks get a background by their attribution
    (:func:`attribution_colour`, full colour at the row's largest ``|attribution|``), every word of the row's
    reading has its attribution in a tooltip; the predicted word is outlined, words not read yet are faded,
    words of another sentence read alone are grey; sentence boundaries are markers as in
    :func:`highlighted_html`. ``span`` shows those tokens only. All text is escaped."""
    sa = attr.analysis
    T = len(attr.targets)
    if not 0 <= target < T:
        raise IndexError(f"target {target} out of range: the text has {T} predicted words (0..{T - 1})")
    first, end = span if span is not None else (0, len(sa.tokens))
    lit = set(attr.highlights(target, threshold, top_k))
    bits = attr.bits[target]
    lim = attribution_scale(attr, [target])
    total = float(np.abs(bits * attr.covered[target]).sum())
    starts = set(int(r) for r in sa.first_rows())  # positions where a reading reads <s>, not a word of the text

    def read_at(i: int) -> int | None:  # the input position that read token i, if any
        p = i + 1
        return p if p < T and p not in starts else None

    def paint(p: int | None, tips: list[str]) -> tuple[str, list[str]]:
        if p is None or not attr.covered[target, p]:
            return "", []
        share = abs(bits[p]) / total if total > 0 else 0.0
        tips.append(f"attribution {bits[p]:+.3f} bits ({share:.0%} of this word's)")
        if p not in lit:
            return "", []
        bg = attribution_colour(float(bits[p]), lim)
        return f"background:{bg};color:{text_colour(bg)};", ["vz-attributed"]

    parts = [f'<span class="vz-start" style="{_MARKER}" title="sentence start">&lt;s&gt;</span> ']
    if first > 0:
        parts.append(f'<span style="{_MARKER}" title="{first} earlier tokens left out">…</span> ')
    gaps = _gaps(sa)
    outline = f"outline:2px solid {SELECTED_COLOUR};outline-offset:1px;"
    for i in range(first, end):
        tok, p = sa.tokens[i], read_at(i)
        parts.append(_esc(gaps[i]) if i > first else "")
        if sa.norms[i] == BOUNDARY:
            tips = ["sentence end: </s>" + (" (predicted word)" if i == target else "")]
            bg, cls = paint(p, tips)
            own = outline if i == target else ""
            parts.append(f' <span class="vz-boundary {" ".join(cls)}" style="{_MARKER}{own}{bg}" '
                         f'title="{_esc(" · ".join(tips))}">&lt;/s&gt;</span> ')
            if p is None and i + 1 < T:  # the next sentence is read afresh
                parts.append(f'<span class="vz-start" style="{_MARKER}{_BREAK}" '
                             f'title="{_esc(_restart_title(sa, i))}">&lt;s&gt;</span> ')
            continue
        style, classes, tips, decided = _token_start(i, target, outline)
        if not decided and p is not None and not attr.covered[target, p]:
            classes.append("vz-outside")
            style += "color:#8a8a8a;"
            tips.append("another sentence, read alone")
        elif not decided and p == target:
            tips.append("read just now")
        bg, cls = paint(p, tips) if i < target else ("", [])
        parts.append(_token_end(sa, i, tok, style + bg, classes + cls, tips))
    if end == len(sa.tokens):
        parts.append(f' <span class="vz-end" style="{_MARKER}{outline if target == T - 1 else ""}" title="sentence end">&lt;/s&gt;</span>')
    else:
        parts.append(f' <span style="{_MARKER}" title="later text left out">…</span>')
    head = ""
    if caption:
        rule = f"top {top_k}" if top_k is not None else f"≥ {DEFAULT_SHARE if threshold is None else threshold:g} of the largest |attribution|"
        head = (f'<div style="font-size:0.85em;color:#555;margin-bottom:4px">predicting <b>{_esc(attr.targets[target])}</b> '
                f"after “{_esc(sa.current_word(target))}” · {_esc(METHOD_LABELS.get(attr.method, attr.method))}, "
                f"highlighted: {_esc(rule)} ({len(lit)} word{'s' if len(lit) != 1 else ''})</div>")
    return f'<div class="vizlm-highlight" style="font-size:1.05em;line-height:2">{head}{"".join(parts)}</div>'


def attribution_key_html(lim: float, method: str) -> str:
    """A colour key for :func:`attribution_html`: swatches from ``-lim`` to ``+lim`` bits, and what they mean."""
    swatches = "".join(
        f'<span style="{_SPAN}background:{attribution_colour(v, lim)};color:{text_colour(attribution_colour(v, lim))};'
        f'min-width:3em;text-align:center">{v:+.2g}</span>'
        for v in (-lim, -lim / 2, 0.0, lim / 2, lim)
    )
    return (f'<div class="vizlm-key" style="font-size:0.8em;color:#555">{_esc(METHOD_LABELS.get(method, method))}, '
            f"bits of log₂ P(word): {swatches} blue: the word raised P(word), red: lowered it</div>")


def text_span(sa: SentenceAnalysis, target: int, around: int = 1, min_tokens: int | None = None) -> tuple[int, int]:
    """The tokens ``(first, end)`` of a long passage worth showing for row ``target``: from ``around``
    sentences before the oldest word the row may attend to (or its own sentence) to ``around`` sentences
    after its own, whole sentences. Every token when the text has at most ``min_tokens`` (default
    :data:`WINDOW_ROWS`)."""
    n = len(sa.tokens)
    if n <= (min_tokens or WINDOW_ROWS) or not sa.boundaries:
        return 0, n
    ends = [b + 1 for b in sa.boundaries] + [n]  # a sentence ends after its boundary token
    starts = [0] + ends[:-1]
    sentence = sa.sentence_of()  # [T]: row i predicts token i, so it is token i's sentence too
    own = int(sentence[target])
    held = [sa.slot_token(int(j)) for j in np.flatnonzero(sa.allowed()[target])] if sa.attention is not None else []
    words = [i for i in held if i >= 0]  # the tokens the row may attend to
    oldest = int(sentence[min(words)]) if words else own
    lo, hi = max(0, min(oldest, own) - around), min(len(ends) - 1, own + around)
    return starts[lo], ends[hi]


def sentence_strip_html(sa: SentenceAnalysis, selected: int | None = None, span: tuple[int, int] | None = None) -> str:
    """Each predicted word as a chip with its probability; the bar under it is coloured by surprisal.

    Colour: :data:`SCHEME` over ``[0, SURPRISAL_MAX_BITS]`` bits (brighter = more
    surprising). ``selected`` (a target row) is outlined; ``span`` ``(first, end)`` shows the
    words of those tokens only (:func:`text_span`). All text is escaped.
    """
    words = list(sa.tokens) + ["</s>"]
    first, end = span if span is not None else (0, len(sa.tokens))
    chips = [] if first == 0 else ['<span class="vz-chip" style="color:#666" title="earlier words left out">…</span>']
    for r in range(first, len(sa.targets) if end == len(sa.tokens) else end):
        word = words[r] if r < len(words) else sa.targets[r]
        p, s = float(sa.probs[r]), float(sa.surprisal[r])
        colour = palette(s, 0.0, SURPRISAL_MAX_BITS)
        unk = r < len(sa.unk) and sa.unk[r]
        top = ", ".join(f"{w} {format_prob(float(q))}" for w, q in zip(sa.top_words[r][:3], sa.top_probs[r][:3]))
        tip = f"P({sa.targets[r]}) = {format_prob(p)} · surprisal {s:.2f} bits" + (f" · top: {top}" if top else "")
        if unk:
            tip += f" · {UNK_TITLE}"
        style = (
            "display:inline-flex;flex-direction:column;align-items:center;margin:2px;padding:2px 5px 0;"
            f"border-radius:4px;background:#f6f6f6;border-bottom:5px solid {colour};"
        )
        if r == selected:
            style += f"outline:2px solid {SELECTED_COLOUR};"
        word_style = f"text-decoration:underline dashed {SELECTED_COLOUR};text-underline-offset:3px;" if unk else ""
        if r == len(sa.targets) - 1 or sa.norms[r] == BOUNDARY:
            word_style += "color:#666;font-size:0.85em;"
        chips.append(
            f'<span class="vz-chip{" vz-unk" if unk else ""}" data-index="{r}" style="{style}" title="{_esc(tip)}">'
            f'<span style="{word_style}">{_esc(word)}</span>'
            f'<span style="font-size:0.7em;color:#555">{format_prob(p)}</span></span>'
        )
    if end < len(sa.tokens):
        chips.append('<span class="vz-chip" style="color:#666" title="later words left out">…</span>')
    return f'<div class="vizlm-strip" style="line-height:1.3">{"".join(chips)}</div>'


# --------------------------------------------------------------------------- helpers


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
        color=alt.Color("model:N", scale=alt.Scale(domain=models, range=_categorical(len(models))), title="model",
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
                 title=alt.Title(f"{name}: attention by position, word by word", subtitle=_subtitle(text, 60), anchor="start"))


def legend_html(models: list[str]) -> str:
    """A one-line colour key for charts that colour models in order (:func:`_categorical`)."""
    items = "".join(
        f'<span style="margin-right:1.2em"><span style="display:inline-block;width:.8em;height:.8em;border-radius:50%;'
        f'background:{colour};margin-right:.35em;vertical-align:middle"></span>{_esc(m)}</span>'
        for m, colour in zip(models, _categorical(len(models))))
    return f'<div style="font-size:.9em;color:#444">{items}</div>'


def _categorical(n: int) -> list[str]:
    """``n`` colours, one per model: :data:`CATEGORICAL` while it has enough, else :data:`CATEGORICAL_WIDE`."""
    palette = CATEGORICAL if n <= len(CATEGORICAL) else CATEGORICAL_WIDE
    return [palette[i % len(palette)] for i in range(n)]


def _unique(names: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return out


def _require(df: pd.DataFrame, columns: list[str], where: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{where}: missing column(s) {missing}; expected {columns}")
