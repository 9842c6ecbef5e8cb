"""Result tables: the checkpoints' stored metrics, and the papers' published numbers beside them.

Pure data and pandas; the Models page, the CLI and reports draw from here, so every
number in a table comes from a checkpoint's ``config.json`` or from :data:`PAPER_RESULTS`.
"""

from __future__ import annotations

import pandas as pd

from vizlm.checkpoint import meta_context, meta_corpus

BASELINE_FAMILY = "lstm"  # what every model's change in perplexity is measured against

# Published test perplexities (different corpora from ours: Liu & Lee use Penn Treebank
# with 50-unit models, Daniluk et al. 7,500 Wikipedia articles).
PAPER_RESULTS = [
    {"paper": "Liu & Lee (AMSRN)", "corpus": "Penn Treebank", "model": "LSTM", "family": "lstm", "test_perplexity": 143.31},
    {"paper": "Liu & Lee (AMSRN)", "corpus": "Penn Treebank", "model": "+ attention", "family": "amsrn", "test_perplexity": 134.09},
    {"paper": "Liu & Lee (AMSRN)", "corpus": "Penn Treebank", "model": "+ attention + selection", "family": "amsrn", "test_perplexity": 133.36},
    {"paper": "Liu & Lee (AMSRN)", "corpus": "Penn Treebank", "model": "+ att. + sel. + entropy", "family": "amsrn", "test_perplexity": 131.43},
    {"paper": "Daniluk et al.", "corpus": "Wikipedia (7.5k articles)", "model": "LSTM", "family": "lstm", "test_perplexity": 85.2},
    {"paper": "Daniluk et al.", "corpus": "Wikipedia (7.5k articles)", "model": "Attention", "family": "attention", "test_perplexity": 82.0},
    {"paper": "Daniluk et al.", "corpus": "Wikipedia (7.5k articles)", "model": "Key-Value", "family": "kv", "test_perplexity": 78.2},
    {"paper": "Daniluk et al.", "corpus": "Wikipedia (7.5k articles)", "model": "Key-Value-Predict", "family": "kvp", "test_perplexity": 75.8},
    {"paper": "Daniluk et al.", "corpus": "Wikipedia (7.5k articles)", "model": "4-gram RNN", "family": "ngram", "test_perplexity": 75.9},
    # Tran et al.'s RM(+tM-g) as Daniluk et al. re-implemented it (their Fig. 2a, window 15; not parameter-matched)
    {"paper": "Daniluk et al.", "corpus": "Wikipedia (7.5k articles)", "model": "RM(+tM-g), window 15", "family": "rm", "test_perplexity": 80.1},
]


def models_frame(metas: dict[str, dict]) -> pd.DataFrame:
    """One row per checkpoint (``name -> config.json``): family, corpus, reading (context),
    parameters, perplexities, and the change in test perplexity relative to the first LSTM among
    them of the same corpus and reading (none without one: a Chinese model against an English
    LSTM, or running text against sentences, would compare different test sets or protocols)."""
    rows = []
    for name, meta in metas.items():
        m = meta.get("metrics", {})
        rows.append({
            "model": name,
            "family": meta.get("model", "?"),
            "corpus": meta_corpus(meta) or "?",
            "context": meta_context(meta),
            "parameters": meta.get("parameters"),
            "epochs": m.get("epochs_trained"),
            "valid ppl": m.get("valid_perplexity"),
            "test ppl": m.get("test_perplexity"),
            "WSJ ppl": m.get("wsj_perplexity"),
        })
    keys = ["corpus", "context"]
    df = pd.DataFrame(rows, columns=["model", "family", *keys, "parameters", "epochs", "valid ppl", "test ppl", "WSJ ppl"])
    lstms = df[(df["family"] == BASELINE_FAMILY) & df["test ppl"].notna()].drop_duplicates(keys)
    base = df.merge(lstms[[*keys, "test ppl"]], on=keys, how="left", suffixes=("", " of the LSTM"))["test ppl of the LSTM"]
    df["test ppl vs LSTM"] = (df["test ppl"] / base - 1).to_numpy()
    return df


def paper_frame() -> pd.DataFrame:
    """The papers' test perplexities with each model's change relative to the paper's own LSTM."""
    df = pd.DataFrame(PAPER_RESULTS)
    lstm = df[df["family"] == BASELINE_FAMILY].set_index("paper")["test_perplexity"]
    df["vs LSTM"] = df["test_perplexity"] / df["paper"].map(lstm) - 1
    return df
