"""Normalisation and tokenisation shared by corpora and user text.

One normalisation is applied to every token the models ever see, whether it came
from a corpus file or from a sentence typed into the app: Unicode NFKC, lowercase,
and numbers mapped to ``N`` (as in Mikolov's Penn Treebank LM data).

The free-text tokenizer splits punctuation the way the Brown corpus does: quotes
become ````/``''``, sentence punctuation is split off, but word-internal
apostrophes and hyphens stay (Brown keeps ``didn't`` and ``Atlanta's`` whole) and
known abbreviations keep their period (``Mr.``, ``U.S.``). Every token keeps its
character offsets into the original string so the app can highlight the text the
user typed.

Text from outside (a sentence typed in the app or given with ``--text``, a line of a
``--text-file``) first goes through :func:`clean_text`, which replaces what no output
format can hold or show safely (control characters, bidirectional controls such as
U+202E, noncharacters, lone surrogates) character for character, so offsets stay valid
and nothing unsafe reaches a renderer, a terminal or a file.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

NUMBER = "N"
MAX_TOKENS = 400  # tokens of one text the models read at once; longer texts are cut or split
_NUMBER_RE = re.compile(r"[-+]?\d[\d.,:/\-]*(?:s|st|nd|rd|th)?")
# Characters peeled off the edges of a whitespace-separated chunk.
_EDGE_PUNCT = set("\"'`“”‘’«»()[]{}<>,;:!?.…—–")
_SPLIT_INSIDE = re.compile(r"(--|—|–|…|\.\.\.)")
# Runs of CJK characters have no spaces: each character is its own token.
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"  # Chinese characters (CJK ideographs)
_HAN_RE = re.compile(f"[{_HAN}]")
_CJK_RE = re.compile(f"[\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\uff00-\uffef{_HAN}]")
DEFAULT_ABBREVIATIONS = frozenset(
    "mr. mrs. ms. dr. st. jr. sr. co. inc. ltd. corp. u.s. u.n. etc. vs. no. fig. "
    "p.m. a.m. mt. gen. gov. sen. rep. rev. prof. lt. col. capt. sgt. jan. feb. "
    "mar. apr. aug. sept. sep. oct. nov. dec. ft. e.g. i.e.".split()
)


# What XML 1.0, HTML and CSV cannot carry: C0 controls but tab, newline and carriage
# return; DEL and the C1 controls; Unicode noncharacters (U+FDD0..U+FDEF and the last two
# code points of every plane, e.g. U+FFFE); and lone surrogates, which is how invalid
# UTF-8 in argv or a file read with ``surrogateescape`` arrives. Also the bidirectional
# controls (U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069): a right-to-left
# override in a word would show the words, cells and lines after it reversed in a terminal,
# a spreadsheet or a page (the "Trojan Source" display attack), so they never reach an output.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE_RE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufdd0-\ufdef\ud800-\udfff" + BIDI_CONTROLS
    + "".join(f"{chr(plane * 0x10000 + 0xFFFE)}{chr(plane * 0x10000 + 0xFFFF)}" for plane in range(17))
    + "]"
)


def _replacement(m: re.Match) -> str:
    return "\ufffd" if "\ud800" <= m.group() <= "\udfff" else " "


def clean_text(text: str) -> str:
    """``text`` with every character no output format can hold replaced, one for one.

    Control characters (but ``\\t \\n \\r``), bidirectional controls and noncharacters become a space, lone
    surrogates (invalid UTF-8 decoded with ``surrogateescape``) become U+FFFD. The
    result has the same length, so character offsets into it are offsets into ``text``.

    >>> clean_text("a\\x00b\\x1bc\\ufffe\\udcff")
    'a b c \ufffd'
    """
    return _UNSAFE_RE.sub(_replacement, text) if _UNSAFE_RE.search(text) else text


_LAST_SPACE_RE = re.compile(r"\s\S*\Z")


def cut_point(text: str, limit: int) -> int:
    """Where to cut ``text`` so the head has at most ``limit`` characters and splits no word:
    just after the last whitespace before ``limit`` (``len(text)`` when it is short enough).
    A head that would keep less than half of ``limit`` (one huge word) is cut at ``limit``."""
    if len(text) <= limit:
        return len(text)
    if text[limit].isspace():
        return limit
    m = _LAST_SPACE_RE.search(text, 0, limit)  # ``\Z`` matches at ``limit`` here
    return m.start() + 1 if m and m.start() + 1 >= limit // 2 else limit


def normalize(token: str) -> str:
    """The one normalisation: NFKC, lowercase, numbers -> ``N``."""
    token = unicodedata.normalize("NFKC", token).lower()
    if _NUMBER_RE.fullmatch(token):
        return NUMBER
    return token


def normalizer(lowercase: bool = True, numbers: bool = True):
    """How a model reads a typed word: NFKC, then lowercased and a number read as ``N`` (vizlm's rule,
    :func:`normalize`), or, for a model trained elsewhere on a vocabulary with capitals or digits, the
    word with its case (``lowercase=False``) and its digits (``numbers=False``)."""
    if lowercase and numbers:
        return normalize

    def read(token: str) -> str:
        token = unicodedata.normalize("NFKC", token)
        if lowercase:
            token = token.lower()
        return NUMBER if numbers and _NUMBER_RE.fullmatch(token.lower()) else token

    return read


def reading_of(words: list[str]) -> dict:
    """How typed text is read for a model of these ``words`` (``imported.reading`` or ``corpus.reading`` in its
    config.json, :func:`vizlm.modeling.checkpoint.meta_reader`): lowercased only when no word has a capital (``N``, PTB's number,
    aside), numbers read as ``N`` only when ``N`` is a word and no word has a digit. WikiText keeps case and
    digits ("The", "1"), PTB has neither ("the", "N")."""
    cased = any(w != w.lower() for w in words if w != NUMBER and not (w.startswith("<") and w.endswith(">")))
    digits = any(ch.isdigit() for w in words for ch in w)
    return {"lowercase": not cased, "numbers": NUMBER in words and not digits}


@dataclass(frozen=True)
class Token:
    """A token of user text: its surface form, normalised form and offsets."""

    text: str  # as typed (possibly rewritten quote, e.g. `` for ")
    norm: str  # what the model reads
    start: int  # character offset into the original string
    end: int


def _quote(ch: str, opening: bool) -> str:
    if ch in "\"“”«»":
        return "``" if opening else "''"
    if ch in "'‘’`":
        return "`" if opening else "'"
    return ch


def _split_chunk(chunk: str, start: int, abbreviations: frozenset[str]) -> list[tuple[str, int, int]]:
    """Split one whitespace-free chunk into (surface, start, end) pieces."""
    out: list[tuple[str, int, int]] = []
    # CJK characters and inner dashes/ellipses break a chunk into parts first.
    parts: list[tuple[str, int]] = []
    pos = 0
    for m in re.finditer(_CJK_RE.pattern + "|" + _SPLIT_INSIDE.pattern, chunk):
        if m.start() > pos:
            parts.append((chunk[pos : m.start()], start + pos))
        parts.append((m.group(0), start + m.start()))
        pos = m.end()
    if pos < len(chunk):
        parts.append((chunk[pos:], start + pos))
    for text, s in parts:
        if _CJK_RE.fullmatch(text) or _SPLIT_INSIDE.fullmatch(text):
            out.append((text, s, s + len(text)))
            continue
        lead: list[tuple[str, int, int]] = []
        trail: list[tuple[str, int, int]] = []
        i, j = 0, len(text)
        while i < j and text[i] in _EDGE_PUNCT:
            lead.append((_quote(text[i], True), s + i, s + i + 1))
            i += 1
        while j > i and text[j - 1] in _EDGE_PUNCT:
            core = text[i:j]
            if text[j - 1] == "." and (core.lower() in abbreviations or re.fullmatch(r"(?:[A-Za-z]\.)+", core)):
                break  # "Mr." and "U.S." keep their period, as in Brown
            if text[j - 1] in "'’" and core[:-1].lower().endswith("s") and len(core) > 2 and not lead:
                break  # plural possessive: "taxpayers'" is one Brown token
            trail.append((_quote(text[j - 1], False), s + j - 1, s + j))
            j -= 1
        out.extend(lead)
        if j > i:
            out.append((text[i:j], s + i, s + j))
        out.extend(reversed(trail))
    return out


def tokenize(text: str, abbreviations: frozenset[str] = DEFAULT_ABBREVIATIONS) -> list[Token]:
    """Tokenise free text like the Brown corpus, keeping character offsets.

    >>> [t.norm for t in tokenize('He said "it costs $5." Mr. Lee didn\\'t.')]
    ['he', 'said', '``', 'it', 'costs', '$5', '.', "''", 'mr.', 'lee', "didn't", '.']
    """
    tokens: list[Token] = []
    for m in re.finditer(r"\S+", text):
        for surface, s, e in _split_chunk(m.group(0), m.start(), abbreviations):
            tokens.append(Token(surface, normalize(surface), s, e))
    return tokens


_LINE_END_RE = re.compile(r"\r\n|\r|\n")  # what ends a line of a text file read in text mode
# Latin: . ! ? then space and a capital, digit or opening quote. Chinese: 。！？ end a sentence
# wherever they stand (no space or capital follows in Chinese), with their closing quotes.
_SENTENCE_END_RE = re.compile(r"[.!?]['\"”’)]*\s+(?=[\"“‘'(]?[A-Z0-9])|[。！？]+[」』”’）)]*\s*")


def _lines(text: str):
    """``(start, end)`` of every line of ``text``, without its line break."""
    start = 0
    for m in _LINE_END_RE.finditer(text):
        yield start, m.start()
        start = m.end()
    yield start, len(text)


def _line_sentences(text: str, lo: int, hi: int) -> list[tuple[int, int]]:
    """Sentence spans of the line ``text[lo:hi]``: . ! ? before a capital, digit or opening quote, and
    Chinese 。！？ anywhere (:data:`_SENTENCE_END_RE`)."""
    spans: list[tuple[int, int]] = []

    def add(a: int, b: int) -> None:
        piece = text[a:b]
        lead, core = len(piece) - len(piece.lstrip()), piece.strip()
        if core:
            spans.append((a + lead, a + lead + len(core)))

    start = lo
    for m in _SENTENCE_END_RE.finditer(text, lo, hi):
        words = text[start : m.end()].split()
        last_word = words[-1].lower() if words else ""
        if last_word in DEFAULT_ABBREVIATIONS or re.fullmatch(r"(?:[a-z]\.)+", last_word):
            continue
        add(start, m.end())
        start = m.end()
    add(start, hi)
    return spans


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the sentences of ``text``, blanks stripped.

    A line break ends a sentence (text is one paragraph or sentence a line, as ``--text-file``
    reads it), and so do . ! ? followed by space and a capital, digit or opening quote, and
    Chinese 。！？ (with their closing quotes) wherever they stand. Deliberately simple;
    abbreviations such as "Mr." do not end a sentence.
    """
    return [span for lo, hi in _lines(text) for span in _line_sentences(text, lo, hi)]


def han_share(tokens: list[str]) -> float:
    """The share of ``tokens`` that are Chinese characters (0 without tokens): a text mostly of them
    is Chinese, and a model trained on English reads it as ``<unk>``."""
    return sum(bool(_HAN_RE.fullmatch(t)) for t in tokens) / max(1, len(tokens))


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (:func:`sentence_spans`)."""
    return [text[s:e] for s, e in sentence_spans(text)]


def passage_documents(text: str) -> list[list[list[Token]]]:
    """The documents of ``text``, each its sentences (:func:`sentence_spans`), each its tokens with
    offsets into ``text``: a blank line ends a document, as in a ``--text-file``. Sentences without
    a token are left out, and so are documents without a sentence."""
    docs: list[list[list[Token]]] = [[]]
    for lo, hi in _lines(text):
        if not text[lo:hi].strip():
            if docs[-1]:
                docs.append([])
            continue
        for s, e in _line_sentences(text, lo, hi):
            toks = [Token(t.text, t.norm, t.start + s, t.end + s) for t in tokenize(text[s:e])]
            if toks:
                docs[-1].append(toks)
    return [d for d in docs if d]


def passage_sentences(text: str) -> list[list[Token]]:
    """The sentences of every document of ``text`` (:func:`passage_documents`), in order."""
    return [s for d in passage_documents(text) for s in d]


def token_row(text: str, start: int) -> int:
    """The row of the analysis of ``text`` that predicts its first token at or after character ``start``:
    that token's index in the reading, its sentences' tokens (:func:`passage_sentences`) with a ``</s>``
    after each. Counted on the text as it is read, not on the words it was made from (a corpus sentence
    written out and read again can have more tokens: ``Reps.`` is read as ``Reps`` ``.``)."""
    row = 0
    for sentence in passage_sentences(text):
        for token in sentence:
            if token.start >= start:
                return row
            row += 1
        row += 1  # its </s>
    return row


def detokenize(words: list[str]) -> str:
    """A corpus sentence's original tokens as readable text that :func:`tokenize` reads back as
    the same tokens: space-separated, spaces inside a token written ``_`` in the corpus files
    restored, and the corpus's ````/``''`` quote tokens written as ``"`` glued to their word."""
    out: list[str] = []
    opening = False
    for w in words:
        if w == "``":
            opening = True  # glued to the next word: "Nobody
        elif w == "''" and out:
            out[-1] += '"'  # glued to the previous word: evacuate."
        else:
            out.append(('"' if opening else "") + w.replace("_", " "))
            opening = False
    return " ".join(out)
