"""Result tables: the checkpoints' stored metrics, and the papers' published numbers beside them.

Pure data and pandas; the Models page, the CLI and reports draw from here, so every
number in a table comes from a checkpoint's ``config.json`` or from :data:`PAPER_RESULTS`.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from vizlm.modeling.checkpoint import meta_context, meta_corpus
from vizlm.models import REGISTRY
from vizlm.data.text import MAX_TOKENS

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


# A config field as people read it: its name, and the values that mean something of their own (a field
# missing here is written with its own name; a None without a meaning here is left out).
CONFIG_NAMES = {
    "emb_dim": "embedding", "hidden_dim": "hidden units", "init_range": "init range", "context": "reads",
    "entropy_weight": "entropy weight", "start_slot": "start slot in memory", "n": "n-gram order",
}
CONFIG_MEANINGS = {
    ("context", "sentence"): "each sentence alone", ("context", "document"): "running text",
    ("memory", None): "whole sentence",
}


def config_value(key: str, value: object) -> str | None:
    """One config value for people: its meaning where it has one (``memory None``: the whole sentence),
    yes / no for a flag, numbers without a trailing ``.0``; None where it says nothing."""
    if (key, value) in CONFIG_MEANINGS:
        return CONFIG_MEANINGS[(key, value)]
    if value is None:
        return None
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def config_items(meta: dict) -> list[tuple[str, str]]:
    """A checkpoint's model config as ``(name, value)`` pairs for people, every field of its family in the
    config class's order: a field an older ``config.json`` lacks is shown with the default the loader builds
    the model with, so two checkpoints of a family list the same fields. Left out: the vocabulary size (said
    elsewhere) and what the family fixes (a kvp model's variant)."""
    stored = dict(meta.get("config") or {})
    family = REGISTRY.get(meta.get("model"))
    if family is not None:
        config_cls, _, fixed = family
        defaults = {f.name: f.default for f in dataclasses.fields(config_cls) if f.default is not dataclasses.MISSING}
        stored = {k: stored.get(k, defaults.get(k)) for k in [*defaults, *stored] if k not in fixed}
    items = []
    for key, value in stored.items():
        shown = config_value(key, value)
        if key != "vocab_size" and shown is not None:
            items.append((CONFIG_NAMES.get(key, key.replace("_", " ")), shown))
    return items


def epochs_text(meta: dict) -> str:
    """How long a checkpoint trained, for people: ``6 epochs of at most 20 (best 4): early stopping ...``
    when training stopped before its cap (``--epochs``), ``20 epochs (best 18)`` when it ran them all."""
    metrics, train = meta.get("metrics") or {}, meta.get("train") or {}
    done, best, cap, patience = (metrics.get("epochs_trained"), metrics.get("best_epoch"), train.get("epochs"),
                                 train.get("patience"))
    if not isinstance(done, int):
        return "epochs not recorded"
    text = f"{done} epoch{'s' * (done != 1)}"
    if isinstance(cap, int) and done < cap:
        text += f" of at most {cap}"
    if isinstance(best, int):
        text += f" (best {best})"
    stopped = isinstance(cap, int) and done < cap and isinstance(best, int) and isinstance(patience, int)
    if stopped and done - best >= patience:  # vizlm.modeling.train stops after `patience` epochs without a better valid ppl
        text += f": early stopping, no better valid ppl for {patience} epochs"
    return text


def paper_frame() -> pd.DataFrame:
    """The papers' test perplexities with each model's change relative to the paper's own LSTM."""
    df = pd.DataFrame(PAPER_RESULTS)
    lstm = df[df["family"] == BASELINE_FAMILY].set_index("paper")["test_perplexity"]
    df["vs LSTM"] = df["test_perplexity"] / df["paper"].map(lstm) - 1
    return df


def card_text(card: dict) -> str:
    """A corpus card written for people (``vizlm prepare`` and ``vizlm corpora NAME``)."""
    layout = card.get("layout") or {}
    stats = card.get("split_stats") or {}
    head = (f"corpus {card.get('name')}: already prepared from these files with these options; nothing changed"
            if card.get("already_prepared") else f"corpus {card.get('name')}")
    options = card.get("options") or {}
    how = [f"{k} {v}" for k, v in (options.get("vocabulary") or {}).items()]
    how += [what for key, what in (("lowercase", "lowercased"), ("chars", "characters")) if options.get(key)]
    found = f"detected: {layout.get('reason')}" if layout.get("detected") else "given"
    lines = [head, f"  from    {(card.get('source') or {}).get('folder')}", f"  layout  {layout.get('name')} ({found})",
             f"  vocabulary {card.get('vocab_size') or 0:,} words ({', '.join(how)})"]
    lines.append(f"  {'split':6} {'documents':>10} {'sentences':>11} {'tokens':>13} {'OOV':>7}  documents from")
    for split in card.get("splits", ()):
        st = stats.get(split) or {}
        lines.append(f"  {split:6} {st.get('documents', 0):>10,} {st.get('sentences', 0):>11,} {st.get('tokens', 0):>13,} "
                     f"{st.get('oov_rate', 0):>7.2%}  {st.get('documents_from', '')}")
    extra = []
    for split, st in stats.items():
        for key, what in (("paragraphs", "paragraphs split into sentences"), ("headings_dropped", "headings dropped"),
                          ("long_sentences_cut", f"sentences over {MAX_TOKENS} tokens cut"),
                          ("reserved_words_as_unk", "<s> </s> <pad> read as <unk>")):
            if st.get(key):
                extra.append(f"{split}: {st[key]:,} {what}")
    if extra:
        lines.append("  " + "; ".join(extra))
    if "seconds" in card and not card.get("already_prepared"):
        tokens = sum((st.get("tokens") or 0) for st in stats.values())
        lines.append(f"  prepared in {card['seconds']:.1f} s ({tokens / max(card['seconds'], 1e-9):,.0f} tokens/s)")
    return "\n".join(lines)


def card_line(card: dict, split: str) -> str:
    """One line of a corpus card for people, for one split (the app's corpus pickers): layout, documents,
    sentences, tokens, vocabulary and OOV rate."""
    st = (card.get("split_stats") or {}).get(split) or {}
    layout = (card.get("layout") or {}).get("name") or (card.get("source") or {}).get("kind") or "corpus"
    parts = [layout] + [f"{st[k]:,} {k}" for k in ("documents", "sentences", "tokens") if isinstance(st.get(k), int)]
    if isinstance(card.get("vocab_size"), int):
        parts.append(f"vocabulary {card['vocab_size']:,}")
    if isinstance(st.get("oov_rate"), (int, float)):
        parts.append(f"{st['oov_rate']:.2%} of tokens outside it")
    return " · ".join(parts)


def sample_text(res: dict) -> str:
    """What a corpus result (:meth:`~vizlm.api.Model.corpus_attribution`,
    :meth:`~vizlm.api.Model.corpus_faithfulness`) read, for people: "1,432 passages of 50 documents"."""
    documents = res["documents"]
    return f"{res['units']:,} {res['read_in']} of {documents:,} document{'' if documents == 1 else 's'}"
