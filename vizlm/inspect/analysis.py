"""Text analysis: the one computation path behind the CLI, the app and the tests.

:func:`analyze` runs a checkpoint on free text, a sentence or a passage of several
sentences (:func:`analyze_sentences` on consecutive corpus sentences, :func:`analyze_tokens`
on one), and returns a :class:`SentenceAnalysis`: per predicted word its probability,
surprisal and top predictions, the attention row over memory slots, and AMSRN's selection
gates. Everything is plain numpy, so renderers never touch a model.

Rows and slots, passages and how a checkpoint reads them (its context, :data:`~vizlm.inspect.reading.READINGS`):
:mod:`vizlm.inspect.reading`.

Effects (:mod:`vizlm.models.effects`). For every target of an attention model, the
**read effect** is ``log P(target)`` with the attention read minus without it (``r_t = 0``)
and the **slot effect** of slot ``j`` is ``log P(target)`` minus the same with slot ``j``
dropped and the row renormalised (positive: the slot helped); both are stored in nats and
shown in bits. An attention weight is not an effect: a busy heat map can change the
prediction very little. Those a long text skips: :mod:`vizlm.inspect.effects`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from vizlm.core.errors import InputError, VizlmError
from vizlm.data.vocab import EOS, UNK
from vizlm.data.batches import iter_batches
from vizlm.data.tagger import tag_sentences
from vizlm.data.text import MAX_TOKENS, clean_text, cut_point, passage_documents
from vizlm.inspect.highlight import DEFAULT, ScoreRow, Setting, chosen
from vizlm.inspect.reading import (
    BOUNDARY,
    BOUNDARY_TAG,
    RowLayout,
    attention_mask,
    context_of,
    first_tokens,
    join_sentences,
    joined_spans,
    pieces_of,
    spaced_offsets,
    split_at_boundaries,
    text_layout,
)
from vizlm.modeling.checkpoint import Checkpoint, meta_reader
from vizlm.modeling.evaluate import OVERFLOW_NOTE, perplexity
from vizlm.models import effects as fx
from vizlm.models.base import device_of

# Longer texts are cut, with a note, to keep the app responsive: to MAX_TOKENS tokens
# (vizlm.data.text, where --text-file reading splits at the same length), and before that to
# MAX_TEXT_CHARS characters, so a huge text is never tokenised or tagged as a whole.
# 50 characters a token is far more than English (about 6) or Chinese (1) needs.
MAX_TEXT_CHARS = 50 * MAX_TOKENS
# In top-k mode a slot must still carry this much weight to count as attended: the third-heaviest
# of a row that puts 98% on one slot is not "attended" (and must not be labelled as a case).
MIN_TOP_K_WEIGHT = 0.05
# Weight on slot 0, the zero start state, reads a zero vector: above this share a row's attention is "off".
ATTENTION_OFF = 0.5
LN2 = math.log(2)  # nats per bit
# How far back a word is, in every view (tables, chart axes, the tour): its distance from the predicted word.
DISTANCE_NOTE = ("distance from the predicted word: 1 = the word just before it (the word just read), 2 = the one "
                 "before that (the newest memory slot)")


def head_words(head: tuple[int, int | None], heads: int) -> str:
    """A self-attention view (``(layer, head)`` counted from 0, head None: the mean of the layer's ``heads``) as
    people count: "layer 2, head 1" or "layer 2, mean of 4 heads"."""
    layer, h = head
    return f"layer {layer + 1}, " + (f"mean of {heads} heads" if h is None else f"head {h + 1}")


def view_label(model: str, head: tuple[int, int | None] | None, heads: int) -> str:
    """A model's name with the self-attention view shown (``"transformer · layer 2, head 1"``); the name alone
    for a model without one (``head`` None)."""
    return model if head is None else f"{model} · {head_words(head, heads)}"


def check_head(layers: int, heads: int, layer, head, model: str) -> tuple[int, int | None]:
    """A self-attention view of a model of ``layers`` x ``heads`` (``layer``, ``head`` counted from 0; negative
    numbers count from the end, as in a list; ``head`` None: the layer's mean), checked and counted from 0;
    :class:`InputError` naming what ``model`` has otherwise."""
    for value, count, what in ((layer, layers, "layer"), (head, heads, "head")):
        if value is None and what == "head":
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not -count <= int(value) < count:
            raise InputError(f"{model} has {layers} layer{'s' * (layers != 1)} x {heads} head{'s' * (heads != 1)}: "
                             f"{what} must be a whole number from 0 to {count - 1} (or -1 for the last), not {value!r}")
    return int(layer) % layers, None if head is None else int(head) % heads


def distance(offset):
    """The distance from the predicted word (:data:`DISTANCE_NOTE`) of a word ``offset`` words back from the word
    just read, as the statistics store positions (0: the word just read; 1: the one before, the newest memory slot;
    :meth:`SentenceAnalysis.slot_offsets`): ``offset + 1``. Numbers and arrays alike."""
    return offset + 1
# Slot effects cost one output-layer row (10k words) per (row, slot) pair with weight: a sentence of
# n words has about n^2 / 2 of them for AMSRN and Salton, 5 n for a window of 5. analyze() computes
# them when there are at most this many (AMSRN: about 88 words, ~25 ms on one core); beyond that
# slot_effects is None and vizlm.inspect.effects computes them on demand.
EFFECT_PAIRS = 4_000


class AnalysisError(VizlmError, ValueError):
    """Input that cannot be analysed, with a message meant for the user."""


@dataclass
class Highlight:
    """One memory slot a highlight setting picks (:meth:`SentenceAnalysis.highlighted`) for one target."""

    slot: int
    word: str  # the slot's label ("<s>" for the start slot and slot 1)
    token: int  # index into ``tokens`` of the attended word, -1 for <s>
    weight: float
    effect_bits: float | None = None  # the slot effect in bits (None: not computed)

    def to_dict(self) -> dict:  # dataclasses.asdict deep-copies: 10x slower for a passage's thousand highlights
        return {"slot": self.slot, "word": self.word, "token": self.token, "weight": self.weight,
                "effect_bits": self.effect_bits}


@dataclass
class SentenceAnalysis(RowLayout):
    """One model on one text, a sentence or a passage. ``n`` tokens (the words, and a ``</s>``
    between two sentences); ``T = n + 1`` rows (``</s>`` last); ``S = T`` slots."""

    model: str  # checkpoint label
    text: str  # the text as given
    tokens: list[str]  # [n] surface forms
    norms: list[str]  # [n] what the model read (normalised)
    offsets: list[tuple[int, int]]  # [n] character spans in ``text``
    unk: list[bool]  # [n] outside the vocabulary (read as <unk>)
    targets: list[str]  # [T] predicted words: norms + ["</s>"]
    logprobs: np.ndarray  # [T] natural log P(target)
    top_words: list[list[str]]  # [T][k] most likely next words
    top_probs: np.ndarray  # [T, k]
    attention: np.ndarray | None  # [T, S] rows sum to 1 over slots 0..r
    gates: np.ndarray | None  # [T, d] AMSRN selection gate g1 (None for other models)
    tags: list[str] | None = None  # [n] POS tags (gold for corpus sentences)
    truncated: int = 0  # tokens dropped beyond MAX_TOKENS
    notes: list[str] = field(default_factory=list)
    read_effect: np.ndarray | None = None  # [T] nats: log P(target) with the attention read minus without it
    slot_effects: np.ndarray | None = None  # [T, S] nats: log P(target) minus the same with slot j dropped
    # (row renormalised); 0 where the row cannot attend, NaN where not computed (see analyze_batch)
    context: str = "sentence"  # how the model read the text (READINGS): each sentence alone, or running text
    breaks: list[int] = field(default_factory=list)  # boundaries that end a document (a blank line): every
    # model starts afresh after one
    self_attention: bool = False  # a Transformer's layout: slot j is input j (vizlm.inspect.reading)
    heads: np.ndarray | None = None  # [L, H, T, S] self-attention of every layer and head (None: recurrent)
    head: tuple[int, int | None] | None = None  # (layer, head) ``attention`` shows; head None: the mean over heads
    # (layer, head) -> (read effect [T], slot effects [T, S] or None) of every head and layer's heads, nats
    # (vizlm.models.effects.head_effects); ``read_effect`` and ``slot_effects`` are the shown head's
    head_effects: dict | None = field(default=None, repr=False)

    @property
    def layers(self) -> int:
        """Self-attention layers (0 for recurrent attention and for none)."""
        return 0 if self.heads is None else int(self.heads.shape[0])

    @property
    def heads_per_layer(self) -> int:
        return 0 if self.heads is None else int(self.heads.shape[1])

    def at_head(self, layer: int = -1, head: int | None = None) -> SentenceAnalysis:
        """The same analysis with ``attention`` one self-attention head's (``layer``, ``head``; negative
        numbers count from the end, as in a list) or, with ``head`` None, the mean over the layer's heads
        (rows still sum to 1). Every view then reads that head. Arrays are shared, not copied."""
        if self.heads is None:
            raise InputError(f"{self.model} has no self-attention heads to choose from")
        layer, head = check_head(*self.heads.shape[:2], layer, head, self.model)
        if self.head == (layer, head):
            return self
        attention = self.heads[layer].mean(0) if head is None else self.heads[layer, head]
        read, slots = (self.head_effects or {}).get((layer, head), (None, None))
        return dataclasses.replace(self, attention=attention, head=(layer, head), read_effect=read, slot_effects=slots)

    @property
    def head_label(self) -> str | None:
        """What ``attention`` shows, in words: "layer 2, head 1" or "layer 2, mean of 4 heads" (1-based, as people
        count); None without self-attention."""
        return None if self.head is None else head_words(self.head, self.heads_per_layer)

    @property
    def probs(self) -> np.ndarray:
        return np.exp(self.logprobs)

    @property
    def surprisal(self) -> np.ndarray:
        """[T] bits."""
        return -self.logprobs / math.log(2)

    @property
    def perplexity(self) -> float:
        """Over the predicted tokens; ``inf`` where it overflows (:func:`vizlm.modeling.evaluate.perplexity`)."""
        return perplexity(-float(self.logprobs.sum()), len(self.logprobs))

    @property
    def read_effect_bits(self) -> np.ndarray | None:
        """[T] read effects in bits."""
        return None if self.read_effect is None else self.read_effect / LN2

    @property
    def slot_effect_bits(self) -> np.ndarray | None:
        """[T, S] slot effects in bits."""
        return None if self.slot_effects is None else self.slot_effects / LN2

    def allowed(self) -> np.ndarray | None:
        """[T, S] the (row, slot) pairs each row could attend to: :func:`~vizlm.inspect.reading.attention_mask`
        (the model's window) within :meth:`readable`. Read-only, computed once per attention matrix (a document of
        the Cases gallery has 2,000 rows)."""
        if self.attention is None:
            return None
        memo = self.__dict__.get("_allowed")
        if memo is None or memo[0] is not self.attention:
            mask = attention_mask(self.attention) & self.readable()
            mask.setflags(write=False)
            memo = self.__dict__["_allowed"] = (self.attention, mask)
        return memo[1]

    def effect_rank_correlation(self) -> float | None:
        """Spearman correlation of weight and slot effect over the allowed (row, slot) pairs.

        Near 1: the heavier a slot, the more it helps. None without slot effects, with fewer
        than 3 pairs, or when weights or effects are all equal.
        """
        if self.attention is None or self.slot_effects is None:
            return None
        use = self.allowed() & np.isfinite(self.slot_effects)
        return spearman(self.attention[use], self.slot_effects[use])

    def slot_table(self, row: int, effect_bits: Sequence[float] | None = None, limit: int = 8,
                   setting: Setting = DEFAULT) -> list[dict]:
        """The memory slots worth showing for one predicted word, effect beside weight: the highlighted
        ones and the three with the largest effect, largest effect first (at most ``limit``).

        ``effect_bits`` [S] are the row's slot effects in bits (default: from ``slot_effects``).
        Each entry: slot, word (the slot's label), weight, effect_bits (None if not computed).
        """
        if self.attention is None:
            return []
        if effect_bits is None and self.slot_effects is not None:
            effect_bits = self.slot_effect_bits[row]
        allowed = np.flatnonzero(self.allowed()[row] & (self.attention[row] > 0))

        def effect(j: int) -> float | None:
            return None if effect_bits is None else _finite(effect_bits[j])

        shown = {h.slot for h in self.highlighted(setting, rows=[row])[0]}
        strongest = sorted(allowed, key=lambda j: -abs(effect(j) or 0.0))[:3] if effect_bits is not None else []
        shown |= {int(j) for j in strongest}
        labels = self.slot_labels
        table = [{"slot": j, "word": labels[j], "weight": float(self.attention[row, j]), "effect_bits": effect(j)}
                 for j in sorted(shown)]
        table.sort(key=lambda e: (e["effect_bits"] is None, -abs(e["effect_bits"] or 0.0), -e["weight"]))
        return table[:limit]

    def slot_token(self, slot: int) -> int:
        """Index into ``tokens`` of the word held by ``slot`` (a boundary slot: the ``</s>`` token); -1
        for the <s> slots: 0, 1 and the start slot after a restart (:attr:`start_slots`); with
        self-attention slot ``j`` is input ``j``: -1 for slot 0, else token ``j - 1``."""
        if self.self_attention:
            return slot - 1
        return -1 if slot < 2 or self.restarts_after(slot - 1) else slot - 2

    def score_row(self, row: int) -> ScoreRow:
        """Row ``row``'s attention as the highlight rule reads it (:class:`vizlm.inspect.highlight.Scores`): the
        weights of the slots it could attend to (a weight is its share: a row sums to 1), top-k picks with at
        least :data:`MIN_TOP_K_WEIGHT`."""
        return ScoreRow(np.where(self.allowed()[row], self.attention[row], np.nan), 1.0, MIN_TOP_K_WEIGHT)

    def highlighted(self, setting: Setting = DEFAULT, rows: Sequence[int] | None = None) -> list[list[Highlight]]:
        """Per target (or per row of ``rows``), the slots ``setting`` highlights (:func:`vizlm.inspect.highlight.chosen`
        of :meth:`score_row`), heaviest first.

        The one highlight rule: the heat map's outlines, the running text, the case labels and the
        exports all read it. Computed once per setting for every row and kept with the
        attention (a page view asks for one setting several times); treat the lists as read-only."""
        every = self._all_highlights(setting)
        return every if rows is None else [every[r] for r in rows]

    def _all_highlights(self, setting: Setting) -> list[list[Highlight]]:
        memo = self.__dict__.setdefault("_highlights", {})
        hit = memo.get(setting)
        if hit is not None and hit[0] is self.attention and hit[1] is self.slot_effects:
            return hit[2]
        if self.attention is None:
            out: list[list[Highlight]] = [[] for _ in self.targets]
        else:
            out = self._highlight_rows(setting)
        memo[setting] = (self.attention, self.slot_effects, out)
        return out

    def _highlight_rows(self, setting: Setting) -> list[list[Highlight]]:
        labels = self.slot_labels
        effects = self.slot_effect_bits

        def effect(r: int, j: int) -> float | None:
            value = None if effects is None else float(effects[r, j])
            return value if value is not None and math.isfinite(value) else None

        return [[Highlight(j, labels[j], self.slot_token(j), float(self.attention[r, j]), effect(r, j))
                 for j in chosen(self.score_row(r), setting)] for r in range(len(self.targets))]

    def effect_summary(self) -> dict | None:
        """Sentence-level effects (bits): mean read effect, share of words it moves by more than
        1 bit, and the weight-effect rank correlation. None for a model without attention."""
        if self.read_effect is None:
            return None
        bits = self.read_effect_bits
        return {
            "unit": "bits",
            "read_effect_mean_bits": float(bits.mean()),
            "share_over_1_bit": float((np.abs(bits) > 1).mean()),
            "slot_effects": self.slot_effects is not None,
            "rank_correlation": self.effect_rank_correlation(),
        }


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1, ties sharing their mean rank."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(inverse, weights=ranks) / counts)[inverse]


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman rank correlation (Pearson on tie-averaged ranks); None below 3 values or for a constant."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 3:
        return None
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _build(
    ckpt: Checkpoint,
    norms: list[str],
    logp: torch.Tensor,  # (T, V) log-softmax of the logits for this text, T = n + 1
    attention: torch.Tensor | None,  # (T, S)
    gates: torch.Tensor | None,  # (T, d)
    surfaces: list[str] | None,
    offsets: list[tuple[int, int]] | None,
    text: str | None,
    tags: list[str] | None,
    top_k: int,
    truncated: int,
    read_effect: torch.Tensor | None = None,  # (T,)
    slot_effects: torch.Tensor | None = None,  # (T, S)
    context: str = "sentence",
    breaks: list[int] | None = None,
    heads: torch.Tensor | None = None,  # (L, H, T, S) self-attention
    head_effects: dict | None = None,  # (layer, head) -> (read (T,), slots (T, S) or None), tensors
) -> SentenceAnalysis:
    """One text's rows of a forward pass (on the model's device) -> :class:`SentenceAnalysis` (on the CPU).
    With self-attention ``heads`` (``attention`` None) ``attention`` is the last layer's mean over its heads."""
    logp, attention, gates, read_effect, slot_effects = (
        None if x is None else x.cpu() for x in (logp, attention, gates, read_effect, slot_effects))
    vocab = ckpt.vocab
    surfaces = list(surfaces or norms)
    offsets = offsets or spaced_offsets(surfaces)
    unk = [w not in vocab for w in norms]
    ids = vocab.encode(norms) + [vocab.eos_id]
    lp = logp.gather(1, torch.tensor(ids)[:, None])[:, 0].double().numpy()  # (T,)
    k = min(top_k, logp.shape[1])
    if k:
        top_i = logp.topk(k, dim=-1).indices  # (T, k): log is monotone, no need to exp the whole row
        top_p = logp.gather(1, top_i).double().exp()  # (T, k)
    else:  # corpus statistics: no top predictions
        top_p, top_i = logp.new_zeros(logp.shape[0], 0), torch.zeros(logp.shape[0], 0, dtype=torch.long)
    notes = []
    if truncated:
        words = sum(w != BOUNDARY for w in norms)
        notes.append(_cut_note(words + truncated, words))
    if any(unk):
        notes.append(f"{sum(unk)} word(s) are not in the model's vocabulary and were read as <unk>")
    if not math.isfinite(perplexity(-float(lp.sum()), len(lp))):
        notes.append(OVERFLOW_NOTE)
    sa = SentenceAnalysis(
        model=ckpt.label,
        text=text if text is not None else " ".join(surfaces),
        tokens=surfaces,
        norms=list(norms),
        offsets=[tuple(o) for o in offsets],
        unk=unk,
        targets=[UNK if u else w for w, u in zip(norms, unk)] + [EOS],
        logprobs=lp,
        top_words=[vocab.decode(row) for row in top_i.tolist()],
        top_probs=top_p.numpy(),
        attention=None if attention is None else attention.double().numpy(),
        gates=None if gates is None else gates.double().numpy(),
        tags=list(tags) if tags else None,
        truncated=truncated,
        notes=notes,
        read_effect=None if read_effect is None else read_effect.double().numpy(),
        slot_effects=None if slot_effects is None else slot_effects.double().numpy(),
        context=context,
        breaks=list(breaks or []),
    )
    if heads is not None:
        sa.self_attention, sa.heads = True, heads.cpu().double().numpy()
        if head_effects is not None:
            sa.head_effects = {key: (read.cpu().double().numpy(), None if slots is None else slots.cpu().double().numpy())
                               for key, (read, slots) in head_effects.items()}
        sa = sa.at_head(-1)
    return sa


def _pairs(attention: torch.Tensor, select: torch.Tensor | None = None) -> int:
    """How many slot effects there are to compute: (row, slot) pairs with weight."""
    return int(((attention > 0) if select is None else (attention > 0) & select).sum())


@torch.no_grad()
def analyze_sentences(
    ckpt: Checkpoint,
    sentences: list[list[str]],
    surfaces: list[list[str]] | None = None,
    offsets: list[list[tuple[int, int]]] | None = None,
    text: str | None = None,
    tags: list[list[str]] | None = None,
    top_k: int = 5,
    effects: bool = True,
    max_effect_pairs: int | None = EFFECT_PAIRS,
    max_tokens: int | None = MAX_TOKENS,
    effect_pairs: Callable[[torch.Tensor], torch.Tensor] | None = None,
    documents: list[int] | None = None,
    head: tuple[int, int | None] | None = None,
) -> SentenceAnalysis:
    """Analyse a passage: consecutive tokenised, normalised sentences (e.g. of a corpus document),
    read in the checkpoint's context (:data:`~vizlm.inspect.reading.READINGS`; :mod:`vizlm.inspect.reading` lays out
    the rows).
    ``documents``: sentences per document (:func:`vizlm.modeling.evaluate.score`'s; None: one document);
    every model reads each document from a zero state.

    Only the first ``max_tokens`` tokens are read (None: all; ``truncated`` counts the rest, and a
    note says so). Tokens and text go through :func:`vizlm.data.text.clean_text`. ``surfaces``,
    ``offsets`` and ``tags`` are per sentence like ``sentences``; without ``text`` the text is the
    sentences' surfaces, a sentence a line, a blank line between documents. With ``effects`` an attention model's read effects are
    computed (one more head call), and its slot effects when there are at most ``max_effect_pairs``
    pairs (None: always); ``effect_pairs`` maps the attention (B, T, S) of the pieces read to the
    pairs wanted (the others are NaN), as in :func:`analyze_batch`. A Transformer's effects are computed for every
    layer and head, or with ``head`` ((layer, head), head None: the layer's heads together) for that view alone,
    which the analysis then shows (:meth:`SentenceAnalysis.at_head`).
    """
    total = sum(map(len, sentences))
    if not total:
        raise AnalysisError("nothing to analyse: the text has no words")
    if max_tokens is not None:
        sentences = first_tokens(sentences, max_tokens)
        surfaces, offsets, tags = (None if xs is None else [x[: len(s)] for x, s in zip(xs, sentences)]
                                   for xs in (surfaces, offsets, tags))
    truncated = total - sum(map(len, sentences))
    ends = [e for e in itertools.accumulate(documents or []) if e < len(sentences)]  # documents' last sentences
    norms = join_sentences([[clean_text(w) for w in s] for s in sentences], BOUNDARY)
    surface = join_sentences([[clean_text(w) for w in s] for s in (surfaces or sentences)], BOUNDARY)
    boundaries = [i for i, w in enumerate(norms) if w == BOUNDARY]
    breaks = [boundaries[e - 1] for e in ends]  # the boundary after a document's last sentence
    laid_out, spans = text_layout(split_at_boundaries(surface), set(ends))
    if text is None:  # a sentence a line, a blank line between documents
        text = laid_out
    elif offsets:
        spans = joined_spans(offsets)
    context = context_of(ckpt)
    rd = pieces_of(ckpt, norms, boundaries if context == "sentence" else breaks)
    model = ckpt.model
    heads = None
    if getattr(model, "self_attention", False):
        h, heads = model.encode_with_attention(rd.inputs)  # (B, Tb, d), (B, L, H, Tb, Tb)
    else:
        h = model.encode(rd.inputs)  # (B, Tb, d)
    out = model.head(h)  # = model(rd.inputs), keeping h for the effects
    att, gates = out.attention, out.extras.get("gate1")  # (B, Tb, Sb), (B, Tb, d)
    logp = out.logits.log_softmax(-1)  # (B, Tb, V) in the model's precision, as vizlm.modeling.evaluate scores
    read = slots = by_head = None
    if effects and heads is not None:
        by_head = _head_effects(model, rd, heads, max_effect_pairs, effect_pairs, head)
    if effects and att is not None:
        select = (rd.targets != 0)[:, :, None]  # (B, Tb, 1) real rows only
        if effect_pairs is not None:
            select = select & effect_pairs(att)  # (B, Tb, Sb)
        all_slots = max_effect_pairs is None or _pairs(att, select) <= max_effect_pairs
        base = logp.gather(-1, rd.targets[..., None])[..., 0]  # (B, Tb) log P(target)
        read, slots = fx.attention_effects(model, h, rd.targets, out=out, slots=all_slots, select=select, base=base)
        if slots is not None and effect_pairs is not None:  # pairs not asked for: not computed
            slots = torch.where(select | (att == 0), slots, torch.full_like(slots, math.nan))
    sa = _build(
        ckpt, norms, rd.gather_rows(logp), None if att is None else rd.gather_slots(att),
        None if gates is None else rd.gather_rows(gates), surface, spans, clean_text(text),
        join_sentences(tags, BOUNDARY_TAG) if tags else None, top_k, truncated,
        None if read is None else rd.gather_rows(read), None if slots is None else rd.gather_slots(slots), context,
        breaks, None if heads is None else rd.gather_slots(heads.permute(0, 3, 4, 1, 2)).permute(2, 3, 0, 1),
        by_head,
    )
    return sa if head is None or sa.heads is None else sa.at_head(*head)


def _head_effects(model, rd, heads: torch.Tensor, max_effect_pairs: int | None,
                  effect_pairs: Callable[[torch.Tensor], torch.Tensor] | None = None,
                  only: tuple[int, int | None] | None = None) -> dict:
    """Every self-attention view's effects, laid out as the text's rows (and slots): (layer, head) -> (read effect
    (T,), slot effects (T, S) or None), head None for a layer's heads together (the view of their mean). Slot
    effects while the views have at most ``max_effect_pairs`` (row, slot) pairs with weight in all (None:
    always); ``effect_pairs`` maps a view's weights (B, Tb, Sb) to the pairs wanted, as for recurrent attention.
    ``only``: that view alone."""
    real = (rd.targets != 0)[:, :, None]  # (B, Tb, 1)
    L, H = heads.shape[1:3]
    views = [(layer, head) for layer in range(L) for head in (None, *range(H))]
    if only is not None:
        views = [(only[0] % L, None if only[1] is None else only[1] % H)]

    def weights(layer: int, head: int | None) -> torch.Tensor:  # (B, Tb, Tb) the view's weights
        return heads[:, layer].mean(1) if head is None else heads[:, layer, head]

    pairs = sum(int(((weights(*v) > 0) & real).sum()) for v in views)
    slots = max_effect_pairs is None or pairs <= max_effect_pairs
    inputs = model.layer_inputs(rd.inputs)
    out = {}
    for layer, head in views:
        select = None if effect_pairs is None else effect_pairs(weights(layer, head))
        read, eff = fx.head_effects(model, rd.inputs, rd.targets, layer, head, slots=slots, select=select,
                                    layer_inputs=inputs)
        out[(layer, head)] = (rd.gather_rows(read), None if eff is None else rd.gather_slots(eff))
    return out


def _cut_note(total: int, kept: int) -> str:
    return f"the text has {total} tokens; only the first {kept} were analysed"


def analyze_tokens(
    ckpt: Checkpoint,
    norms: list[str],
    surfaces: list[str] | None = None,
    offsets: list[tuple[int, int]] | None = None,
    text: str | None = None,
    tags: list[str] | None = None,
    top_k: int = 5,
    effects: bool = True,
    max_effect_pairs: int | None = EFFECT_PAIRS,
) -> SentenceAnalysis:
    """Analyse one already tokenised, normalised sentence (e.g. from a corpus): :func:`analyze_sentences`
    of that sentence alone, its first :data:`MAX_TOKENS` tokens read."""
    return analyze_sentences(ckpt, [norms], None if surfaces is None else [surfaces],
                             None if offsets is None else [offsets], text, None if tags is None else [tags],
                             top_k, effects, max_effect_pairs)


@torch.no_grad()
def analyze_batch(
    ckpt: Checkpoint,
    sentences: list[list[str]],
    surfaces: list[list[str]] | None = None,
    tags: list[list[str]] | None = None,
    top_k: int = 0,
    batch_size: int = 64,
    effects: str = "none",
    effect_pairs: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> Iterator[tuple[int, SentenceAnalysis]]:
    """``(index, analysis)`` for every non-empty sentence, from length-bucketed batches.

    Gives the same :class:`SentenceAnalysis` as :func:`analyze_tokens` (tested), one
    forward pass per batch: right padding changes nothing because every model is
    causal. ``top_k=0`` skips the top predictions, which corpus statistics do not read.
    ``effects``: ``"none"``, ``"read"`` (read effects) or ``"slots"`` (read effects and slot
    effects; ``effect_pairs`` maps the attention (B, T, S) to the pairs wanted, the others
    are NaN, e.g. ``lambda a: a >= 0.2`` for the pairs a threshold can highlight).
    """
    if effects not in ("none", "read", "slots"):
        raise ValueError(f"effects must be 'none', 'read' or 'slots', not {effects!r}")
    keep = [i for i, s in enumerate(sentences) if s]
    seqs = [ckpt.vocab.encode(sentences[i][:MAX_TOKENS]) for i in keep]
    device = device_of(ckpt.model)
    for idx, inputs, targets in iter_batches(seqs, batch_size):
        inputs, targets = inputs.to(device), targets.to(device)
        out = ckpt.model(inputs)  # logits (B, T, V)
        gates = out.extras.get("gate1")  # (B, T, d) for AMSRN
        read = slots = None
        if effects != "none" and out.attention is not None:
            select = (targets != 0)[:, :, None]  # (B, T, 1) real rows only
            if effect_pairs is not None:
                select = select & effect_pairs(out.attention)
            read, slots = fx.attention_effects(ckpt.model, ckpt.model.encode(inputs), targets, out=out,
                                               slots=effects == "slots", select=select)  # (B, T), (B, T, S)
            if slots is not None:
                slots = torch.where(select | (out.attention == 0), slots, torch.full_like(slots, math.nan))
        for b, j in enumerate(idx):
            i = keep[j]
            T = len(seqs[j]) + 1
            yield i, _build(
                ckpt, sentences[i][:MAX_TOKENS], out.logits[b, :T].log_softmax(-1),
                None if out.attention is None else out.attention[b, :T, :T],
                None if gates is None else gates[b, :T],
                surfaces[i][:MAX_TOKENS] if surfaces is not None else None, None, None,
                tags[i][:MAX_TOKENS] if tags is not None else None, top_k, len(sentences[i]) - len(seqs[j]),
                None if read is None else read[b, :T], None if slots is None else slots[b, :T, :T],
            )


def analyze(
    ckpt: Checkpoint, text: str, top_k: int = 5, tags: list[str] | None = None, effects: bool = True,
    max_effect_pairs: int | None = EFFECT_PAIRS,
) -> SentenceAnalysis:
    """Tokenise ``text`` like the corpus, a sentence or a passage, and analyse it with ``ckpt``.

    The text is split into sentences and documents (:func:`vizlm.data.text.passage_documents`: a
    sentence ends at a line break, at . ! ? before a capital or at Chinese 。！？, a document at a blank line, as
    ``vizlm eval --text-file`` splits a file) and read in the checkpoint's context
    (:func:`analyze_sentences`). It is cleaned
    (:func:`vizlm.data.text.clean_text`: control characters, noncharacters and lone surrogates
    replaced one for one, so ``text`` and the offsets stay aligned) and bounded before any work:
    only its first :data:`MAX_TEXT_CHARS` characters (cut at a space) are tokenised and only its
    first :data:`MAX_TOKENS` tokens tagged and analysed, with a note. ``SentenceAnalysis.text``
    is the part that was read. Raises :class:`AnalysisError` with a readable message for empty
    input. ``tags`` (one per token, no boundaries) replace the tagger's. ``effects`` and
    ``max_effect_pairs``: as :func:`analyze_sentences`.
    """
    if not isinstance(text, str):
        raise AnalysisError("please type a sentence: the text is empty")
    chars = len(text)
    if chars > MAX_TEXT_CHARS:  # a long text: skip leading blanks so the part read holds words
        text = text[len(text) - len(text.lstrip()) :]
    read = clean_text(text[: cut_point(text, MAX_TEXT_CHARS)])
    if not read.strip():
        raise AnalysisError("please type a sentence: the text is empty")
    docs = passage_documents(read)
    sents = [s for d in docs for s in d]
    if not sents:
        raise AnalysisError("nothing to analyse: the text has no words")
    n_read = sum(map(len, sents))
    more = len(read) < len(text) and not text[len(read) :].isspace()  # words beyond the character cut
    sents = first_tokens(sents, MAX_TOKENS)  # only what is analysed is tagged (tagging is slow)
    kept = sum(map(len, sents))
    reader = meta_reader(ckpt.meta or {})  # vizlm's rule, or an imported vocabulary's (case, digits kept)
    norms = [[reader(t.text) for t in s] for s in sents]
    if tags is not None:  # one per token: cut like the sentences
        starts = itertools.accumulate([0] + [len(s) for s in sents])
        tags = [tags[i : i + len(s)] for i, s in zip(starts, sents)]
    else:
        tags = tag_sentences([[t.norm for t in s] for s in sents])  # the tagger reads vizlm's rule
    surfaces, spans = [[t.text for t in s] for s in sents], [[(t.start, t.end) for t in s] for s in sents]
    sa = analyze_sentences(ckpt, norms, surfaces, spans, read, tags, top_k, effects, max_effect_pairs,
                           documents=[len(d) for d in docs])
    if more or kept < n_read:
        sa.truncated = max(1, n_read - kept)  # at least 1: the rest of the text was never tokenised
        sa.notes.insert(0, f"the text has {chars:,} characters; only its first {kept} tokens were analysed" if more
                        else _cut_note(n_read, kept))
    return sa
