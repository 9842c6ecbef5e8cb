"""The look shared by every figure: colour scales and palettes, how numbers and words are written on axes.

One colour scale for attention everywhere: :data:`SCHEME` over the fixed domain
:data:`WEIGHT_DOMAIN`, so heat maps of two models side by side, and the
highlighted text, read on the same scale. Viridis is perceptually uniform and
stays ordered for the common colour-vision deficiencies and in greyscale.
Slot effects (``measure="effect"``) and attributions use one diverging scale, :data:`EFFECT_SCHEME`,
centred at 0. The HTML fragments (:mod:`vizlm.present.fragments`) colour text in Python with the same scales
(:func:`palette`, :func:`effect_colour`), sampled from Vega's and tested against them.

Labels. Slot ``j`` is labelled ``"j word"`` (``"0 <s>"``, ``"1 <s>"``, ``"2 the"``).
A target row is labelled with the number its word gets once it is in memory
(row ``r`` predicts ``w_{r+1}``, later held by slot ``r + 2``), so one word has
one number on both axes: for "the dogs ..." the first rows read ``"2 the"``,
``"3 dogs"``. The last word of a sentence read alone is never held: its number is the next
sentence's start slot, ``<s>``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd

from vizlm.inspect.analysis import SentenceAnalysis
from vizlm.inspect.attribution import Attribution

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
MAX_LABEL_PX = 140  # long tokens are cut with an ellipsis on axes
WINDOW_ROWS = 40  # rows of a heat map window around the selected word (heatmap_rows): a long passage stays readable
OUTLINE_COLOUR, OUTLINE_HALO = "#000000", "#ffffff"  # a highlighted cell of a heat map (_outlines)
SELECTED_COLOUR = "#d55e00"  # the outline of the predicted word, in the running text and the heat map
SCATTER_OPACITY = 0.35  # thousands of sentences overlap: where both groups lie, both colours show


# --------------------------------------------------------------------------- colours

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
    """[S] ``"j word"`` for each memory slot; with self-attention, whose slot ``j`` is input ``j``, numbered ``j + 1``
    as the recurrent slot that holds that input (and as the attribution's positions and the targets)."""
    return [f"{sa.slot_number(j)} {w}" for j, w in enumerate(sa.slot_labels)]


def target_axis_labels(sa: SentenceAnalysis) -> list[str]:
    """[T] ``"k word"`` for each target row, ``k`` being the slot the word will occupy (``r + 2``), the word as
    read (:attr:`SentenceAnalysis.norms`, as the slot and position axes write it: an out-of-vocabulary word too,
    not ``<unk>``)."""
    return [f"{r + 2} {sa.norms[r] if r < len(sa.norms) else w}" for r, w in enumerate(sa.targets)]


def cell_sizes(n: int) -> tuple[int, int, int]:
    """(cell px, font px, x label angle) for an ``n`` x ``n`` grid: small grids get big cells."""
    cell = int(min(30, max(9, 640 // max(n, 1))))
    font = int(min(12, max(8, round(cell * 0.6))))
    angle = -45 if cell >= 1.5 * font else -90
    return cell, font, angle


def word_axis(angle: int, font: int) -> alt.Axis:
    """Word labels under a grid. At -45 degrees the cells are wide enough for every label
    (see :func:`_sizes`), and Vega's overlap test, which uses the rotated labels' upright
    bounding boxes, would hide most of them; at -90 degrees the test is exact."""
    return alt.Axis(
        labelAngle=angle,
        labelFontSize=font,
        labelLimit=MAX_LABEL_PX,
        labelOverlap=angle == -90,
        labelAlign="right",
        labelBaseline="middle" if angle == -90 else "top",
    )


def short_text(text: str, limit: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def attribution_colour(bits: float, lim: float) -> str:
    """Background of a word in running text by its attribution: the :data:`EFFECT_SCHEME` colour of
    ``bits`` over ``±lim`` (blue: raised P(word), red: lowered it), as :func:`attribution_heatmap` draws it."""
    return palette(bits, -lim, lim, _REDBLUE)


def categorical(n: int) -> list[str]:
    """``n`` colours, one per model: :data:`CATEGORICAL` while it has enough, else :data:`CATEGORICAL_WIDE`."""
    palette = CATEGORICAL if n <= len(CATEGORICAL) else CATEGORICAL_WIDE
    return [palette[i % len(palette)] for i in range(n)]


def unique_names(names: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return out


def require_columns(df: pd.DataFrame, columns: list[str], where: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{where}: missing column(s) {missing}; expected {columns}")


def attribution_scale(attr: Attribution, rows: Sequence[int] | None = None, quantile: float = 1.0) -> float:
    """The colour scale's end, in bits: that ``quantile`` of the ``|attribution|`` of ``rows`` (every row by
    default; 1.0: the largest, so the strongest word shown gets the full colour; larger values clip);
    1 bit where nothing is attributed."""
    rows = list(range(len(attr.targets)) if rows is None else rows)
    bits = np.abs(attr.bits[rows])[attr.covered[rows]]
    bits = bits[bits > 0]
    top = float(np.quantile(bits, quantile)) if bits.size else 0.0
    return top if top > 0 else 1.0
