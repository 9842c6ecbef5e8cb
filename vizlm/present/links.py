"""The Explorer's and Compare perplexity's state as a URL query string: build it, and parse
(validate) what a link brings.

Pure logic, no Streamlit. The Explorer: ``?model=amsrn&compare=lstm&text=...&threshold=0.2&target=3``
(``topk=3`` instead of ``threshold`` for top-k mode; ``measure=effect`` when the heat map is
coloured by effect, ``measure=integrated-gradients`` (or another attribution method) when the
highlights and the heat map show what each prediction depended on). Compare perplexity: ``?a=lstm-continued&b=amsrn&corpus=brown&split=test``.
Anything malformed or out of range in a link falls back to a default, with a note for the user
each time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from vizlm.inspect.analysis import MAX_TEXT_CHARS
from vizlm.inspect.highlight import DEFAULT, Setting, Share, TopK
from vizlm.data.registry import CORPORA
from vizlm.inspect.attribution import LABELS as METHOD_LABELS
from vizlm.inspect.attribution import TEXT_METHODS
from vizlm.present.style import MEASURES

MAX_TOP_K = 10  # the Explorer's top-k slider
# What the Explorer's highlights and heat map show: the attention (its weight; its effect in the heat map),
# or an attribution method's answer to "what did this prediction depend on?" (every model, the LSTM too).
EXPLORER_MEASURES = (*MEASURES, *TEXT_METHODS)
MEASURE_LABELS = {"weight": "attention weight", "effect": "attention effect", **{m: METHOD_LABELS[m] for m in TEXT_METHODS}}
# The Explorer's text when a link brings none: every word in the vocabulary of the models it opens with
# (tests/test_app.py checks), so a newcomer's first sight is the attention, not an <unk> notice.
DEFAULT_TEXT = "The dogs in the park are running because they saw a cat , so the owners are running too ."
# The text the Explorer opens with for a model of each language (switching to a model of another language brings its own)
DEFAULT_TEXTS = {"English": DEFAULT_TEXT, "Chinese": "今天天氣很好，我們去公園散步。他說這個問題很重要。"}


@dataclass
class ExplorerState:
    model: str
    compare: str | None
    text: str
    highlight: Setting  # Share (``threshold=``) or TopK (``topk=``)
    target: int | None
    measure: str = MEASURES[0]  # one of EXPLORER_MEASURES: weight (left out of the link), effect, an attribution
    head: str | None = None  # the model's self-attention head shown (head_code; None: its default)

    def query(self) -> dict[str, str]:
        q = {"model": self.model}
        if self.compare:
            q["compare"] = self.compare
        q["text"] = self.text[:MAX_TEXT_CHARS]
        if isinstance(self.highlight, TopK):
            q["topk"] = str(self.highlight.k)
        else:
            q["threshold"] = f"{self.highlight.share:g}"
        if self.target is not None:
            q["target"] = str(self.target)
        if self.measure != MEASURES[0]:
            q["measure"] = self.measure
        if self.head:
            q["head"] = self.head
        return q


_HEAD_CODE = re.compile(r"([1-9][0-9]{0,2})(?:\.([1-9][0-9]{0,2}))?")


def head_code(head: tuple[int, int | None]) -> str:
    """A self-attention head as people count, for a link: ``"2"`` for layer 2's mean over its heads, ``"2.1"`` for
    its head 1, from ``(layer, head)`` counted from 0 (:meth:`vizlm.inspect.analysis.SentenceAnalysis.at_head`)."""
    layer, h = head
    return f"{layer + 1}" if h is None else f"{layer + 1}.{h + 1}"


def parse_head_code(code: str) -> tuple[int, int | None] | None:
    """``(layer, head)`` counted from 0 of a :func:`head_code`; None when it is not one."""
    m = _HEAD_CODE.fullmatch(code or "")
    if not m:
        return None
    return int(m[1]) - 1, None if m[2] is None else int(m[2]) - 1


def explorer_query(model: str, text: str, compare: str | None = None, target: int | None = None,
                   highlight: Share = DEFAULT) -> dict[str, str]:
    """Query parameters that open ``text`` in the Explorer (for ``st.page_link``)."""
    return ExplorerState(model, compare, text, highlight, target).query()


def parse_query(params: dict, names: list[str], default_model: str, default_compare: str | None,
                default_text: str) -> tuple[ExplorerState, list[str]]:
    """Validate the Explorer's query string; unknown or malformed values fall back, with a note each."""
    notes = []
    model = params.get("model", default_model)
    if model not in names:
        notes.append(f"model {model!r} in the link is not available here; showing {default_model}")
        model = default_model
    compare = params.get("compare", default_compare if "model" not in params else None)
    if compare in ("", "none"):
        compare = None
    if compare is not None and (compare not in names or compare == model):
        if compare not in names:
            notes.append(f"comparison model {compare!r} in the link is not available here")
        compare = None
    text = params.get("text", default_text)
    if len(text) > MAX_TEXT_CHARS:  # analysis reads no more than this anyway
        notes.append(f"the text in the link has {len(text):,} characters; only the first {MAX_TEXT_CHARS:,} are read")
        text = text[:MAX_TEXT_CHARS]
    highlight, target, measure = DEFAULT, None, params.get("measure", MEASURES[0])
    if measure not in EXPLORER_MEASURES:
        notes.append(f"the measure {measure!r} in the link is not one of {', '.join(EXPLORER_MEASURES)}; "
                     f"showing the attention {MEASURES[0]}")
        measure = MEASURES[0]
    if "threshold" in params:
        try:
            value = float(params["threshold"])
            if not math.isfinite(value):
                raise ValueError
            highlight = Share(min(1.0, max(0.0, value)))
            if highlight.share != value:
                notes.append(f"the threshold {value:g} in the link is outside 0 to 1; using {highlight.share:g}")
        except ValueError:
            notes.append(f"the threshold in the link is not a number between 0 and 1; using {DEFAULT.share:g}")
    if "topk" in params:
        try:
            value = int(params["topk"])
            highlight = TopK(min(MAX_TOP_K, max(1, value)))
            if highlight.k != value:
                notes.append(f"top-k {value} in the link is outside 1 to {MAX_TOP_K}; using {highlight.k}")
        except ValueError:
            notes.append("top-k in the link is not a whole number; using the threshold")
    if "target" in params:
        try:
            target = int(params["target"])
            if target < 0:
                raise ValueError
        except ValueError:
            notes.append("the selected word in the link is not a word number; picking one")
            target = None
    head = params.get("head")
    if head is not None and parse_head_code(head) is None:
        notes.append(f"the head {head!r} in the link is not a layer (\"2\") or a layer and head (\"2.1\"); showing the "
                     "model's default")
        head = None
    return ExplorerState(model, compare, text, highlight, target, measure, head), notes


@dataclass
class CompareState:
    """Compare perplexity's view: the baseline ``a``, the compared model ``b`` and the corpus split
    (None: the first one the models read)."""

    a: str
    b: str
    corpus: str | None = None
    split: str | None = None

    def query(self) -> dict[str, str]:
        q = {"a": self.a, "b": self.b}
        if self.corpus:
            q["corpus"] = self.corpus
        if self.corpus and self.split:
            q["split"] = self.split
        return q


def parse_compare_query(params: dict, names: list[str], default_a: str, default_b: str,
                        corpora: dict[str, tuple[str, ...]] | None = None) -> tuple[CompareState, list[str]]:
    """Validate Compare perplexity's query string: an unknown model, a model compared with itself, an
    unknown corpus or a split it does not have fall back (to the defaults, the first split), with a note each.
    ``corpora``: the corpora a link may name, with their splits (default: vizlm's own; the app adds yours).
    Whether the models read the corpus's language is the page's to check."""
    corpora = CORPORA if corpora is None else corpora
    notes = []
    a = params.get("a", default_a)
    if a not in names:
        notes.append(f"baseline model {a!r} in the link is not available here; using {default_a}")
        a = default_a
    b = params.get("b", default_b)
    if b not in names:
        notes.append(f"compared model {b!r} in the link is not available here")
        b = default_b
    if b == a:
        b = default_b if default_b != a else next((n for n in names if n != a), a)
        if "b" in params:
            notes.append(f"the link compares {a} with itself; comparing with {b}")
    corpus, split = params.get("corpus"), params.get("split")
    if corpus is not None and corpus not in corpora:
        notes.append(f"corpus {str(corpus)[:64]!r} in the link is not one of {', '.join(corpora)}; "
                     "using the first the models read")
        corpus = split = None
    if corpus is not None and split is not None and split not in corpora[corpus]:
        notes.append(f"the corpus {corpus} has no split {str(split)[:32]!r} (it has {', '.join(corpora[corpus])}); "
                     "using its first")
        split = None
    return CompareState(a, b, corpus, split), notes
