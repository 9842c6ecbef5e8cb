"""Token attribution beside attention: which earlier words did a prediction depend on, and does the
attention agree? (Jain & Wallace 2019, "Attention is not Explanation"; Wiegreffe & Pinter 2019.)

:func:`attribute` reads a text in the checkpoint's context exactly as :mod:`vizlm.inspect.analysis` reads it
(a sentence model each sentence alone from a zero state, a document model running text across
sentence boundaries) and attributes ``log P(target)`` of every predicted word to every input token read
before it, for every family, the plain LSTM included:

* ``gradient-x-input`` (Shrikumar et al. 2016): the gradient of ``log P(target)`` with respect to each
  input embedding times that embedding, summed over its dimensions (captum ``InputXGradient``);
* ``integrated-gradients`` (Sundararajan et al. 2017): the same gradient averaged on the straight path
  from the baseline to the input embeddings, times their difference, with ``n_steps`` Gauss-Legendre
  points (captum ``IntegratedGradients``). The baseline is the text with every word's embedding zero (the
  ``<s>`` a reading starts with kept). The attributions of a target sum to ``log P(target) - log P(target
  | baseline)``; what they miss is its **convergence delta**, reported per target;
* ``occlusion``: ``log P(target)`` minus the same with that input token replaced by ``<unk>`` (captum
  ``FeatureAblation``; one batched pass of every replaced text gives every target at once);
* ``slot-effect`` (attention models): ``log P(target)`` minus the same with the token's memory slot dropped
  and the row renormalised (:func:`vizlm.models.effects.slot_effects`).

Positions. The text's rows are the analysis's (:class:`~vizlm.inspect.analysis.SentenceAnalysis`): row ``r``
predicts ``targets[r]`` after reading ``input_labels[0..r]``; input position ``p`` is the token read at step
``p`` (``<s>`` at a reading's start, else token ``p - 1`` of the text; the **current word**, ``p = r``, is
the query of row ``r``). Row ``r`` is attributed to the words of its reading up to ``r`` and nothing
else: a later position (the target itself included) is always exactly 0, and in sentence context so is
every position of another sentence. The ``<s>`` a reading starts with is the same in every text and not a
word of it: it is never replaced (occlusion), kept in the baseline (integrated gradients), and its
position is 0 for every method (a boundary ``</s>`` read in running text is a token of the text). Every family embeds the words it reads (RM also through its two memory
tables: a position's attribution sums all three). Memory slot ``j >= 1`` holds what was read at position
``j - 1`` (:mod:`vizlm.models.base`), so the attention on slot ``p + 1`` is the weight "on" position ``p``
and its offset is ``r - p`` words back, as :func:`vizlm.inspect.corpus_stats.attention_by_position` counts slots; the
zero start slot and the current word have no position / no slot, so agreement is measured over the
positions **both** cover: those with a slot the row could attend to. A Transformer's self-attention reads
position ``p`` itself, the current word included (:func:`slot_positions`), one head or a layer's mean at a
time (:meth:`Attribution.at_head`, :meth:`Attribution.agreement_by_head`).

Agreement (:func:`vizlm.inspect.agreement.agreement`): Kendall's tau-b between attention weight and
``|attribution|``, whether the most attended position is among the most important ones, and the overlap of the
three heaviest of each. The passes of each method are :mod:`vizlm.inspect.attribution_methods`'s; over a split:
:mod:`vizlm.inspect.attribution_corpus`.

All scores are in nats of ``log P(target)``. captum is imported when a method first runs, so importing
this module stays light.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from vizlm.data.text import MAX_TOKENS
from vizlm.inspect.agreement import TOP_K, agreement, nanmean
from vizlm.inspect.choices import ATTRIBUTION_MAX_STEPS as MAX_STEPS  # the most steps any door accepts
from vizlm.inspect.choices import ATTRIBUTION_METHODS as METHODS  # the interface's names -> what each measures
from vizlm.inspect.analysis import LN2, SentenceAnalysis, analyze, analyze_sentences, distance
from vizlm.inspect.effects import with_slot_effects
from vizlm.inspect.highlight import DEFAULT, ScoreRow, Setting, chosen
from vizlm.inspect.attribution_methods import (
    IG_ROW_BLOCK,
    AttributionError,
    Meter,
    gradients,
    occlusion,
    reading_pieces,
    slot_positions,
)
from vizlm.modeling.checkpoint import Checkpoint

LABELS = {  # each method as people read it (the Explorer's measure picker, chart titles, exports)
    "gradient-x-input": "gradient × input",
    "integrated-gradients": "integrated gradients",
    "occlusion": "occlusion",
    "slot-effect": "slot effect",
}
TEXT_METHODS = ("gradient-x-input", "integrated-gradients", "occlusion")  # any family, the plain LSTM included
# Integrated gradients' steps (Gauss-Legendre) to start with. At 32 steps the convergence delta of about 98%
# of the bundled models' targets is below 1% of |log P(target) - log P(target | baseline)| (all of them
# at 64; benchmarks/attribution.py measures it); the rest are computed again with twice the steps until
# theirs is (DELTA_TOLERANCE), up to MAX_STEPS.
DEFAULT_STEPS = 32
DELTA_TOLERANCE = 0.01


def check_steps(n_steps) -> int:
    """``n_steps`` if it is a whole number from 1 to :data:`MAX_STEPS`, else
    :class:`~vizlm.inspect.attribution_methods.AttributionError`: the bound every door (the API, the CLI, the
    app) applies before anything is allocated."""
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or not 1 <= n_steps <= MAX_STEPS:
        raise AttributionError(f"n_steps must be a whole number from 1 to {MAX_STEPS} (integrated gradients' steps; "
                               f"vizlm.inspect.attribution.MAX_STEPS), not {str(n_steps)[:40]}")
    return int(n_steps)


# Cost, measured on one core (lstm and kvp-doc, a 97-token passage, every method): seconds per unit of work, a
# unit being one position read by one copy of the text at one step (integrated gradients), forward and
# backward, per million parameters of the model; occlusion's forward passes cost OCCLUSION_FACTOR times more per
# position read (one copy per position, every row through the output layer). An order of magnitude only:
# another machine, another load.
SECONDS_PER_UNIT = 2e-5
OCCLUSION_FACTOR = 4.0
SAY_COST_S = 3.0  # an estimated cost above this is said before starting (the CLI's stderr, the app's bar)


def _rows_wanted(rows, T: int) -> np.ndarray:
    """[T] bool: the rows to compute (``rows``: indices, a ``(first, end)`` range, or None for all)."""
    want = np.zeros(T, dtype=bool)
    if rows is None:
        want[:] = True
        return want
    if isinstance(rows, range):
        rows = list(rows)
    try:
        idx = np.asarray(list(rows), dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise AttributionError(f"rows must be row indices (whole numbers), not {str(rows)[:40]}") from None
    if idx.size and (idx.min() < 0 or idx.max() >= T):
        raise AttributionError(f"rows must be from 0 to {T - 1} (the text has {T} predicted words), not "
                               f"{int(idx.min() if idx.min() < 0 else idx.max())}")
    want[idx] = True
    return want


def _work(first: int, size: int, local: np.ndarray, method: str, n_steps: int) -> int:
    """Units of work (positions read, times steps) of one piece's rows ``local``, as
    :func:`~vizlm.inspect.attribution_methods.gradients` and :func:`~vizlm.inspect.attribution_methods.occlusion` read
    them."""
    if not len(local):
        return 0
    b = int(local.max()) + 1
    if method == "occlusion":
        return b * b
    if method == "integrated-gradients":
        ends = [int(local[min(k + IG_ROW_BLOCK, len(local)) - 1]) + 1 for k in range(0, len(local), IG_ROW_BLOCK)]
        return n_steps * sum(min(IG_ROW_BLOCK, len(local) - k) * e for k, e in zip(range(0, len(local), IG_ROW_BLOCK), ends))
    return len(local) * b


def estimate_seconds(ckpt: Checkpoint, sa: SentenceAnalysis, method: str = "integrated-gradients",
                     n_steps: int = DEFAULT_STEPS, rows=None) -> float:
    """The expected time of :func:`attribute` of the analysed text ``sa`` (its ``rows``), from its tokens and
    steps (:data:`SECONDS_PER_UNIT`): an order of magnitude to say before a long request starts. Integrated
    gradients' rows computed again with more steps (a large convergence delta) come on top."""
    if method == "slot-effect":
        return 0.0
    n_steps = check_steps(n_steps)
    want = _rows_wanted(rows, len(sa.targets))
    units = sum(_work(first, len(inputs), np.flatnonzero(want[first : first + len(inputs)]), method, n_steps)
                for first, inputs, _ in reading_pieces(ckpt, sa))
    millions = sum(p.numel() for p in ckpt.model.parameters()) / 1e6
    return units * SECONDS_PER_UNIT * millions * (OCCLUSION_FACTOR if method == "occlusion" else 1.0)

# --------------------------------------------------------------------------- one text
@dataclass
class Attribution:
    """One method on one text, one model. ``T`` rows (the analysis's targets) and ``T`` input positions
    (the token read at each step, :attr:`inputs`); all scores in nats of ``log P(target)``."""

    model: str
    method: str
    context: str  # how the model read the text (vizlm.inspect.reading.READINGS)
    inputs: list[str]  # [T] the token read at each position (<s> where a reading starts)
    targets: list[str]  # [T] the predicted words
    scores: np.ndarray  # [T, T] attribution of log P(targets[r]) to position p; exactly 0 outside ``covered``
    covered: np.ndarray  # [T, T] bool: the words of row r's reading up to r (the current word included, the
    # <s> the reading starts with not: it is the same in every text)
    logprobs: np.ndarray  # [T] log P(target) as the model reads the text
    attention: np.ndarray | None = None  # [T, T] weight on the slot holding position p (slot p + 1)
    attended: np.ndarray | None = None  # [T, T] bool: positions with a slot row r could attend to
    read_effect: np.ndarray | None = None  # [T] log P(target) with the attention read minus without it
    baseline_logprobs: np.ndarray | None = None  # [T] integrated gradients: log P(target | zero embeddings)
    convergence_delta: np.ndarray | None = None  # [T] integrated gradients: sum of a row - (logprobs - baseline)
    steps: np.ndarray | None = None  # [T] integrated gradients' steps of each row
    analysis: SentenceAnalysis | None = field(default=None, repr=False)
    computed: np.ndarray | None = None  # [T] bool: the rows computed (``rows`` of :func:`attribute`; None: all)

    def _check_row(self, row: int) -> None:
        if not 0 <= row < len(self.targets):
            raise AttributionError(f"row {row} out of range: the text has {len(self.targets)} predicted words")
        if self.computed is not None and not self.computed[row]:
            raise AttributionError(f"row {row} was not computed (attribute(rows=...) computed "
                                   f"{int(self.computed.sum())} of the {len(self.targets)} rows)")

    def computed_rows(self) -> list[int]:
        """The rows computed: every row unless :func:`attribute` was given ``rows``."""
        return list(range(len(self.targets))) if self.computed is None else [int(r) for r in np.flatnonzero(self.computed)]

    @property
    def relative_delta(self) -> np.ndarray | None:
        """[T] ``|convergence delta| / |log P(target) - log P(target | baseline)|`` (integrated gradients; 0 for
        a row that reads no word, whose input is its baseline)."""
        if self.convergence_delta is None:
            return None
        gap, delta = np.abs(self.logprobs - self.baseline_logprobs), np.abs(self.convergence_delta)
        with np.errstate(divide="ignore", invalid="ignore"):  # a row with nothing to attribute (only <s> read): 0
            return np.where(delta == 0, 0.0, delta / gap)

    @property
    def bits(self) -> np.ndarray:
        """[T, T] :attr:`scores` in bits of ``log2 P(target)`` (the unit the app and the pictures show)."""
        return self.scores / LN2

    def __repr__(self) -> str:
        return (f"Attribution(model={self.model!r}, method={self.method!r}, targets={len(self.targets)}, "
                f"context={self.context!r}, {'attention' if self.attention is not None else 'no attention'})")

    def row_of(self, row: int | str) -> int:
        """A row of this attribution: its number (0 .. T - 1), or a predicted word (its first occurrence, as
        :meth:`vizlm.inspect.analysis.SentenceAnalysis.target_index` reads it). Raises for anything else."""
        if isinstance(row, str):
            if self.analysis is not None:
                return self.analysis.target_index(row)
            if row in self.targets:
                return self.targets.index(row)
            raise AttributionError(f"{row!r} is not a predicted word of this text")
        if isinstance(row, bool) or not isinstance(row, numbers.Integral) or not 0 <= row < len(self.targets):
            raise AttributionError(f"row {row!r} out of range: the text has {len(self.targets)} predicted words")
        return int(row)

    def score_row(self, row: int) -> ScoreRow:
        """Row ``row``'s ``|attribution|`` as the highlight rule reads it (:class:`vizlm.inspect.highlight.Scores`):
        a share is of the row's largest ``|attribution|``, so that the largest is always highlighted, however long the
        reading; positions with no attribution at all (exactly 0, e.g. a row reading only ``<s>``) never are."""
        size = np.abs(self.scores[row]) * self.covered[row]  # (T,)
        return ScoreRow(np.where(size > 0, size, np.nan), float(size.max()), 0.0)

    def highlighted(self, row: int | str, setting: Setting = DEFAULT) -> list[int]:
        """The positions row ``row`` depended on most that ``setting`` picks (:func:`vizlm.inspect.highlight.chosen` of
        :meth:`score_row`), largest ``|attribution|`` first. ``row``: a number or a predicted word (:meth:`row_of`)."""
        row = self.row_of(row)
        self._check_row(row)
        return chosen(self.score_row(row), setting)

    def row_frame(self, row: int | str) -> pd.DataFrame:
        """Row ``row``'s reading, most important first: position, input, distance (from the predicted word: 1
        for the word just before it, the word just read; :meth:`distances`), attribution in bits, its share of the row's ``|attribution|``, and the attention weight on it (NaN without a slot;
        no column for a model without attention). ``row``: a number or a predicted word (:meth:`row_of`)."""
        row = self.row_of(row)
        self._check_row(row)
        positions = np.flatnonzero(self.covered[row])
        bits = self.bits[row, positions]
        total = np.abs(bits).sum()
        out = {"position": positions, "input": [self.inputs[p] for p in positions], "distance": distance(row - positions),
               "attribution_bits": bits, "share": np.abs(bits) / total if total > 0 else np.zeros(len(bits))}
        if self.attention is not None:
            out["attention"] = np.where(self.attended[row, positions], self.attention[row, positions], math.nan)
        frame = pd.DataFrame(out)
        return frame.iloc[np.argsort(-np.abs(bits), kind="stable")].reset_index(drop=True)

    def offsets(self) -> np.ndarray:
        """[T, T] words back from the word row r just read to position p: ``r - p`` (0: that word; the
        ``offset`` of :meth:`frame` and :meth:`to_dict`). :meth:`distances` counts from the predicted word."""
        T = len(self.targets)
        return np.arange(T)[:, None] - np.arange(T)[None, :]

    def distances(self) -> np.ndarray:
        """[T, T] the distance of position p from row r's predicted word, ``r + 1 - p``: 1 for the word just
        before it (the word just read), 2 for the one before that (the attention's newest slot); the
        distance every view of vizlm shows."""
        return distance(self.offsets())

    def agreement(self, absolute: bool = True, k: int = TOP_K) -> pd.DataFrame:
        """Per target, :func:`agreement` of its attention and attribution over the positions both cover:
        columns row, target, positions, kendall_tau, top1, top_k_overlap. Raises for a model without attention."""
        if self.attention is None:
            raise AttributionError(f"{self.model} has no attention: there is nothing to agree with")
        records = [{"row": r, "target": self.targets[r], **self.row_agreement(r, absolute, k)}
                   for r in self.computed_rows()]
        return pd.DataFrame.from_records(records, columns=["row", "target", "positions", "kendall_tau", "top1",
                                                           "top_k_overlap"])

    def row_agreement(self, row: int | str, absolute: bool = True, k: int = TOP_K) -> dict:
        """:func:`agreement` of row ``row``'s attention and attribution over the positions both cover."""
        if self.attention is None:
            raise AttributionError(f"{self.model} has no attention: there is nothing to agree with")
        row = self.row_of(row)
        self._check_row(row)
        both = np.flatnonzero(self.attended[row] & self.covered[row])
        return agreement(self.attention[row], self.scores[row], both, absolute, k)

    def at_head(self, layer: int = -1, head: int | None = None) -> Attribution:
        """The same attribution beside another self-attention head of a Transformer (or a layer's mean over its
        heads, ``head`` None): :meth:`~vizlm.inspect.analysis.SentenceAnalysis.at_head` of its analysis."""
        if self.analysis is None or self.analysis.heads is None:
            raise AttributionError(f"{self.model} has no self-attention heads to choose from")
        sa = self.analysis.at_head(layer, head)
        if sa is self.analysis:
            return self
        attention, attended = _attention_on_positions(sa)
        return dataclasses.replace(self, analysis=sa, attention=attention, attended=attended)

    def agreement_by_head(self, absolute: bool = True, k: int = TOP_K) -> pd.DataFrame:
        """A Transformer's :meth:`agreement_summary` for every layer and head, and each layer's mean over its heads
        (head None): columns layer, head (counted from 1), targets, kendall_tau, top1_share, top{k}_overlap."""
        if self.analysis is None or self.analysis.heads is None:
            raise AttributionError(f"{self.model} has no self-attention heads")
        L, H = self.analysis.heads.shape[:2]
        rows = [{"layer": layer + 1, "head": None if h is None else h + 1,
                 **self.at_head(layer, h).agreement_summary(absolute, k)}
                for layer in range(L) for h in (None, *range(H))]
        return pd.DataFrame.from_records(rows)

    def agreement_summary(self, absolute: bool = True, k: int = TOP_K) -> dict:
        """The text's agreement: mean tau-b, share of top-1 matches and mean top-k overlap over the targets
        with at least two positions to rank (a row with one slot chooses nothing)."""
        rows = self.agreement(absolute, k)
        rows = rows[rows.positions >= 2]
        tau = rows.kendall_tau.to_numpy(float)
        return {"targets": len(rows), "kendall_tau": nanmean(tau), "top1_share": nanmean(rows.top1.to_numpy(float)),
                f"top{k}_overlap": nanmean(rows.top_k_overlap.to_numpy(float))}

    def to_dict(self) -> dict:
        """JSON-able: per target (``targets``) its ``attributions`` over the positions of its reading up to
        it (``position``, ``input``, ``offset`` words back, ``score`` in nats, ``attention`` where the row has
        a slot for it), ``logprob``, for integrated gradients ``convergence_delta`` and ``steps``, and for an
        attention model ``agreement`` (Kendall tau-b, top-1, top-3 overlap); the text's ``agreement``."""
        agree = self.agreement() if self.attention is not None else None
        rows = []
        for i, r in enumerate(self.computed_rows()):
            word = self.targets[r]
            positions = np.flatnonzero(self.covered[r])
            row = {"index": r, "word": word, "logprob": float(self.logprobs[r]), "attributions": [
                {"position": int(q), "input": self.inputs[q], "offset": r - int(q), "score": float(self.scores[r, q]),
                 **({"attention": float(self.attention[r, q]) if self.attended[r, q] else None}
                    if self.attention is not None else {})}
                for q in positions]}
            if self.convergence_delta is not None:
                row |= {"convergence_delta": float(self.convergence_delta[r]), "steps": int(self.steps[r]),
                        "relative_delta": float(self.relative_delta[r])}
            if agree is not None:
                a = agree.iloc[i]
                row["agreement"] = {"positions": int(a.positions), "kendall_tau": _float(a.kendall_tau),
                                    "top1": _float(a.top1), f"top{TOP_K}_overlap": _float(a.top_k_overlap)}
            rows.append(row)
        return {"model": self.model, "method": self.method, "context": self.context, "unit": "nats of log P(word)",
                "inputs": list(self.inputs), "targets": rows,
                "agreement": self.agreement_summary() if agree is not None else None}

    def frame(self) -> pd.DataFrame:
        """One line per (target, position) of the rows' readings: row, target, position, input, offset,
        score (nats), attention (NaN where the row has no slot for the position) and, for integrated
        gradients, the row's convergence delta."""
        rows, positions = np.nonzero(self.covered)
        out = {
            "row": rows, "target": [self.targets[r] for r in rows], "position": positions,
            "input": [self.inputs[p] for p in positions], "offset": rows - positions,
            "score": self.scores[rows, positions], "method": self.method,
        }
        if self.attention is not None:
            out["attention"] = np.where(self.attended[rows, positions], self.attention[rows, positions], math.nan)
        if self.convergence_delta is not None:
            out["convergence_delta"] = self.convergence_delta[rows]
        return pd.DataFrame(out)


def attribute(
    ckpt: Checkpoint,
    text: str | Sequence[str] | Sequence[Sequence[str]] | SentenceAnalysis,
    method: str = "integrated-gradients",
    n_steps: int = DEFAULT_STEPS,
    documents: list[int] | None = None,
    max_tokens: int | None = MAX_TOKENS,
    tolerance: float | None = DELTA_TOLERANCE,
    rows=None,
    progress: Callable[[float], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> Attribution:
    """Attribute ``log P(target)`` of every predicted word of ``text`` to the earlier input tokens.

    ``text``: free text (read as :func:`vizlm.inspect.analysis.analyze` reads it: sentences, documents at blank
    lines), one tokenised sentence (normalised words), consecutive tokenised sentences (``documents``:
    sentences per document, as :func:`~vizlm.inspect.analysis.analyze_sentences`), or an analysis of this
    checkpoint, whose rows the result keeps. ``method``: a key of :data:`METHODS`; ``n_steps``: integrated
    gradients' steps, doubled for the targets whose convergence delta exceeds ``tolerance`` times
    ``|log P(target) - log P(target | baseline)|`` until it does not (up to :data:`MAX_STEPS`; None: never).
    All targets of a reading are attributed together: gradient x input in one batched
    forward and backward pass (blocks of :data:`~vizlm.inspect.attribution_methods.ROW_BLOCK` targets), integrated
    gradients in ``n_steps`` times that over blocks of :data:`~vizlm.inspect.attribution_methods.IG_ROW_BLOCK` targets,
    each read only up to its last (in batches of :data:`~vizlm.inspect.attribution_methods.POSITION_BUDGET` positions),
    occlusion in one batched forward pass of every replaced copy.

    Cost. ``rows`` (row indices or a ``range``; None: every row) computes those rows only, each exactly as
    in the whole text's attribution (a row depends on its reading up to it alone), the others left out
    (:attr:`Attribution.computed`): a window of a long text costs that window, read up to its last row.
    ``n_steps`` is at most :data:`MAX_STEPS` (:func:`check_steps`, before anything is allocated);
    :func:`estimate_seconds` says the expected time beforehand. ``progress(fraction)`` is called as the
    batches finish; ``cancel()`` (a callable, e.g. ``threading.Event().is_set``) is asked before each batch
    of passes, and True stops with :class:`~vizlm.inspect.attribution_methods.AttributionCancelled`.
    """
    if method not in METHODS:
        raise AttributionError(f"unknown attribution method {method!r}; valid: {', '.join(METHODS)}")
    if method == "integrated-gradients":
        n_steps = check_steps(n_steps)
    sa = _analysis(ckpt, text, documents, max_tokens)
    want = _rows_wanted(rows, len(sa.targets))
    if method == "slot-effect":
        if sa.attention is None:
            raise AttributionError(f"{ckpt.label} has no attention: it has no slot effects")
        sa = with_slot_effects(ckpt, sa)
    T = len(sa.targets)
    covered = sa.readable()  # (T, T): the reading's positions from its start up to the row's own ...
    covered[:, sa.first_rows()] = False  # ... but the <s> it starts with, the same in every text
    scores = np.zeros((T, T))
    logprobs = sa.logprobs
    base = delta = steps = None
    if method == "slot-effect":
        positions = slot_positions(sa)  # (T, T): the slot of each position (-1: none)
        has = positions >= 0
        scores[has] = sa.slot_effects[np.nonzero(has)[0], positions[has]]
    else:
        ig = method == "integrated-gradients"
        base, delta, steps = (np.full(T, np.nan), np.full(T, np.nan), np.zeros(T, dtype=int)) if ig else (None, None, None)
        pieces = [(first, inputs, targets, np.flatnonzero(want[first : first + len(inputs)]))
                  for first, inputs, targets in reading_pieces(ckpt, sa)]
        meter = Meter(sum(_work(f, len(i), loc, method, n_steps) for f, i, _, loc in pieces), progress, cancel)
        for first, inputs, targets, local in pieces:
            if not len(local):
                continue
            b = int(local.max()) + 1  # the piece is read up to its last wanted row
            span = slice(first, first + b)
            if method == "occlusion":
                part = occlusion(ckpt.model, inputs[:b], targets[:b], ckpt.vocab.unk_id, meter)
            else:
                part, bl, d, n = gradients(ckpt.model, inputs[:b], targets[:b], method, n_steps, tolerance,
                                           torch.from_numpy(local), meter, max_steps=MAX_STEPS)
                if base is not None:
                    g = first + local
                    base[g], delta[g], steps[g] = bl[local], d[local], n[local]
            keep = np.zeros(b, dtype=bool)
            keep[local] = True
            scores[span, span] = np.where(keep[:, None], part.double().cpu().numpy(), 0.0)
    covered &= want[:, None]  # rows not computed read nothing here
    scores[~covered] = 0.0  # never a later position, another sentence's or the reading's <s>: exactly zero
    if not np.isfinite(scores).all():  # finite outputs, but gradients that overflow: no number to show
        rows = np.nonzero(~np.isfinite(scores).all(1))[0]
        raise AttributionError(f"{ckpt.label}: its {method} attribution is not finite (NaN or infinite) for "
                               f"{len(rows):,} of {T:,} words, the first {sa.targets[rows[0]]!r}; vizlm cannot show it")
    attention, attended = _attention_on_positions(sa)
    return Attribution(
        model=ckpt.label, method=method, context=sa.context, inputs=sa.input_labels, targets=list(sa.targets),
        scores=scores, covered=covered, logprobs=logprobs, attention=attention, attended=attended,
        read_effect=sa.read_effect, baseline_logprobs=base, convergence_delta=delta,
        steps=steps, analysis=sa, computed=None if want.all() else want,
    )


def _attention_on_positions(sa: SentenceAnalysis) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(attention, attended)`` [T, T] each: the weight row r puts on the slot holding position p, and whether it
    has one it could attend to (:func:`slot_positions`); ``(None, None)`` without attention."""
    if sa.attention is None:
        return None, None
    T = len(sa.targets)
    positions = slot_positions(sa)
    attended = (positions >= 0) & sa.allowed()[np.arange(T)[:, None], positions.clip(0)]
    return np.where(attended, sa.attention[np.arange(T)[:, None], positions.clip(0)], 0.0), attended


def _analysis(ckpt: Checkpoint, text, documents: list[int] | None, max_tokens: int | None) -> SentenceAnalysis:
    """The text read in the checkpoint's context, with read effects (attention models) and no slot effects."""
    if isinstance(text, SentenceAnalysis):
        if text.model != ckpt.label:
            raise AttributionError(f"the analysis is of {text.model}, not of {ckpt.label}")
        return text
    if isinstance(text, str):
        return analyze(ckpt, text, top_k=0, effects=True, max_effect_pairs=0)
    sentences = list(text)
    if not sentences:
        raise AttributionError("nothing to attribute: the text has no words")
    if all(isinstance(w, str) for w in sentences):  # one tokenised sentence
        sentences = [sentences]
    sentences = [list(s) for s in sentences]
    return analyze_sentences(ckpt, sentences, top_k=0, effects=True, max_effect_pairs=0, max_tokens=max_tokens,
                             documents=documents)


def _float(x) -> float | None:
    """A number for JSON: None where it is not defined (NaN)."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


__all__ = [
    "DEFAULT_STEPS", "METHODS", "Attribution", "attribute", "check_steps", "estimate_seconds",
]
