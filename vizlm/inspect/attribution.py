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
positions **both** cover: those with a slot the row could attend to.

Agreement (:func:`agreement`): Kendall's tau-b between attention weight and ``|attribution|`` (by default:
a word that lowers the prediction matters as much as one that raises it), whether the most attended
position is among the most important ones, and the overlap of the three heaviest of each.

Corpus statistics (:func:`corpus_attribution`, cached on disk like :mod:`vizlm.inspect.corpus_stats`'s): the
distribution of agreement with 95% intervals, Jain & Wallace's permutation test (shuffle each row's
attention weights over its own slots: how far does the prediction move?), and attribution by relative
position beside the attention's (Daniluk et al., Fig. 3).

All scores are in nats of ``log P(target)``. captum is imported when a method first runs, so importing
this module stays light.
"""

from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from vizlm.inspect.analysis import LN2, SentenceAnalysis, distance, analyze, analyze_sentences, with_slot_effects
from vizlm.inspect.cache import cached, checkpoint_digest, stored
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.data.registry import load_corpus, split_checksum
from vizlm.data.vocab import Vocab
from vizlm.core.errors import VizlmError
from vizlm.models import REGISTRY
from vizlm.models.base import RecurrentLM, device_of, memory_of
from vizlm.data.text import MAX_TOKENS

METHODS = {  # the interface's names -> what each measures
    "gradient-x-input": "gradient of log P(target) times the input embedding, summed over its dimensions",
    "integrated-gradients": "gradients integrated from zero embeddings to the input, times the input",
    "occlusion": "log P(target) minus the same with the input token replaced by <unk>",
    "slot-effect": "log P(target) minus the same with the token's memory slot dropped (attention models)",
}
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
MAX_STEPS = 512  # the most steps any door accepts (API, CLI, app); the doubling stops here too
ROW_BLOCK = 64  # targets attributed in one batch: the block's copies of the text read up to its last row
# Integrated gradients' blocks are smaller: each copy is read n_steps times, so reading a block only up to its
# own last row matters more than the passes it adds (a 40-token sentence, 32 steps, one core: 8-row blocks take
# 45-55% less time than one 41-row block for lstm, amsrn and kvp-doc; gradient x input is fastest in one block).
IG_ROW_BLOCK = 8
POSITION_BUDGET = 1 << 17  # text positions per forward pass (copies x length): bounds memory on long passages
TOP_K = 3
# Attribution.highlights without a setting: the positions with at least a fifth of the row's largest |attribution|.
# Relative to the largest, not to the row's total: the total spreads over every word read, so a share of it shrinks
# with the length of the reading (in a 100-word passage no word holds a fifth of it and nothing was highlighted),
# while a share of the largest means the same on a short sentence and a long passage and always shows the word
# the prediction depended on most, with those that matter nearly as much.
DEFAULT_SHARE = 0.2
# corpus statistics
ATTRIBUTION_VERSION = 1  # in the cache key: bump when the statistics change
MAX_OFFSET = 30  # the most words back the position statistics keep (beyond: summed)
PASSAGE_TOKENS = 100  # a document model reads a document in passages of whole sentences up to this many tokens
PERMUTATIONS = 10  # shuffles of each row's attention in the permutation test
MAX_PERMUTATIONS = 1000  # the most any door accepts (Jain & Wallace used 100)
# Attribution by distance as the Positions page shows it (and data/stats/ ships it for the bundled models):
# gradient x input, one backward pass per block of predicted words, and no permutation test (the page does not
# show it; it doubles an attention model's time). One dict, so the page, the shipping script and the tests ask
# for the same cache entry.
BY_DISTANCE = {"method": "gradient-x-input", "permutations": 0}
PERMUTATION_ROWS = 64  # shuffled rows per output-layer call: 64 x 10k logits (2.5 MB) stay in the CPU cache
# The families whose head reads a carried memory exactly as its own slots (row_head): vizlm's own recurrent ones
# (the Transformer's head is its output layer alone: its whole head is computed and the row taken).
_ROW_HEAD_FAMILIES = frozenset(cls for _, cls, _ in REGISTRY.values() if issubclass(cls, RecurrentLM))
N_BOOT = 1000


class AttributionError(VizlmError, ValueError):
    """An attribution that cannot be computed from the input (a message meant for the user)."""


class AttributionCancelled(AttributionError):
    """:func:`attribute` stopped because its ``cancel`` said so (between two batches of its passes)."""


def check_steps(n_steps) -> int:
    """``n_steps`` if it is a whole number from 1 to :data:`MAX_STEPS`, else :class:`AttributionError`: the bound
    every door (the API, the CLI, the app) applies before anything is allocated."""
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
    """Units of work (positions read, times steps) of one piece's rows ``local``, as :func:`_gradients` and
    :func:`_occlusion` read them."""
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


class _Meter:
    """Progress and cancellation of one :func:`attribute`: units done of the planned total, reported as a
    fraction; ``cancel`` asked before every batch (its passes' forward calls)."""

    def __init__(self, total: int, progress: Callable[[float], None] | None, cancel: Callable[[], bool] | None):
        self.total, self.done, self.progress, self.cancel = max(1, total), 0, progress, cancel

    def check(self) -> None:
        if self.cancel is not None and self.cancel():
            raise AttributionCancelled("attribution cancelled")

    def add(self, units: int) -> None:
        self.done += units
        self.total = max(self.total, self.done)  # a round of more steps adds to the plan
        if self.progress is not None:
            self.progress(min(1.0, self.done / self.total))


# --------------------------------------------------------------------------- one text
@dataclass
class Attribution:
    """One method on one text, one model. ``T`` rows (the analysis's targets) and ``T`` input positions
    (the token read at each step, :attr:`inputs`); all scores in nats of ``log P(target)``."""

    model: str
    method: str
    context: str  # how the model read the text (vizlm.inspect.analysis.READINGS)
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

    def highlights(self, row: int | str, threshold: float | None = None, top_k: int | None = None) -> list[int]:
        """The positions row ``row`` depended on most, by ``|attribution|``, largest first: the ``top_k``
        largest, or those with at least ``threshold`` (default :data:`DEFAULT_SHARE`) of the row's largest
        ``|attribution|``, so that the largest is always among them, however long the reading. Positions with
        no attribution at all (exactly 0, e.g. a row reading only ``<s>``) are never highlighted. ``row``: a
        number or a predicted word (:meth:`row_of`)."""
        row = self.row_of(row)
        self._check_row(row)
        size = np.abs(self.scores[row]) * self.covered[row]  # (T,)
        order = [int(p) for p in np.argsort(-size, kind="stable") if size[p] > 0]
        if top_k is not None:
            return order[:top_k]
        cut = DEFAULT_SHARE if threshold is None else threshold
        return [p for p in order if size[p] >= cut * size.max()]

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

    def agreement_summary(self, absolute: bool = True, k: int = TOP_K) -> dict:
        """The text's agreement: mean tau-b, share of top-1 matches and mean top-k overlap over the targets
        with at least two positions to rank (a row with one slot chooses nothing)."""
        rows = self.agreement(absolute, k)
        rows = rows[rows.positions >= 2]
        tau = rows.kendall_tau.to_numpy(float)
        return {"targets": len(rows), "kendall_tau": _nanmean(tau), "top1_share": _nanmean(rows.top1.to_numpy(float)),
                f"top{k}_overlap": _nanmean(rows.top_k_overlap.to_numpy(float))}

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
    forward and backward pass (blocks of :data:`ROW_BLOCK` targets), integrated gradients in ``n_steps``
    times that over blocks of :data:`IG_ROW_BLOCK` targets, each read only up to its last (in batches of
    :data:`POSITION_BUDGET` positions), occlusion in one batched forward pass of every replaced copy.

    Cost. ``rows`` (row indices or a ``range``; None: every row) computes those rows only, each exactly as
    in the whole text's attribution (a row depends on its reading up to it alone), the others left out
    (:attr:`Attribution.computed`): a window of a long text costs that window, read up to its last row.
    ``n_steps`` is at most :data:`MAX_STEPS` (:func:`check_steps`, before anything is allocated);
    :func:`estimate_seconds` says the expected time beforehand. ``progress(fraction)`` is called as the
    batches finish; ``cancel()`` (a callable, e.g. ``threading.Event().is_set``) is asked before each batch
    of passes, and True stops with :class:`AttributionCancelled`.
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
        meter = _Meter(sum(_work(f, len(i), loc, method, n_steps) for f, i, _, loc in pieces), progress, cancel)
        for first, inputs, targets, local in pieces:
            if not len(local):
                continue
            b = int(local.max()) + 1  # the piece is read up to its last wanted row
            span = slice(first, first + b)
            if method == "occlusion":
                part = _occlusion(ckpt.model, inputs[:b], targets[:b], ckpt.vocab.unk_id, meter)
            else:
                part, bl, d, n = _gradients(ckpt.model, inputs[:b], targets[:b], method, n_steps, tolerance,
                                            torch.from_numpy(local), meter)
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
    attention = attended = None
    if sa.attention is not None:
        positions = slot_positions(sa)
        attended = (positions >= 0) & sa.allowed()[np.arange(T)[:, None], positions.clip(0)]
        attention = np.where(attended, sa.attention[np.arange(T)[:, None], positions.clip(0)], 0.0)
    return Attribution(
        model=ckpt.label, method=method, context=sa.context, inputs=sa.input_labels, targets=list(sa.targets),
        scores=scores, covered=covered, logprobs=logprobs, attention=attention, attended=attended,
        read_effect=sa.read_effect, baseline_logprobs=base, convergence_delta=delta,
        steps=steps, analysis=sa, computed=None if want.all() else want,
    )


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


def reading_pieces(ckpt: Checkpoint, sa: SentenceAnalysis):
    """``(first row, inputs (Tb,), targets (Tb,))`` of each piece the model reads from a zero state: the
    text cut after its restarts (:attr:`~vizlm.inspect.analysis.SentenceAnalysis.restarts`), ``<s>`` first, as
    :func:`vizlm.inspect.analysis.analyze_sentences` reads it."""
    cuts = [-1, *sa.restarts, len(sa.norms)]
    for a, b in zip(cuts, cuts[1:]):
        ids = ckpt.vocab.encode(sa.norms[a + 1 : b])
        device = device_of(ckpt.model)  # read where the model is; results come back to the CPU
        yield a + 1, torch.tensor([Vocab.bos_id, *ids], device=device), torch.tensor([*ids, Vocab.eos_id], device=device)


def slot_positions(sa: SentenceAnalysis) -> np.ndarray:
    """[T, T] the memory slot holding position p for row r (``p + 1``), -1 where there is none: the
    current word and later, positions outside the row's reading (a reading's start slot holds nothing)."""
    T = len(sa.targets)
    rows, pos = np.arange(T)[:, None], np.arange(T)[None, :]
    ok = (pos < rows) & (pos >= sa.first_rows()[:, None])  # (T, T): slot p + 1 in the reading, before the row's
    return np.where(ok, pos + 1, -1)


# --------------------------------------------------------------------------- gradient methods
class _Fed(nn.Module):
    """Stands in for an embedding table: returns the embeddings it was given for the ids it is called with."""

    def __init__(self):
        super().__init__()
        self.value: torch.Tensor | None = None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.value is None or self.value.shape[:2] != ids.shape:
            raise RuntimeError("embeddings were not given for these ids")
        return self.value  # (B, T, d)


def _fed_copy(model: nn.Module) -> tuple[nn.Module, list[nn.Embedding], list[_Fed]]:
    """A shallow copy of ``model`` whose embedding tables return given embeddings, the tables, and the
    stand-ins. The parameters are shared; ``model`` itself is never changed (the app shares one model
    between sessions, so no hook is registered on it)."""
    tables = [(name, m) for name, m in model.named_children() if isinstance(m, nn.Embedding)]
    if any(isinstance(m, nn.Embedding) for name, m in model.named_modules() if "." in name):
        raise AttributionError(f"{type(model).__name__} has an embedding table below its top level")
    clone = copy.copy(model)
    clone._modules = dict(model._modules)  # its own table of submodules
    feeds = []
    for name, _ in tables:
        feeds.append(_Fed())
        clone._modules[name] = feeds[-1]
    return clone, [m for _, m in tables], feeds


def _target_logprob(clone: nn.Module, feeds: list[_Fed], n: int, check: Callable[[], None] | None = None) -> Callable:
    """captum's forward function: ``(*embeddings (N, T, d), ids (N, T), rows (N,), targets (N,))`` ->
    ``log P(targets[i])`` at row ``rows[i]`` of copy ``i``: (N,). Only those rows go through the output
    layer (copy ``i`` of a block is read for one target). ``check()`` runs first (a cancelled request
    raises there, between two batches of steps)."""

    def forward(*args):
        if check is not None:
            check()
        embs, (ids, rows, targets) = args[:n], args[n:]
        for feed, e in zip(feeds, embs):
            feed.value = e
        try:
            h = clone.encode(ids)  # (N, T, D)
        finally:
            for feed in feeds:
                feed.value = None
        ro = row_head(clone, h, rows).readout  # features (N, 1, F), logits not multiplied out
        logp = F.linear(ro.features[:, 0], ro.weight, ro.bias).log_softmax(-1)  # (N, V)
        return logp.gather(1, targets[:, None])[:, 0]  # (N,)

    return forward


def row_head(model: nn.Module, h: torch.Tensor, rows: torch.Tensor, memory_h: torch.Tensor | None = None):
    """The head of row ``rows[i]`` of copy ``i`` alone: an :class:`~vizlm.models.base.LMOutput` of one step
    per copy (readout features (N, 1, F)), from the outputs ``h`` (N, T, D) of copies read from a zero state.
    ``memory_h`` (N, T, D): other outputs to build the memory slots from (the row's own output, the query,
    still from ``h``), the two paths of :mod:`vizlm.inspect.faithfulness`; built-in families only.

    A row depends only on its own output and the memory slots before it (:mod:`vizlm.models.base`), and a
    model's head reads those as a document's carried memory (``head(h, memory, valid)``, the interface a
    :class:`~vizlm.models.base.State` uses): the slots up to the row's, right-aligned, the older ones masked by
    ``valid``. So the attention of a copy's other rows, (T, S) per copy and most of the head's cost for AMSRN and
    Salton (a 100-token passage: 100 copies x 100 rows x 100 slots), is never computed. Built-in families only
    (each holds this in tests/test_attribution.py); another family's whole head is computed and its row taken."""
    N, T = h.shape[:2]
    copy_idx = torch.arange(N, device=h.device)
    if type(model) not in _ROW_HEAD_FAMILIES:
        if memory_h is not None:
            raise AttributionError(f"{type(model).__name__} is not a built-in family: its memory cannot be read apart")
        out = model.head(h)
        out.readout.features = out.readout.features[copy_idx, rows][:, None]  # (N, 1, F)
        return out
    now = h[copy_idx, rows][:, None]  # (N, 1, D)
    try:
        M = model.memory_size()  # the slots a state carries: the window, N - 2 outputs, none for the LSTM
    except ValueError:  # a sentence model attending to the whole sentence: every slot
        M = T
    if not M:
        return model.head(now)
    slots = memory_of(model.to_slots(h if memory_h is None else memory_h))  # (N, T, slot): slot j holds step j - 1's outputs, slot 0 zero
    src = rows[:, None] + torch.arange(1 - M, 1, device=h.device)  # (N, M): the slot at each memory position
    mem = slots.gather(1, src.clamp_min(0)[..., None].expand(-1, -1, slots.shape[-1]))  # (N, M, slot)
    mem = mem * (src >= 0)[..., None].to(mem.dtype)  # zero before slot 0, as a document starts
    valid = (rows + model.start_slots()).clamp_max(M)  # (N,) real slots: the start slot (if any) and the row's
    return model.head(now, mem, valid)


def _gradients(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, method: str, n_steps: int,
               tolerance: float | None = None, rows: torch.Tensor | None = None,
               meter: _Meter | None = None) -> tuple[torch.Tensor, np.ndarray | None, np.ndarray | None,
                                                        np.ndarray | None]:
    """``(scores (Tb, Tb), baseline log P (Tb,), convergence delta (Tb,), steps (Tb,))`` of one piece
    (``inputs`` ``<s>`` first, ``targets`` (Tb,)): row r's attribution to input position p, for every row;
    the last three None for gradient x input. Integrated gradients: the rows whose delta exceeds
    ``tolerance`` times ``|log P - log P(baseline)|`` are computed again with twice the steps, up to
    :data:`MAX_STEPS`. ``rows``: those rows only (ascending; the others stay 0); ``meter``: progress and
    cancellation (:class:`_Meter`)."""
    from captum.attr import InputXGradient, IntegratedGradients

    meter = meter or _Meter(1, None, None)
    clone, tables, feeds = _fed_copy(model)
    forward = _target_logprob(clone, feeds, len(tables), meter.check)
    Tb = len(inputs)
    scores = torch.zeros(Tb, Tb, dtype=torch.float64)
    ig = method == "integrated-gradients"
    base, delta, steps = (np.zeros(Tb), np.zeros(Tb), np.zeros(Tb, dtype=int)) if ig else (None, None, None)

    def block(rows: torch.Tensor, n: int) -> None:  # attribute the targets of ``rows`` (ascending, CPU) with n steps
        b = int(rows[-1]) + 1
        ids = inputs[:b].expand(len(rows), b).contiguous()  # (n, b): one copy per target, read up to the last row
        here = rows.to(inputs.device)  # the rows where the model reads
        extra = (ids, here, targets[here])
        embs = tuple(t(ids).detach().requires_grad_() for t in tables)  # (n, b, d) each
        if not ig:
            attr = InputXGradient(forward).attribute(embs, additional_forward_args=extra)
        else:  # the baseline: every word's embedding zero, the <s> the reading starts with as it is
            zeros = tuple(torch.cat([e[:, :1], torch.zeros_like(e[:, 1:])], 1).detach() for e in embs)
            per_pass = max(len(rows), POSITION_BUDGET // b)  # copies per pass (captum: >= 2 steps of every copy)
            attr, d = IntegratedGradients(forward).attribute(
                embs, baselines=zeros, additional_forward_args=extra, n_steps=n, method="gausslegendre",
                internal_batch_size=per_pass, return_convergence_delta=True)
            idx = rows.numpy()
            with torch.no_grad():
                base[idx] = forward(*zeros, *extra).double().cpu().numpy()
            delta[idx], steps[idx] = d.detach().double().cpu().numpy(), n
        scores[rows, :b] = sum(x.detach().double().sum(-1) for x in attr).cpu()  # (n, b): summed over d and tables
        meter.add(len(rows) * b * (n if ig else 1))

    with torch.enable_grad():
        todo, n = (torch.arange(Tb) if rows is None else rows), n_steps
        size = IG_ROW_BLOCK if ig else ROW_BLOCK
        while len(todo):
            for k in range(0, len(todo), size):
                block(todo[k : k + size], n)
            if not ig or tolerance is None or 2 * n > MAX_STEPS:
                break
            gap = np.abs(scores.sum(1).numpy() - delta)  # |log P(target) - log P(target | baseline)|
            todo = torch.from_numpy(np.flatnonzero(np.abs(delta) > tolerance * gap))
            n *= 2
    return scores, base, delta, steps


# --------------------------------------------------------------------------- occlusion
def _occlusion(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, unk: int,
               meter: _Meter | None = None) -> torch.Tensor:
    """(Tb, Tb): row r's log P(target) minus the same with input position p read as ``<unk>``, from
    captum's FeatureAblation over one piece; every target comes from each replaced copy's one pass."""
    from captum.attr import FeatureAblation

    Tb = len(inputs)
    meter = meter or _Meter(1, None, None)

    @torch.no_grad()
    def forward(ids: torch.Tensor) -> torch.Tensor:  # (k, Tb) -> (k, Tb) log P of every row's target
        meter.check()
        out = -model(ids).token_nll(targets.expand(ids.shape[0], Tb))
        meter.add(ids.shape[0] * Tb)
        return out

    per_pass = max(1, POSITION_BUDGET // Tb)
    replace = torch.full((1, Tb), unk, device=inputs.device)
    replace[0, 0] = inputs[0]  # the <s> the reading starts with is not replaced: its column stays 0
    attr = FeatureAblation(forward).attribute(
        inputs[None], baselines=replace, feature_mask=torch.arange(Tb, device=inputs.device)[None],
        perturbations_per_eval=min(Tb, per_pass))
    return attr.reshape(Tb, Tb).double()  # (outputs = rows, positions)


# --------------------------------------------------------------------------- agreement
def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b (ties in either ranking corrected, as ``scipy.stats.kendalltau``'s default):
    ``(concordant - discordant) / sqrt((n0 - ties_x) (n0 - ties_y))`` over the ``n0`` pairs; NaN below two
    values or when either is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    if n < 2:
        return math.nan
    i, j = np.triu_indices(n, 1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])  # (pairs,)
    n0 = len(i)
    denom = math.sqrt(float(n0 - (dx == 0).sum()) * float(n0 - (dy == 0).sum()))
    return float((dx * dy).sum() / denom) if denom > 0 else math.nan


def _top(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values, ties broken by position (the later one, the nearer word, first)."""
    order = np.lexsort((-np.arange(len(values)), -values))
    return order[:k]


def agreement(attention_row: Sequence[float], attribution_row: Sequence[float], positions: Sequence[int],
              absolute: bool = True, k: int = TOP_K) -> dict:
    """How one target's attention and attribution agree over ``positions`` (the positions both cover):

    * ``kendall_tau``: tau-b of weight and importance (``|attribution|`` when ``absolute``), NaN below two
      positions or when either is constant;
    * ``top1``: 1.0 when a most attended position is a most important one (exact ties all count), else 0.0;
    * ``top_k_overlap``: the share of the ``k`` heaviest positions of each that are in both (of
      ``min(k, positions)``; ties broken by position, the nearer word first);
    * ``positions``: how many positions were compared (NaN metrics with none).
    """
    pos = np.asarray(positions, dtype=int)
    a = np.asarray(attention_row, dtype=float)[pos]
    b = np.asarray(attribution_row, dtype=float)[pos]
    if absolute:
        b = np.abs(b)
    n = len(pos)
    if n == 0:
        return {"positions": 0, "kendall_tau": math.nan, "top1": math.nan, "top_k_overlap": math.nan}
    top1 = float(bool(((a == a.max()) & (b == b.max())).any()))
    m = min(k, n)
    overlap = len(set(_top(a, m).tolist()) & set(_top(b, m).tolist())) / m
    return {"positions": n, "kendall_tau": kendall_tau(a, b), "top1": top1, "top_k_overlap": overlap}


def _float(x) -> float | None:
    """A number for JSON: None where it is not defined (NaN)."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _nanmean(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else math.nan


# --------------------------------------------------------------------------- permutation test
@torch.no_grad()
def permutation_shift(ckpt: Checkpoint, sa: SentenceAnalysis, permutations: int = PERMUTATIONS,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Jain & Wallace's permutation test on one analysed text: each row's attention weights shuffled over
    the slots the row could attend to (its own weights, another order), the head recomputed with them
    (the recurrent states as read: :meth:`~vizlm.models.base.AttentionLM.head` with ``weights``).

    Returns ``(|delta log P(target)|, total variation distance of the next-word distribution)``, each
    (T, permutations); NaN for rows with fewer than two slots (nothing to shuffle)."""
    if sa.attention is None:
        raise AttributionError(f"{sa.model} has no attention: there is nothing to permute")
    model = ckpt.model
    rng = np.random.default_rng(seed)
    T = len(sa.targets)
    allowed = sa.allowed()
    dlogp = np.full((T, permutations), math.nan)
    tvd = np.full((T, permutations), math.nan)
    for first, inputs, targets in reading_pieces(ckpt, sa):
        Tb = len(inputs)
        h = model.encode(inputs[None])  # (1, Tb, D)
        out = model.head(h)
        att = out.attention[0]  # (Tb, Tb) the piece's own slots
        mask = allowed[first : first + Tb, first : first + Tb]  # (Tb, Tb)
        shuffle = [r for r in range(Tb) if mask[r].sum() >= 2]
        if not shuffle:
            continue
        dev = att.device  # the model's; the results come back to the CPU
        m = torch.tensor(np.asarray(mask, dtype=bool), device=dev)  # (Tb, Tb), a copy: the mask may be read only
        keys = torch.from_numpy(rng.random((permutations, Tb, Tb))).to(dev).masked_fill(~m, math.inf)  # (K, Tb, Tb)
        order = keys.argsort(-1)  # (K, Tb, Tb): a random order of each row's allowed slots first
        span = torch.arange(Tb, device=dev)
        allowed_first = torch.where(m, span, span + Tb).argsort(-1)  # (Tb, Tb): the allowed slots in order first
        src = att.expand(permutations, Tb, Tb).gather(-1, order)  # (K, Tb, Tb) the weights in shuffled order
        # slot allowed_first[r, i] gets the weight of slot order[q, r, i]: a permutation over the allowed slots;
        # beyond them both index slots with weight 0
        weights = torch.zeros_like(src).scatter(-1, allowed_first.expand(permutations, Tb, Tb), src)
        rows = torch.tensor(shuffle, device=dev)  # (R,)
        tgt = targets[rows]
        own = out.readout
        logp = F.linear(own.features[0, rows], own.weight, own.bias).log_softmax(-1)  # (R, V) as computed
        base, p = logp.gather(-1, tgt[:, None])[:, 0], logp.exp()  # (R,), (R, V)
        # only the shuffled rows go through the output layer, a few permutations per call (K x R x 10k logits
        # would not stay in the cache), and the distributions are compared in place
        feats = model.head(h.expand(permutations, -1, -1), weights=weights).readout.features[:, rows]  # (K, R, F)
        d, t = base.new_empty(permutations, len(rows)), base.new_empty(permutations, len(rows))  # (K, R)
        per_call = max(1, PERMUTATION_ROWS // len(rows))
        for k in range(0, permutations, per_call):
            moved = F.linear(feats[k : k + per_call], own.weight, own.bias).log_softmax(-1)  # (k, R, V)
            d[k : k + per_call] = moved.gather(-1, tgt[None, :, None].expand(len(moved), -1, 1))[..., 0] - base
            t[k : k + per_call] = 0.5 * moved.exp_().sub_(p).abs_().sum(-1)
        dlogp[first + np.array(shuffle)] = d.abs().T.double().cpu().numpy()
        tvd[first + np.array(shuffle)] = t.T.double().cpu().numpy()
    return dlogp, tvd


# --------------------------------------------------------------------------- corpus statistics
def reading_units(sentences: list[list[str]], ids: list[str], document: bool, passage_tokens: int) -> list[list[int]]:
    """The sentence indices each unit reads: every sentence alone (a sentence model), or passages of
    consecutive whole sentences of one document up to ``passage_tokens`` tokens (a document model; a
    longer sentence alone), each read as running text from a zero state as an analysed passage is."""
    keep = [i for i, s in enumerate(sentences) if s]
    if not document:
        return [[i] for i in keep]
    units: list[list[int]] = []
    doc_of = [sid.rpartition(":")[0] or f"\0{k}" for k, sid in enumerate(ids)]
    size = 0
    for i in keep:
        n = len(sentences[i]) + 1
        if units and doc_of[units[-1][-1]] == doc_of[i] and size + n <= passage_tokens:
            units[-1].append(i)
            size += n
        else:
            units.append([i])
            size = n
    return units


def model_window(ckpt: Checkpoint) -> int | None:
    """How many of the newest slots a row may attend to (Daniluk et al.'s L, RM's n, AMSRN's and Salton's
    ``memory``); None: the whole reading, or no attention."""
    return ckpt.model.window_size() if ckpt.has_attention else None


def corpus_attribution(
    ckpt: Checkpoint, corpus: str, split: str, method: str = "gradient-x-input", limit: int | None = None,
    n_steps: int = DEFAULT_STEPS, permutations: int = PERMUTATIONS, max_offset: int = MAX_OFFSET,
    passage_tokens: int = PASSAGE_TOKENS, absolute: bool = True, n_boot: int = N_BOOT, seed: int = 0,
    use_cache: bool = True, progress: Callable[[float], None] | None = None,
) -> dict:
    """Attribution over a processed split (its first ``limit`` sentences), cached (:mod:`vizlm.inspect.cache`,
    keyed by the checkpoint's and the split's checksums, the method and every parameter).

    Each unit (:func:`_units`: a sentence, or a document model's passage) is read in the model's
    context and attributed with ``method``. The result (JSON-able):

    * ``positions``: per offset ``0..max_offset`` (0: the current word), the mean share of a row's
      ``|attribution|`` at that many words back over the rows that reach it, with a normal 95% interval
      (as :mod:`vizlm.inspect.corpus_stats`'s positions), the mean attention weight there (attention models), and
      ``beyond``: the mean share further back; ``beyond_window``: the share beyond the model's attention
      window (:func:`model_window`; None without one);
    * attention models only: ``agreement`` (per target over the positions both cover, rows with at least
      two: tau-b mean, median, quantiles; the share of targets whose most attended word is the most
      important one; top-3 overlap) and ``permutation`` (Jain & Wallace: per target the median over
      ``permutations`` shuffles of ``|delta log P(target)|`` and of the total variation distance of the
      next-word distribution; their corpus median and mean, and the share of targets the median shuffle
      moves by more than 1 bit);

    every interval a 95% bootstrap over units (sentences, or a document model's passages: targets of one
    unit are not independent), ``n_boot`` resamples from ``seed``.
    """
    if method == "integrated-gradients":
        n_steps = check_steps(n_steps)
    parts = _cache_parts(ckpt, corpus, split, method, limit, n_steps, permutations, max_offset, passage_tokens,
                         absolute, n_boot, seed)

    def compute() -> dict:
        rows, units = collect(ckpt, corpus, split, method, limit, n_steps, permutations, max_offset, passage_tokens,
                              absolute, seed, progress)
        return {"model": ckpt.label, "method": method, "corpus": corpus, "split": split, "context": parts["context"],
                "units": units, "resampled": "passages" if parts["context"] == "document" else "sentences",
                **_statistics(rows, units, model_window(ckpt), max_offset, n_boot, seed)}

    return cached(parts, compute, use_cache)


def _cache_parts(ckpt: Checkpoint, corpus: str, split: str, method: str, limit: int | None, n_steps: int,
                 permutations: int, max_offset: int, passage_tokens: int, absolute: bool, n_boot: int,
                 seed: int) -> dict:
    """:func:`corpus_attribution`'s cache key: the checkpoint's and the split's checksums and every parameter."""
    if method not in METHODS:
        raise AttributionError(f"unknown attribution method {method!r}; valid: {', '.join(METHODS)}")
    document = getattr(ckpt.model.config, "context", "sentence") == "document"
    parts = {"kind": "attribution", "version": ATTRIBUTION_VERSION, "checkpoint": checkpoint_digest(ckpt),
             "corpus": split_checksum(corpus, split), "method": method, "limit": limit,
             "permutations": permutations, "max_offset": max_offset, "absolute": absolute, "n_boot": n_boot,
             "seed": seed, "context": "document" if document else "sentence"}
    if method == "integrated-gradients":
        parts["n_steps"] = n_steps
    if document:
        parts["passage_tokens"] = passage_tokens
    return parts


def is_stored(ckpt: Checkpoint, corpus: str, split: str, method: str = "gradient-x-input", limit: int | None = None,
              n_steps: int = DEFAULT_STEPS, permutations: int = PERMUTATIONS, max_offset: int = MAX_OFFSET,
              passage_tokens: int = PASSAGE_TOKENS, absolute: bool = True, n_boot: int = N_BOOT,
              seed: int = 0) -> bool:
    """Whether :func:`corpus_attribution` with these arguments is read from the disk cache or the shipped
    statistics (``data/stats/``) rather than computed: the cost is said only for what will be computed."""
    return stored(_cache_parts(ckpt, corpus, split, method, limit, n_steps, permutations, max_offset, passage_tokens,
                               absolute, n_boot, seed))


def corpus_agreement(ckpt: Checkpoint, corpus: str, split: str, method: str = "gradient-x-input",
                     limit: int | None = None, **kwargs) -> dict:
    """:func:`corpus_attribution` of an attention model (its ``agreement`` and ``permutation`` parts);
    raises :class:`AttributionError` for a model without attention."""
    if not ckpt.has_attention:
        raise AttributionError(f"{ckpt.label} has no attention: there is nothing to agree with")
    return corpus_attribution(ckpt, corpus, split, method, limit, **kwargs)


def _collect(ckpt, sentences, ids, units, method, n_steps, permutations, max_offset, absolute, seed,
             progress) -> dict:
    """Per-target arrays over the units: unit index, agreement, permutation shifts, position shares."""
    W = max_offset
    unit_of, tau, top1, topk, npos = [], [], [], [], []
    dlogp, tvd, perm_unit = [], [], []
    share = []  # (rows, W + 2): shares at offsets 0..W and beyond W
    reach = []  # (rows, W + 1) bool: the offset is in the row's reading
    beyond_window = []
    att_at = []  # (rows, W + 1) attention weight at offsets 0..W (NaN: no slot)
    window = model_window(ckpt)
    for k, unit in enumerate(units):
        # read without the read effects, which the statistics do not use (one output layer fewer)
        sa = analyze_sentences(ckpt, [sentences[i] for i in unit], top_k=0, effects=False, max_tokens=None)
        res = attribute(ckpt, sa, method, n_steps)
        T = len(res.targets)
        off = res.offsets()
        mag = np.abs(res.scores)
        total = mag.sum(1)  # (T,)
        shares = np.zeros((T, W + 2))
        reached = np.zeros((T, W + 1), dtype=bool)
        for o in range(W + 1):
            at = res.covered & (off == o)
            shares[:, o] = (mag * at).sum(1)
            reached[:, o] = at.any(1)
        shares[:, W + 1] = (mag * (res.covered & (off > W))).sum(1)
        ok = total > 0
        shares[ok] /= total[ok, None]
        shares[~ok] = math.nan
        share.append(shares)
        reach.append(reached)
        if window is not None:
            bw = np.where(ok, (mag * (res.covered & (off > window))).sum(1) / np.where(ok, total, 1), math.nan)
            beyond_window.append(bw)
        unit_of.append(np.full(T, k))
        if res.attention is not None:
            agree = res.agreement(absolute)
            tau.append(agree.kendall_tau.to_numpy(float))
            top1.append(agree.top1.to_numpy(float))
            topk.append(agree.top_k_overlap.to_numpy(float))
            npos.append(agree.positions.to_numpy(int))
            w = np.full((T, W + 1), math.nan)
            for o in range(1, W + 1):
                at = res.attended & (off == o)
                has = at.any(1)
                w[has, o] = (res.attention * at).sum(1)[has]
            att_at.append(w)
            if permutations:
                d, t = permutation_shift(ckpt, res.analysis, permutations, seed + k)
                dlogp.append(np.median(d, 1))
                tvd.append(np.median(t, 1))
                perm_unit.append(np.full(T, k))
        if progress:
            progress((k + 1) / len(units))
    return {"unit": _cat(unit_of), "share": np.concatenate(share) if share else np.zeros((0, W + 2)),
            "reach": np.concatenate(reach) if reach else np.zeros((0, W + 1), bool),
            "beyond_window": _cat(beyond_window) if window is not None else None,
            "tau": _cat(tau), "top1": _cat(top1), "topk": _cat(topk), "npos": _cat(npos),
            "attention": np.concatenate(att_at) if att_at else None,
            "dlogp": _cat(dlogp), "tvd": _cat(tvd), "perm_unit": _cat(perm_unit)}


def _cat(xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(xs) if xs else np.zeros(0)


def bootstrap_draws(n_units: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_units): how often each unit is drawn in each bootstrap resample (with replacement)."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_units, np.full(n_units, 1 / n_units), size=n_boot)


def _percentiles(boot: np.ndarray) -> dict:
    """``{"lo", "hi"}``: the 95% percentile interval of the finite bootstrap values."""
    boot = boot[np.isfinite(boot)]
    if not len(boot):
        return {"lo": math.nan, "hi": math.nan}
    return {"lo": float(np.quantile(boot, 0.025)), "hi": float(np.quantile(boot, 0.975))}


def cluster_mean(sums: np.ndarray, counts: np.ndarray, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """``{"value", "lo", "hi", "n"}``: the mean of values given per unit as their sum and count (``sums[u]``,
    ``counts[u]``: a unit with none counts 0), with a 95% bootstrap interval that resamples the units. What
    :func:`cluster_interval` computes for ``stat="mean"``, from the per-unit sums alone (the evidence keeps
    those: :func:`unit_sums`)."""
    sums, counts = np.asarray(sums, float), np.asarray(counts, float)
    n = int(counts.sum())
    if not n:
        return {"value": math.nan, "lo": math.nan, "hi": math.nan, "n": 0}
    draws = bootstrap_draws(len(sums), n_boot, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (draws @ sums) / (draws @ counts)
    return {"value": float(sums.sum() / counts.sum()), **_percentiles(boot), "n": n}


def cluster_interval(values: np.ndarray, units: np.ndarray, n_units: int, stat: str = "mean",
                     n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """``{"value", "lo", "hi", "n"}``: the mean or median of ``values`` (NaN ignored) with a 95% bootstrap
    interval that resamples the units (``units[i]``: the unit of value i, 0..n_units-1) with replacement."""
    values, units = np.asarray(values, float), np.asarray(units, int)
    ok = np.isfinite(values)
    values, units = values[ok], units[ok]
    if not len(values):
        return {"value": math.nan, "lo": math.nan, "hi": math.nan, "n": 0}
    if stat == "mean":
        return cluster_mean(np.bincount(units, weights=values, minlength=n_units),
                            np.bincount(units, minlength=n_units).astype(float), n_boot, seed)
    draws = bootstrap_draws(n_units, n_boot, seed)
    if stat == "median":
        order = np.argsort(values, kind="stable")
        v, u = values[order], units[order]
        boot = np.empty(n_boot)
        for i, d in enumerate(draws):
            w = d[u].astype(float)  # (n,) each value counted as often as its unit was drawn
            c = np.cumsum(w)
            boot[i] = v[np.searchsorted(c, c[-1] / 2)] if c[-1] > 0 else math.nan
        value = float(np.median(values))
    else:
        raise ValueError(f"stat must be 'mean' or 'median', not {stat!r}")
    return {"value": value, **_percentiles(boot), "n": int(len(values))}


# The per-target quantities the evidence keeps as per-unit sums (:func:`unit_sums`), each a mean over targets:
# where a prediction's |attribution| lies by distance, how much of it lies beyond the attention window, the
# agreement with the attention (targets with >= 2 positions both cover) and Jain & Wallace's permutation shift.
DISTANCE_BINS = {"share_now": (0, 0), "share_1": (1, 1), "share_2_5": (2, 5), "share_beyond_5": (6, None)}
UNIT_SUMS = (*DISTANCE_BINS, "beyond_window", "kendall_tau", "top1", f"top{TOP_K}_overlap", "top1_chance",
             f"top{TOP_K}_chance", "abs_dlogp", "moved_1_bit", "tvd")


def unit_sums(rows: dict, n_units: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per unit, the sum and the count of each per-target quantity of :data:`UNIT_SUMS` (NaN targets left
    out): ``{name: (sums [n_units], counts [n_units])}``; what :func:`cluster_mean` needs, so the evidence of a
    corpus attribution stays small (its units, not its targets) and its intervals are exactly the library's.
    Quantities a model does not have (agreement without attention) are absent."""

    def per_unit(values: np.ndarray, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ok = np.isfinite(values)
        return (np.bincount(units[ok], weights=values[ok], minlength=n_units),
                np.bincount(units[ok], minlength=n_units).astype(float))

    unit, share = rows["unit"].astype(int), rows["share"]  # share: (targets, W + 2), offsets 0..W then beyond W
    W = share.shape[1] - 2
    out = {}
    for name, (lo, hi) in DISTANCE_BINS.items():
        cols = list(range(lo, W + 2)) if hi is None else list(range(lo, hi + 1))
        out[name] = per_unit(share[:, cols].sum(1), unit)  # NaN rows (nothing attributed) stay NaN
    if rows["beyond_window"] is not None:
        out["beyond_window"] = per_unit(rows["beyond_window"], unit)
    if rows["attention"] is not None:
        chosen = rows["npos"] >= 2  # a row with one slot chooses nothing
        for name, key in (("kendall_tau", "tau"), ("top1", "top1"), (f"top{TOP_K}_overlap", "topk")):
            out[name] = per_unit(np.where(chosen, rows[key], math.nan), unit)
        # the same by chance (attention and attribution unrelated; ties aside): the most attended of n positions
        # is the most important one with probability 1/n, and two random m-subsets of n share m/n of m
        n = np.where(chosen, rows["npos"], 1).astype(float)
        out["top1_chance"] = per_unit(np.where(chosen, 1 / n, math.nan), unit)
        out[f"top{TOP_K}_chance"] = per_unit(np.where(chosen, np.minimum(TOP_K, n) / n, math.nan), unit)
        if len(rows["dlogp"]):
            pu = rows["perm_unit"].astype(int)
            dlogp = rows["dlogp"]
            out["abs_dlogp"] = per_unit(dlogp, pu)
            out["moved_1_bit"] = per_unit(np.where(np.isfinite(dlogp), (dlogp > math.log(2)).astype(float), math.nan), pu)
            out["tvd"] = per_unit(rows["tvd"], pu)
    return out


def collect(ckpt: Checkpoint, corpus: str, split: str, method: str = "gradient-x-input", limit: int | None = None,
            n_steps: int = DEFAULT_STEPS, permutations: int = PERMUTATIONS, max_offset: int = MAX_OFFSET,
            passage_tokens: int = PASSAGE_TOKENS, absolute: bool = True, seed: int = 0,
            progress: Callable[[float], None] | None = None) -> tuple[dict, int]:
    """``(rows, units)``: the per-target arrays of :func:`corpus_attribution` over a processed split (its first
    ``limit`` sentences), not cached, and how many units (sentences, or a document model's passages) they come
    from."""
    if method not in METHODS:
        raise AttributionError(f"unknown attribution method {method!r}; valid: {', '.join(METHODS)}")
    if method == "slot-effect" and not ckpt.has_attention:
        raise AttributionError(f"{ckpt.label} has no attention: it has no slot effects")
    data = load_corpus(corpus, split)
    document = getattr(ckpt.model.config, "context", "sentence") == "document"
    sentences = data.sentences[:limit] if limit is not None else data.sentences
    units = reading_units(sentences, data.ids, document, passage_tokens)
    rows = _collect(ckpt, sentences, data.ids, units, method, n_steps, permutations, max_offset, absolute, seed,
                    progress)
    return rows, len(units)


def _statistics(rows: dict, n_units: int, window: int | None, W: int, n_boot: int, seed: int) -> dict:
    share, reach = rows["share"], rows["reach"]
    positions = {"offset": list(range(W + 1)), "mean": [], "lo": [], "hi": [], "count": []}
    for o in range(W + 1):
        x = share[reach[:, o] & np.isfinite(share[:, o]), o]
        mean = float(x.mean()) if len(x) else math.nan
        half = 1.96 * float(x.std()) / math.sqrt(len(x)) if len(x) else math.nan
        positions["mean"].append(mean)
        positions["lo"].append(mean - half)
        positions["hi"].append(mean + half)
        positions["count"].append(int(len(x)))
    out: dict = {"targets": int(len(rows["unit"])), "positions": positions}
    positions["beyond"] = cluster_interval(share[:, W + 1], rows["unit"], n_units, "mean", n_boot, seed)
    positions["window"] = window
    positions["beyond_window"] = (None if rows["beyond_window"] is None else
                                  cluster_interval(rows["beyond_window"], rows["unit"], n_units, "mean", n_boot, seed))
    if rows["attention"] is not None:
        att = rows["attention"]
        positions["attention"] = [_nanmean(att[:, o]) for o in range(W + 1)]
        chosen = rows["npos"] >= 2  # a row with one slot chooses nothing
        unit = rows["unit"][chosen]
        tau = rows["tau"][chosen]
        finite = tau[np.isfinite(tau)]
        out["agreement"] = {
            "targets": int(chosen.sum()),
            "kendall_tau": cluster_interval(tau, unit, n_units, "mean", n_boot, seed),
            "kendall_tau_median": cluster_interval(tau, unit, n_units, "median", n_boot, seed),
            "kendall_tau_quantiles": {str(q): float(np.quantile(finite, q)) if len(finite) else math.nan
                                      for q in (0.1, 0.25, 0.5, 0.75, 0.9)},
            "top1_share": cluster_interval(rows["top1"][chosen], unit, n_units, "mean", n_boot, seed),
            f"top{TOP_K}_overlap": cluster_interval(rows["topk"][chosen], unit, n_units, "mean", n_boot, seed),
        }
        if len(rows["dlogp"]):
            pu = rows["perm_unit"]
            out["permutation"] = {
                "targets": int(np.isfinite(rows["dlogp"]).sum()),
                "median_abs_dlogp": cluster_interval(rows["dlogp"], pu, n_units, "median", n_boot, seed),
                "mean_abs_dlogp": cluster_interval(rows["dlogp"], pu, n_units, "mean", n_boot, seed),
                "median_tvd": cluster_interval(rows["tvd"], pu, n_units, "median", n_boot, seed),
                "mean_tvd": cluster_interval(rows["tvd"], pu, n_units, "mean", n_boot, seed),
                "share_over_1_bit": cluster_interval(
                    np.where(np.isfinite(rows["dlogp"]), (rows["dlogp"] > math.log(2)).astype(float), math.nan),
                    pu, n_units, "mean", n_boot, seed),
                "unit": "nats",
            }
    return out


__all__ = [
    "METHODS", "DEFAULT_STEPS", "Attribution", "AttributionError", "agreement", "attribute",
    "cluster_interval", "cluster_mean", "collect", "corpus_agreement", "corpus_attribution", "kendall_tau",
    "model_window", "permutation_shift", "unit_sums",
    "bootstrap_draws", "reading_pieces", "reading_units", "row_head", "slot_positions",
]
