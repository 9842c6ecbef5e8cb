"""The heat map: one renderer (:func:`heatmap`) for every grid of predicted words by positions read, and its two
uses, the attention (coloured by weight or by slot effect) and an attribution, each outlining the cells its
highlight setting picks (:mod:`vizlm.inspect.highlight`). Returns Altair charts; never displays, never calls a model.
"""

from __future__ import annotations

from dataclasses import dataclass

import altair as alt
import numpy as np
import pandas as pd

from vizlm.inspect.analysis import SentenceAnalysis, distance
from vizlm.inspect.attribution import LABELS as METHOD_LABELS
from vizlm.inspect.attribution import Attribution
from vizlm.inspect.highlight import NONE, Scores, Setting, TopK, chosen, describe
from vizlm.present.style import (
    EFFECT_DOMAIN_BITS,
    EFFECT_SCHEME,
    MAX_LABEL_PX,
    MEASURES,
    OUTLINE_COLOUR,
    OUTLINE_HALO,
    SCHEME,
    SELECTED_COLOUR,
    WEIGHT_DOMAIN,
    WINDOW_ROWS,
    attribution_scale,
    cell_sizes,
    short_text,
    slot_axis_labels,
    target_axis_labels,
    word_axis,
)


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
        return short_text(sa.text)
    return f"words {r0 + 2} to {r1 + 1} of {T + 1} (a window) · " + short_text(sa.text, 70)


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


HEATMAP_SCALE_QUANTILE = 0.95  # an attribution heat map's colours end here: the current word's few large cells clip


@dataclass
class Grid:
    """What one heat map draws: its cells (one row each: ``target`` and ``column`` labels, the tooltip's fields, the
    ``value`` coloured, ``highlighted``) and how, as :func:`attention_heatmap` and :func:`attribution_heatmap` make it."""

    cells: pd.DataFrame
    column: str  # the column field: "slot" (memory slots) or "position" (input positions)
    column_title: str
    row_domain: list[str]
    column_domain: list[str]
    value: str  # the field coloured and written in the cells
    colour: alt.Scale
    colour_title: str | list[str]
    legend_format: str
    text_format: str
    dark: object  # a Vega expression: the cells whose numbers are written in white
    tooltip: list
    title: str
    subtitle: str | list[str]
    overlays: list  # drawn on top: the sentence lines and the selected row
    outlined: bool  # some cells of the rows are highlighted (drawn or not): the outline layers are added
    hide_small: bool = True  # leave |value| < 0.005 unwritten (a diverging scale: the cells that do not matter)


def marked(scores: Scores, rows: range, setting: Setting) -> set[tuple[int, int]]:
    """The ``(row, position)`` cells of ``rows`` that ``setting`` highlights in ``scores`` (the outlined cells)."""
    return {(r, p) for r in rows for p in chosen(scores.score_row(r), setting)}


def heatmap(grid: Grid, values: bool | None = None) -> alt.LayerChart:
    """The one heat map renderer: predicted words (rows, top to bottom) x positions (columns), coloured by
    ``grid.value``, the highlighted cells outlined (:func:`_outlines`), the numbers written in the cells when they
    are big enough (``values``, default: cells of 28 px or more), the overlays on top."""
    n_rows = len(grid.row_domain)
    cell, font, angle = cell_sizes(max(n_rows, len(grid.column_domain)))
    if values is None:
        values = cell >= 28
    x = alt.X(f"{grid.column}:N", title=grid.column_title, scale=alt.Scale(domain=grid.column_domain),
              axis=word_axis(angle, font))
    y = alt.Y("target:N", title="predicted word", scale=alt.Scale(domain=grid.row_domain),
              axis=alt.Axis(labelFontSize=font, labelLimit=MAX_LABEL_PX, labelOverlap=True))
    base = alt.Chart(grid.cells).encode(x=x, y=y)
    legend = alt.Legend(gradientLength=min(200, max(80, cell * n_rows // 2)), format=grid.legend_format)
    colour = alt.Color(f"{grid.value}:Q", title=grid.colour_title, legend=legend, scale=grid.colour)
    layers: list[alt.Chart] = [base.mark_rect().encode(color=colour, tooltip=grid.tooltip)]
    if grid.outlined:
        layers += _outlines(base, cell, grid.tooltip)
    if values:
        texts = base.transform_filter(alt.expr.abs(getattr(alt.datum, grid.value)) >= 0.005) if grid.hide_small else base
        layers.append(texts.mark_text(fontSize=max(7, font - 3)).encode(
            text=alt.Text(f"{grid.value}:Q", format=grid.text_format),
            color=alt.condition(grid.dark, alt.value("#ffffff"), alt.value("#000000")),
            tooltip=grid.tooltip,
        ))
    layers += grid.overlays
    return alt.layer(*layers).properties(width=alt.Step(cell), height=alt.Step(cell),
                                         title=alt.Title(grid.title, subtitle=grid.subtitle, anchor="start"))


def _window(T: int, rows: tuple[int, int] | None) -> tuple[int, int]:
    r0, r1 = rows if rows is not None else (0, T)
    if not 0 <= r0 < r1 <= T:
        raise ValueError(f"rows {r0}..{r1} are not rows of this text (0..{T})")
    return r0, r1


def attention_heatmap(
    sa: SentenceAnalysis,
    setting: Setting = NONE,
    title: str | None = None,
    values: bool | None = None,
    measure: str = "weight",
    rows: tuple[int, int] | None = None,
    selected: int | None = None,
) -> alt.LayerChart:
    """Targets (rows, top to bottom) x memory slots (columns); colour = attention weight, or with
    ``measure="effect"`` the slot effect in bits (:attr:`SentenceAnalysis.slot_effects`: how much
    log2 P(word) drops without that slot), on a diverging scale centred at 0.

    Masked cells (future slots, slots outside a window, another sentence read alone; in effect
    mode also effects not computed) are left blank. The cells the highlight ``setting`` picks in the
    attention (the same ones :func:`vizlm.present.fragments.highlighted_html` colours) get an outline (none with
    :data:`vizlm.inspect.highlight.NONE`). ``values`` writes the weight (effect) in each cell (default:
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
    r0, r1 = _window(att.shape[0], rows)
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
    lit = marked(sa, range(r0, r1), setting)
    labels, inputs = sa.slot_labels, sa.input_labels
    df = pd.DataFrame({
        "target": [ylab[r] for r in rows_],
        "slot": [xlab[j] for j in cols],
        "predicting": [sa.targets[r] for r in rows_],
        "current": [inputs[r] for r in rows_],
        "attended": [labels[j] for j in cols],
        "weight": att[rows_, cols],
        "highlighted": [(int(r), int(j)) in lit for r, j in zip(rows_, cols)],
    })
    if effects is not None:
        eff = effects[rows_, cols]
        df["effect"] = np.where(np.isfinite(eff), eff, None)
    tooltip = [
        alt.Tooltip("predicting:N", title="predicting"),
        alt.Tooltip("current:N", title="after reading"),
        alt.Tooltip("attended:N", title="attended word"),
        alt.Tooltip("slot:N", title="slot"),
        alt.Tooltip("weight:Q", title="weight", format=".3f"),
    ]
    if effects is not None:
        tooltip.append(alt.Tooltip("effect:Q", title="effect (bits)", format="+.3f"))
    if effect_mode:
        lim = EFFECT_DOMAIN_BITS
        head = title or f"{sa.model}: effect of each memory slot on P(word), in bits"
    elif sa.head is not None:
        head = title or f"{sa.model}: self-attention, {sa.head_label}"
    else:
        head = title or f"{sa.model}: attention over memory"
    rule = describe(setting, "weight ≥ {share:g}")
    if rule:
        head += f" (outlined: {rule}{' by weight' if effect_mode and isinstance(setting, TopK) else ''})"
    subtitle = _window_subtitle(sa, (r0, r1))
    if effect_mode:
        biggest = float(np.nanmax(np.abs(effects[mask]))) if mask.any() else 0.0
        subtitle = [subtitle, (f"log-probability minus the same with the slot dropped · blue: the slot helped, red: it "
                               f"hurt (clipped at ±{EFFECT_DOMAIN_BITS:g} bit) · largest here {biggest:.2g} bits")]
    grid = Grid(
        df, "slot", "word read (attended)" if sa.self_attention else "memory slot (attended word)", row_domain,
        slot_domain,
        value="effect" if effect_mode else "weight",
        colour=alt.Scale(scheme=EFFECT_SCHEME, domain=[-lim, lim], domainMid=0, clamp=True) if effect_mode
        else alt.Scale(scheme=SCHEME, domain=list(WEIGHT_DOMAIN)),
        colour_title=["slot effect", "(bits)"] if effect_mode else "attention",
        legend_format="+.1f" if effect_mode else ".1f",
        text_format="+.2f" if effect_mode else ".2f",
        # dark cells (|effect| near the ends of the scale; viridis's low end) get white numbers, pale ones black
        dark=((alt.datum.effect >= 0.6 * lim) | (alt.datum.effect <= -0.6 * lim)) if effect_mode
        else alt.datum.weight < 0.6,
        tooltip=tooltip, title=head, subtitle=subtitle,
        overlays=_boundary_rules(sa, ylab, xlab, row_domain, slot_domain) + _selected_row(ylab, row_domain, selected,
                                                                                          (r0, r1)),
        outlined=bool(lit),
        hide_small=effect_mode,  # effect mode: no "+0.00" in the cells that do not matter, so the ones that do stand out
    )
    return heatmap(grid, values)


def position_axis_labels(attr: Attribution) -> list[str]:
    """[T] ``"j word"`` for each input position ``p``, numbered ``j = p + 1`` as the memory slot that holds it
    (:func:`slot_axis_labels`), so an attribution heat map and an attention heat map share their columns."""
    return [f"{p + 1} {w}" for p, w in enumerate(attr.inputs)]


def attribution_heatmap(
    attr: Attribution,
    setting: Setting = NONE,
    rows: tuple[int, int] | None = None,
    selected: int | None = None,
    title: str | None = None,
) -> alt.LayerChart:
    """Targets (rows) x input positions (columns): the attribution of each predicted word's log2 P(word) to
    each word read before it (:class:`vizlm.inspect.attribution.Attribution`, in bits), on a diverging scale centred
    at 0 over ± the largest ``|attribution|`` shown (blue: the word raised P(word), red: lowered it).

    Only the positions of each row's reading up to it are drawn (no later word, no other sentence read
    alone). The positions the highlight ``setting`` picks in the attribution are outlined (none with
    :data:`vizlm.inspect.highlight.NONE`); ``rows`` ``(first, end)`` draws those rows and the positions they read,
    at most as many as rows, the newest; ``selected`` outlines a row. Dashed lines separate the sentences of a
    passage."""
    sa = attr.analysis
    r0, r1 = _window(len(attr.targets), rows)
    used = np.flatnonzero(attr.covered[r0:r1].any(0))  # (n,) the positions the rows read
    columns = [int(p) for p in used[-(r1 - r0):]] if len(used) else []
    mask = np.zeros_like(attr.covered)
    mask[r0:r1, columns] = attr.covered[r0:r1, columns]
    ylab, xlab = target_axis_labels(sa), position_axis_labels(attr)
    row_domain, col_domain = ylab[r0:r1], [xlab[p] for p in columns]
    rows_, cols = np.nonzero(mask)
    lit = marked(attr, range(r0, r1), setting)
    bits = attr.bits
    lim = attribution_scale(attr, range(r0, r1), HEATMAP_SCALE_QUANTILE)
    df = pd.DataFrame({
        "target": [ylab[r] for r in rows_],
        "position": [xlab[p] for p in cols],
        "predicting": [attr.targets[r] for r in rows_],
        "input": [attr.inputs[p] for p in cols],
        "distance": distance(rows_ - cols).astype(int),
        "attribution": bits[rows_, cols],
        "highlighted": [(int(r), int(p)) in lit for r, p in zip(rows_, cols)],
    })
    tooltip = [alt.Tooltip("predicting:N", title="predicting"), alt.Tooltip("input:N", title="word read"),
               alt.Tooltip("distance:Q", title="distance"),
               alt.Tooltip("attribution:Q", title="attribution (bits)", format="+.3f")]
    if attr.attention is not None:
        df["weight"] = np.where(attr.attended[rows_, cols], attr.attention[rows_, cols], np.nan)  # NaN: no slot
        tooltip.append(alt.Tooltip("weight:Q", title="attention weight", format=".3f"))
    head = title or f"{attr.model}: what each prediction depended on ({METHOD_LABELS.get(attr.method, attr.method)})"
    rule = describe(setting, "≥ {share:g} of the row's largest |attribution|")
    if rule:
        head += f" (outlined: {rule})"
    # the same sentence lines as the attention's map: its slot j is this map's position j - 1, labelled alike
    slot_like = ["0 <s>"] + xlab
    grid = Grid(
        df, "position", "word read (input position)", row_domain, col_domain, value="attribution",
        colour=alt.Scale(scheme=EFFECT_SCHEME, domain=[-lim, lim], domainMid=0, clamp=True),
        colour_title=["attribution", "(bits)"], legend_format="+.2g", text_format="+.2f",
        dark=(alt.datum.attribution >= 0.6 * lim) | (alt.datum.attribution <= -0.6 * lim),
        tooltip=tooltip, title=head,
        subtitle=[_window_subtitle(sa, (r0, r1)),
                  (f"attribution of log₂ P(word) to each word read · blue: raised P(word), red: lowered it · "
                   f"clipped at ±{lim:.2g} bits ({HEATMAP_SCALE_QUANTILE:.0%} of the cells shown are within)")],
        overlays=_boundary_rules(sa, ylab, slot_like, row_domain, col_domain)
        + _selected_row(ylab, row_domain, selected, (r0, r1)),
        outlined=bool(lit),
    )
    return heatmap(grid)
