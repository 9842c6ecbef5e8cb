"""Attribution by distance beside the attention by position: the frame built from
:func:`vizlm.inspect.attribution_corpus.corpus_attribution` results and its chart (vizlm.present.charts), on a tiny corpus."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import TINY
from corpora import make_corpus

from vizlm.inspect import attribution_corpus as ac
from vizlm.present import charts, export
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.data.vocab import Vocab
from vizlm.models import build_model

WINDOW = 3


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict]:
    """corpus_attribution (gradient × input) of a windowed attention model and an LSTM, read as running text."""
    tmp = tmp_path_factory.mktemp("attr")
    data = make_corpus(tmp / "data", train=5, valid=5, test=10, doc_sentences=4, mean_length=6)
    mp = pytest.MonkeyPatch()
    mp.setenv("VIZLM_DATA", str(data))
    mp.setenv("VIZLM_CACHE", str(tmp / "cache"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        vocab = Vocab.for_corpus("brown", data)
        out = []
        for name, kw in (("kvp", {"window": WINDOW}), ("lstm", {})):
            torch.manual_seed(0)
            model = build_model(name, **{**TINY, "vocab_size": len(vocab), **kw}, context="document").double().eval()
            out.append(ac.corpus_attribution(Checkpoint(model, vocab, name), "brown", "test", "gradient-x-input",
                                             limit=8, permutations=0, max_offset=6, passage_tokens=20, n_boot=50))
        yield out
    finally:
        torch.set_num_threads(threads)
        mp.undo()


def test_frame_holds_each_model_s_shares_in_order(results):
    frame = charts.attribution_positions_frame(results, window=WINDOW)
    assert list(frame.columns) == charts.ATTRIBUTION_POSITION_COLUMNS
    assert list(dict.fromkeys(frame["model"])) == ["kvp", "lstm"]  # the given order: the colours follow it
    for res in results:
        rows = frame[frame["model"] == res["model"]]
        assert rows["offset"].tolist() == list(range(WINDOW + 1))  # 0 (the word just read) .. the window
        assert rows["mean"].tolist() == pytest.approx(res["positions"]["mean"][: WINDOW + 1])
        assert (rows["lo"] <= rows["mean"]).all() and (rows["mean"] <= rows["hi"]).all()
        assert set(rows["method"]) == {"gradient-x-input"}
    kvp, lstm = frame[frame["model"] == "kvp"], frame[frame["model"] == "lstm"]
    assert np.isfinite(kvp["attention"].iloc[1:]).all() and math.isnan(kvp["attention"].iloc[0])  # no slot holds 0
    assert lstm["attention"].isna().all()
    # a share of |attribution| per word: the positions and what lies further back make up at most the whole
    assert 0 < kvp["mean"].sum() <= 1 + 1e-9
    assert len(charts.attribution_positions_frame(results)) == 2 * 7  # without a window: every offset kept
    # a result read back from JSON (the disk cache) may hold null for NaN
    back = json.loads(json.dumps(results[1]).replace("NaN", "null"))
    back["positions"]["mean"][WINDOW] = None
    assert math.isnan(charts.attribution_positions_frame([back], WINDOW)["mean"].iloc[WINDOW])


def test_chart_validates_and_colours_models_as_the_attention_plot(results):
    frame = charts.attribution_positions_frame(results, window=WINDOW)
    spec = export.chart_spec(charts.attribution_positions_chart(frame))  # validates against the Vega-Lite schema
    line = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")
    assert line["encoding"]["y"]["field"] == "mean" and line["encoding"]["y"]["title"] == "share of |attribution|"
    assert line["encoding"]["x"]["field"] == "distance" and "1 = the word just before it" in line["encoding"]["x"]["title"]
    assert "gradient × input" in spec["title"]["subtitle"]
    data = spec["datasets"][line["data"]["name"] if "data" in line else spec["data"]["name"]]
    assert sorted({row["distance"] for row in data}) == list(range(1, WINDOW + 2))
    assert {row["model"] for row in data} == {"kvp", "lstm"}
    # the same colour per model as positions_chart draws for the same models in the same order
    weights = pd.DataFrame({"model": ["kvp", "lstm"], "offset": [1, 1], "mean": [0.5, 0.5], "lo": [0.4, 0.4],
                            "hi": [0.6, 0.6], "count": [1, 1]})
    theirs = export.chart_spec(charts.positions_chart(weights))
    ours_scale = line["encoding"]["color"]["scale"]
    theirs_scale = next(lyr for lyr in theirs["layer"] if lyr["mark"]["type"] == "line")["encoding"]["color"]["scale"]
    assert ours_scale == theirs_scale
    assert any(layer["mark"]["type"] == "text" for layer in spec["layer"])  # 1 is labelled "word just read"
    # one convention: the attention chart puts the newest memory slot (offset 1) at the attribution's distance 2
    theirs_line = next(lyr for lyr in theirs["layer"] if lyr["mark"]["type"] == "line")
    assert theirs_line["encoding"]["x"]["field"] == "distance" and theirs_line["encoding"]["x"]["scale"]["reverse"]
    assert {row["distance"] for row in theirs["datasets"][theirs_line["data"]["name"] if "data" in theirs_line
                                                          else theirs["data"]["name"]]} == {2}


def test_chart_without_the_current_word_and_without_data(results):
    frame = charts.attribution_positions_frame(results, window=WINDOW)
    spec = export.chart_spec(charts.attribution_positions_chart(frame, current=False))
    assert all(layer["mark"]["type"] in ("area", "line") for layer in spec["layer"])
    data = next(iter(spec["datasets"].values()))
    assert min(row["distance"] for row in data) == 2  # offset 0 (distance 1, the word just read) left out
    with pytest.raises(ValueError, match="no position"):
        charts.attribution_positions_chart(frame.assign(mean=math.nan))
    with pytest.raises(ValueError, match="missing column"):
        charts.attribution_positions_chart(frame.drop(columns="count"))
