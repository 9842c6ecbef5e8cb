"""Sentence analysis: the one computation path behind the CLI, the app and the tests.

:func:`analyze` runs a checkpoint on free text (or :func:`analyze_tokens` on a
corpus sentence) and returns a :class:`SentenceAnalysis`: per predicted word its
probability, surprisal and top predictions, the attention row over memory slots,
and AMSRN's selection gates. Everything is plain numpy, so renderers never touch
a model.

Rows and slots. The model reads ``<s> w_1 .. w_n`` and predicts ``w_1 .. w_n </s>``:
row ``r`` (0-based) predicts ``targets[r]``. Memory slot 0 is the start state
``h_0`` (shown as ``<s>``); slot ``j >= 1`` is the output after reading input ``j``,
i.e. ``<s>`` for ``j = 1`` and word ``w_{j-1}`` for ``j >= 2``. Row ``r`` may attend
to slots ``0..r``: when predicting ``w_{r+1}`` the current word ``w_r`` is the query,
and the memory holds the words before it.

Effects (:mod:`vizlm.models.effects`). For every target of an attention model, the
**read effect** is ``log P(target)`` with the attention read minus without it (``r_t = 0``)
and the **slot effect** of slot ``j`` is ``log P(target)`` minus the same with slot ``j``
dropped and the row renormalised (positive: the slot helped); both are stored in nats and
shown in bits. An attention weight is not an effect: a busy heat map can change the
prediction very little.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from vizlm.checkpoint import Checkpoint
from vizlm.data import BOS, EOS, UNK, iter_batches
from vizlm.models import effects as fx
from vizlm.tagger import tag_tokens
from vizlm.text import MAX_TOKENS, clean_text, cut_point, tokenize

# Longer texts are cut, with a note, to keep the app responsive: to MAX_TOKENS tokens
# (vizlm.text, where --text-file reading splits at the same length), and before that to
# MAX_TEXT_CHARS characters, so a huge text is never tokenised or tagged as a whole.
# 50 characters a token is far more than English (about 6) or Chinese (1) needs.
MAX_TEXT_CHARS = 50 * MAX_TOKENS
DEFAULT_THRESHOLD = 0.2
# In top-k mode a slot must still carry this much weight to count as attended: the third-heaviest
# of a row that puts 98% on one slot is not "attended" (and must not be labelled as a case).
MIN_TOP_K_WEIGHT = 0.05
# Weight on slot 0, the zero start state, reads a zero vector: above this share a row's attention is "off".
ATTENTION_OFF = 0.5
LN2 = math.log(2)  # nats per bit
# Slot effects cost one output-layer row (10k words) per (row, slot) pair with weight: a sentence of
# n words has about n^2 / 2 of them for AMSRN and Salton, 5 n for a window of 5. analyze() computes
# them when there are at most this many (AMSRN: about 88 words, ~25 ms on one core); beyond that
# slot_effects is None and slot_effect_rows / with_slot_effects compute them on demand.
EFFECT_PAIRS = 4_000


class AnalysisError(ValueError):
    """Input that cannot be analysed, with a message meant for the user."""


@dataclass
class Highlight:
    """One memory slot above the threshold (or among the top-k) for one target."""

    slot: int
    word: str  # the slot's label ("<s>" for the start slot and slot 1)
    token: int  # index into ``tokens`` of the attended word, -1 for <s>
    weight: float
    effect_bits: float | None = None  # the slot effect in bits (None: not computed)


@dataclass
class SentenceAnalysis:
    """One model on one sentence. ``n`` words; ``T = n + 1`` rows (``</s>`` last); ``S = T`` slots."""

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

    @property
    def probs(self) -> np.ndarray:
        return np.exp(self.logprobs)

    @property
    def surprisal(self) -> np.ndarray:
        """[T] bits."""
        return -self.logprobs / math.log(2)

    @property
    def perplexity(self) -> float:
        return float(np.exp(-self.logprobs.mean()))

    @property
    def slot_labels(self) -> list[str]:
        """[S] label of each memory slot."""
        return [BOS, BOS] + self.norms[: len(self.targets) - 2]

    @property
    def read_effect_bits(self) -> np.ndarray | None:
        """[T] read effects in bits."""
        return None if self.read_effect is None else self.read_effect / LN2

    @property
    def slot_effect_bits(self) -> np.ndarray | None:
        """[T, S] slot effects in bits."""
        return None if self.slot_effects is None else self.slot_effects / LN2

    def allowed(self) -> np.ndarray | None:
        """[T, S] the (row, slot) pairs each row could attend to (:func:`attention_mask`)."""
        return None if self.attention is None else attention_mask(self.attention)

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
                   threshold: float | None = DEFAULT_THRESHOLD, top_k: int | None = None) -> list[dict]:
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

        shown = {h.slot for h in self.highlights(threshold, top_k)[row]}
        strongest = sorted(allowed, key=lambda j: -abs(effect(j) or 0.0))[:3] if effect_bits is not None else []
        shown |= {int(j) for j in strongest}
        labels = self.slot_labels
        table = [{"slot": j, "word": labels[j], "weight": float(self.attention[row, j]), "effect_bits": effect(j)}
                 for j in sorted(shown)]
        table.sort(key=lambda e: (e["effect_bits"] is None, -abs(e["effect_bits"] or 0.0), -e["weight"]))
        return table[:limit]

    def slot_token(self, slot: int) -> int:
        """Index into ``tokens`` of the word held by ``slot``; -1 for the <s> slots."""
        return slot - 2 if slot >= 2 else -1

    def highlights(self, threshold: float | None = DEFAULT_THRESHOLD, top_k: int | None = None) -> list[list[Highlight]]:
        """Per target, the slots with weight >= threshold, or the ``top_k`` heaviest slots."""
        if self.attention is None:
            return [[] for _ in self.targets]
        labels = self.slot_labels
        effects = self.slot_effect_bits
        out = []

        def effect(r: int, j: int) -> float | None:
            value = None if effects is None else float(effects[r, j])
            return value if value is not None and math.isfinite(value) else None

        for r, row in enumerate(self.attention):
            allowed = row[: r + 1]
            if top_k is not None:
                slots = np.argsort(-allowed, kind="stable")[:top_k]
                slots = slots[allowed[slots] >= MIN_TOP_K_WEIGHT]
            else:
                slots = np.flatnonzero(allowed >= (threshold if threshold is not None else DEFAULT_THRESHOLD))
                slots = slots[np.argsort(-allowed[slots], kind="stable")]
            out.append([Highlight(int(j), labels[j], self.slot_token(int(j)), float(allowed[j]), effect(r, int(j)))
                        for j in slots])
        return out

    def to_dict(
        self, threshold: float | None = DEFAULT_THRESHOLD, top_k: int | None = None, cases: dict[int, list[dict]] | None = None
    ) -> dict:
        """JSON-ready dict: ``tokens`` and one entry per target (no NaN anywhere).

        ``cases`` (target index -> case dicts) are the labels of :mod:`vizlm.cases`, which
        sits above this module: :func:`vizlm.cases.labelled_dict` passes them in.
        """
        hl = self.highlights(threshold, top_k)
        case_map = cases or {}
        read_bits, slot_bits = self.read_effect_bits, self.slot_effect_bits
        targets = []
        for r, word in enumerate(self.targets):
            targets.append({
                "index": r,
                "word": word,
                "prob": float(self.probs[r]),
                "surprisal_bits": float(self.surprisal[r]),
                "top": [{"word": w, "prob": float(p)} for w, p in zip(self.top_words[r], self.top_probs[r])],
                "attention": None if self.attention is None else [float(a) for a in self.attention[r, : r + 1]],
                "highlights": [asdict(h) for h in hl[r]],
                "gate_mean": None if self.gates is None else float(self.gates[r].mean()),
                # slot 0 is the zero start state: weight there reads nothing ("attention off")
                "start_weight": None if self.attention is None else float(self.attention[r, 0]),
                # effects in bits: log2 P(word) with the read minus without; per slot, minus with the slot dropped
                "read_effect_bits": None if read_bits is None else _finite(read_bits[r]),
                "prob_without_read": None if self.read_effect is None else float(np.exp(self.logprobs[r] - self.read_effect[r])),
                "effects_bits": None if slot_bits is None else [_finite(e) for e in slot_bits[r, : r + 1]],
                "cases": case_map.get(r, []),
            })
        return {
            "model": self.model,
            "text": self.text,
            "tokens": list(self.tokens),
            "normalized": list(self.norms),
            "unk": list(self.unk),
            "offsets": [list(o) for o in self.offsets],
            "slots": self.slot_labels,
            "perplexity": self.perplexity,
            "truncated": self.truncated,
            "notes": list(self.notes),
            "effects": self.effect_summary(),
            "targets": targets,
        }

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


def attention_mask(attention: np.ndarray) -> np.ndarray:
    """[T, S] True where row ``r`` could attend to slot ``j``.

    Causal: ``j <= r``. Windowed models (Daniluk et al. 2017) give exact zeros to
    slots that left the window, always a prefix of the row (``band_to_slots``), so
    leading exact zeros are masked too; a softmax over finite scores is never 0. A row
    of zeros had no slot at all (AMSRN without the start slot, first row): all masked.
    """
    a = np.asarray(attention, dtype=float)
    T, S = a.shape
    mask = np.arange(S)[None, :] <= np.arange(T)[:, None]
    finite = np.isfinite(a)
    nonzero = finite & (a != 0) & mask
    for r in range(T):
        nz = np.flatnonzero(nonzero[r])
        mask[r, : nz[0] if len(nz) else S] = False
    return mask & finite


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


def _offsets(surfaces: list[str]) -> list[tuple[int, int]]:
    """Character spans of tokens joined by single spaces."""
    out, pos = [], 0
    for s in surfaces:
        out.append((pos, pos + len(s)))
        pos += len(s) + 1
    return out


def _build(
    ckpt: Checkpoint,
    norms: list[str],
    logits: torch.Tensor,  # (T, V) for this sentence, T = n + 1
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
) -> SentenceAnalysis:
    """One sentence's rows of a forward pass -> :class:`SentenceAnalysis`."""
    vocab = ckpt.vocab
    surfaces = list(surfaces or norms)
    offsets = offsets or _offsets(surfaces)
    unk = [w not in vocab for w in norms]
    ids = vocab.encode(norms) + [vocab.eos_id]
    logp = logits.double().log_softmax(-1)  # (T, V)
    lp = logp.gather(1, torch.tensor(ids)[:, None])[:, 0].numpy()  # (T,)
    k = min(top_k, logp.shape[1])
    if k:
        top_i = logp.topk(k, dim=-1).indices  # (T, k): log is monotone, no need to exp the whole row
        top_p = logp.gather(1, top_i).exp()  # (T, k)
    else:  # corpus statistics: no top predictions
        top_p, top_i = logp.new_zeros(logp.shape[0], 0), torch.zeros(logp.shape[0], 0, dtype=torch.long)
    notes = []
    if truncated:
        notes.append(f"the text has {len(norms) + truncated} tokens; only the first {MAX_TOKENS} were analysed")
    if any(unk):
        notes.append(f"{sum(unk)} word(s) are not in the model's vocabulary and were read as <unk>")
    return SentenceAnalysis(
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
    )


def _targets(ckpt: Checkpoint, norms: list[str]) -> torch.Tensor:
    """(1, T) the predicted ids: the words, then </s>."""
    return torch.tensor([ckpt.vocab.encode(norms) + [ckpt.vocab.eos_id]])


def _inputs(ckpt: Checkpoint, norms: list[str]) -> torch.Tensor:
    """(1, T) the ids read: <s>, then the words."""
    return torch.tensor([[ckpt.vocab.bos_id] + ckpt.vocab.encode(norms)])


def _pairs(attention: torch.Tensor, select: torch.Tensor | None = None) -> int:
    """How many slot effects there are to compute: (row, slot) pairs with weight."""
    return int(((attention > 0) if select is None else (attention > 0) & select).sum())


@torch.no_grad()
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
    """Analyse an already tokenised, normalised sentence (e.g. from a corpus).

    Only the first :data:`MAX_TOKENS` tokens are read (``truncated`` counts the rest, and a
    note says so). Tokens and text go through :func:`vizlm.text.clean_text`. With
    ``effects`` an attention model's read effects are computed (one more head call), and
    its slot effects when there are at most ``max_effect_pairs`` pairs (None: always).
    """
    if not norms:
        raise AnalysisError("nothing to analyse: the text has no words")
    truncated = max(0, len(norms) - MAX_TOKENS)

    def cut(xs):
        return xs[:MAX_TOKENS] if xs else xs

    norms = [clean_text(w) for w in norms[:MAX_TOKENS]]
    surfaces = [clean_text(w) for w in surfaces[:MAX_TOKENS]] if surfaces else surfaces
    text = clean_text(text) if text is not None else None
    inputs = _inputs(ckpt, norms)
    h = ckpt.model.encode(inputs)  # (1, T, d)
    out = ckpt.model.head(h)  # = ckpt.model(inputs), keeping h for the effects
    att, gates = out.attention, out.extras.get("gate1")
    read = slots = None
    if effects and att is not None:
        targets = _targets(ckpt, norms)
        all_slots = max_effect_pairs is None or _pairs(att) <= max_effect_pairs
        read, slots = fx.attention_effects(ckpt.model, h, targets, out=out, slots=all_slots)
        read, slots = read[0], None if slots is None else slots[0]
    return _build(ckpt, norms, out.logits[0], None if att is None else att[0], None if gates is None else gates[0],
                  surfaces, cut(offsets), text, cut(tags), top_k, truncated, read, slots)


@torch.no_grad()
def slot_effect_rows(ckpt: Checkpoint, sa: SentenceAnalysis, rows: Sequence[int]) -> np.ndarray:
    """[len(rows), S] slot effects (nats) of some rows of ``sa``, e.g. the selected word of a
    text too long for :data:`EFFECT_PAIRS`: rows after the last one are not recomputed."""
    if sa.attention is None:
        raise AnalysisError(f"{sa.model} has no attention: it has no slot effects")
    rows = [int(r) for r in rows]
    if sa.slot_effects is not None and np.isfinite(sa.slot_effects[rows]).all():
        return sa.slot_effects[rows]
    inputs, targets = _inputs(ckpt, sa.norms), _targets(ckpt, sa.norms)
    out = ckpt.model(inputs)
    select = torch.zeros_like(out.attention, dtype=torch.bool)
    select[:, rows] = True
    effects = fx.slot_effects(ckpt.model, ckpt.model.encode(inputs), targets, out=out, select=select)  # (1, T, S)
    return effects[0, rows].double().numpy()


def with_slot_effects(ckpt: Checkpoint, sa: SentenceAnalysis) -> SentenceAnalysis:
    """``sa`` with every slot effect (a copy; ``sa`` itself if it has them or has no attention)."""
    if sa.attention is None or (sa.slot_effects is not None and np.isfinite(sa.slot_effects).all()):
        return sa
    return dataclasses.replace(sa, slot_effects=slot_effect_rows(ckpt, dataclasses.replace(sa, slot_effects=None),
                                                                 range(len(sa.targets))))



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
    for idx, inputs, targets in iter_batches(seqs, batch_size):
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
                ckpt, sentences[i][:MAX_TOKENS], out.logits[b, :T],
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
    """Tokenise ``text`` like the corpus and analyse it with ``ckpt``.

    The text is cleaned (:func:`vizlm.text.clean_text`: control characters, noncharacters
    and lone surrogates replaced one for one, so ``text`` and the offsets stay aligned) and
    bounded before any work: only its first :data:`MAX_TEXT_CHARS` characters (cut at a
    space) are tokenised and only its first :data:`MAX_TOKENS` tokens tagged and analysed,
    with a note. ``SentenceAnalysis.text`` is the part that was read. Raises
    :class:`AnalysisError` with a readable message for empty input. ``effects`` and
    ``max_effect_pairs``: as :func:`analyze_tokens`.
    """
    if not isinstance(text, str):
        raise AnalysisError("please type a sentence: the text is empty")
    chars = len(text)
    if chars > MAX_TEXT_CHARS:  # a long text: skip leading blanks so the part read holds words
        text = text[len(text) - len(text.lstrip()) :]
    read = clean_text(text[: cut_point(text, MAX_TEXT_CHARS)])
    if not read.strip():
        raise AnalysisError("please type a sentence: the text is empty")
    toks = tokenize(read)
    if not toks:
        raise AnalysisError("nothing to analyse: the text has no words")
    n_read = len(toks)
    more = len(read) < len(text) and not text[len(read) :].isspace()  # words beyond the character cut
    if more:
        toks = toks[:MAX_TOKENS]  # the token note would count only what was read: one note below instead
    if tags is None:
        tags = tag_tokens([t.norm for t in toks[:MAX_TOKENS]])  # tag only what is analysed (tagging is slow)
    sa = analyze_tokens(
        ckpt, [t.norm for t in toks], [t.text for t in toks], [(t.start, t.end) for t in toks], read, tags, top_k,
        effects, max_effect_pairs,
    )
    if more:
        sa.truncated = max(1, n_read - len(toks))  # at least: the rest of the text was never tokenised
        sa.notes.insert(0, f"the text has {chars:,} characters; only its first {len(toks)} tokens were analysed")
    return sa
