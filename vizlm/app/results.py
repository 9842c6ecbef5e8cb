"""Library calls cached per input for the app, the corpora behind them, and progress bars.

A typed text is analysed through the Python API (:meth:`vizlm.api.Model.analyze`, giving a
:class:`vizlm.api.Analysis`), and its JSON document is :meth:`vizlm.api.Analysis.to_dict`, what
``vizlm analyze --json`` prints and the JSON download holds. Results are cached with ``st.cache_data`` keyed by :func:`vizlm.app.checkpoints.model_key`
(which changes when a checkpoint's files change) and, for corpus results, :func:`corpus_version` (which changes
when a split's files are written again); corpora with ``st.cache_resource``.
"""

from __future__ import annotations


import numpy as np
import streamlit as st

from vizlm.inspect.analysis import LN2, SentenceAnalysis, analyze_sentences, analyze_tokens
from vizlm.inspect.effects import slot_effect_rows, with_slot_effects
from vizlm.api import Analysis, Model
from vizlm.app import jobs
from vizlm.inspect.attribution import LABELS as METHOD_LABELS
from vizlm.inspect.attribution import Attribution, estimate_seconds
from vizlm.app.checkpoints import UserError, get_checkpoint, model_key
from vizlm.data.examples import passage_start
from vizlm.data.registry import Corpus, DataError, corpus_folder, load_corpus
from vizlm.core.errors import VizlmError
from vizlm.inspect.highlight import Setting
from vizlm.present.export import chart_spec
from vizlm.present.word_view import cases_by_target
from vizlm.present.heatmap import attention_heatmap, attribution_heatmap
from vizlm.data.text import MAX_TOKENS, detokenize, passage_sentences, token_row

# Cache sizes bound the server's memory: a 400-word text's analysis is ~2 MB (with its dict ~4 MB),
# its heat-map spec ~13 MB; a 40-word one about 1/100 of that.
ANALYSIS_CACHE_ENTRIES = 64
HEATMAP_CACHE_ENTRIES = 24


# A page view needs the read effect of every word but the slot effects of the selected word only: the
# analysis computes none (max_effect_pairs=0), row_effect_bits the selected word's, and full_effects all
# of them when the heat map is coloured by effect or an export asks for them (cached).
APP_EFFECT_PAIRS = 0


@st.cache_data(show_spinner=False, max_entries=ANALYSIS_CACHE_ENTRIES)
def _analyze_text(name: str, key: str, text: str, head: tuple[int, int | None] | None = None) -> Analysis:
    if head is not None:  # a Transformer's layer and head: the one analysis, another head shown
        return _analyze_text(name, key, text).at_head(*head)
    return Model(get_checkpoint(name)).analyze(text, max_effect_pairs=APP_EFFECT_PAIRS)


def analyze_text(name: str, text: str, head: tuple[int, int | None] | None = None) -> Analysis:
    """:meth:`vizlm.api.Model.analyze` through the cache, showing self-attention ``head`` ((layer, head), 0-based;
    None: the analysis's default, :meth:`~vizlm.inspect.analysis.SentenceAnalysis.at_head`); :class:`UserError` for
    bad input."""
    try:
        return _analyze_text(name, model_key(name), text, head)
    except VizlmError as exc:
        raise UserError(str(exc)) from None


@st.cache_data(show_spinner=False, max_entries=ANALYSIS_CACHE_ENTRIES)
def _case_map(name: str, key: str, text: str, highlight: Setting,
              head: tuple[int, int | None] | None = None) -> dict[int, list[dict]]:
    return cases_by_target(_analyze_text(name, key, text, head), highlight)


def case_map(name: str, text: str, highlight: Setting, head: tuple[int, int | None] | None = None) -> dict[int, list[dict]]:
    """The case labels of every predicted word of ``text`` for one highlight setting (and self-attention ``head``)
    (:func:`vizlm.present.word_view.cases_by_target`), cached per setting: a page view reads one word's."""
    return _case_map(name, model_key(name), text, highlight, head)


def _attribute(name: str, text: str, method: str, rows: tuple[int, int] | None, progress=None,
               cancel=None) -> Attribution:
    return Model(get_checkpoint(name)).attribute(text, method=method, rows=None if rows is None else range(*rows),
                                                 progress=progress, cancel=cancel)


def attribution(name: str, text: str, method: str, rows: tuple[int, int] | None = None) -> Attribution:
    """:meth:`vizlm.api.Model.attribute` of ``text``'s ``rows`` (``(first, end)``: the window shown; None: every
    row), computed once in the background (:mod:`vizlm.app.jobs`) with a progress bar that states the expected
    time and a Cancel button (``method``: one of :data:`vizlm.inspect.attribution.TEXT_METHODS`); :class:`UserError` for
    bad input or a cancelled request."""
    try:
        sa = _analyze_text(name, model_key(name), text)
        if rows is not None and rows[0] == 0 and rows[1] >= len(sa.targets):
            rows = None  # the window is the whole text: one computation for the panel and the heat map
        key = ("attribution", name, model_key(name), text, method, rows)
        seconds = estimate_seconds(get_checkpoint(name), sa, method, rows=None if rows is None else range(*rows))
        words = "every word" if rows is None else f"words {rows[0] + 1}-{rows[1]}"
        label = f"Attributing {words} of the text for {name} ({METHOD_LABELS[method]}, about {seconds:.0f} s)"
        return jobs.result(key, _attribute, name, text, method, rows, text=label, cancellable=True)
    except jobs.Cancelled:
        raise UserError(f"Attribution for {name} cancelled: pick another word, measure or text, or reload to "
                        "compute it again.") from None
    except VizlmError as exc:
        raise UserError(str(exc)) from None


@st.cache_data(show_spinner=False, max_entries=HEATMAP_CACHE_ENTRIES)
def _attribution_spec(name: str, key: str, text: str, method: str, highlight: Setting,
                      rows: tuple[int, int] | None, selected: int | None, _attr: Attribution,
                      head: tuple[int, int | None] | None = None) -> dict:
    chart = attribution_heatmap(_attr if head is None else _attr.at_head(*head), highlight, rows=rows, selected=selected)
    return chart_spec(chart, validate=False)  # the tests validate these specs


def attribution_spec(name: str, text: str, method: str, highlight: Setting,
                     rows: tuple[int, int] | None = None, selected: int | None = None,
                     head: tuple[int, int | None] | None = None) -> dict:
    """The attribution heat map of ``text`` (:func:`vizlm.present.heatmap.attribution_heatmap`) as a Vega-Lite spec,
    built once per input; only ``rows`` are attributed (None: every row). ``head``: a Transformer's head whose
    weights the cells' tooltips show."""
    attr = attribution(name, text, method, rows)
    return _attribution_spec(name, model_key(name), text, method, highlight, rows, selected, attr, head)


@st.cache_data(show_spinner=False, max_entries=ANALYSIS_CACHE_ENTRIES)
def _full_effects(name: str, key: str, text: str, head: tuple[int, int | None] | None = None) -> SentenceAnalysis:
    return with_slot_effects(get_checkpoint(name), _analyze_text(name, key, text, head))


@st.cache_data(show_spinner=False, max_entries=1024)
def _row_effects(name: str, key: str, text: str, row: int, head: tuple[int, int | None] | None = None) -> np.ndarray:
    return slot_effect_rows(get_checkpoint(name), _analyze_text(name, key, text, head), [row])[0]


def row_effect_bits(name: str, text: str, row: int, head: tuple[int, int | None] | None = None) -> np.ndarray | None:
    """[S] the slot effects in bits of one predicted word (of a Transformer's ``head``), computed for that word
    alone when the analysis has none (a long text); None for a model without attention."""
    sa = _analyze_text(name, model_key(name), text, head)
    if sa.attention is None:
        return None
    if sa.slot_effects is not None:
        return sa.slot_effect_bits[row]
    return _row_effects(name, model_key(name), text, row, head) / LN2


@st.cache_data(show_spinner=False, max_entries=HEATMAP_CACHE_ENTRIES)
def _heatmap_spec(name: str, key: str, text: str, highlight: Setting, measure: str,
                  rows: tuple[int, int] | None, selected: int | None, head: tuple[int, int | None] | None = None) -> dict:
    sa = _full_effects(name, key, text, head) if measure == "effect" else _analyze_text(name, key, text, head)
    heatmap = attention_heatmap(sa, highlight, measure=measure, rows=rows, selected=selected)
    return chart_spec(heatmap, validate=False)  # a new window each click; the tests validate these specs


def heatmap_spec(name: str, text: str, highlight: Setting, measure: str = "weight",
                 rows: tuple[int, int] | None = None, selected: int | None = None,
                 head: tuple[int, int | None] | None = None) -> dict:
    """The heat map of ``text`` (``measure``: attention weight or slot effect; ``rows``: a window of a long
    text, ``selected``: the outlined row; ``head``: a Transformer's layer and head) as a Vega-Lite spec, built once
    per input."""
    return _heatmap_spec(name, model_key(name), text, highlight, measure, rows, selected, head)


def corpus_version(corpus: str, split: str) -> tuple[int, int] | None:
    """Changes when a split's processed files are written again (a corpus you prepared again under its name
    with ``--force``, or ``vizlm prepare`` run again): the size and modification time of its ``SPLIT.txt``;
    None when there is none. The corpus results kept in memory (here and :mod:`vizlm.app.jobs`) key on it,
    as the disk cache keys on the split's checksum."""
    try:
        stat = (corpus_folder(corpus) / f"{split}.txt").stat()
    except (DataError, OSError):
        return None
    return stat.st_size, stat.st_mtime_ns


@st.cache_resource(show_spinner="Reading corpus…", max_entries=16)
def _load_corpus(corpus: str, split: str, version: tuple[int, int] | None) -> Corpus:
    return load_corpus(corpus, split)


def load_corpus_cached(corpus: str, split: str) -> Corpus:
    """The processed split, read once per version of its files (:func:`corpus_version`)."""
    return _load_corpus(corpus, split, corpus_version(corpus, split))


@st.cache_data(show_spinner=False, max_entries=1024)
def _analyze_corpus_sentence(name: str, key: str, corpus: str, split: str, version: tuple[int, int] | None,
                             index: int) -> SentenceAnalysis:
    c = load_corpus_cached(corpus, split)
    surfaces = [w.replace("_", " ") for w in c.originals[index]]
    # the gallery draws the weights: no effects (the report has each example's)
    return analyze_tokens(get_checkpoint(name), c.sentences[index], surfaces, tags=c.tags[index], effects=False)


def analyze_corpus_sentence(name: str, corpus: str, split: str, index: int) -> SentenceAnalysis:
    """:func:`vizlm.inspect.analysis.analyze_tokens` on sentence ``index`` of a split (gold tags), cached."""
    return _analyze_corpus_sentence(name, model_key(name), corpus, split, corpus_version(corpus, split), index)


def sentence_text(corpus: str, split: str, index: int) -> str:
    """A corpus sentence as readable text (:func:`vizlm.data.text.detokenize`)."""
    return detokenize(load_corpus_cached(corpus, split).originals[index])


def passage_text(corpus: str, split: str, index: int) -> tuple[str, int]:
    """Sentence ``index`` of a split after the sentences before it in its document, as many as the
    Explorer reads (:func:`vizlm.data.examples.passage_start`), a sentence a line; and the row that predicts
    the sentence's first word there, counted on the text as the Explorer reads it (:func:`vizlm.data.text.token_row`)."""
    c = load_corpus_cached(corpus, split)
    start = passage_start(c.ids, [len(w) for w in c.sentences], index)
    before = [detokenize(c.originals[k]) + "\n" for k in range(start, index)]
    text = "".join(before) + detokenize(c.originals[index])
    while before and sum(map(len, passage_sentences(text))) > MAX_TOKENS:  # read as more tokens than the corpus's
        text = text[len(before.pop(0)):]
    return text, token_row(text, sum(map(len, before)))


@st.cache_data(show_spinner=False, max_entries=8)  # a Brown document's analysis is ~100 MB
def _analyze_corpus_passage(name: str, key: str, corpus: str, split: str, version: tuple[int, int] | None, first: int,
                            last: int) -> SentenceAnalysis:
    c = load_corpus_cached(corpus, split)
    part = slice(first, last + 1)
    surfaces = [[w.replace("_", " ") for w in o] for o in c.originals[part]]
    return analyze_sentences(get_checkpoint(name), c.sentences[part], surfaces, tags=c.tags[part], effects=False,
                             max_tokens=None)


def analyze_corpus_passage(name: str, corpus: str, split: str, first: int, last: int) -> SentenceAnalysis:
    """:func:`vizlm.inspect.analysis.analyze_sentences` on sentences ``first..last`` of a split (a document read
    in the model's context, gold tags, every token), cached."""
    return _analyze_corpus_passage(name, model_key(name), corpus, split, corpus_version(corpus, split), first, last)


@st.cache_resource(show_spinner=False, max_entries=16)
def _sentence_ids(corpus: str, split: str, version: tuple[int, int] | None) -> dict[str, int]:
    return {sid: i for i, sid in enumerate(load_corpus_cached(corpus, split).ids)}


def sentence_index(corpus: str, split: str, sentence_id: str) -> int | None:
    return _sentence_ids(corpus, split, corpus_version(corpus, split)).get(sentence_id)


class StreamlitProgress:
    """A ``progress(fraction)`` callback (as :mod:`vizlm.inspect.corpus_stats` takes) drawing a progress bar."""

    def __init__(self, text: str):
        self.text = text
        self.bar = None

    def __call__(self, fraction: float) -> None:
        frac = min(1.0, max(0.0, float(fraction)))
        label = f"{self.text} · {frac:.0%}"
        if self.bar is None:
            self.bar = st.progress(frac, text=label)
        else:
            self.bar.progress(frac, text=label)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.empty()


