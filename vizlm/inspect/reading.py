"""How a checkpoint reads a text: its rows and slots, its context, the pieces it reads from a zero state.

Rows and slots. The model reads ``<s> w_1 .. w_n`` and predicts ``w_1 .. w_n </s>``:
row ``r`` (0-based) predicts ``targets[r]``. Memory slot 0 is the start state
``h_0`` (shown as ``<s>``); slot ``j >= 1`` is the output after reading input ``j``,
i.e. ``<s>`` for ``j = 1`` and word ``w_{j-1}`` for ``j >= 2``. Row ``r`` may attend
to slots ``0..r``: when predicting ``w_{r+1}`` the current word ``w_r`` is the query,
and the memory holds the words before it.

Passages. The sentences of a passage are joined by a boundary token ``</s>`` (norm and
surface ``</s>``), so the layout above holds for the whole text: ``w_1 .. w_n`` are the words
of every sentence with a ``</s>`` between two sentences, and each sentence predicts its words
and its ``</s>``, as :func:`vizlm.modeling.evaluate.score_documents` charges them. How a checkpoint
reads it is its ``context`` (:data:`READINGS`): a **document** checkpoint reads the passage as
running text (``<s> s_1 </s> s_2 </s> ...``, :func:`vizlm.data.batches.document_tokens`), its state
and memory crossing the boundaries (its window still limits each row); a **sentence**
checkpoint reads each sentence alone from a zero state, so a row attends to its own sentence only:
sentence ``k`` has rows and slots ``f_k .. f_{k+1} - 1`` (``f_k``: the row after its boundary), laid
out as a sentence alone shifted by ``f_k``. Its slot ``f_k`` is its zero start state (``<s>``; the
last word of the sentence before is read but never a memory slot), slot ``f_k + 1`` the output after
reading its ``<s>`` (the boundary), so the attention matrix is block diagonal, square blocks
(:meth:`vizlm.inspect.analysis.SentenceAnalysis.allowed`). A document of a passage (after a blank line)
starts the same way.

Self-attention (a Transformer, :mod:`vizlm.models.transformer`) reads the words read so far, the
word just read included, and has no zero start state: its slot ``j`` is input ``j`` itself (``<s>``
for ``j = 0``, ``w_j`` for ``j >= 1``), and row ``r`` attends to slots ``0..r``, its own input
last. The rows, the causal rule and the pieces are the same; what a slot holds moves one step
(:attr:`RowLayout.self_attention`), and so do its label, its word and its distance.

:class:`RowLayout` holds these rules for an analysed text (:class:`vizlm.inspect.analysis.SentenceAnalysis`
mixes it in); :func:`pieces_of` cuts a text into the pieces a model reads from a zero state and
:class:`Pieces` gathers their rows and slots back into the text's.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from vizlm.core.errors import InputError
from vizlm.data.batches import collate
from vizlm.data.tagger import tag_sentences
from vizlm.data.vocab import BOS, EOS
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.models.base import device_of

READINGS = {  # a checkpoint's config.context -> how it reads a text of several sentences
    "sentence": "reads each sentence alone, from a zero state: its attention stays inside the sentence",
    "document": "reads the text as running text: its state and memory cross sentence boundaries",
}
BOUNDARY = EOS  # the token between two sentences of a passage (norm and surface)
BOUNDARY_TAG = "."  # its POS tag: Brown's tag of sentence-final punctuation


def split_at_boundaries(norms: list[str]) -> list[list[str]]:
    """The sentences of a passage's tokens (split at the ``</s>`` between two sentences)."""
    out: list[list[str]] = [[]]
    for w in norms:
        if w == BOUNDARY:
            out.append([])
        else:
            out[-1].append(w)
    return out


def tag_passage(sentences: list[list[str]]) -> list[str] | None:
    """POS tags of a passage's tokens: every sentence tagged alone (:func:`vizlm.data.tagger.tag_sentences`),
    :data:`BOUNDARY_TAG` at the boundaries; None when the tagger has nothing to say."""
    tags = tag_sentences(sentences)
    return None if tags is None else join_sentences(tags, BOUNDARY_TAG)


def join_sentences(sentences: list[list], boundary) -> list:
    """One list of the sentences' items with ``boundary`` between two sentences."""
    out: list = []
    for i, s in enumerate(sentences):
        if i:
            out.append(boundary)
        out.extend(s)
    return out


def first_tokens(sentences: list[list], limit: int) -> list[list]:
    """The sentences cut to their first ``limit`` tokens in all (the last one kept may be cut)."""
    out, left = [], limit
    for s in sentences:
        if left <= 0:
            break
        out.append(s[:left])
        left -= len(s)
    return out


def text_layout(sentences: list[list[str]], ends: set[int]) -> tuple[str, list[tuple[int, int]]]:
    """A text of the sentences' tokens, a sentence a line and a blank line after the sentences
    ``ends`` (the documents' ends), and the tokens' spans: a boundary is an empty span at the end
    of its line."""
    lines, spans, pos = [], [], 0
    for i, sentence in enumerate(sentences):
        if i:
            spans.append((pos, pos))
            gap = "\n\n" if i in ends else "\n"
            lines.append(gap)
            pos += len(gap)
        for k, w in enumerate(sentence):
            if k:
                lines.append(" ")
                pos += 1
            spans.append((pos, pos + len(w)))
            lines.append(w)
            pos += len(w)
    return "".join(lines), spans


def joined_spans(offsets: list[list[tuple[int, int]]]) -> list[tuple[int, int]]:
    """The sentences' spans as one list, a boundary an empty span where the previous token ends."""
    out: list[tuple[int, int]] = []
    for i, spans in enumerate(offsets):
        if i:
            out.append((out[-1][1],) * 2 if out else (0, 0))
        out.extend(tuple(x) for x in spans)
    return out


def spaced_offsets(surfaces: list[str]) -> list[tuple[int, int]]:
    """Character spans of tokens joined by single spaces."""
    out, pos = [], 0
    for s in surfaces:
        out.append((pos, pos + len(s)))
        pos += len(s) + 1
    return out


@dataclass
class Pieces:
    """How a model reads a text (its ``context``): the pieces it reads from a zero state, each
    ``<s>`` then its tokens, right-padded into a batch. Document context: one piece, the whole
    text as running text (a boundary is read as ``</s>``); sentence context: one piece per sentence.
    Row ``i`` of piece ``b`` is the text's row ``first[b] + i`` and its slot ``j`` the text's slot
    ``first[b] + j``: its zero start state is the piece's own start slot ``first[b]``."""

    inputs: torch.Tensor  # (B, Tb) token ids, <s> first
    targets: torch.Tensor  # (B, Tb) predicted ids, 0 = padding
    first: list[int]  # [B] the text's row of each piece's first row
    rows: list[int]  # [B] rows of each piece: its tokens + 1

    def gather_rows(self, x: torch.Tensor) -> torch.Tensor:
        """The text's rows of a per-piece tensor: (B, Tb, ...) -> (T, ...)."""
        if len(self.rows) == 1:  # running text: one piece, no copy (its logits are 16 MB)
            return x[0, : self.rows[0]]
        return torch.cat([x[b, :n] for b, n in enumerate(self.rows)])

    def gather_slots(self, x: torch.Tensor) -> torch.Tensor:
        """The text's (row, slot) matrix of per-piece ones: (B, Tb, Sb, ...) -> (T, T, ...), block diagonal, zero
        between the pieces (a row of a sentence read alone cannot attend to another sentence)."""
        if len(self.rows) == 1:
            return x[0, : self.rows[0], : self.rows[0]]
        T = sum(self.rows)
        out = x.new_zeros(T, T, *x.shape[3:])
        for b, (f, n) in enumerate(zip(self.first, self.rows)):
            out[f : f + n, f : f + n] = x[b, :n, :n]
        return out

    def scatter_rows(self, rows: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        """(B, Tb, 1) bool: the pieces' rows that are the text's ``rows``."""
        want = torch.zeros(like.shape[0], like.shape[1], 1, dtype=torch.bool, device=like.device)
        for r in rows:
            b = int(np.searchsorted(self.first, r, side="right")) - 1
            want[b, r - self.first[b]] = True
        return want


def context_of(ckpt: Checkpoint) -> str:
    """How ``ckpt`` reads text: ``"sentence"`` or ``"document"`` (:data:`READINGS`)."""
    return getattr(ckpt.model.config, "context", "sentence")


def piece_words(norms: list[str], restarts: list[int]) -> list[tuple[int, list[str]]]:
    """``(first row, words)`` of each piece read from a zero state: ``norms`` cut at the boundaries ``restarts``
    (token indices; the boundary ends its piece as ``</s>`` does)."""
    cuts = [-1, *restarts, len(norms)]
    return [(a + 1, norms[a + 1 : b]) for a, b in itertools.pairwise(cuts)]


def pieces_of(ckpt: Checkpoint, norms: list[str], restarts: list[int]) -> Pieces:
    """The pieces read from a zero state (:func:`piece_words`), batched."""
    pieces = [words for _, words in piece_words(norms, restarts)]
    inputs, targets = collate([ckpt.vocab.encode(p) for p in pieces])  # (B, Tb) each
    rows = [len(p) + 1 for p in pieces]
    first = [sum(rows[:b]) for b in range(len(rows))]
    device = device_of(ckpt.model)  # the model's: the results come back to the CPU (vizlm.inspect.analysis)
    return Pieces(inputs.to(device), targets.to(device), first, rows)


def attention_mask(attention: np.ndarray) -> np.ndarray:
    """[T, S] True where row ``r`` could attend to slot ``j``.

    Causal: ``j <= r``. Windowed models (Daniluk et al. 2017) give exact zeros to
    slots that left the window, always a prefix of the row (``band_to_slots``), so
    leading exact zeros are masked too; a softmax over finite scores is never 0. A row
    of zeros had no slot at all (AMSRN without the start slot, first row): all masked.
    """
    a = np.asarray(attention, dtype=float)
    T, S = a.shape
    slots = np.arange(S)[None, :]  # (1, S)
    mask = slots <= np.arange(T)[:, None]  # (T, S) causal
    finite = np.isfinite(a)
    nonzero = finite & (a != 0) & mask  # (T, S)
    first = np.where(nonzero.any(1), nonzero.argmax(1), S)  # (T,) the first slot with weight (S: none)
    return mask & finite & (slots >= first[:, None])


class RowLayout:
    """The rows and slots of a text read in a model's context (the module docstring): what each row reads
    and may attend to, where the readings restart. A mixin of :class:`vizlm.inspect.analysis.SentenceAnalysis`,
    read from its fields: ``tokens``, ``norms`` [n], ``targets`` [T], ``context`` and ``breaks``."""

    tokens: list[str]  # [n] surface forms
    norms: list[str]  # [n] what the model read (normalised)
    targets: list[str]  # [T] predicted words: norms + ["</s>"]
    context: str  # how the model read the text (READINGS)
    breaks: list[int]  # boundaries that end a document (a blank line)
    self_attention: bool = False  # slot j is input j (a Transformer), not the state after input j - 1

    @property
    def shift(self) -> int:
        """How many steps a slot's word trails its row's word at the diagonal: 1 for recurrent attention (slot
        ``j`` holds the state after input ``j - 1``), 0 for self-attention (slot ``j`` is input ``j``)."""
        return 0 if self.self_attention else 1

    def slot_number(self, slot: int) -> int:
        """The number a view writes before slot ``slot``'s word: the slot itself, or with self-attention (slot ``j``
        is input ``j``) ``j + 1``, the number of the recurrent slot that holds that input, so the attention axes,
        the attribution's positions and the targets count alike."""
        return slot + 1 - self.shift

    @property
    def input_labels(self) -> list[str]:
        """[T] the word read at each step, the attention query of its row: ``<s>``, then the tokens; a
        boundary is ``</s>`` in running text, the next sentence's (document's) ``<s>`` where the reading
        starts afresh (:attr:`restarts`)."""
        restarts = set(self.restarts)
        return [BOS] + [(BOS if i in restarts else BOUNDARY) if w == BOUNDARY else w
                        for i, w in enumerate(self.norms[: len(self.targets) - 1])]

    @property
    def slot_labels(self) -> list[str]:
        """[S] label of each memory slot: ``<s>`` for the start slots (:attr:`start_slots`) and slot 1,
        else the word read at the step before (:attr:`input_labels`); with self-attention, the word read at
        the slot's own step."""
        if self.self_attention:
            return list(self.input_labels)
        labels = [BOS] + self.input_labels[:-1]
        for j in self.start_slots:
            labels[j] = BOS
        return labels

    @property
    def start_slots(self) -> list[int]:
        """The zero start state of each reading: slot 0, and after each restart ``b`` slot ``b + 1``,
        numbered as the reading's first row (:meth:`first_rows`). Self-attention has none: its first slot
        is the ``<s>`` it read."""
        if self.self_attention:
            return []
        return [0] + [b + 1 for b in self.restarts]

    @property
    def boundaries(self) -> list[int]:
        """Token indices of the sentence boundaries (``</s>`` between two sentences), in order."""
        return [i for i, w in enumerate(self.norms) if w == BOUNDARY]

    @property
    def restarts(self) -> list[int]:
        """The boundaries after which the model reads from a zero state (:meth:`restarts_after`)."""
        return [i for i in range(len(self.norms)) if self.restarts_after(i)]

    def restarts_after(self, i: int) -> bool:
        """Whether the model reads from a zero state after token ``i``: after every boundary in sentence
        context, after the ends of documents (:attr:`breaks`) in running text."""
        return self.norms[i] == BOUNDARY and (self.context == "sentence" or i in self.breaks)

    def sentence_of(self) -> np.ndarray:
        """[T] the sentence each row belongs to (0-based): the row predicting a boundary ends its sentence."""
        rows = np.arange(len(self.targets))
        return np.searchsorted(np.asarray(self.boundaries, dtype=int), rows, side="left")

    def first_rows(self) -> np.ndarray:
        """[T] the first row of each row's reading: the row that predicts the first word of its sentence
        (sentence context) or document (running text) (:attr:`restarts`); it is also the row's start slot."""
        first = np.zeros(len(self.targets), dtype=int)
        for b in self.restarts:
            first[b + 1 :] = b + 1
        return first

    def target_index(self, target: int | str) -> int:
        """The row of a predicted word: an index (negative counts from the end, as in a list) or the word
        itself (its first occurrence among the tokens, then among the normalised words)."""
        T = len(self.targets)
        if isinstance(target, str):
            for words in (self.tokens, self.norms, self.targets):
                if target in words:
                    return list(words).index(target)
            shown = ", ".join(repr(t) for t in self.tokens[:12]) + (", ..." if len(self.tokens) > 12 else "")
            raise InputError(f"{target!r} is not a word of this text ({shown})")
        if isinstance(target, bool) or not isinstance(target, numbers.Integral) or not -T <= int(target) < T:
            raise InputError(f"target must be a word of the text or a word number from 0 to {T - 1}, not {target!r}")
        return int(target) % T

    def current_word(self, row: int) -> str:
        """The word read when predicting row ``row`` (the attention query)."""
        return self.input_labels[row]

    def slot_offsets(self) -> np.ndarray:
        """[T, S] how many words back each slot's word is from each row's word just read: ``r + 1 - j`` (1 =
        the newest slot), ``r - j`` with self-attention (0 = the word just read); a reading's start slot is
        numbered as its first row, so it counts from the reading's start."""
        T = len(self.targets)
        return np.arange(T)[:, None] + self.shift - np.arange(T)[None, :]  # (T, S)

    def readable(self) -> np.ndarray:
        """[T, S] the slots each row's reading holds: its start slot and every later one up to slot ``r``,
        of its sentence (sentence context) or document (running text): block diagonal where it restarts."""
        T = len(self.targets)
        rows, slots = np.arange(T)[:, None], np.arange(T)[None, :]
        return (slots <= rows) & (slots >= self.first_rows()[:, None])  # (T, S) causal, from the reading's start slot
