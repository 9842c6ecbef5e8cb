"""Figures and exports, parsed back: PNG header, SVG as XML, standalone HTML, CSV and JSON round trips.

The analyses are built by hand (no model) and carry hostile tokens: a script
payload, a spreadsheet formula, Chinese, an emoji and an out-of-vocabulary word.
"""

from __future__ import annotations

import io
import json
import re
import struct
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import altair as alt
import numpy as np
import pandas as pd
import pytest
from conftest import vega_colours

from vizlm.present import charts, export, fragments, heatmap, render, style
from vizlm.inspect.analysis import SentenceAnalysis
from vizlm.inspect.highlight import Share, TopK

PAYLOAD = "<script>alert(1)</script>"
FORMULA = "=SUM(A1)"
TOKENS = ["The", PAYLOAD, "猫", "🐈", FORMULA, "zyzzyva", "sat", "."]
UNK_INDEX = 5


def make_analysis(tokens=TOKENS, attention=True, gates=True, window=None, seed=0, model="kvp") -> SentenceAnalysis:
    rng = np.random.default_rng(seed)
    n = len(tokens)
    T = n + 1
    norms = [t.lower() for t in tokens]
    unk = [i == UNK_INDEX for i in range(n)]
    offsets, pos = [], 0
    for t in tokens:
        offsets.append((pos, pos + len(t)))
        pos += len(t) + 1
    att = None
    if attention:
        att = np.zeros((T, T))  # (T, S)
        for r in range(T):
            lo = 0 if window is None else max(0, r + 1 - window)
            att[r, lo : r + 1] = rng.dirichlet(np.full(r + 1 - lo, 0.5))
    k = 3
    top_probs = np.sort(rng.dirichlet(np.ones(k), size=T), axis=1)[:, ::-1]
    return SentenceAnalysis(
        model=model,
        text=" ".join(tokens),
        tokens=list(tokens),
        norms=norms,
        offsets=offsets,
        unk=unk,
        targets=["<unk>" if u else w for w, u in zip(norms, unk)] + ["</s>"],
        logprobs=np.log(rng.uniform(0.001, 0.9, size=T)),
        top_words=[["the", "a", "<unk>"] for _ in range(T)],
        top_probs=top_probs,
        attention=att,
        gates=rng.uniform(0, 1, size=(T, 6)) if gates else None,
    )


@pytest.fixture(scope="module")
def sa() -> SentenceAnalysis:
    return make_analysis()


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


class TagCollector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def parse_html(text: str) -> list[tuple[str, dict]]:
    p = TagCollector()
    p.feed(text)
    return p.tags


# --------------------------------------------------------------------------- charts


def test_every_chart_builds_a_valid_spec(sa):
    positions = pd.DataFrame({
        "model": ["kvp"] * 3 + ["amsrn"] * 3,
        "offset": [1, 2, 3] * 2,
        "mean": [0.5, 0.3, 0.2, 0.4, 0.35, 0.25],
        "lo": [0.45, 0.25, 0.15, 0.35, 0.3, 0.2],
        "hi": [0.55, 0.35, 0.25, 0.45, 0.4, 0.3],
        "count": [100] * 6,
    })
    table = pd.DataFrame({
        "sentence_id": [0, 1, 2],
        "text": ["a b", PAYLOAD, "c"],
        "length": [2, 1, 1],
        "ppl_a": [10.0, 200.0, float("inf")],
        "ppl_b": [12.0, 150.0, 3.0],
        "difference": [2.0, -50.0, float("nan")],
        "log_ratio": [0.1, -0.2, float("nan")],
    })
    figures = [
        heatmap.attention_heatmap(sa, Share(0.3)),
        heatmap.attention_heatmap(sa, TopK(1)),
        charts.positions_chart(positions),
        charts.comparison_scatter(table, "lstm", "kvp"),
        charts.surprisal_chart([sa]),
        charts.surprisal_chart([sa, make_analysis(seed=1, model="kvp")]),
        charts.gates_chart(sa),
        charts.gates_chart(sa, dims=True),
        # the charts the app's pages draw (moved out of the app, so the CLI can export them too)
        charts.training_curve_chart("lstm", [{"epoch": 1, "train_perplexity": 300.0, "valid_perplexity": 250.0},
                                            {"epoch": 2, "train_perplexity": 200.0, "valid_perplexity": 190.0, "stage": "2"}]),
        charts.case_counts_chart(pd.DataFrame({"model": ["kvp", "kvp", "amsrn"], "label": ["trigger", "unlabelled", "phrase"],
                                              "count": [3, 5, 1], "share": [0.3, 0.5, 0.1]})),
        charts.sentence_positions_chart(pd.DataFrame({"target": [0, 1], "word": ["a", PAYLOAD], "offset": [1, 2],
                                                     "weight": [0.5, 0.25], "attended": ["<s>", "a"]}), "kvp", PAYLOAD),
    ]
    for chart in figures:
        assert isinstance(chart, alt.TopLevelMixin)
        spec = chart.to_dict()  # validates against the Vega-Lite schema
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
    # the non-finite perplexity row cannot be drawn on a log axis and is dropped
    scatter = figures[3].to_dict()
    points = [d for name, d in scatter["datasets"].items() if any("sentence" in row for row in d)][0]
    assert len(points) == 2
    # two models with the same name stay apart
    bars = figures[5].to_dict()
    models = {row["model"] for rows in bars["datasets"].values() for row in rows}
    assert models == {"kvp", "kvp (2)"}
    legend = fragments.legend_html(["kvp", PAYLOAD])
    assert PAYLOAD not in legend and "&lt;" in legend and legend.count("border-radius:50%") == 2


@pytest.mark.parametrize("n", [3, len(style.CATEGORICAL), len(style.CATEGORICAL) + 1, 16, 20])
def test_every_model_of_a_chart_has_its_own_colour_and_the_legend_agrees(n):
    """Beyond the eight colour-blind-safe colours, a wider palette: no two models share a colour,
    and the HTML key (shared by charts side by side) shows the chart's colours."""
    frame = pd.DataFrame([{"model": f"m{i}", "offset": d, "mean": 0.5, "lo": 0.4, "hi": 0.6, "count": 3}
                          for i in range(n) for d in (1, 2)])
    spec = charts.positions_chart(frame).to_dict()
    scale = spec.get("spec", spec)["layer"][0]["encoding"]["color"]["scale"]  # small multiples beyond a few models
    assert scale["domain"] == [f"m{i}" for i in range(n)] and len(set(scale["range"])) == n
    assert re.findall(r"background:(#[0-9a-fA-F]{6})", fragments.legend_html(scale["domain"])) == scale["range"]


@pytest.mark.parametrize("measure", style.MEASURES)
def test_eight_models_by_position_are_small_multiples(measure):
    """Eight models' lines in one panel crowded it, and two that sit on 0 hid each other: beyond
    OVERLAY_MODELS each model gets its own panel (one y scale, so they compare), in the page's width at
    1440 px; up to OVERLAY_MODELS they share one panel, as in Daniluk et al.'s figure."""
    from vizlm.present.export import chart_spec

    def frame(n):  # two models on 0 at every position, as a window-1 model beyond its slot
        return pd.DataFrame([{"model": f"model-{i}", "offset": d, "mean": 0.0 if i < 2 else 1 / (d + i), "lo": 0.0,
                              "hi": 0.5, "count": 3, "effect": 0.0 if i < 2 else 0.1, "effect_lo": 0.0,
                              "effect_hi": 0.2} for i in range(n) for d in range(1, 11)])

    spec = chart_spec(charts.positions_chart(frame(8), measure=measure))  # validates against the Vega-Lite schema
    assert spec["facet"]["field"] == "model" and spec["facet"]["sort"] == [f"model-{i}" for i in range(8)]
    assert spec["columns"] == charts.FACET_COLUMNS and "resolve" not in spec  # one y scale for every panel
    layers = spec["spec"]["layer"]
    line = next(layer for layer in layers if layer["mark"]["type"] == "line")
    assert line["encoding"]["y"]["field"] == ("effect" if measure == "effect" else "mean")
    # the panels and their y axis fit the main column at 1440 px beside the sidebar (about 900 px)
    assert charts.FACET_COLUMNS * (spec["spec"]["width"] + 30) + 80 <= 900
    assert len(line["encoding"]["x"]["title"]) * 6 <= spec["spec"]["width"] + 30  # a panel's axis title fits it
    few = chart_spec(charts.positions_chart(frame(charts.OVERLAY_MODELS), measure=measure))
    assert "facet" not in few and any(layer["mark"]["type"] == "line" for layer in few["layer"])


def test_heatmap_cells_axes_and_scale(sa):
    spec = heatmap.attention_heatmap(sa, Share(0.3)).to_dict()
    T = len(sa.targets)
    (rows,) = spec["datasets"].values()
    assert len(rows) == T * (T + 1) // 2  # causal: row r sees slots 0..r, future cells left out
    rect = spec["layer"][0]["encoding"]
    assert rect["color"]["scale"] == {"scheme": style.SCHEME, "domain": [0.0, 1.0]}
    assert rect["x"]["scale"]["domain"][:3] == ["0 <s>", "1 <s>", "2 the"]
    assert rect["y"]["scale"]["domain"][0] == "2 the" and rect["y"]["scale"]["domain"][-1] == f"{T + 1} </s>"
    assert {t["field"] for t in rect["tooltip"]} >= {"predicting", "attended", "weight"}
    marked = [r for r in rows if r["highlighted"]]
    assert marked and all(r["weight"] >= 0.3 for r in marked)
    assert len(marked) == sum(1 for r in rows if r["weight"] >= 0.3)


def test_heatmap_leaves_cells_outside_the_window_blank():
    sa = make_analysis(window=3)
    (rows,) = heatmap.attention_heatmap(sa).to_dict()["datasets"].values()
    T = len(sa.targets)
    assert len(rows) == sum(min(r + 1, 3) for r in range(T))
    assert all(r["weight"] > 0 for r in rows)


def test_charts_without_attention_or_gates_say_so():
    lstm = make_analysis(attention=False, gates=False, model="lstm")
    with pytest.raises(ValueError, match="no attention"):
        heatmap.attention_heatmap(lstm)
    with pytest.raises(ValueError, match="no selection gates"):
        charts.gates_chart(lstm)
    html_text = fragments.highlighted_html(lstm, 2)
    assert "has no attention" in html_text


def test_html_palette_matches_the_chart_scheme():
    """highlighted_html colours words in Python; they must match what Vega draws for the same weight."""
    weights = [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]
    scale = alt.Scale(scheme=style.SCHEME, domain=list(style.WEIGHT_DOMAIN))
    for w, rgb in zip(weights, vega_colours(weights, scale)):
        ours = style._rgb(style.palette(w))
        assert max(abs(a - b) for a, b in zip(ours, rgb)) <= 6, (w, ours, rgb)
    assert style.palette(5.0) == style.palette(1.0)  # clipped
    assert style.text_colour(style.palette(0.0)) == "#ffffff" and style.text_colour(style.palette(1.0)) == "#000000"


# --------------------------------------------------------------------------- HTML fragments


def test_highlighted_html_escapes_and_marks(sa):
    target = 6  # predicting "sat": may attend to <s> and the six words before it
    text = fragments.highlighted_html(sa, target, TopK(2))
    assert PAYLOAD not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    tags = parse_html(text)
    assert "script" not in {t for t, _ in tags}
    spans = [a for t, a in tags if t == "span" and "vz-tok" in a.get("class", "")]
    assert len(spans) == len(sa.tokens)
    assert "vz-target" in spans[target]["class"] and "outline" in spans[target]["style"]
    assert "vz-unk" in spans[UNK_INDEX]["class"] and "not in vocabulary" in spans[UNK_INDEX]["title"]
    assert "dashed" in spans[UNK_INDEX]["style"]
    assert all("vz-future" in s["class"] for s in spans[target + 1 :])
    # top-2: exactly the two heaviest allowed slots are coloured, with their weight in the tooltip
    heavy = sorted(np.argsort(-sa.attention[target, : target + 1])[:2])
    coloured = [a for t, a in tags if t == "span" and "background:" in a.get("style", "")]
    assert len(coloured) == 2
    for slot in heavy:
        if slot >= 2:
            assert "vz-attended" in spans[slot - 2]["class"]
            assert f"attention {sa.attention[target, slot]:.3f}" in spans[slot - 2]["title"]
    start = [a for t, a in tags if t == "span" and a.get("class") == "vz-start"]
    assert len(start) == 1 and "sentence start" in start[0]["title"]
    with pytest.raises(IndexError):
        fragments.highlighted_html(sa, len(sa.targets))


def test_sentence_strip_html(sa):
    text = fragments.sentence_strip_html(sa, selected=1)
    assert PAYLOAD not in text and "&lt;script&gt;" in text and "猫" in text and "🐈" in text
    chips = [a for t, a in parse_html(text) if t == "span" and "vz-chip" in a.get("class", "")]
    assert len(chips) == len(sa.targets)
    assert "outline" in chips[1]["style"] and "not in vocabulary" in chips[UNK_INDEX]["title"]


def test_small_probabilities_keep_significant_digits():
    """"0.0004 instead of 0.0004" hid a 0.16-bit effect and "0.0000" a probability: below 0.01
    two significant digits, never 0 for a nonzero probability."""
    assert [style.format_prob(p) for p in (1.0, 0.1234, 0.0315, 0.01)] == ["1.000", "0.123", "0.032", "0.010"]
    assert [style.format_prob(p) for p in (0.00041, 0.000358, 0.0012, 3e-6, 1e-300)] == [
        "4.1e-4", "3.6e-4", "1.2e-3", "3.0e-6", "1.0e-300"]
    assert style.format_prob(0.0) == "0.000" and style.format_prob(float("nan")) == "–"
    small = make_analysis()
    small.logprobs[:] = np.log(0.00041)
    small.top_probs[:] = 0.0004
    tags = parse_html(fragments.sentence_strip_html(small))
    chips = [a for t, a in tags if t == "span" and "vz-chip" in a.get("class", "")]
    assert all("P(" in c["title"] and "= 4.1e-4" in c["title"] and "4.0e-4" in c["title"] for c in chips)
    assert "P = 4.1e-4" in fragments.highlighted_html(small, 6)


# --------------------------------------------------------------------------- exports


def test_png_export_has_the_declared_size(sa):
    chart = heatmap.attention_heatmap(sa, Share(0.2))
    w1, h1 = png_size(export.chart_bytes(chart, "png", scale=1.0))
    assert 250 < w1 < 1200 and 250 < h1 < 1200, (w1, h1)
    w2, h2 = png_size(export.export_analysis(sa, "png", Share(0.2)))  # the same chart at the default scale 2
    assert (w2, h2) == (2 * w1, 2 * h1)


def test_svg_export_is_xml_with_the_words(sa):
    data = export.export_analysis(sa, "svg")
    root = ET.fromstring(data)
    assert root.tag.endswith("svg")
    text = "".join(root.itertext())
    for word in ["the", "猫", "🐈", FORMULA.lower(), PAYLOAD, "</s>"]:
        assert word in text, word



def test_png_export_draws_chinese_glyphs_not_empty_boxes():
    """Heat maps that differ only in one Chinese token differ in their pixels. Without a CJK font
    both characters are drawn as the same empty box (tofu) and the two PNGs are identical."""
    if not render.CJK_FONT_FILE.is_file():
        pytest.skip(f"no CJK font at {render.CJK_FONT_FILE}: apt-get install fonts-wqy-microhei (.ci/run does)")
    from PIL import Image  # a dependency of streamlit

    def pixels(word: str) -> np.ndarray:
        data = export.export_analysis(make_analysis(tokens=["The", word, "sat", "."]), "png", scale=1.0)
        return np.asarray(Image.open(io.BytesIO(data)).convert("L"))

    cat, dog = pixels("猫"), pixels("狗")
    assert cat.shape == dog.shape
    changed = cat != dog
    # The word is in the subtitle and on both axes: a few glyphs' worth of pixels, not the cells.
    assert 30 < changed.sum() < 0.05 * changed.size, changed.sum()
    svg = export.export_analysis(make_analysis(tokens=["The", "猫", "sat", "."]), "svg").decode("utf-8")
    assert render.CJK_FONT_FAMILY in svg  # SVG keeps text as text, naming the font for its viewer

def test_html_export_is_standalone_and_safe(sa):
    page = export.export_analysis(sa, "html").decode("utf-8")
    assert page.startswith("<!DOCTYPE html>")
    tags = parse_html(page)
    scripts = [a for t, a in tags if t == "script"]
    assert len(scripts) == 2 and not any("src" in a for a in scripts)
    assert not any(t == "link" for t, _ in tags)
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.I)
    assert page.count("</script>") == 2  # nothing in the data closes a script block early
    assert PAYLOAD not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # in the sentence strip
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in page  # in the chart spec
    assert "猫" in page and "🐈" in page and "vegaEmbed" in page
    assert "Content-Security-Policy" in page


def test_chart_html_without_attention_shows_surprisal():
    lstm = make_analysis(attention=False, gates=False, model="lstm")
    page = export.export_analysis(lstm, "html").decode()
    assert "surprisal (bits)" in page
    png_size(export.export_analysis(lstm, "png", scale=1.0))


def test_csv_round_trip_neutralises_formulas(sa):
    data = export.export_analysis(sa, "csv", Share(0.3))
    df = pd.read_csv(io.BytesIO(data), keep_default_na=False)
    T = len(sa.targets)
    assert len(df) == T * (T + 1) // 2
    assert list(df.columns[:3]) == ["model", "target_index", "target"]
    text_cells = [v for col in df.columns if df[col].dtype == object for v in df[col]]
    assert not any(str(v).startswith(("=", "+", "-", "@", "\t", "\r")) for v in text_cells)
    assert "'" + FORMULA.lower() in set(df["target"]) and "'" + FORMULA.lower() in set(df["attended"])
    assert PAYLOAD in set(df["target"]) and "猫" in set(df["attended"])
    assert df["weight"].between(0, 1).all()
    assert set(df.loc[df["highlighted"], "weight"].round(9)) == set(df.loc[df["weight"] >= 0.3, "weight"].round(9))
    row = df[(df["target_index"] == 3) & (df["slot"] == 2)].iloc[0]
    assert row["weight"] == pytest.approx(sa.attention[3, 2]) and row["prob"] == pytest.approx(sa.probs[3])


def test_csv_without_attention_has_one_row_per_target():
    lstm = make_analysis(attention=False, gates=False, model="lstm")
    df = pd.read_csv(io.BytesIO(export.export_analysis(lstm, "csv")))
    assert len(df) == len(lstm.targets) and df["weight"].isna().all()


def test_export_frame_neutralises_every_formula_start():
    df = pd.DataFrame({
        "text": ["=1+1", "+cmd|' /C calc'!A0", "-2+3", "@SUM(1)", "\tx", "\rx", "fine", "a=b"],
        "number": [-1.5, 2, 3, 4, 5, 6, 7, float("nan")],
    })
    back = pd.read_csv(io.BytesIO(export.export_frame(df, "csv")))
    assert list(back["text"][:6]) == ["'" + v for v in df["text"][:6]]
    assert list(back["text"][6:]) == ["fine", "a=b"]
    assert back["number"][0] == -1.5  # numbers stay numbers
    records = json.loads(export.export_frame(df, "json"), parse_constant=_no_constants)
    assert records[0]["text"] == "=1+1" and records[-1]["number"] is None  # JSON keeps text as is


def _no_constants(name):
    raise ValueError(f"non-standard JSON constant {name}")


def test_json_round_trip_has_no_nan(sa):
    bad = make_analysis()
    bad.logprobs = bad.logprobs.copy()
    bad.logprobs[2] = -np.inf  # probability 0: infinite surprisal and perplexity
    for analysis in (sa, bad):
        data = export.export_analysis(analysis, "json", Share(0.3))
        d = json.loads(data.decode("utf-8"), parse_constant=_no_constants)
        assert d["tokens"] == TOKENS and len(d["targets"]) == len(analysis.targets)
        assert d["threshold"] == 0.3
        t3 = d["targets"][3]
        assert t3["attention"] == pytest.approx(list(analysis.attention[3, :4]))
    assert d["targets"][2]["surprisal_bits"] is None and d["perplexity"] is None


def test_formats_and_write_export(tmp_path, sa):
    with pytest.raises(ValueError, match="png, svg, html, csv, json"):
        export.export_analysis(sa, "pdf")
    with pytest.raises(ValueError, match="csv, json"):
        export.export_frame(pd.DataFrame({"a": [1]}), "png")
    path = export.write_export(b"abc", tmp_path / "sub" / "out.csv")
    assert path.read_bytes() == b"abc" and [p.name for p in path.parent.iterdir()] == ["out.csv"]
    assert path.stat().st_mode & 0o644 == 0o644
    export.write_export(b"de", path)  # overwrite in place
    assert path.read_bytes() == b"de" and len(list(path.parent.iterdir())) == 1


# --------------------------------------------------------------------------- renderer failures
@pytest.mark.parametrize("bad", ["\x00", "\x01", "\x02", "\x08", "\x1b", "\ufffe"])
def test_control_characters_never_reach_the_renderer(bad):
    """vl-convert aborted the whole process (a server with it) on such a label; now it is replaced."""
    sa = make_analysis(["the", f"a{bad}b", "market"], gates=False)
    for fmt in ("svg", "png"):
        data = export.export_analysis(sa, fmt)
        assert data
    root = ET.fromstring(export.export_analysis(sa, "svg"))
    assert "market" in "".join(root.itertext())
    page = export.export_analysis(sa, "html").decode("utf-8")
    assert bad not in page


def test_a_renderer_crash_fails_one_export_not_the_process(monkeypatch, tmp_path):
    from vizlm.present import render

    crash = tmp_path / "python"
    crash.write_text("#!/bin/sh\nkill -ABRT $$\n")  # what vl-convert's non-unwinding panic does
    crash.chmod(0o755)
    monkeypatch.setattr(render.sys, "executable", str(crash))
    chart = heatmap.attention_heatmap(make_analysis(), Share(0.2))
    with pytest.raises(render.RenderError, match="could not be drawn"):
        export.chart_bytes(chart, "png")
    monkeypatch.undo()
    with pytest.raises(render.RenderError, match="longer than"):
        render.render(export.chart_spec(chart), "svg", timeout=0.001)
    assert export.chart_bytes(chart, "svg").startswith(b"<svg")  # and the next one works


def test_charts_over_five_thousand_rows_export():
    """Altair refuses data over 5,000 rows by default: a whole split (5,642 sentences) must still export."""
    n = 6000
    rng = np.random.default_rng(0)
    table = pd.DataFrame({"sentence_id": [f"d:{i}" for i in range(n)], "text": ["w"] * n, "length": rng.integers(1, 40, n),
                          "ppl_a": rng.uniform(20, 900, n), "ppl_b": rng.uniform(20, 900, n)})
    table["log_ratio"] = np.log(table["ppl_b"] / table["ppl_a"])
    table["difference"] = table["ppl_b"] - table["ppl_a"]
    chart = charts.comparison_scatter(table, "lstm", "amsrn")
    for fmt in ("html", "svg", "png"):
        assert export.chart_bytes(chart, fmt)
    assert len(export.chart_spec(chart)["datasets"]) >= 1
