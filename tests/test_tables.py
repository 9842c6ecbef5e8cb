"""Result tables: each model against the LSTM of its own corpus and reading."""

from __future__ import annotations

import math

from vizlm.tables import models_frame


def _meta(model: str, corpus: str, ppl: float | None, context: str | None = None) -> dict:
    config = {"context": context} if context else {}  # old checkpoints have no context: sentence
    return {"model": model, "corpus": {"name": corpus}, "config": config, "metrics": {"test_perplexity": ppl}}


def test_models_are_held_against_the_lstm_of_their_corpus_and_reading():
    df = models_frame({
        "amsrn": _meta("amsrn", "brown", 130.0),
        "lstm": _meta("lstm", "brown", 140.0),
        "kvp-doc": _meta("kvp", "brown", 99.0, "document"),
        "lstm-doc": _meta("lstm", "brown", 110.0, "document"),
        "amsrn-sinica": _meta("amsrn", "sinica", 150.0),
        "kvp-sinica-doc": _meta("kvp", "sinica", 90.0, "document"),  # no LSTM of that corpus and reading
        "lstm-sinica": _meta("lstm", "sinica", 120.0),
    }).set_index("model")
    vs = df["test ppl vs LSTM"]
    assert math.isclose(vs["amsrn"], 130 / 140 - 1) and vs["lstm"] == 0
    assert math.isclose(vs["kvp-doc"], 99 / 110 - 1) and vs["lstm-doc"] == 0
    assert math.isclose(vs["amsrn-sinica"], 150 / 120 - 1)
    assert math.isnan(vs["kvp-sinica-doc"])
    assert list(df["context"]) == ["sentence", "sentence", "document", "document", "sentence", "document", "sentence"]
