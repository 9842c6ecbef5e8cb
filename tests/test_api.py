"""The Python API (``import vizlm``, vizlm/api/): its public names, the errors a user can cause,
the result type and its frames, highlights, JSON round trip, charts and notebook HTML, comparisons and
positions. The CLI and the app walk through the same calls (tests/test_cli.py, tests/test_app.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import altair as alt
import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, vega_colours

import vizlm
from vizlm import api, cli
from vizlm.present import charts, export, heatmap, style
from vizlm.inspect.analysis import AnalysisError, SentenceAnalysis, analyze
from vizlm.modeling.checkpoint import CheckpointError, load_checkpoint
from vizlm.data.registry import DataError, DataMissingError
from vizlm.core.errors import InputError, VizlmError
from vizlm.core.files import OverwriteError
from vizlm.present.serialize import AnalysisFileError
from vizlm.inspect.highlight import Share

TEXT = "The dogs in the park are barking because they saw a cat ."
PASSAGE = "The jury praised the city . It said the election was fair .\nThe mayor thanked them ."


@pytest.fixture(scope="module")
def lm():
    return vizlm.load("amsrn")


@pytest.fixture(scope="module")
def a(lm):
    return lm.analyze(TEXT)


# --------------------------------------------------------------------------- the front door
def test_public_names_exist_and_none_is_private():
    assert vizlm.__all__ and len(set(vizlm.__all__)) == len(vizlm.__all__)
    for name in vizlm.__all__:
        assert not name.startswith("_"), name
        assert getattr(vizlm, name) is getattr(api, name), name
        assert name in dir(vizlm)
    assert not [n for n in api.__all__ if n.startswith("_")]
    assert set(api.__all__) == set(vizlm.__all__)
    for name in ("load", "checkpoints", "corpora", "Analysis", "compare", "positions", "VizlmError"):
        assert name in vizlm.__all__
    assert vizlm.VizlmError is VizlmError
    with pytest.raises(AttributeError, match="no attribute"):
        vizlm.no_such_name  # noqa: B018


def test_import_vizlm_stays_light():
    """The package root imports the API on first use only: `import vizlm.data.text` brings no torch."""
    code = ("import sys, vizlm, vizlm.data.text, vizlm.core.paths; "
            "assert 'torch' not in sys.modules and 'vizlm.api' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_every_library_error_on_bad_input_is_a_vizlm_error_and_keeps_its_base():
    from vizlm.app.checkpoints import UserError

    for cls, base in ((CheckpointError, ValueError), (AnalysisError, ValueError), (OverwriteError, ValueError),
                      (DataError, ValueError), (DataMissingError, FileNotFoundError), (UserError, ValueError),
                      (AnalysisFileError, ValueError), (InputError, ValueError)):
        assert issubclass(cls, VizlmError) and issubclass(cls, base), cls


def _bad_checkpoint(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\x00" * 16)
    (folder / "config.json").write_text("{}")
    return folder


USER_ERRORS = {
    "unknown model": lambda lm, a, t: vizlm.load("no-such-model"),
    "a model name mistyped": lambda lm, a, t: vizlm.load("amsrm"),
    "missing path": lambda lm, a, t: vizlm.load(t / "nowhere" / "model.safetensors"),
    "not a path": lambda lm, a, t: vizlm.load(42),
    "empty name": lambda lm, a, t: vizlm.load(" "),
    "a text file": lambda lm, a, t: vizlm.load((t / "notes.txt", (t / "notes.txt").write_text("x"))[0]),
    "an empty folder": lambda lm, a, t: vizlm.load(t),
    "a broken checkpoint": lambda lm, a, t: vizlm.load(_bad_checkpoint(t)),
    "empty text": lambda lm, a, t: lm.analyze("   "),
    "text not a str": lambda lm, a, t: lm.analyze(None),
    "threshold > 1": lambda lm, a, t: lm.analyze(TEXT, threshold=2),
    "threshold not a number": lambda lm, a, t: lm.analyze(TEXT, threshold="high"),
    "top_k 0": lambda lm, a, t: lm.analyze(TEXT, top_k=0),
    "threshold and top_k": lambda lm, a, t: lm.analyze(TEXT, threshold=0.1, top_k=2),
    "predictions < 0": lambda lm, a, t: lm.analyze(TEXT, predictions=-1),
    "max_effect_pairs": lambda lm, a, t: lm.analyze(TEXT, max_effect_pairs="all"),
    "target out of range": lambda lm, a, t: a.show(target=999),
    "target not a word": lambda lm, a, t: a.show(target="zebra"),
    "target a float": lambda lm, a, t: a.html(target=1.5),
    "measure": lambda lm, a, t: a.show(measure="colour"),
    "chart measure": lambda lm, a, t: a.chart(measure="size"),
    "highlights threshold": lambda lm, a, t: a.highlights(threshold=-0.1),
    "cases top_k": lambda lm, a, t: a.cases(top_k=1000),
    "export format": lambda lm, a, t: a.export(t / "out.pdf"),
    "export over a file": lambda lm, a, t: a.export((t / "x.csv", (t / "x.csv").write_text("mine"))[0]),
    "save over a file": lambda lm, a, t: a.save((t / "x.json", (t / "x.json").write_text("mine"))[0]),
    "load a missing file": lambda lm, a, t: vizlm.Analysis.load(t / "missing.json"),
    "load a folder": lambda lm, a, t: vizlm.Analysis.load(t),
    "load not JSON": lambda lm, a, t: vizlm.Analysis.load((t / "a.json", (t / "a.json").write_text("{nope"))[0]),
    "load other JSON": lambda lm, a, t: vizlm.Analysis.load((t / "b.json", (t / "b.json").write_text("[1, 2]"))[0]),
    "load cut JSON": lambda lm, a, t: vizlm.Analysis.from_dict({**a.to_dict(), "targets": a.to_dict()["targets"][:3]}),
    "load a bad row": lambda lm, a, t: vizlm.Analysis.from_dict(
        {**a.to_dict(), "targets": [{**r, "attention": [0.5] * (r["index"] + 2)} for r in a.to_dict()["targets"]]}),
    "load a bad setting": lambda lm, a, t: vizlm.Analysis.from_dict({**a.to_dict(), "threshold": 7}),
    "effect chart without effects": lambda lm, a, t: lm.analyze(TEXT, max_effect_pairs=0).chart(measure="effect"),
    "unknown corpus": lambda lm, a, t: vizlm.compare("lstm", lm, corpus="penn", limit=5),
    "unknown split": lambda lm, a, t: vizlm.compare("lstm", lm, corpus="wsj", split="train", limit=5),
    "different vocabularies": lambda lm, a, t: vizlm.compare("amsrn-sinica", lm, corpus="brown", limit=5),
    "limit 0": lambda lm, a, t: vizlm.compare("lstm", lm, limit=0),
    "no models": lambda lm, a, t: vizlm.positions([], limit=5),
    "window 0": lambda lm, a, t: vizlm.positions(lm, window=0, limit=5),
    "positions split": lambda lm, a, t: vizlm.positions(lm, corpus="sinica", split="dev", limit=5),
    "most_improved n": lambda lm, a, t: vizlm.compare("lstm", lm, limit=20).most_improved(-1),
    "no given words": lambda lm, a, t: vizlm.compare("lstm", lm, sentences=[[], []]),
    "attribute a list": lambda lm, a, t: lm.attribute(["the", "end"]),
    "attribute method": lambda lm, a, t: lm.attribute(TEXT, method="saliency"),
    "corpus attribution split": lambda lm, a, t: lm.corpus_attribution("wsj", "valid"),
    "corpus attribution limit": lambda lm, a, t: lm.corpus_attribution("wsj", limit=0),
    "corpus attribution permutations": lambda lm, a, t: lm.corpus_attribution("wsj", limit=5, permutations=-1),
    "corpus attribution too many permutations": lambda lm, a, t: lm.corpus_attribution("wsj", limit=5,
                                                                                        permutations=10**9),
    "ids for other sentences": lambda lm, a, t: vizlm.positions(lm, sentences=[["the", "end"]], ids=["d:0", "d:1"]),
    "a name too long for a path": lambda lm, a, t: vizlm.load("a" * 5000),
    "sentences of numbers": lambda lm, a, t: vizlm.compare("lstm", lm, sentences=[[5, 6]]),
    "sentences as a text": lambda lm, a, t: vizlm.compare("lstm", lm, sentences="the cat"),
    "sentences as texts": lambda lm, a, t: vizlm.positions(lm, sentences=["the cat", "a dog"]),
    "sentences a number": lambda lm, a, t: vizlm.compare("lstm", lm, sentences=5),
    "a source that is no path": lambda lm, a, t: vizlm.prepare_corpus("x", 5),
}


@pytest.mark.parametrize("case", list(USER_ERRORS))
def test_every_error_a_user_can_cause_is_a_vizlm_error(case, lm, a, tmp_path):
    with pytest.raises(VizlmError) as info:
        USER_ERRORS[case](lm, a, tmp_path)
    message = str(info.value)
    assert message and "Traceback" not in message and len(message) < 400, message
    if case == "a model name mistyped":
        assert "(did you mean 'amsrn'?); available: " in message, message


def test_the_app_answers_a_mistyped_model_as_the_library_does():
    """A model name that is not there (a shared link to a run since deleted, a typo in the URL): the close names and
    where the rest are listed, not all of them."""
    from vizlm.app.checkpoints import UserError, get_checkpoint

    with pytest.raises(UserError) as info:
        get_checkpoint("amsrm")
    message = str(info.value)
    assert message.startswith("there is no model called 'amsrm' (did you mean 'amsrn'"), message
    assert "listed in the sidebar" in message and len(message) < 400, message


def test_given_sentences_are_lists_of_words_never_a_text_split_into_letters(lm):
    with pytest.raises(VizlmError, match="sentences= takes a list of sentences, each a list of words .str., not str: "
                                         "split the text into sentences and words first"):
        vizlm.compare("lstm", lm, sentences="the cat")
    with pytest.raises(VizlmError, match="sentence 0 holds a value of type int"):
        vizlm.compare("lstm", lm, sentences=[[5, 6]])
    with pytest.raises(VizlmError, match=r"^'a{60}\.\.\. \(5,000 characters\)' cannot be a checkpoint's name or path"):
        vizlm.load("a" * 5000)


def test_nothing_is_replaced_unasked(a, tmp_path):
    path = tmp_path / "dogs.json"
    path.write_text("someone's notes")
    with pytest.raises(OverwriteError, match="force=True"):
        a.save(path)
    assert path.read_text() == "someone's notes"
    a.save(path, force=True)
    assert vizlm.Analysis.load(path).tokens == a.tokens
    a.save(path)  # the same content again is not a change


def test_load_and_checkpoints(lm):
    assert isinstance(lm, vizlm.Model) and lm.name == "amsrn" and lm.family == "amsrn" and lm.has_attention
    assert vizlm.load(ROOT / "checkpoints" / "amsrn").name == "amsrn"  # a folder
    assert vizlm.load(ROOT / "checkpoints" / "lstm" / "model.safetensors").family == "lstm"  # the weights file
    table = vizlm.checkpoints()
    assert list(table.columns) == api.FACT_COLUMNS
    row = table.set_index("name").loc["amsrn"]
    assert row["family"] == "amsrn" and row["context"] == "sentence" and row["corpus"] == "brown" and row["attention"]
    assert row["test_perplexity"] == lm.metrics["test_perplexity"] and row["parameters"] == lm.parameters
    assert not table.set_index("name").loc["lstm", "attention"]
    assert table.set_index("name").loc["kvp-doc", "context"] == "document"
    corpora = vizlm.corpora().set_index(["corpus", "split"])
    assert corpora.loc[("brown", "test"), "sentences"] > 1000 and corpora.loc[("wsj", "test"), "language"] == "English"


# --------------------------------------------------------------------------- one analysis
def test_analyze_is_the_analysis_of_the_library(lm, a):
    sa = analyze(load_checkpoint("amsrn"), TEXT, max_effect_pairs=api.EFFECT_PAIRS)
    assert isinstance(a, SentenceAnalysis) and isinstance(a, vizlm.Analysis)
    T = len(a.targets)
    assert a.attention.shape == (T, T) and a.slot_effects.shape == (T, T) and len(a.slot_tokens) == T
    # the same computation twice on one machine: the same numbers
    np.testing.assert_array_equal(a.logprobs, sa.logprobs)
    np.testing.assert_array_equal(a.attention, sa.attention)
    np.testing.assert_array_equal(a.slot_effects, sa.slot_effects)
    assert "Analysis(model='amsrn'" in repr(a) and len(repr(a)) < 200


def test_frames(a):
    frame = a.frame()
    T = len(a.targets)
    assert len(frame) == T and frame.index.name == "target"
    np.testing.assert_array_equal(frame["prob"].to_numpy(), a.probs)
    np.testing.assert_array_equal(frame["read_effect_bits"].to_numpy(), a.read_effect_bits)
    assert frame["word"].tolist() == a.targets and frame["token"].iloc[1] == "dogs" and frame["token"].iloc[-1] == "</s>"
    long = a.attention_frame()
    assert len(long) == int(a.allowed().sum())
    assert long.groupby("target_index")["weight"].sum().to_numpy() == pytest.approx(1.0)  # each row sums to 1
    lit = long[long["highlighted"]]
    assert sorted(zip(lit["target_index"], lit["slot"])) == sorted((r, h.slot) for r, hs in enumerate(a.highlights())
                                                                   for h in hs)
    # the CSV export holds the same rows
    csv = pd.read_csv(__import__("io").BytesIO(export.export_analysis(a, "csv")))
    assert len(csv) == len(long) and list(csv.columns) == list(long.columns)


def test_highlights_are_computed_once_per_setting(a):
    assert a.highlights() is a.highlights() is a.highlights(threshold=a.threshold)
    assert a.highlights(top_k=2) is a.highlights(top_k=2) and a.highlights(top_k=2) is not a.highlights()
    fresh = SentenceAnalysis(**{f: getattr(a, f) for f in SentenceAnalysis.__dataclass_fields__})
    assert [[h.slot for h in row] for row in a.highlights(threshold=0.1)] == \
        [[h.slot for h in row] for row in fresh.highlighted(Share(0.1))]
    assert all(h.weight >= 0.1 for row in a.highlights(threshold=0.1) for h in row)
    own = vizlm.load("amsrn").analyze(TEXT, threshold=0.05)
    assert own.highlights() is own.highlights(threshold=0.05) and own.to_dict()["threshold"] == 0.05
    assert sum(map(len, own.highlights())) > sum(map(len, a.highlights()))


def test_cases_frame_matches_the_json(a):
    cases = a.cases(threshold=0.05)
    doc = a.to_dict(threshold=0.05)
    labelled = [(t["index"], c["slot"], label) for t in doc["targets"] for c in t["cases"] for label in c["labels"]]
    assert sorted(zip(cases["target"], cases["slot"], cases["label"])) == sorted(labelled)
    assert set(cases["label"]) <= {"trigger", "causal", "phrase", "grammar"}


def _close(x, y, path="") -> None:
    """Two JSON documents equal, floats within float64 rounding (slot effects come back from bits)."""
    if isinstance(x, float) and isinstance(y, float):
        assert math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-15), (path, x, y)
    elif isinstance(x, dict):
        assert isinstance(y, dict) and x.keys() == y.keys(), path
        for k in x:
            _close(x[k], y[k], f"{path}.{k}")
    elif isinstance(x, list):
        assert isinstance(y, list) and len(x) == len(y), path
        for i, (u, v) in enumerate(zip(x, y)):
            _close(u, v, f"{path}[{i}]")
    else:
        assert x == y, (path, x, y)


@pytest.mark.parametrize("name, text", [("amsrn", TEXT), ("kvp-doc", PASSAGE), ("lstm", TEXT)])
def test_save_load_round_trip(name, text, tmp_path):
    a = vizlm.load(name).analyze(text, top_k=2)
    path = a.save(tmp_path / "a.json")
    b = vizlm.Analysis.load(path)
    assert (b.model, b.text, b.tokens, b.norms, b.offsets, b.unk, b.targets, b.tags, b.breaks, b.context, b.notes) == \
        (a.model, a.text, a.tokens, a.norms, a.offsets, a.unk, a.targets, a.tags, a.breaks, a.context, a.notes)
    assert (b.threshold, b.top_k) == (None, 2)
    np.testing.assert_array_equal(b.logprobs, a.logprobs)  # stored as they are: bit for bit
    np.testing.assert_array_equal(b.top_probs, a.top_probs)
    for got, want in ((b.attention, a.attention), (b.gates, a.gates)):
        assert (got is None) == (want is None)
        if want is not None:
            np.testing.assert_array_equal(got, want)
    if a.slot_effects is not None:  # stored in bits, back as bits x ln 2
        np.testing.assert_allclose(b.slot_effects, a.slot_effects, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(b.read_effect, a.read_effect, rtol=1e-12, atol=1e-15)
    _close(b.to_dict(), a.to_dict())
    assert b._repr_html_() == a._repr_html_() or name != "lstm"  # no model needed to show it again


def test_one_serialiser_for_the_cli_the_exports_and_save(a, tmp_path, capsys):
    assert cli.main(["analyze", "--checkpoint", "amsrn", "--text", TEXT, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    _close(printed, a.to_dict())
    assert cli.main(["export", "--checkpoint", "amsrn", "--text", TEXT, "--format", "json", "--out",
                     str(tmp_path / "e.json")]) == 0
    _close(json.loads((tmp_path / "e.json").read_text()), a.to_dict())
    assert json.loads(export.export_analysis(a, "json")) == json.loads(a.save(tmp_path / "s.json").read_text())
    _close(vizlm.Analysis.load(tmp_path / "e.json").to_dict(), a.to_dict())


def test_an_export_of_an_earlier_version_loads(a):
    """Exports written before the exact fields (logprob, gates, tags, breaks, format) still load."""
    doc = a.to_dict()
    for key in ("format", "format_version", "tags", "breaks"):
        doc.pop(key)
    for t in doc["targets"]:
        t.pop("logprob")
        t.pop("gates")
    b = vizlm.Analysis.from_dict(doc)
    np.testing.assert_allclose(b.logprobs, a.logprobs, rtol=1e-12, atol=1e-12)  # log(exp(x)): float64 tolerance
    assert b.gates is None and b.tokens == a.tokens and b.highlights(top_k=1)


def test_export_files(a, tmp_path):
    for fmt in ("csv", "json", "html"):
        path = a.export(tmp_path / f"dogs.{fmt}")
        assert path.stat().st_size > 100
    assert a.export(tmp_path / "heat", format="svg", target="barking").read_text().startswith("<svg")


# --------------------------------------------------------------------------- charts and notebook HTML
def test_chart_is_the_apps(a):
    ours = export.chart_spec(a.chart(target=3), validate=False)
    app = export.chart_spec(heatmap.attention_heatmap(a, Share(0.2), measure="weight", selected=3), validate=False)
    assert ours == app
    effect = a.chart(measure="effect").to_dict()  # validated against the Vega-Lite schema
    assert "redblue" in json.dumps(effect)
    long = vizlm.load("kvp-doc").analyze(" ".join([TEXT] * 6))
    window = export.chart_spec(long.chart(target=50), validate=False)
    rows = heatmap.heatmap_rows(long, 50)
    assert window == export.chart_spec(heatmap.attention_heatmap(long, Share(0.2), rows=rows, selected=50), validate=False)


def test_effect_colours_match_the_chart_scheme():
    """Effects are coloured in Python for the notebook's heat map: as Vega draws EFFECT_SCHEME."""
    values = [-1.0, -0.6, -0.2, 0.0, 0.3, 0.7, 1.0]
    scale = alt.Scale(scheme=style.EFFECT_SCHEME, domain=[-style.EFFECT_DOMAIN_BITS, style.EFFECT_DOMAIN_BITS],
                      domainMid=0)
    for v, rgb in zip(values, vega_colours(values, scale)):
        ours = style._rgb(style.effect_colour(v))
        assert max(abs(p - q) for p, q in zip(ours, rgb)) <= 8, (v, ours, rgb)
    assert style.effect_colour(5.0) == style.effect_colour(1.0)


def test_notebook_html_is_static_and_shows_the_word(a):
    html = a._repr_html_()
    assert "<script" not in html.lower() and "javascript:" not in html.lower()
    assert "attention over memory" in html and "vz-target" in html and "<table" in html
    assert "memory slots of this word" in html and "attention effect" in html
    T = len(a.targets)
    cells = html.count("<td style=\"font-size:0.8em;width:") + html.count("<td style=\"width:")
    assert cells == T * len(heatmap.window_slots(a.allowed(), (0, T)))  # one cell per row and shown slot
    park = a.target_index("park")
    view = a.show(target="park")
    assert isinstance(view, vizlm.View) and view._repr_html_() == view.html
    assert a.targets[park] == "park" and "predicting <b>park</b> after “the”" in view.html
    assert "slot effect (bits" in a.show(target=-2, measure="effect").html
    assert a.default_target() == a.target_index(a.default_target())


def test_notebook_html_escapes_the_text(lm):
    payload = 'The <script>alert("x")</script> dogs <img src=x onerror=alert(1)> bark .'
    a = lm.analyze(payload)
    for html in (a._repr_html_(), a.show(target=1, measure="effect").html):
        assert "<script" not in html.lower() and "<img" not in html.lower()
        assert "&lt;script&gt;" in html or "&lt;" in html


def test_a_model_without_attention_shows_its_probabilities():
    a = vizlm.load("lstm").analyze(TEXT)
    html = a._repr_html_()
    assert a.attention is None and "vizlm-strip" in html and "<script" not in html
    assert a.attention_frame()["slot"].isna().all() and a.cases().empty
    assert a.chart().to_dict()["mark"]["type"] == "bar" or "layer" in a.chart().to_dict()


# --------------------------------------------------------------------------- comparisons and positions
def test_compare(lm):
    c = vizlm.compare("lstm", lm, corpus="brown", split="test", limit=40)
    assert {"ratio", "ratio_ci_low", "ratio_ci_high", "share_improved"} <= set(c.summary)
    assert c.summary["ratio_ci_low"] <= c.summary["ratio"] <= c.summary["ratio_ci_high"]
    frame = c.frame()
    assert len(frame) == c.summary["sentences"] <= 40 and list(frame["log_ratio"]) == sorted(frame["log_ratio"])
    assert c.most_improved(3).equals(frame.head(3))
    assert export.chart_spec(c.chart(), validate=False) == \
        export.chart_spec(charts.comparison_scatter(frame, "lstm", "amsrn"), validate=False)
    html = c._repr_html_()
    assert "bootstrap interval" in html and "<svg" in html and "<script" not in html.lower()
    assert "amsrn" in repr(c)


def test_given_sentences_are_what_the_cli_reads(lm):
    """``sentences`` / ``ids`` (what ``vizlm compare|positions --text-file`` passes) go to the same library
    functions a split does; a document model reads each document's sentences as running text."""
    from vizlm.inspect import corpus_stats as corpus

    sents = [["the", "jury", "said", "it", "."], ["the", "city", "paid", "."], ["it", "rained", "."]]
    ids = ["d1:0", "d1:1", "d2:0"]
    c = vizlm.compare("lstm", lm, sentences=sents, ids=ids)
    direct = corpus.compare(vizlm.load("lstm").checkpoint, lm.checkpoint, sents, ids)
    assert c.frame().equals(direct.table) and c.summary == direct.summary and "given sentences" in repr(c)
    p = vizlm.positions("kvp-doc", window=4, sentences=sents, ids=ids)
    same = corpus.attention_by_position([vizlm.load("kvp-doc").checkpoint], sents, window=4, ids=ids)
    assert p.frame().drop(columns="distance").equals(same.frame) and p.entropy == same.entropy
    assert (p.frame()["distance"] == same.frame["offset"] + 1).all()  # the distance from the predicted word


def test_positions():
    p = vizlm.positions(["kvp-doc", "lstm-doc"], corpus="brown", split="test", window=5, limit=30)
    frame = p.frame()
    assert set(frame["model"]) == {"kvp-doc"} and p.skipped == ["lstm-doc"]
    assert sorted(frame["offset"]) == [1, 2, 3, 4, 5] and (frame["mean"] >= 0).all()
    assert "kvp-doc" in p.effects and 0 <= p.effects["kvp-doc"]["share_over_1_bit"] <= 1
    assert p.resampled == {"kvp-doc": "sentences"} and p.to_dict()["resampled"] == p.resampled  # 30 sentences: one document
    assert (frame["lo"] <= frame["mean"]).all() and (frame["mean"] <= frame["hi"]).all()
    assert export.chart_spec(p.chart(), validate=False) == export.chart_spec(charts.positions_chart(frame), validate=False)
    assert export.chart_spec(p.chart("effect"), validate=False) == \
        export.chart_spec(charts.positions_chart(frame, measure="effect"), validate=False)
    html = p._repr_html_()
    assert "Fig. 3" in html and "kvp-doc" in html and html.count("<svg") == 2 and "<script" not in html.lower()


def test_the_reference_names_every_public_name_and_method():
    doc = (ROOT / "docs" / "API.md").read_text(encoding="utf-8")
    for name in vizlm.__all__:
        assert f"`{name}" in doc, name
    for cls in (api.Model, api.Analysis, api.Attribution, api.Comparison, api.Positions):
        for member in vars(cls):
            if not member.startswith("_") and member != "of":
                assert member in doc, f"{cls.__name__}.{member}"


def test_an_attribution_shows_itself_and_takes_words(lm):
    """Model.attribute's result displays itself in a notebook as the Explorer shows it (highlighted text, the
    words read with bits and distance), its repr is one line, and a row can be a word, as in Analysis.show;
    a word not in the text is a VizlmError with a message."""
    attr = lm.attribute(TEXT, method="gradient-x-input")
    assert isinstance(attr, vizlm.Attribution) and "\n" not in repr(attr) and "array" not in repr(attr)
    cat = attr.row_of("cat")
    assert attr.targets[cat] == "cat" and attr.row_frame("cat").equals(attr.row_frame(cat))
    assert attr.highlights("cat") == attr.highlights(cat)
    frame = attr.row_frame("cat")
    assert list(frame.distance) == [cat + 1 - p for p in frame.position] and frame.distance.min() == 1
    page = attr._repr_html_()
    assert "vizlm-attribution" in page and "vz-attributed" in page and "<script" not in page
    shown = attr.show("cat").html
    assert "predicting <b>cat</b>" in shown and "distance" in shown and "1 " in shown
    with pytest.raises(VizlmError, match="not a word of this text"):
        attr.row_frame("taxes")
    with pytest.raises(VizlmError, match="out of range"):
        attr.row_frame(len(attr.targets))


def test_the_notebook_heat_map_gives_every_column_one_width(a):
    """Every cell of the notebook heat map has the same size, in the same font: the first column, filled on
    every row in a smaller font, was narrower than the rest and cut its numbers."""
    import re

    from vizlm.present import notebook

    html = notebook.heatmap_html(a, values=True)
    sizes = {re.search(r"font-size:[^;]+;width:[^;]+;", style).group(0) if "width:" in style else None
             for style in re.findall(r'<td style="([^"]*)"', html)}
    assert len(sizes) == 1 and None not in sizes, sizes
