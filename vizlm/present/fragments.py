"""HTML fragments (inline styles only, every piece of text escaped): the running text with one row's highlights
(:func:`running_text_html`, for the attention and for an attribution), the colour keys, the probability strip, a
model legend, and the span of a long passage worth showing.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np

from vizlm.data.text import clean_text
from vizlm.inspect.analysis import SentenceAnalysis
from vizlm.inspect.attribution import LABELS as METHOD_LABELS
from vizlm.inspect.attribution import Attribution
from vizlm.inspect.highlight import DEFAULT, Setting, describe
from vizlm.inspect.reading import BOUNDARY
from vizlm.present.style import (
    SELECTED_COLOUR,
    SURPRISAL_MAX_BITS,
    UNK_TITLE,
    WINDOW_ROWS,
    attribution_colour,
    attribution_scale,
    categorical,
    format_prob,
    highlight_colour,
    palette,
    text_colour,
)

_SPAN = "display:inline-block;margin:1px 0;padding:0 3px;border-radius:3px;line-height:1.7;"
_MARKER = "font-size:0.7em;color:#666;vertical-align:middle;border:1px solid #bbb;border-radius:3px;padding:0 3px;"
_BREAK = "border-left:3px solid #888;margin-left:2px;"  # a sentence read alone starts here


def _esc(text: object) -> str:
    return html.escape(clean_text(str(text)), quote=True)


def _gaps(sa: SentenceAnalysis) -> list[str]:
    """[n] text before each token (from ``offsets``), or single spaces if offsets don't fit ``text``."""
    n = len(sa.tokens)
    try:
        spans = [(int(s), int(e)) for s, e in sa.offsets]
        ok = len(spans) == n and all(0 <= s <= e <= len(sa.text) for s, e in spans)
        ok = ok and all(spans[i][1] <= spans[i + 1][0] for i in range(n - 1))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        return [""] + [" "] * (n - 1) if n else []
    gaps, prev = [], spans[0][0] if n else 0
    for s, e in spans:
        gap = sa.text[prev:s]  # untokenised text between two tokens, whitespace runs squashed
        core = " ".join(gap.split())
        lead = " " if gap[:1].isspace() else ""
        gaps.append(lead + core + (" " if core and gap[-1:].isspace() else ""))
        prev = e
    return gaps


_OUTLINE = f"outline:2px solid {SELECTED_COLOUR};outline-offset:1px;"  # the predicted word, in every running text


def _restart_title(sa: SentenceAnalysis, boundary: int) -> str:
    """The tooltip of the ``<s>`` where ``sa``'s model reads the text after token ``boundary`` afresh."""
    what = "sentence" if boundary not in sa.breaks else "document (after a blank line)"
    return f"start of a {what}: {sa.model} reads it afresh, from a zero state"


def _plain_start(what: str, style: str) -> str:
    return f'<span class="vz-start" style="{style}" title="{_esc(what)}">&lt;s&gt;</span> '


class _Reading:
    """How one kind of scores paints the running text of row ``target`` (:func:`running_text_html`): the attention
    (:class:`_AttentionReading`) or an attribution (:class:`_AttributionReading`)."""

    truncated = 0  # tokens not analysed, said at the end (0: nothing said)

    def start(self, start: int, what: str, style: str) -> str:
        """The ``<s>`` marker of a reading that starts at slot ``start``."""
        return _plain_start(what, style)

    def boundary(self, i: int, tips: list[str], own: str) -> tuple[str, bool]:
        """The ``</s>`` marker of boundary token ``i``, and whether the next sentence is read afresh after it."""
        raise NotImplementedError

    def token(self, i: int, style: str, classes: list[str], tips: list[str], decided: bool) -> tuple[str, list[str]]:
        """Token ``i``'s style and classes (``tips`` grows): its place in the reading and its highlight."""
        raise NotImplementedError

    def caption(self) -> str:
        """What is highlighted (HTML, escaped)."""
        raise NotImplementedError


def running_text_html(sa: SentenceAnalysis, target: int, reading: _Reading, caption: bool = True,
                      span: tuple[int, int] | None = None) -> str:
    """The one highlighted-text renderer: the running text of ``sa`` for row ``target``, painted by ``reading``
    (inline styles only). The predicted word is outlined, words not read yet are faded, ``<unk>`` words have a
    dashed underline; sentence boundaries of a passage are markers: ``</s>`` in running text, ``</s>`` then a bar
    and the next sentence's ``<s>`` where the model starts afresh (each sentence read alone; a new document).
    ``span`` ``(first, end)`` shows those tokens only (with "…" where text is left out). All text is escaped."""
    T = len(sa.targets)
    if not 0 <= target < T:
        raise IndexError(f"target {target} out of range: the text has {T} predicted words (0..{T - 1})")
    first, end = span if span is not None else (0, len(sa.tokens))
    parts = [reading.start(0, "sentence start", _MARKER)]
    if first > 0:
        parts.append(f'<span style="{_MARKER}" title="{first} earlier tokens left out">…</span> ')
    gaps = _gaps(sa)
    for i in range(first, end):
        tok = sa.tokens[i]
        parts.append(_esc(gaps[i]) if i > first else "")
        if sa.norms[i] == BOUNDARY:  # the end of a sentence: the row i predicts </s>
            tips = ["sentence end: </s>" + (" (predicted word)" if i == target else "")]
            marker, afresh = reading.boundary(i, tips, _OUTLINE if i == target else "")
            parts.append(marker)
            if afresh:
                parts.append(reading.start(i + 1, _restart_title(sa, i), _MARKER + _BREAK))
            continue
        if i == target:
            style, classes, tips, decided = _SPAN + _OUTLINE + "font-weight:600;", ["vz-tok", "vz-target"], ["predicted word"], True
        elif i > target:
            style, classes, tips, decided = _SPAN + "opacity:0.45;", ["vz-tok", "vz-future"], ["not read yet"], True
        else:
            style, classes, tips, decided = _SPAN, ["vz-tok"], [], False
        style, classes = reading.token(i, style, classes, tips, decided)
        if i < len(sa.unk) and sa.unk[i]:  # a word outside the vocabulary is underlined; its tooltip says so
            classes = [*classes, "vz-unk"]
            style += f"text-decoration:underline dashed {SELECTED_COLOUR};text-underline-offset:3px;"
            tips = [*tips, UNK_TITLE]
        parts.append(f'<span class="{" ".join(classes)}" style="{style}" title="{_esc(" · ".join(tips))}">{_esc(tok)}</span>')
    if end == len(sa.tokens):
        parts.append(f' <span class="vz-end" style="{_MARKER}{_OUTLINE if target == T - 1 else ""}" title="sentence end">&lt;/s&gt;</span>')
        if reading.truncated:
            more = _esc(f"{reading.truncated} more tokens not analysed")
            parts.append(f' <span style="{_MARKER}" title="{more}">…</span>')
    else:
        parts.append(f' <span style="{_MARKER}" title="later text left out">…</span>')
    head = ""
    if caption:
        head = (f'<div style="font-size:0.85em;color:#555;margin-bottom:4px">predicting <b>{_esc(sa.targets[target])}</b> '
                f"after “{_esc(sa.current_word(target))}” · {reading.caption()}</div>")
    return f'<div class="vizlm-highlight" style="font-size:1.05em;line-height:2">{head}{"".join(parts)}</div>'


def _painted(bg: str) -> str:
    return f"background:{bg};color:{text_colour(bg)};"


class _AttentionReading(_Reading):
    """The attention of row ``target``: the highlighted slots coloured by weight, every slot's weight in a tooltip,
    words outside the row's memory grey."""

    def __init__(self, sa: SentenceAnalysis, target: int, setting: Setting):
        self.sa, self.target, self.setting = sa, target, setting
        self.att = None if sa.attention is None else np.asarray(sa.attention, dtype=float)
        self.mask = sa.allowed()
        self.lit = {h.slot: h.weight for h in sa.highlighted(setting, rows=[target])[0]}
        self.truncated = sa.truncated

    def weight_of(self, slot: int) -> float | None:
        if self.att is None or self.mask is None or slot >= self.att.shape[1] or not self.mask[self.target, slot]:
            return None
        return float(self.att[self.target, slot])

    def slot_style(self, slot: int, tips: list[str]) -> tuple[str, list[str]]:
        """Background and classes of a slot's marker or word: coloured when highlighted."""
        w = self.weight_of(slot)
        if w is None:
            return "", []
        tips.append(f"attention {w:.3f}")
        return (_painted(highlight_colour(w)), ["vz-attended"]) if slot in self.lit else ("", [])

    def start(self, start: int, what: str, style: str) -> str:
        """A reading's ``<s>``: its start slot (the zero start state) and the next (after reading ``<s>``) share one
        marker."""
        tips = [f"slot {j} ({name}): {w:.3f}" for j, name in ((start, "start state"), (start + 1, "<s>"))
                if (w := self.weight_of(j)) is not None]
        shown = [self.lit[j] for j in (start, start + 1) if j in self.lit]
        bg = _painted(highlight_colour(min(1.0, sum(shown)))) if shown else ""
        title = _esc(what + (": " + "; ".join(tips) if tips else ""))
        return f'<span class="vz-start" style="{style}{bg}" title="{title}">&lt;s&gt;</span> '

    def boundary(self, i: int, tips: list[str], own: str) -> tuple[str, bool]:
        slot = i + 2  # token i is held by slot i + 2
        if self.sa.slot_labels[slot] == BOUNDARY:  # running text: the </s> read is a memory slot of later words
            bg, cls = self.slot_style(slot, tips)
            return (f' <span class="vz-boundary {" ".join(cls)}" style="{_MARKER}{own}{bg}" '
                    f'title="{_esc(" · ".join(tips))}">&lt;/s&gt;</span> '), False
        return f' <span class="vz-boundary" style="{_MARKER}{own}" title="{_esc(tips[0])}">&lt;/s&gt;</span> ', True

    def token(self, i: int, style: str, classes: list[str], tips: list[str], decided: bool) -> tuple[str, list[str]]:
        sa, slot = self.sa, i + 2
        # the last word of a text, or of a sentence read alone, is not held (slot i + 2 is the next one's start slot)
        held = slot < len(sa.targets) and sa.slot_token(slot) == i
        if not decided and i == self.target - 1:
            tips.append("read just now: the attention's query")
        elif not decided and self.att is not None and not (held and self.mask[self.target, slot]):
            classes.append("vz-outside")
            style += "color:#8a8a8a;"
            tips.append("not in this word's memory")
        bg, cls = self.slot_style(slot, tips) if held else ("", [])
        if i < len(sa.targets):
            tips.append(f"P = {format_prob(float(sa.probs[i]))}")
        return style + bg, classes + cls

    def caption(self) -> str:
        if self.att is None:
            return f"{_esc(self.sa.model)} has no attention"
        rule, n = describe(self.setting, "weight ≥ {share:g}"), len(self.lit)
        return f"highlighted: {_esc(rule)} ({n} slot{'s' if n != 1 else ''})"


def highlighted_html(
    sa: SentenceAnalysis,
    target: int,
    setting: Setting = DEFAULT,
    caption: bool = True,
    span: tuple[int, int] | None = None,
) -> str:
    """The running text with attention for one target row as an HTML fragment (:func:`running_text_html`).

    Attended words (those the highlight ``setting`` picks, :meth:`SentenceAnalysis.highlighted`) get a
    background on the :data:`vizlm.present.style.SCHEME` scale; every word in memory has its weight in
    a tooltip; words read but not in the row's memory (outside its window, or another sentence read alone) are
    grey. ``span`` ``(first, end)`` shows those tokens only. All text is escaped.
    """
    T = len(sa.targets)
    if not 0 <= target < T:
        raise IndexError(f"target {target} out of range: the text has {T} predicted words (0..{T - 1})")
    return running_text_html(sa, target, _AttentionReading(sa, target, setting), caption, span)


class _AttributionReading(_Reading):
    """An attribution's row ``target``: the highlighted words coloured by their attribution (full colour at the row's
    largest ``|attribution|``), every word of the row's reading with its attribution in a tooltip, words of another
    sentence read alone grey."""

    def __init__(self, attr: Attribution, target: int, setting: Setting):
        self.attr, self.target = attr, target
        self.lit = set(attr.highlighted(target, setting))
        self.bits = attr.bits[target]
        self.lim = attribution_scale(attr, [target])
        self.total = float(np.abs(self.bits * attr.covered[target]).sum())
        self.starts = {int(r) for r in attr.analysis.first_rows()}  # positions reading <s>, not a word of the text
        self.rule = describe(setting, "≥ {share:g} of the largest |attribution|")

    def read_at(self, i: int) -> int | None:
        """The input position that read token ``i``, if any."""
        p = i + 1
        return p if p < len(self.attr.targets) and p not in self.starts else None

    def paint(self, p: int | None, tips: list[str]) -> tuple[str, list[str]]:
        attr = self.attr
        if p is None or not attr.covered[self.target, p]:
            return "", []
        share = abs(self.bits[p]) / self.total if self.total > 0 else 0.0
        tips.append(f"attribution {self.bits[p]:+.3f} bits ({share:.0%} of this word's)")
        if p not in self.lit:
            return "", []
        return _painted(attribution_colour(float(self.bits[p]), self.lim)), ["vz-attributed"]

    def boundary(self, i: int, tips: list[str], own: str) -> tuple[str, bool]:
        p = self.read_at(i)
        bg, cls = self.paint(p, tips)
        return (f' <span class="vz-boundary {" ".join(cls)}" style="{_MARKER}{own}{bg}" '
                f'title="{_esc(" · ".join(tips))}">&lt;/s&gt;</span> '), p is None and i + 1 < len(self.attr.targets)

    def token(self, i: int, style: str, classes: list[str], tips: list[str], decided: bool) -> tuple[str, list[str]]:
        p = self.read_at(i)
        if not decided and p is not None and not self.attr.covered[self.target, p]:
            classes.append("vz-outside")
            style += "color:#8a8a8a;"
            tips.append("another sentence, read alone")
        elif not decided and p == self.target:
            tips.append("read just now")
        bg, cls = self.paint(p, tips) if i < self.target else ("", [])
        return style + bg, classes + cls

    def caption(self) -> str:
        n = len(self.lit)
        return (f"{_esc(METHOD_LABELS.get(self.attr.method, self.attr.method))}, "
                f"highlighted: {_esc(self.rule)} ({n} word{'s' if n != 1 else ''})")


def attribution_html(
    attr: Attribution,
    target: int,
    setting: Setting = DEFAULT,
    span: tuple[int, int] | None = None,
    caption: bool = True,
) -> str:
    """The running text with what row ``target``'s prediction depended on, as an HTML fragment
    (:func:`running_text_html`): the words the highlight ``setting`` picks (:meth:`Attribution.highlighted`) get a
    background by their attribution (:func:`vizlm.present.style.attribution_colour`, full colour at the row's
    largest ``|attribution|``), every word of the row's reading has its attribution in a tooltip; words of another
    sentence read alone are grey. ``span`` shows those tokens only. All text is escaped."""
    T = len(attr.targets)
    if not 0 <= target < T:
        raise IndexError(f"target {target} out of range: the text has {T} predicted words (0..{T - 1})")
    return running_text_html(attr.analysis, target, _AttributionReading(attr, target, setting), caption, span)


def attribution_key_html(lim: float, method: str) -> str:
    """A colour key for :func:`attribution_html`: swatches from ``-lim`` to ``+lim`` bits, and what they mean."""
    swatches = "".join(
        f'<span style="{_SPAN}background:{attribution_colour(v, lim)};color:{text_colour(attribution_colour(v, lim))};'
        f'min-width:3em;text-align:center">{v:+.2g}</span>'
        for v in (-lim, -lim / 2, 0.0, lim / 2, lim)
    )
    return (f'<div class="vizlm-key" style="font-size:0.8em;color:#555">{_esc(METHOD_LABELS.get(method, method))}, '
            f"bits of log₂ P(word): {swatches} blue: the word raised P(word), red: lowered it</div>")


def text_span(sa: SentenceAnalysis, target: int, around: int = 1, min_tokens: int | None = None) -> tuple[int, int]:
    """The tokens ``(first, end)`` of a long passage worth showing for row ``target``: from ``around``
    sentences before the oldest word the row may attend to (or its own sentence) to ``around`` sentences
    after its own, whole sentences. Every token when the text has at most ``min_tokens`` (default
    :data:`WINDOW_ROWS`)."""
    n = len(sa.tokens)
    if n <= (min_tokens or WINDOW_ROWS) or not sa.boundaries:
        return 0, n
    ends = [b + 1 for b in sa.boundaries] + [n]  # a sentence ends after its boundary token
    starts = [0] + ends[:-1]
    sentence = sa.sentence_of()  # [T]: row i predicts token i, so it is token i's sentence too
    own = int(sentence[target])
    held = [sa.slot_token(int(j)) for j in np.flatnonzero(sa.allowed()[target])] if sa.attention is not None else []
    words = [i for i in held if i >= 0]  # the tokens the row may attend to
    oldest = int(sentence[min(words)]) if words else own
    lo, hi = max(0, min(oldest, own) - around), min(len(ends) - 1, own + around)
    return starts[lo], ends[hi]


def sentence_strip_html(sa: SentenceAnalysis, selected: int | None = None, span: tuple[int, int] | None = None) -> str:
    """Each predicted word as a chip with its probability; the bar under it is coloured by surprisal.

    Colour: :data:`SCHEME` over ``[0, SURPRISAL_MAX_BITS]`` bits (brighter = more
    surprising). ``selected`` (a target row) is outlined; ``span`` ``(first, end)`` shows the
    words of those tokens only (:func:`text_span`). All text is escaped.
    """
    words = list(sa.tokens) + ["</s>"]
    first, end = span if span is not None else (0, len(sa.tokens))
    chips = [] if first == 0 else ['<span class="vz-chip" style="color:#666" title="earlier words left out">…</span>']
    for r in range(first, len(sa.targets) if end == len(sa.tokens) else end):
        word = words[r] if r < len(words) else sa.targets[r]
        p, s = float(sa.probs[r]), float(sa.surprisal[r])
        colour = palette(s, 0.0, SURPRISAL_MAX_BITS)
        unk = r < len(sa.unk) and sa.unk[r]
        top = ", ".join(f"{w} {format_prob(float(q))}" for w, q in zip(sa.top_words[r][:3], sa.top_probs[r][:3]))
        tip = f"P({sa.targets[r]}) = {format_prob(p)} · surprisal {s:.2f} bits" + (f" · top: {top}" if top else "")
        if unk:
            tip += f" · {UNK_TITLE}"
        style = (
            "display:inline-flex;flex-direction:column;align-items:center;margin:2px;padding:2px 5px 0;"
            f"border-radius:4px;background:#f6f6f6;border-bottom:5px solid {colour};"
        )
        if r == selected:
            style += f"outline:2px solid {SELECTED_COLOUR};"
        word_style = f"text-decoration:underline dashed {SELECTED_COLOUR};text-underline-offset:3px;" if unk else ""
        if r == len(sa.targets) - 1 or sa.norms[r] == BOUNDARY:
            word_style += "color:#666;font-size:0.85em;"
        chips.append(
            f'<span class="vz-chip{" vz-unk" if unk else ""}" data-index="{r}" style="{style}" title="{_esc(tip)}">'
            f'<span style="{word_style}">{_esc(word)}</span>'
            f'<span style="font-size:0.7em;color:#555">{format_prob(p)}</span></span>'
        )
    if end < len(sa.tokens):
        chips.append('<span class="vz-chip" style="color:#666" title="later words left out">…</span>')
    return f'<div class="vizlm-strip" style="line-height:1.3">{"".join(chips)}</div>'


def attention_key_html(weights: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9)) -> str:
    """A colour key for :func:`highlighted_html`: a swatch per weight, coloured the same way."""
    swatches = "".join(
        f'<span style="{_SPAN}background:{highlight_colour(w)};color:{text_colour(highlight_colour(w))};'
        f'min-width:2.4em;text-align:center">{w:.1f}</span>'
        for w in weights
    )
    return (f'<div class="vizlm-key" style="font-size:0.8em;color:#555">attention weight {swatches}'
            f' <span style="{_MARKER}">outlined</span> = the predicted word</div>')


def legend_html(models: list[str]) -> str:
    """A one-line colour key for charts that colour models in order (:func:`_categorical`)."""
    items = "".join(
        f'<span style="margin-right:1.2em"><span style="display:inline-block;width:.8em;height:.8em;border-radius:50%;'
        f'background:{colour};margin-right:.35em;vertical-align:middle"></span>{_esc(m)}</span>'
        for m, colour in zip(models, categorical(len(models))))
    return f'<div style="font-size:.9em;color:#444">{items}</div>'
