"""Static HTML views of results, for notebooks (``_repr_html_``) and saved pages.

No JavaScript: inline styles and ``title`` tooltips only, so a notebook saved with its outputs
still shows the highlighted text and the heat map on GitHub and nbviewer. The heat map is an
HTML table coloured in Python with the app's scales (:func:`vizlm.present.style.palette` for weights,
:func:`vizlm.present.style.effect_colour` for effects), the running text is the app's
(:func:`vizlm.present.fragments.highlighted_html`). Every piece of text is escaped (:func:`esc`): a text
holding ``<script>`` shows it, never runs it. Nothing here calls a model.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from vizlm.present import fragments, heatmap, style
from vizlm.inspect.analysis import ATTENTION_OFF, DISTANCE_NOTE, SentenceAnalysis, distance
from vizlm.inspect.reading import READINGS
from vizlm.inspect.attribution import LABELS as METHOD_LABELS
from vizlm.inspect.attribution import Attribution
from vizlm.inspect.highlight import DEFAULT, NONE, Setting, describe
from vizlm.inspect.case_rules import LABEL_DESCRIPTIONS
from vizlm.data.text import clean_text

MAX_VALUE_COLUMNS = 16  # a heat map with at most this many columns writes its values in the cells
CELL_PX = 16  # the side of a heat map cell without values
_BOX = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;color:#222;line-height:1.4;max-width:100%;"
_NOTE = "font-size:0.85em;color:#666;margin:2px 0;"
_TABLE = "border-collapse:collapse;font-size:0.85em;margin:4px 0;"
_CELL = "border:1px solid #e4e4e4;padding:1px 6px;text-align:left;"
_LABEL_COLOURS = {"trigger": "#0072B2", "causal": "#D55E00", "phrase": "#009E73", "grammar": "#CC79A7"}


def esc(text: object) -> str:
    """Text as HTML: cleaned (:func:`vizlm.data.text.clean_text`) and escaped, quotes included."""
    return html.escape(clean_text(str(text)), quote=True)


def _bits(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    text = f"{x:+.2f} bits"
    return "+0.00 bits" if text == "-0.00 bits" else text


def _swatch(colour: str, text: str) -> str:
    return (f'<span style="display:inline-block;min-width:2.6em;text-align:center;border-radius:3px;padding:0 3px;'
            f'background:{colour};color:{style.text_colour(colour)}">{esc(text)}</span>')


def colour_key(measure: str) -> str:
    """The heat map's colour scale as swatches."""
    if measure == "effect":
        lim = style.EFFECT_DOMAIN_BITS
        items = [_swatch(style.effect_colour(v), f"{v:+.1f}") for v in (-lim, -lim / 2, 0.0, lim / 2, lim)]
        return f'<div style="{_NOTE}">slot effect (bits; blue: the slot helped, red: it hurt) {" ".join(items)}</div>'
    items = [_swatch(style.palette(v), f"{v:.1f}") for v in (0.0, 0.25, 0.5, 0.75, 1.0)]
    return f'<div style="{_NOTE}">attention weight {" ".join(items)}</div>'


def heatmap_html(sa: SentenceAnalysis, measure: str = "weight", setting: Setting = NONE, rows: tuple[int, int] | None = None, selected: int | None = None,
                 values: bool | None = None) -> str:
    """The attention heat map as an HTML table: the rows and columns of
    :func:`vizlm.present.heatmap.attention_heatmap` (``rows``: a window; its columns: the slots the window may use,
    :func:`vizlm.present.heatmap.window_slots`), coloured by weight or by slot effect (``measure``), the
    highlighted cells outlined, the ``selected`` row marked, a tooltip per cell. ``values`` writes the
    numbers in the cells (default: when there are at most :data:`MAX_VALUE_COLUMNS` columns)."""
    if measure not in style.MEASURES:
        raise ValueError(f"measure must be one of {', '.join(style.MEASURES)}, not {measure!r}")
    if sa.attention is None:
        return f'<div style="{_NOTE}">{esc(sa.model)} has no attention: no heat map.</div>'
    T = len(sa.targets)
    r0, r1 = rows if rows is not None else (0, T)
    allowed = sa.allowed()
    columns = heatmap.window_slots(allowed, (r0, r1))
    effects = sa.slot_effect_bits
    if measure == "effect" and effects is None:
        raise ValueError(f"the analysis of {sa.model!r} has no slot effects")
    marked = heatmap.marked(sa, range(r0, r1), setting)
    ylab, xlab = style.target_axis_labels(sa), style.slot_axis_labels(sa)
    labels, inputs = sa.slot_labels, sa.input_labels
    starts = set(sa.start_slots)
    values = len(columns) <= MAX_VALUE_COLUMNS if values is None else values
    # every cell the same size, empty or not: the font size is part of it (em counts in the cell's own font: a
    # filled cell's smaller font made the first column, which every row fills, narrower; it cut its numbers)
    width = ("font-size:0.8em;width:3.2em;min-width:3.2em;padding:0;" if values
             else f"width:{CELL_PX}px;min-width:{CELL_PX}px;height:{CELL_PX}px;padding:0;")
    head_style = ("writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;font-weight:normal;"
                  "padding:2px 0;font-size:0.85em;max-height:9em;overflow:hidden;")
    head = "".join(f'<th style="{head_style}" title="{esc(xlab[j])}">{esc(xlab[j])}</th>' for j in columns)
    body = []
    for r in range(r0, r1):
        outline = f"outline:2px solid {style.SELECTED_COLOUR};" if r == selected else ""
        cells = [(f'<th style="text-align:right;font-weight:normal;white-space:nowrap;padding:0 6px;{outline}" '
                  f'title="{esc(f"predicting {sa.targets[r]} after {inputs[r]}")}">{esc(ylab[r])}</th>')]
        for j in columns:
            rule = "border-left:1px dashed #888;" if j in starts and j > 0 else ""
            if not allowed[r, j] or (measure == "effect" and not math.isfinite(effects[r, j])):
                cells.append(f'<td style="{width}{rule}border:1px solid #f2f2f2"></td>')
                continue
            w = float(sa.attention[r, j])
            e = None if effects is None or not math.isfinite(effects[r, j]) else float(effects[r, j])
            colour = style.effect_colour(e) if measure == "effect" else style.palette(w)
            ink = style.text_colour(colour)
            lit = f"outline:2px solid {ink};outline-offset:-3px;" if (r, j) in marked else ""
            tip = f"predicting {sa.targets[r]} after {inputs[r]} · slot {j} {labels[j]} · weight {w:.3f}"
            if e is not None:
                tip += f" · effect {_bits(e)}"
            shown = "" if not values else (f"{e:+.2f}" if measure == "effect" and e is not None and abs(e) >= 0.005
                                           else "" if measure == "effect" else f"{w:.2f}")
            cells.append(f'<td style="{width}{rule}background:{colour};color:{ink};{lit}text-align:center" '
                         f'title="{esc(tip)}">{shown}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    what = "effect of each memory slot on P(word), in bits" if measure == "effect" else "attention over memory"
    rule = describe(setting, "weight ≥ {share:g}")
    title = f"{sa.model}: {what}" + (f" (outlined: {rule})" if rule and marked else "")
    window = f"rows {r0}–{r1 - 1} of {T} (a window around the selected word) · " if (r0, r1) != (0, T) else ""
    return (f'<div class="vizlm-heatmap"><div style="font-weight:600;margin-top:8px">{esc(title)}</div>'
            f'<div style="{_NOTE}">{esc(window)}rows: the predicted word; columns: the memory slots (attended word); '
            f"hover a cell for its numbers</div>"
            f'<div style="overflow-x:auto"><table style="{_TABLE}border-spacing:0">'
            f"<thead><tr><th></th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
            f"{colour_key(measure)}</div>")


def _row_table(header: Sequence[str], rows: list[Sequence[str]]) -> str:
    """A small table; cells are HTML already (escaped by the caller)."""
    th = "".join(f'<th style="{_CELL}background:#f6f6f6">{h}</th>' for h in header)
    trs = "".join("<tr>" + "".join(f'<td style="{_CELL}">{c}</td>' for c in row) + "</tr>" for row in rows)
    return f'<table style="{_TABLE}"><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>'


def _word_facts(sa: SentenceAnalysis, target: int) -> str:
    p = float(sa.probs[target])
    items = [f"P(word) <b>{esc(style.format_prob(p))}</b>", f"surprisal <b>{float(sa.surprisal[target]):.1f} bits</b>"]
    if sa.read_effect is not None:
        read = float(sa.read_effect_bits[target])
        with np.errstate(over="ignore"):
            without = float(np.exp(sa.logprobs[target] - sa.read_effect[target]))
        items.append(f"attention effect <b>{esc(_bits(read))}</b> (without the read P(word) would be "
                     f"{esc(style.format_prob(without))})")
    top = ", ".join(f"{esc(w)} {esc(style.format_prob(float(q)))}"
                    for w, q in zip(sa.top_words[target][:5], sa.top_probs[target][:5]))
    if top:
        items.append(f"top predictions: {top}")
    return f'<div style="{_NOTE}color:#333">{" · ".join(items)}</div>'


def _slot_rows(sa: SentenceAnalysis, target: int, setting: Setting) -> str:
    table = sa.slot_table(target, setting=setting)
    if not table:
        return ""
    rows = []
    for e in table:
        w, b = e["weight"], e["effect_bits"]
        rows.append([esc(f"{sa.slot_number(e['slot'])} {e['word']}"), _swatch(style.palette(w), f"{w:.3f}"),
                     "–" if b is None else _swatch(style.effect_colour(b), f"{b:+.3f}")])
    return ('<div style="font-weight:600;margin-top:6px;font-size:0.9em">memory slots of this word, largest |effect| '
            "first</div>" + _row_table(["memory slot", "weight", "effect (bits)"], rows))


def _case_lines(cases: list[dict], word: str) -> str:
    lines = []
    for c in sorted((c for c in cases if c.get("labels")), key=lambda c: (c.get("effect") is None, -(c.get("effect") or 0))):
        effect = "" if c.get("effect") is None else f" · effect {esc(_bits(c['effect']))}"
        for label in c["labels"]:
            why = c["evidence"].get(label, "") if isinstance(c.get("evidence"), dict) else c.get("evidence", "")
            colour = _LABEL_COLOURS.get(label, "#666")
            lines.append(
                f'<div style="font-size:0.9em"><span style="background:{colour};color:#fff;border-radius:3px;'
                f'padding:0 4px" title="{esc(LABEL_DESCRIPTIONS.get(label, ""))}">{esc(label)}</span> '
                f"<b>{esc(c['attended'])}</b> → <b>{esc(word)}</b> · weight {float(c['weight']):.2f}{effect}"
                f'<div style="{_NOTE}">{esc(why)}</div></div>')
    return "".join(lines)


def analysis_html(sa: SentenceAnalysis, target: int, setting: Setting = DEFAULT, measure: str = "weight", cases: list[dict] | None = None) -> str:
    """One analysis as the Explorer shows it, for word ``target``: the running text with its attention
    highlighted, the word's probability and attention effect, its memory slots (weight and effect),
    its labelled ``cases``, and the heat map (coloured by ``measure``; a long text: the
    :data:`vizlm.present.style.WINDOW_ROWS` rows around the word). Self-contained, no JavaScript."""
    T = len(sa.targets)
    if not 0 <= target < T:
        raise IndexError(f"target {target} out of range: the text has {T} predicted words (0..{T - 1})")
    facts = f"perplexity {sa.perplexity:.1f} · {T} predicted words"
    if sa.boundaries:
        facts += f" · {len(sa.boundaries) + 1} sentences"
    parts = [(f'<div style="font-weight:600;font-size:1.05em">{esc(sa.model)} '
              f'<span style="font-weight:normal;color:#555">· {esc(facts)}</span></div>'),
             f'<div style="{_NOTE}">{esc(sa.context)}-level checkpoint: {esc(READINGS.get(sa.context, ""))}</div>']
    parts += [f'<div style="{_NOTE}">note: {esc(n)}</div>' for n in sa.notes]
    span = fragments.text_span(sa, target)
    if sa.attention is None:
        parts.append(fragments.sentence_strip_html(sa, selected=target, span=span))
        parts.append(_word_facts(sa, target))
        return f'<div class="vizlm-analysis" style="{_BOX}">{"".join(parts)}</div>'
    parts.append(fragments.highlighted_html(sa, target, setting, span=span))
    parts.append(fragments.attention_key_html())
    parts.append(_word_facts(sa, target))
    start = None if sa.self_attention else float(sa.attention[target, sa.first_rows()[target]])
    if sa.head is not None:
        parts.append(f'<div style="{_NOTE}">self-attention, {sa.head_label}</div>')
    if start is not None and start >= ATTENTION_OFF:
        parts.append(f'<div style="{_NOTE}">attention mostly off for this word: {start:.0%} of the weight is on the '
                     "empty start slot</div>")
    parts.append(_slot_rows(sa, target, setting))
    parts.append(_case_lines(cases or [], sa.targets[target]))
    rows = heatmap.heatmap_rows(sa, target)
    if measure == "effect" and sa.slot_effects is None:
        parts.append(f'<div style="{_NOTE}">no slot effects were computed for this text: the heat map shows the '
                     "weights</div>")
        measure = "weight"
    parts.append(heatmap_html(sa, measure, setting, rows=rows, selected=target))
    return f'<div class="vizlm-analysis" style="{_BOX}">{"".join(parts)}</div>'


ATTRIBUTION_ROWS = 10  # the words of a row's reading listed in the notebook view, largest |attribution| first


def attribution_html(attr: Attribution, target: int, setting: Setting = DEFAULT) -> str:
    """One attribution as the Explorer shows it, for word ``target``: the running text with the words its
    prediction depended on highlighted (:func:`vizlm.present.fragments.attribution_html`), the colour key, and the
    words it read, largest |attribution| first (bits, share, distance and, with attention, the weight).
    Self-contained, no JavaScript."""
    sa = attr.analysis
    T = len(attr.targets)
    if not 0 <= target < T:
        raise IndexError(f"target {target} out of range: the text has {T} predicted words (0..{T - 1})")
    method = METHOD_LABELS.get(attr.method, attr.method)
    parts = [(f'<div style="font-weight:600;font-size:1.05em">{esc(attr.model)} '
              f'<span style="font-weight:normal;color:#555">· {esc(method)} · {T} predicted words</span></div>'),
             f'<div style="{_NOTE}">{esc(attr.context)}-level checkpoint: {esc(READINGS.get(attr.context, ""))}</div>']
    span = fragments.text_span(sa, target) if sa is not None else None
    parts.append(fragments.attribution_html(attr, target, setting, span=span))
    parts.append(fragments.attribution_key_html(style.attribution_scale(attr, [target]), attr.method))
    frame = attr.row_frame(target)
    if frame.empty:
        parts.append(f'<div style="{_NOTE}">no word of this text was read before this one: nothing to attribute</div>')
    else:
        shown = frame.head(ATTRIBUTION_ROWS)
        header = ["word read", "distance", "attribution", "share"] + (["weight"] if "attention" in shown else [])
        rows = []
        for _, x in shown.iterrows():
            row = [esc(f"{x.position + 1} {x.input}"), str(int(x.distance)), _bits(float(x.attribution_bits)),
                   f"{x.share:.0%}"]
            if "attention" in shown:
                row.append("–" if math.isnan(x.attention) else f"{x.attention:.3f}")
            rows.append(row)
        more = f" (the first {ATTRIBUTION_ROWS} of {len(frame)})" if len(frame) > ATTRIBUTION_ROWS else ""
        parts.append(f'<div style="{_NOTE}">the words read before it, largest |attribution| first{esc(more)}; '
                     f"distance 1: the word just before the predicted word</div>")
        parts.append(_row_table(header, rows))
    if attr.convergence_delta is not None:
        parts.append(f'<div style="{_NOTE}">integrated gradients, {int(attr.steps[target])} steps: convergence delta '
                     f"{_bits(float(attr.convergence_delta[target]) / math.log(2))} "
                     f"({float(attr.relative_delta[target]):.1%})</div>")
    return f'<div class="vizlm-attribution" style="{_BOX}">{"".join(parts)}</div>'


def frame_html(frame: pd.DataFrame, floats: str = "{:.3f}") -> str:
    """A data frame as a small escaped HTML table (no index)."""
    return frame.to_html(index=False, escape=True, border=0, float_format=floats.format, na_rep="–", justify="left")


def figure_html(svg: str | None) -> str:
    """A chart drawn as SVG (:func:`vizlm.present.export.chart_bytes`), or nothing when it could not be drawn."""
    return f'<div style="overflow-x:auto;margin:6px 0">{svg}</div>' if svg else ""


def comparison_html(name_a: str, name_b: str, summary: dict, improved: pd.DataFrame, worsened: pd.DataFrame,
                    svg: str | None = None) -> str:
    """A per-sentence comparison: the summary (corpus ratio with its bootstrap interval, share
    improved), the scatter (``svg``), and the most improved / worsened sentences."""
    def num(key: str, fmt: str) -> str:
        v = summary.get(key)
        return fmt.format(v) if isinstance(v, (int, float)) and math.isfinite(v) else "–"

    lo, hi = summary.get("ratio_ci_low"), summary.get("ratio_ci_high")
    verdict = ""
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        verdict = "better" if hi < 1 else "worse" if lo > 1 else "not clearly different"
        verdict = f" · {esc(name_b)} is <b>{verdict}</b>"
    rows = [[esc(f"perplexity {name_a}"), num("perplexity_a", "{:.2f}")],
            [esc(f"perplexity {name_b}"), num("perplexity_b", "{:.2f}")],
            ["ratio B / A (95% bootstrap interval)",
             f"{num('ratio', '{:.4f}')} ({num('ratio_ci_low', '{:.4f}')} – {num('ratio_ci_high', '{:.4f}')})"],
            ["sentences improved", num("share_improved", "{:.1%}")],
            ["sentences", num("sentences", "{:,}")]]
    columns = [c for c in ("sentence_id", "length", "ppl_a", "ppl_b", "text") if c in improved.columns]
    return (f'<div class="vizlm-comparison" style="{_BOX}"><div style="font-weight:600">{esc(name_b)} against '
            f"{esc(name_a)}{verdict}</div>{_row_table(['', ''], rows)}{figure_html(svg)}"
            f'<div style="font-weight:600;margin-top:6px">most improved by {esc(name_b)}</div>'
            f"{frame_html(improved[columns])}"
            f'<div style="font-weight:600;margin-top:6px">most worsened</div>{frame_html(worsened[columns])}</div>')


def positions_html(frame: pd.DataFrame, entropy: dict, peak: dict, effects: dict, skipped: list[str],
                   svgs: Sequence[str | None] = ()) -> str:
    """Attention by position (Daniluk et al. Fig. 3): the charts (``svgs``), the mean weight per
    position and model as a table, the entropy and the share of words the read moves by > 1 bit."""
    parts = ['<div style="font-weight:600">Mean attention by relative position</div>',
             f'<div style="{_NOTE}">cf. Daniluk et al. (2017), Fig. 3; {esc(DISTANCE_NOTE)}</div>']
    parts += [figure_html(s) for s in svgs]
    if not frame.empty:
        wide = frame.assign(distance=distance(frame["offset"].astype(int))).pivot_table(
            index="distance", columns="model", values="mean", sort=False).reset_index()
        parts.append(frame_html(wide, "{:.4f}"))
    rows = []
    for name, value in entropy.items():
        e = effects.get(name) or {}
        share = e.get("share_over_1_bit")
        rows.append([esc(name), f"{value:.3f}", f"{peak.get(name, math.nan):.3f}",
                     "–" if share is None else f"{share:.2%}"])
    if rows:
        parts.append(_row_table(["model", "mean entropy (nats)", "mean largest weight", "words moved > 1 bit"], rows))
    if skipped:
        parts.append(f'<div style="{_NOTE}">without attention, left out: {esc(", ".join(skipped))}</div>')
    return f'<div class="vizlm-positions" style="{_BOX}">{"".join(parts)}</div>'
