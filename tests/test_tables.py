"""Result tables: each model against the LSTM of its own corpus and reading."""

from __future__ import annotations

import math

from vizlm.present.tables import config_items, epochs_text, models_frame


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


def _trained(done: int, best: int, cap: int | None, patience: int = 2) -> dict:
    train = {"epochs": cap, "patience": patience} if cap else {}
    return {"metrics": {"epochs_trained": done, "best_epoch": best}, "train": train}


def test_epochs_say_the_cap_and_why_training_stopped():
    """"6 epochs (best 4)" beside ``--epochs 20``: which is the cap?"""
    assert epochs_text(_trained(6, 4, 20)) == "6 epochs of at most 20 (best 4): early stopping, no better valid ppl for 2 epochs"
    assert epochs_text(_trained(20, 18, 20)) == "20 epochs (best 18)"  # ran them all
    assert epochs_text(_trained(4, 4, 20)) == "4 epochs of at most 20 (best 4)"  # saved mid-run: not stopped
    assert epochs_text(_trained(1, 1, None)) == "1 epoch (best 1)"  # an upload without its training settings
    assert epochs_text({}) == "epochs not recorded"


def test_config_values_are_written_for_people_with_every_field_of_the_family():
    old = {"model": "amsrn", "config": {"vocab_size": 100, "emb_dim": 50, "dropout": 0.0, "selection": "shared"}}
    new = {"model": "amsrn", "config": {**old["config"], "context": "document", "memory": 100, "start_slot": False}}
    a, b = dict(config_items(old)), dict(config_items(new))
    assert list(a) == list(b)  # the same fields, in the config class's order
    assert a["memory"] == "whole sentence" and a["start slot in memory"] == "yes" and a["reads"] == "each sentence alone"
    assert b["memory"] == "100" and b["start slot in memory"] == "no" and b["reads"] == "running text"
    assert a["dropout"] == "0" and "vocab_size" not in a and "vocab size" not in a
    kvp = dict(config_items({"model": "kvp", "config": {"variant": "kvp", "window": 5}}))
    assert "variant" not in kvp and kvp["window"] == "5"  # the family fixes the variant
    for items in (a, b, kvp):
        assert not {"None", "True", "False"} & set(items.values()) and not any("_" in k for k in items)
    assert config_items({"model": "unknown", "config": {"x_y": None, "z": True}}) == [("z", "yes")]  # None: left out
