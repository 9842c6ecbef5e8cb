"""Export figures and results: PNG / SVG / HTML through vl-convert, CSV / JSON through pandas.

Everything returns ``bytes`` so the app can hand it to ``st.download_button`` and
the CLI to :func:`write_export`; nothing needs a browser or the network.

Safety. Text typed by a user ends up in every file:

* HTML pages are built here rather than with ``vl_convert.vegalite_to_html``,
  which pastes the spec into a ``<script>`` block unescaped (a token
  ``</script><script>...`` would run). We inline vl-convert's JavaScript bundle
  and write the spec as JSON with ``<``, ``>`` and ``&`` as ``\\u`` escapes, so the
  page is standalone, works offline and cannot be broken out of.
* CSV cells starting with ``= + - @``, tab or carriage return get a leading
  ``'`` so spreadsheets don't evaluate them (OWASP "CSV injection").
* JSON has no NaN/Infinity (``allow_nan=False``); non-finite numbers become ``null``.
"""

from __future__ import annotations

import functools
import html
import io
import json
import math
import os
import re
import tempfile
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
import vl_convert as vlc

from vizlm.present import charts, fragments, heatmap
from vizlm.inspect.analysis import LN2, SentenceAnalysis
from vizlm.inspect.highlight import DEFAULT, NONE, Setting
from vizlm.inspect.attribution import Attribution
from vizlm.present.render import clean_spec, render
from vizlm.present.serialize import analysis_dict, json_safe
from vizlm.data.text import clean_text

CHART_FORMATS = ("png", "svg", "html")
TABLE_FORMATS = ("csv", "json")
FORMATS = CHART_FORMATS + TABLE_FORMATS
MIME = {
    "png": "image/png",
    "svg": "image/svg+xml",
    "html": "text/html",
    "csv": "text/csv",
    "json": "application/json",
}
PNG_SCALE = 2.0  # PNG pixels per chart pixel: sharp on high-density screens and in print
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Offline page: no request can leave it (Vega compiles expressions with Function(), hence 'unsafe-eval').
_CSP = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:"
)


def _check_format(fmt: str, allowed: tuple[str, ...]) -> str:
    f = str(fmt).lower().lstrip(".")
    if f not in allowed:
        raise ValueError(f"unknown export format {fmt!r}; choose one of: {', '.join(allowed)}")
    return f


# --------------------------------------------------------------------------- charts


@functools.lru_cache(maxsize=1)
def _vl_version() -> str | None:
    """The Vega-Lite version vl-convert should compile with: the one Altair writes specs for."""
    want = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return want if want in vlc.get_vegalite_versions() else None  # None: vl-convert's latest


@functools.lru_cache(maxsize=1)
def _js_bundle() -> str:
    """vega + vega-lite + vega-embed as one script (about 0.9 MB), safe to inline in ``<script>``."""
    return vlc.javascript_bundle(vl_version=_vl_version()).replace("</script", "<\\/script")


def _script_json(obj: object) -> str:
    """JSON that is also a safe JavaScript literal inside an HTML ``<script>`` element."""
    text = json.dumps(json_safe(obj), allow_nan=False, ensure_ascii=False)
    return (
        text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    )  # fmt: skip


def chart_html(chart: alt.TopLevelMixin, title: str = "vizlm", body_html: str = "") -> str:
    """A standalone HTML page drawing ``chart`` with the JavaScript inlined (no network needed).

    ``body_html`` is inserted above the chart as is: pass escaped HTML (e.g. from
    :mod:`vizlm.present.fragments`).
    """
    spec = clean_spec(chart_spec(chart))
    embed_opts = {"renderer": "svg", "actions": {"export": True, "source": False, "compiled": False, "editor": False}}
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem; color: #222; }}
h1 {{ font-size: 1.2rem; margin: 0 0 0.5rem; }}
.vizlm-chart {{ margin-top: 1rem; overflow-x: auto; }}
.vizlm-note {{ color: #666; font-size: 0.85rem; }}
</style>
<script>{_js_bundle()}</script>
</head>
<body>
<h1>{html.escape(title)}</h1>
{body_html}
<div class="vizlm-chart" id="vizlm-chart"></div>
<script>
(function () {{
  var spec = {_script_json(spec)};
  var target = document.getElementById("vizlm-chart");
  vegaEmbed(target, spec, {_script_json(embed_opts)}).catch(function (err) {{
    target.textContent = "The chart could not be drawn: " + err;
  }});
}})();
</script>
</body>
</html>
"""


def chart_spec(chart: alt.TopLevelMixin, validate: bool = True) -> dict:
    """The chart's Vega-Lite spec with its data inline, however many rows (a whole split, a 400-word
    heat map): Altair's 5,000-row guard protects notebooks, not files we write on request.
    ``validate=False`` skips Altair's schema check, half the time of a heat map: for a figure whose
    specs the tests validate (``tests/test_export.py``) and that the app draws on every click."""
    with alt.data_transformers.disable_max_rows():
        return chart.to_dict(validate=validate)


def chart_bytes(chart: alt.TopLevelMixin, fmt: str, scale: float = PNG_SCALE, title: str = "vizlm") -> bytes:
    """Render an Altair chart as ``png`` (``scale`` x its pixel size), ``svg`` or standalone ``html``.

    PNG and SVG are drawn in a child process (:mod:`vizlm.present.render`): if vl-convert fails or crashes,
    this raises :class:`~vizlm.present.render.RenderError` and the calling process lives on.
    """
    fmt = _check_format(fmt, CHART_FORMATS)
    if fmt == "html":
        return chart_html(chart, title=title).encode("utf-8")
    return render(chart_spec(chart), fmt, scale=scale if fmt == "png" else 1.0, vl_version=_vl_version())


# --------------------------------------------------------------------------- tables


def neutralise_cell(value: object) -> object:
    """Prefix ``'`` to a string a spreadsheet would read as a formula, and clean it
    (:func:`vizlm.data.text.clean_text`: no control character or lone surrogate in a cell);
    other values pass through."""
    if isinstance(value, str):
        value = clean_text(value)
        return "'" + value if value.startswith(_FORMULA_START) else value
    return value


def _neutralise_frame(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    out.columns = [neutralise_cell(str(c)) for c in out.columns]
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(neutralise_cell)
    return out


def safe_filename(text: str, default: str = "vizlm") -> str:
    """A download's file stem from free text: ASCII letters and digits joined by ``-``, at most 40."""
    stem = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:40]
    return stem or default


def _json_bytes(obj: object) -> bytes:
    # errors="replace": a lone surrogate (text that skipped vizlm.data.text.clean_text) becomes "?", not an exception.
    return json.dumps(json_safe(obj), allow_nan=False, ensure_ascii=False, indent=2).encode("utf-8", errors="replace")


def _csv_bytes(df: pd.DataFrame) -> bytes:
    # utf-8-sig: the BOM makes Excel read Chinese / emoji tokens correctly; pandas skips it on read.
    # CRLF line ends (RFC 4180) also make the csv writer quote cells holding a lone \r.
    buf = io.StringIO()
    _neutralise_frame(df).to_csv(buf, index=False, lineterminator="\r\n")
    # errors="replace": cells are cleaned above, but a lone surrogate must never be an exception here.
    return buf.getvalue().encode("utf-8-sig", errors="replace")


def export_frame(df: pd.DataFrame, fmt: str) -> bytes:
    """Any table (e.g. a model comparison) as ``csv`` (formula cells neutralised) or ``json`` (records)."""
    fmt = _check_format(fmt, TABLE_FORMATS)
    if fmt == "csv":
        return _csv_bytes(df)
    return _json_bytes(df.to_dict(orient="records"))


# --------------------------------------------------------------------------- one analysis


def analysis_records(sa: SentenceAnalysis, setting: Setting = DEFAULT) -> list[dict]:
    """One row per (target, memory slot it may attend to); one row per target without attention.

    Columns: model, target_index, target (word predicted), current (word just read),
    sentence (of the target, 0-based: a passage has several), target_unk, prob, surprisal_bits,
    read_effect_bits, slot, attended (slot
    label), attended_token (index into ``tokens``, -1 for ``<s>``), weight,
    effect_bits (the slot effect), highlighted (by the highlight ``setting``). Effects are empty where not
    computed.
    """
    hl = sa.highlighted(setting)
    sentence = sa.sentence_of()  # [T]
    probs, surprisal = sa.probs, sa.surprisal
    read, effects = sa.read_effect_bits, sa.slot_effect_bits
    labels, inputs = sa.slot_labels, sa.input_labels
    mask = sa.allowed()
    rows = []
    for r, word in enumerate(sa.targets):
        base = {
            "model": sa.model,
            "target_index": r,
            "target": word,
            "current": inputs[r],
            "sentence": int(sentence[r]),
            "target_unk": bool(sa.unk[r]) if r < len(sa.unk) else False,
            "prob": float(probs[r]),
            "surprisal_bits": float(surprisal[r]),
            "read_effect_bits": None if read is None else float(read[r]),
        }
        if mask is None:
            rows.append({**base, "slot": None, "attended": None, "attended_token": None, "weight": None,
                         "effect_bits": None, "highlighted": False})
            continue
        lit = {h.slot for h in hl[r]}
        for j in np.flatnonzero(mask[r]):
            j = int(j)
            rows.append({
                **base,
                "slot": j,
                "attended": labels[j],
                "attended_token": sa.slot_token(j),
                "weight": float(sa.attention[r, j]),
                "effect_bits": None if effects is None or not math.isfinite(effects[r, j]) else float(effects[r, j]),
                "highlighted": j in lit,
            })
    return rows


def analysis_chart(
    sa: SentenceAnalysis, setting: Setting = DEFAULT, measure: str = "weight", rows: tuple[int, int] | None = None, selected: int | None = None,
) -> alt.TopLevelMixin:
    """The figure that stands for one analysis: the attention heat map (coloured by ``measure``: weight
    or slot effect; ``rows`` and ``selected`` as :func:`vizlm.present.heatmap.attention_heatmap`), or surprisal
    without attention."""
    if sa.attention is None:
        return charts.surprisal_chart([sa])
    return heatmap.attention_heatmap(sa, setting, measure=measure, rows=rows, selected=selected)


def export_analysis(
    sa: SentenceAnalysis,
    fmt: str,
    setting: Setting = DEFAULT,
    scale: float = PNG_SCALE,
    cases: bool = True,
    measure: str = "weight",
    rows: tuple[int, int] | None = None,
    selected: int | None = None,
) -> bytes:
    """One analysis as ``png`` / ``svg`` / ``html`` (the heat map, coloured by ``measure``; ``rows``: a
    window of a long passage, ``selected``: an outlined row) or ``csv`` / ``json`` (the numbers, always
    of the whole text)."""
    fmt = _check_format(fmt, FORMATS)
    if fmt == "csv":
        return _csv_bytes(pd.DataFrame(analysis_records(sa, setting)))
    if fmt == "json":
        return _json_bytes(analysis_dict(sa, setting, cases))
    chart = analysis_chart(sa, setting, measure, rows, selected)
    if fmt != "html":
        return chart_bytes(chart, fmt, scale=scale)
    notes = "".join(f'<p class="vizlm-note">{html.escape(n)}</p>' for n in sa.notes)
    body = (
        f'<p class="vizlm-note">perplexity {sa.perplexity:.1f} · probability of each word below '
        f"(bar colour: surprisal)</p>{fragments.sentence_strip_html(sa)}{notes}"
    )
    return chart_html(chart, title=f"vizlm: {sa.model}", body_html=body).encode("utf-8")


def attribution_records(attr: Attribution) -> pd.DataFrame:
    """One row per (predicted word, word read before it): :meth:`Attribution.frame` with the score in bits
    beside nats and its share of the word's total |attribution| (the CSV of an attribution)."""
    frame = attr.frame()
    frame["score_bits"] = frame["score"] / LN2
    total = frame.groupby("row")["score"].transform(lambda s: s.abs().sum())
    frame["share"] = np.where(total > 0, frame["score"].abs() / total.where(total > 0, 1.0), 0.0)
    return frame


def export_attribution(attr: Attribution, fmt: str, setting: Setting = NONE,
                       rows: tuple[int, int] | None = None, selected: int | None = None,
                       scale: float = PNG_SCALE) -> bytes:
    """One attribution (one method, one text, one model) as ``png`` / ``svg`` / ``html`` (its heat map,
    :func:`vizlm.present.heatmap.attribution_heatmap`, the highlights outlined; ``rows``: a window, ``selected``: an
    outlined row), ``csv`` (:func:`attribution_records`: every pair of the whole text) or ``json``
    (:meth:`Attribution.to_dict`: per word its attributions, IG's convergence delta, the agreement)."""
    fmt = _check_format(fmt, FORMATS)
    if fmt == "csv":
        return _csv_bytes(attribution_records(attr))
    if fmt == "json":
        return _json_bytes(attr.to_dict())
    chart = heatmap.attribution_heatmap(attr, setting, rows=rows, selected=selected)
    return chart_bytes(chart, fmt, scale=scale, title=f"vizlm: {attr.model}")


def write_export(data: bytes, path: str | os.PathLike) -> Path:
    """Write ``data`` to ``path`` atomically (a reader never sees half a file); creates parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        # mkstemp makes the file private (0600); an export should read like any other file.
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
