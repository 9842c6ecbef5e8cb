"""Is attention an explanation? The literature's tests of an attention model, done on one text
(:class:`~vizlm.inspect.analysis.SentenceAnalysis` of a checkpoint); over a split with 95% intervals:
:mod:`vizlm.inspect.faithfulness_corpus`.

Every test recomputes only the head from other attention weights (the recurrent outputs as read:
:meth:`~vizlm.models.base.AttentionLM.head` with ``weights``, as :mod:`vizlm.models.effects` does), or, for the
two paths, the head of one row from its own output and another reading's memory
(:func:`vizlm.inspect.attribution_methods.row_head`). All log-probability changes are in nats, ``log P(target)`` as
read minus ``log P(target)`` as changed: positive where the change hurt the prediction.

Units. Attention weighs a memory *slot*; attribution scores an input *word* (:mod:`vizlm.inspect.attribution`: slot
``p + 1`` holds what was read at position ``p``). A row's **word slots** are the slots it could attend to that
hold a word of the text: not a reading's zero start slot, not the slot of the ``<s>`` the reading starts with
(the positions :meth:`~vizlm.inspect.attribution.Attribution.agreement` compares). Every perturbation below that
ranks, shuffles or drops slots acts on word slots only and holds the others fixed (AMSRN's start slot holds
most of its weight: shuffling it in moves "attention off" onto a word, a change no explanation proposes).

* :func:`agreement_table` (Jain & Wallace 2019, Sec. 3): Kendall tau-b per row between the attention and each
  slot-level and word-level method (``slot-effect``; ``gradient-x-input``, ``integrated-gradients``,
  ``occlusion``), and between each pair of methods: the **ceiling** an explanation can reach when the methods
  themselves disagree. Over the positions both attention and attribution cover, ``|attribution|``.
* :func:`permutations` (Jain & Wallace, Sec. 4.1, 100 permutations): each row's weights on its word slots
  shuffled among them, per row the median total variation distance and Jensen-Shannon divergence (nats) of the
  next-word distribution over the permutations, and the row's largest weight, by which the corpus statistics
  bin the rows (the change rises with peak attention; a flat row cannot move much).
* :func:`adversarial` (Jain & Wallace, Sec. 4.2): for each row the attention distribution farthest (JSD) from
  the model's own over its slots with ``|delta log P(target)| < epsilon``, found by Adam on the logits of the
  row's weights (the model's other weights fixed) with a squared-hinge penalty on the constraint; the farthest
  weights met that satisfy it are reported (the model's own always do: JSD 0).
* :func:`uniform_baseline` (Wiegreffe & Pinter 2019, Sec. 3): every row's weights replaced by uniform weights
  over its slots, and by the attention of another checkpoint of the family (another seed) on the same text;
  ``log P(target)`` of each (per-token NLL: perplexity).
* :func:`~vizlm.inspect.faithfulness_erasure.erasure_curves` (Serrano & Smith 2019): the ``k`` top word slots dropped
  (k = 1..5), ranked by attention, by the gradient of ``log P(target)`` with respect to each weight, at random or
  by an attribution method; the change in ``log P(target)`` and whether the top-1 prediction changed.
* :func:`~vizlm.inspect.faithfulness_erasure.aopc` (DeYoung et al. 2020, ERASER): comprehensiveness (the top ``f`` of a
  row's word slots dropped) and sufficiency (only they kept of the word slots) at ``f`` = 1, 5, 10, 20, 50% (at
  least one slot), for each ranking; their mean over ``f`` is the AOPC.
* :func:`two_paths`: how a prediction's dependence on an earlier word splits between the attention read and the
  recurrent state, by distance (see its docstring).

The two tests that drop slots by a ranking (erasure, AOPC) and their masking rule are
:mod:`vizlm.inspect.faithfulness_erasure`'s.

A Transformer (self-attention, :mod:`vizlm.models.transformer`) is tested one head at a time: an analysis showing
one head (:meth:`~vizlm.inspect.analysis.SentenceAnalysis.at_head`; a layer's heads together are no attention the
model computes, and are refused). Slot ``j`` holds input ``j`` (:mod:`vizlm.inspect.reading`): the word just read
is a word slot, the ``<s>`` slot is held fixed. Its rows are not independent (a later layer reads every position
below it), so each test changes one row's weights of the head at a time, the other positions as computed: each
(variant, row) is a copy of the row's block run from the head's layer on (:func:`_features`, through
:func:`vizlm.models.effects.head_row_outputs`, as :func:`~vizlm.models.effects.head_effects` drops a slot). It
has no recurrent state, so no two paths, and frozen attention from another seed is offered for recurrent
attention only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from vizlm.core.errors import VizlmError
from vizlm.inspect.agreement import kendall_tau
from vizlm.inspect.analysis import SentenceAnalysis, distance
from vizlm.inspect.attribution import DEFAULT_STEPS, TEXT_METHODS, attribute
from vizlm.inspect.attribution_methods import reading_pieces, row_head
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.models.base import AttentionLM, LMOutput
from vizlm.models.effects import head_row_outputs

PERMUTATIONS = 100  # Jain & Wallace's shuffles per row
EPSILON = 0.01  # nats: the adversary's bound on |delta log P(target)|
ADVERSARY_STEPS = 200
ADVERSARY_LR = 0.1
LOGIT_ELEMENTS = 1 << 21  # variants x rows x vocabulary per output-layer call: ~8 MB in float32


class FaithfulnessError(VizlmError, ValueError):
    """A test that cannot run on this input (a message meant for the user)."""


# --------------------------------------------------------------------------- one reading
@dataclass
class _Piece:
    """One piece of a text read from a zero state (:func:`vizlm.inspect.attribution_methods.reading_pieces`), its
    head as computed: ``Tb`` rows over ``Tb`` slots (the sentence layout)."""

    first: int  # the text's row of the piece's row 0
    inputs: torch.Tensor  # (Tb,) <s> first
    targets: torch.Tensor  # (Tb,)
    h: torch.Tensor  # (1, Tb, D) the recurrent outputs
    out: LMOutput
    logp: torch.Tensor  # (Tb, V) log-softmax as computed
    allowed: torch.Tensor  # (Tb, Tb) bool: the slots each row could attend to (the model's mask)
    words: torch.Tensor  # (Tb, Tb) bool: word slots (allowed, neither the start slot nor the <s> slot)
    # a Transformer's head (self-attention): (layer, head) tested, its weights (Tb, Tb), and every layer's input
    # (run_layer's, (Tb, 1, d) each) with the piece's block mask: each row is run again alone from that layer on
    view: tuple[int, int] | None = None
    weights: torch.Tensor | None = None
    xs: list[torch.Tensor] | None = None
    mask: torch.Tensor | None = None

    @property
    def attention(self) -> torch.Tensor:
        return self.out.attention[0] if self.weights is None else self.weights  # (Tb, Tb)

    @property
    def base(self) -> torch.Tensor:
        return self.logp.gather(1, self.targets[:, None])[:, 0]  # (Tb,) log P(target) as computed


def self_attention(ckpt: Checkpoint) -> bool:
    """Whether the tests read one of the model's self-attention heads (a Transformer) rather than its attention
    over memory slots."""
    return bool(getattr(ckpt.model, "self_attention", False))


def _check(ckpt: Checkpoint, sa: SentenceAnalysis) -> None:
    if sa.model != ckpt.label:
        raise FaithfulnessError(f"the analysis is of {sa.model}, not of {ckpt.label}")
    if self_attention(ckpt):
        if sa.head is None or sa.head[1] is None:
            raise FaithfulnessError(f"{ckpt.label} is a Transformer: the tests replace the weights of one head, so "
                                    "show one first (analysis.at_head(layer, head)), not a layer's heads together")
        return
    if not isinstance(ckpt.model, AttentionLM) or sa.attention is None:
        raise FaithfulnessError(f"{ckpt.label} has no attention: there is nothing to test")


@torch.no_grad()
def _read(ckpt: Checkpoint, sa: SentenceAnalysis, wanted: np.ndarray | None = None) -> list[_Piece]:
    """The pieces of ``sa`` as read; with ``wanted`` ([T] bool), only the pieces holding a wanted row, each cut
    after its last (a row depends on nothing after it: its own output and the slots before it)."""
    _check(ckpt, sa)
    model = ckpt.model
    out = []
    for first, inputs, targets in reading_pieces(ckpt, sa):
        if wanted is not None:
            mine = np.flatnonzero(wanted[first : first + len(inputs)])
            if not len(mine):
                continue
            inputs, targets = inputs[: mine[-1] + 1], targets[: mine[-1] + 1]
        Tb = len(inputs)
        rows, slots = torch.arange(Tb, device=inputs.device)[:, None], torch.arange(Tb, device=inputs.device)[None, :]
        if self_attention(ckpt):  # slot j is input j (slot 0 the <s> read), the row's own included
            xs, mask = model.layer_inputs(inputs[None])
            layer, h_ = sa.head
            weights = model.run_layer(layer, xs[layer], mask)[1][0, h_]  # (Tb, Tb)
            h = model.outputs(xs[-1])  # (1, Tb, d)
            head = model.head(h)
            allowed = mask == 0  # (Tb, Tb): the row's block up to itself
            out.append(_Piece(first, inputs, targets, h, head, head.logits[0].log_softmax(-1), allowed,
                              allowed & (slots >= 1), view=(layer, h_), weights=weights, xs=xs, mask=mask))
            continue
        h = model.encode(inputs[None])  # (1, Tb, D)
        head = model.head(h)
        allowed = model.allowed_slots(Tb, device=h.device)  # (Tb, Tb)
        words = allowed & (slots >= 2) & (slots <= rows)  # slot 0: the zero start state; slot 1: the <s> read
        out.append(_Piece(first, inputs, targets, h, head, head.logits[0].log_softmax(-1), allowed, words))
    return out


def _features(model, piece: _Piece, weights: torch.Tensor) -> torch.Tensor:
    """(N, Tb, F) what the output layer reads at every row of the piece with the row's attention weights those
    of ``weights`` (N, Tb, Tb) (differentiable in them). A recurrent model's rows are independent given the
    recurrent outputs: its head is run again. A Transformer's head changes one row at a time: each (variant,
    row) is a copy of the row's block run from the head's layer on with only that row's weights of the head
    replaced, the other positions as computed (:func:`vizlm.models.effects.head_row_outputs`, as the slot
    effects are)."""
    if piece.view is None:
        return model.head(piece.h.expand(len(weights), -1, -1), weights=weights).readout.features
    layer, head = piece.view
    N, Tb = weights.shape[:2]
    W, dev = min(model.config.block, Tb), weights.device
    variant, row = torch.arange(N, device=dev).repeat_interleave(Tb), torch.arange(Tb, device=dev).repeat(N)
    padded = F.pad(weights, (0, W))  # (N, Tb, Tb + W): a copy's positions beyond the text get no weight
    steps = torch.arange(W, device=dev)

    def replaced(kept: torch.Tensor, part: slice, start: torch.Tensor) -> torch.Tensor:  # (n, 1, W)
        return padded[variant[part], row[part]].gather(1, start[:, None] + steps[None, :])[:, None]

    feats = head_row_outputs(model, (piece.xs, piece.mask), layer, [head], torch.zeros_like(row), row, replaced)
    return feats.reshape(N, Tb, -1)


def _outputs(model, piece: _Piece, weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every row's prediction with other attention weights ``weights`` (N, Tb, Tb) against the piece's own:
    ``logp`` (N, Tb) log P(target), ``top1`` (N, Tb) the most likely word, ``tvd`` and ``jsd`` (N, Tb) of the
    next-word distributions (JSD in nats). The output layer runs a few variants at a time."""
    N, Tb = weights.shape[:2]
    ro = piece.out.readout
    feats = _features(model, piece, weights)  # (N, Tb, F)
    base, p = piece.logp, piece.logp.exp()  # (Tb, V)
    res = {k: feats.new_empty(N, Tb) for k in ("logp", "tvd", "jsd")}
    res["top1"] = torch.empty(N, Tb, dtype=torch.long, device=feats.device)
    per_call = max(1, LOGIT_ELEMENTS // (Tb * base.shape[1]))
    for k in range(0, N, per_call):
        q_log = F.linear(feats[k : k + per_call], ro.weight, ro.bias).log_softmax(-1)  # (n, Tb, V)
        res["logp"][k : k + per_call] = q_log.gather(-1, piece.targets[None, :, None].expand(len(q_log), -1, 1))[..., 0]
        res["top1"][k : k + per_call] = q_log.argmax(-1)
        q = q_log.exp()
        res["tvd"][k : k + per_call] = 0.5 * (q - p).abs().sum(-1)
        res["jsd"][k : k + per_call] = _jsd(base[None], q_log)
    return res


def _jsd(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence (nats, at most ln 2) of distributions given by their logs, over the last axis."""
    log_m = torch.logaddexp(log_p, log_q) - math.log(2)
    p, q = log_p.exp(), log_q.exp()
    kl_p = torch.where(p > 0, p * (log_p - log_m), torch.zeros_like(p)).sum(-1)
    kl_q = torch.where(q > 0, q * (log_q - log_m), torch.zeros_like(q)).sum(-1)
    return (0.5 * (kl_p + kl_q)).clamp_min(0.0)


def _frame(sa: SentenceAnalysis, columns: dict[str, np.ndarray]) -> pd.DataFrame:
    T = len(sa.targets)
    return pd.DataFrame({"row": np.arange(T), "target": list(sa.targets), **columns})


# --------------------------------------------------------------------------- (a) agreement at both levels
def agreement_table(ckpt: Checkpoint, sa: SentenceAnalysis, methods: Sequence[str] = TEXT_METHODS,
                    n_steps: int = DEFAULT_STEPS, attributions: dict | None = None) -> pd.DataFrame:
    """Per row, Kendall tau-b of every pair of ``attention``, ``slot-effect`` (the same unit as attention: a
    slot) and the word-level ``methods``, over the positions attention and attribution both cover (``positions``
    of them; NaN below two), ``|attribution|`` for a method: columns ``row, target, positions`` and one
    ``"a~b"`` per pair. The pairs of methods are the ceiling: how far two explanations agree with each other.
    ``attributions``: :class:`~vizlm.inspect.attribution.Attribution` objects already computed, by method."""
    _check(ckpt, sa)
    for m in methods:
        if m not in TEXT_METHODS:
            raise FaithfulnessError(f"unknown word-level method {m!r}; valid: {', '.join(TEXT_METHODS)}")
    attributions = dict(attributions or {})
    names = ["slot-effect", *methods]
    for m in names:
        if m not in attributions:
            attributions[m] = attribute(ckpt, sa, m, n_steps)
    first = attributions[names[0]]
    both = first.attended & first.covered  # (T, T) positions with a slot the row could attend to
    scores = {"attention": first.attention, **{m: np.abs(attributions[m].scores) for m in names}}
    T = len(sa.targets)
    cols: dict[str, np.ndarray] = {"positions": both.sum(1)}
    for a, b in combinations(["attention", *names], 2):
        cols[f"{a}~{b}"] = np.array([kendall_tau(scores[a][r, both[r]], scores[b][r, both[r]]) for r in range(T)])
    return _frame(sa, cols)


# --------------------------------------------------------------------------- (b) Jain & Wallace's permutations
@torch.no_grad()
def permutations(ckpt: Checkpoint, sa: SentenceAnalysis, n: int = PERMUTATIONS, seed: int = 0) -> pd.DataFrame:
    """Jain & Wallace's permutation test as they ran it: ``n`` shuffles (100) of each row's weights over its word
    slots (the start slot and the ``<s>`` slot keep theirs). Per row: ``word_slots``, ``max_weight`` (the row's
    largest weight on a word slot: what a shuffle can move), ``fixed_weight`` (on the held slots),
    ``median_tvd``, ``median_jsd`` (nats) of the next-word distribution and ``median_abs_dlogp`` of
    ``log P(target)`` over the shuffles; NaN for rows with fewer than two word slots."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise FaithfulnessError(f"the number of permutations must be a whole number >= 1, not {n!r}")
    model = ckpt.model
    rng = np.random.default_rng(seed)
    T = len(sa.targets)
    cols = {k: np.full(T, math.nan) for k in ("max_weight", "fixed_weight", "median_tvd", "median_jsd",
                                              "median_abs_dlogp")}
    cols["word_slots"] = np.zeros(T, dtype=int)
    for piece in _read(ckpt, sa):
        Tb, f = len(piece.inputs), piece.first
        att, words, dev = piece.attention, piece.words, piece.h.device
        span = torch.arange(Tb, device=dev)
        count = words.sum(1)  # (Tb,)
        cols["word_slots"][f : f + Tb] = count.cpu().numpy()
        has = count > 0
        cols["max_weight"][f : f + Tb] = torch.where(has, (att * words).amax(1), torch.nan).double().cpu().numpy()
        cols["fixed_weight"][f : f + Tb] = (att * ~words).sum(1).double().cpu().numpy()
        if not bool((count >= 2).any()):
            continue
        # word slots in a random order first, then the others in their own order: slot words_first[r, i] gets
        # the weight of slot order[q, r, i], a permutation of the word slots, the identity on the others
        keys = torch.from_numpy(rng.random((n, Tb, Tb))).to(dev)  # (n, Tb, Tb) in [0, 1)
        keys = torch.where(words, keys, 2.0 + span.to(keys.dtype))
        order = keys.argsort(-1)  # (n, Tb, Tb)
        words_first = torch.where(words, span, span + Tb).argsort(-1)  # (Tb, Tb)
        src = att.expand(n, Tb, Tb).gather(-1, order)  # (n, Tb, Tb)
        weights = torch.zeros_like(src).scatter(-1, words_first.expand(n, Tb, Tb), src)
        res = _outputs(model, piece, weights)
        ok = (count >= 2).cpu().numpy()
        for name, x in (("median_tvd", res["tvd"]), ("median_jsd", res["jsd"]),
                        ("median_abs_dlogp", (res["logp"] - piece.base).abs())):
            m = x.double().median(0).values.cpu().numpy()  # (Tb,) the lower median of n values (n even)
            cols[name][f : f + Tb] = np.where(ok, m, math.nan)
    return _frame(sa, cols)


# --------------------------------------------------------------------------- (c) adversarial attention
def adversarial(ckpt: Checkpoint, sa: SentenceAnalysis, epsilon: float = EPSILON, steps: int = ADVERSARY_STEPS,
                lr: float = ADVERSARY_LR, seed: int = 0) -> pd.DataFrame:
    """Jain & Wallace's adversarial attention, per row: the weights over the row's slots farthest from its own
    (Jensen-Shannon divergence, nats, at most ln 2) with ``|delta log P(target)| < epsilon`` nats. Only the
    attention distribution of each row moves (its logits, by Adam, ``steps`` steps at ``lr``, from the model's
    own plus unit Gaussian noise: at the model's own the divergence has no gradient); the objective is the
    divergence minus ``(max(0, |delta| - epsilon / 2) / epsilon)^2``. Rows are independent given the recurrent
    outputs, so a piece's rows move together. Columns: ``slots`` (the row's), ``jsd`` (the farthest weights met
    that satisfy the bound; 0: the model's own), ``dlogp`` (log P(target) as read minus with them), ``tvd`` of the
    next-word distributions; NaN for a row with fewer than two slots."""
    if not (isinstance(epsilon, (int, float)) and epsilon > 0 and math.isfinite(epsilon)):
        raise FaithfulnessError(f"epsilon must be a positive number of nats, not {epsilon!r}")
    model = ckpt.model
    T = len(sa.targets)
    cols = {k: np.full(T, math.nan) for k in ("jsd", "dlogp", "tvd")}
    cols["slots"] = np.zeros(T, dtype=int)
    gen = torch.Generator().manual_seed(seed)
    for piece in _read(ckpt, sa):
        Tb, f = len(piece.inputs), piece.first
        count = piece.allowed.sum(1)
        cols["slots"][f : f + Tb] = count.cpu().numpy()
        movable = count >= 2  # (Tb,)
        if not bool(movable.any()):
            continue
        best_w, best_jsd = _adversary(model, piece, movable, epsilon, steps, lr, gen)
        with torch.no_grad():
            res = _outputs(model, piece, best_w[None])
        ok = movable.cpu().numpy()
        cols["jsd"][f : f + Tb] = np.where(ok, best_jsd.double().cpu().numpy(), math.nan)
        cols["dlogp"][f : f + Tb] = np.where(ok, (piece.base - res["logp"][0]).double().cpu().numpy(), math.nan)
        cols["tvd"][f : f + Tb] = np.where(ok, res["tvd"][0].double().cpu().numpy(), math.nan)
    return _frame(sa, cols)


def _check_row(sa: SentenceAnalysis, row) -> int:
    if isinstance(row, bool) or not isinstance(row, (int, np.integer)) or not 0 <= row < len(sa.targets):
        raise FaithfulnessError(f"row must be a predicted word of the text, 0 to {len(sa.targets) - 1}, not {row!r}")
    return int(row)


def adversarial_row(ckpt: Checkpoint, sa: SentenceAnalysis, row: int, epsilon: float = EPSILON,
                    steps: int = ADVERSARY_STEPS, lr: float = ADVERSARY_LR, seed: int = 0) -> pd.DataFrame:
    """:func:`adversarial` for one predicted word, with the weights it found: per slot the row could attend to,
    ``slot`` (the text's, as :attr:`~vizlm.inspect.analysis.SentenceAnalysis.attention` numbers them), ``word``
    (:attr:`~vizlm.inspect.analysis.SentenceAnalysis.slot_labels`), ``weight`` (the model's own) and
    ``adversarial`` (the farthest weights met with ``|delta log P(target)| < epsilon``; the model's own for a
    row with fewer than two slots). ``frame.attrs``: ``jsd`` (nats) between them, ``dlogp`` (log P(target) as
    read minus with the adversarial weights), ``tvd`` of the next-word distributions, ``epsilon``. Only the
    reading up to the row is computed (the Explorer's panel: one word, on request)."""
    if not (isinstance(epsilon, (int, float)) and epsilon > 0 and math.isfinite(epsilon)):
        raise FaithfulnessError(f"epsilon must be a positive number of nats, not {epsilon!r}")
    _check(ckpt, sa)
    row = _check_row(sa, row)
    wanted = np.zeros(len(sa.targets), dtype=bool)
    wanted[row] = True
    (piece,) = _read(ckpt, sa, wanted)
    local = row - piece.first
    movable = torch.zeros(len(piece.inputs), dtype=torch.bool, device=piece.h.device)
    movable[local] = int(piece.allowed[local].sum()) >= 2
    weights, jsd = _adversary(ckpt.model, piece, movable, epsilon, steps, lr, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        res = _outputs(ckpt.model, piece, weights[None])
    slots = torch.nonzero(piece.allowed[local])[:, 0].cpu().numpy()  # the piece's; the text's are piece.first on
    labels = sa.slot_labels
    frame = pd.DataFrame({"slot": piece.first + slots, "word": [labels[piece.first + j] for j in slots],
                          "weight": piece.attention[local, slots].double().cpu().numpy(),
                          "adversarial": weights[local, slots].detach().double().cpu().numpy()})
    frame.attrs.update(row=row, target=sa.targets[row], epsilon=float(epsilon), jsd=float(jsd[local]),
                       dlogp=float(piece.base[local] - res["logp"][0, local]), tvd=float(res["tvd"][0, local]))
    return frame


def _adversary(model, piece: _Piece, movable: torch.Tensor, epsilon: float, steps: int, lr: float,
               gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weights (Tb, Tb), jsd (Tb,))``: the farthest weights from the piece's own met that keep every
    ``movable`` row's ``|delta log P(target)| < epsilon`` (:func:`adversarial`); other rows keep their own."""
    att, allowed = piece.attention.detach(), piece.allowed
    Tb = len(piece.inputs)
    log_att = att.clamp_min(torch.finfo(att.dtype).tiny).log()
    noise = torch.randn(att.shape, generator=gen, dtype=att.dtype).to(att.device)
    z = (log_att + noise).masked_fill(~allowed, 0.0).requires_grad_()
    opt = torch.optim.Adam([z], lr=lr)
    best_jsd = torch.zeros(Tb, dtype=att.dtype, device=att.device)
    best_w = att.clone()
    base = piece.base
    ro = piece.out.readout
    for _ in range(steps + 1):
        with torch.enable_grad():
            w = torch.where(movable[:, None], z.masked_fill(~allowed, -math.inf), 0.0).softmax(-1)  # (Tb, Tb)
            w = torch.where(movable[:, None], w, att)  # a row with one slot or none keeps its own
            feats = _features(model, piece, w[None])[0]  # (Tb, F)
            logp = F.linear(feats, ro.weight, ro.bias).log_softmax(-1).gather(1, piece.targets[:, None])[:, 0]
            delta = (base - logp).abs()  # (Tb,)
            div = _jsd_rows(att, w)  # (Tb,)
            with torch.no_grad():  # the farthest weights met that satisfy the bound
                better = movable & (delta < epsilon) & (div > best_jsd)
                best_jsd = torch.where(better, div, best_jsd)
                best_w = torch.where(better[:, None], w, best_w)
            loss = (-div + ((delta - epsilon / 2).clamp_min(0.0) / epsilon) ** 2)[movable].sum()
            (grad,) = torch.autograd.grad(loss, [z])  # the model's parameters get no gradient
        opt.zero_grad()
        z.grad = grad
        opt.step()
    return best_w, best_jsd


def _jsd_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence (nats) of each row of two weight matrices (rows sum to 1, zeros allowed)."""
    m = 0.5 * (a + b)
    tiny = torch.finfo(a.dtype).tiny

    def kl(x):
        return torch.where(x > 0, x * (x.clamp_min(tiny).log() - m.clamp_min(tiny).log()), torch.zeros_like(x)).sum(-1)

    return (0.5 * (kl(a) + kl(b))).clamp_min(0.0)


# --------------------------------------------------------------------------- (d) uniform and frozen attention
@torch.no_grad()
def uniform_baseline(ckpt: Checkpoint, sa: SentenceAnalysis, other: Checkpoint | None = None) -> pd.DataFrame:
    """Wiegreffe & Pinter's baselines: ``log P(target)`` of each row as read (``logprob``), with every row's
    weights uniform over its slots (``uniform_logprob``), and, given ``other`` (a checkpoint of the same family
    and attention layout, e.g. another seed), with ``other``'s attention on the same text (``frozen_logprob``)
    and how far that attention lies from the model's own (``seed_jsd``: Jensen-Shannon divergence of the row's
    weights, nats, beside which Wiegreffe & Pinter set the adversary's; NaN for a row with fewer than two slots);
    the log-probabilities' negatives are the per-token NLL (perplexity: the exponential of their mean)."""
    model = ckpt.model
    if other is not None and self_attention(ckpt):
        raise FaithfulnessError(f"{ckpt.label} is a Transformer: frozen attention from another seed is offered for "
                                "attention over memory slots only")
    if other is not None:
        om = other.model
        if (type(om) is not type(model) or om.window_size() != model.window_size()
                or om.start_slots() != model.start_slots() or getattr(om.config, "context", None)
                != getattr(model.config, "context", None)):
            raise FaithfulnessError(f"{other.label} does not attend over {ckpt.label}'s slots: frozen attention needs "
                                    "a checkpoint of the same family, window and context")
        if list(other.vocab.itos) != list(ckpt.vocab.itos):
            raise FaithfulnessError(f"{other.label} has another vocabulary than {ckpt.label}")
    T = len(sa.targets)
    cols = {"logprob": np.full(T, math.nan), "uniform_logprob": np.full(T, math.nan)}
    if other is not None:
        cols["frozen_logprob"], cols["seed_jsd"] = np.full(T, math.nan), np.full(T, math.nan)
    for piece in _read(ckpt, sa):
        Tb, f = len(piece.inputs), piece.first
        allowed = piece.allowed.to(piece.attention.dtype)
        uniform = allowed / allowed.sum(1, keepdim=True).clamp_min(1.0)  # (Tb, Tb); a row with no slot reads nothing
        variants = [uniform]
        if other is not None:
            variants.append(other.model.head(other.model.encode(piece.inputs[None])).attention[0].to(uniform.dtype))
        res = _outputs(model, piece, torch.stack(variants))
        cols["logprob"][f : f + Tb] = piece.base.double().cpu().numpy()
        cols["uniform_logprob"][f : f + Tb] = res["logp"][0].double().cpu().numpy()
        if other is not None:
            cols["frozen_logprob"][f : f + Tb] = res["logp"][1].double().cpu().numpy()
            jsd = _jsd_rows(piece.attention.to(uniform.dtype), variants[1]).double().cpu().numpy()
            cols["seed_jsd"][f : f + Tb] = np.where(piece.allowed.sum(1).cpu().numpy() >= 2, jsd, math.nan)
    return _frame(sa, cols)


# --------------------------------------------------------------------------- (g) two paths
@torch.no_grad()
def two_paths(ckpt: Checkpoint, sa: SentenceAnalysis, rows: Sequence[int] | None = None) -> pd.DataFrame:
    """How much of a prediction's dependence on an earlier word travels through the attention read, and how much
    through the recurrent state.

    A row's head reads two things (:mod:`vizlm.models.base`): its own recurrent output ``h_t`` (the query, and the
    output layer's input beside the read) and the memory slots before it (earlier outputs; RM's hold the words'
    embeddings). The word at position ``p`` of the row's reading reaches row ``r >= p`` through both. With the
    text read again with that word replaced by ``<unk>`` (occlusion, as :mod:`vizlm.inspect.attribution`'s), per (row,
    position) pair, each a change of log P(target) in nats (as read minus as changed):

    * ``total``: the row as in the occluded reading (= the occlusion attribution);
    * ``read``: the row's own output as read, its memory from the occluded reading: the word's effect through the
      attention read alone (the weights and what they read both move), the recurrent state kept;
    * ``state``: the row's own output from the occluded reading, its memory as read: the recurrent path alone, the
      memory kept;
    * ``interaction`` = total - read - state.

    Defined alike for every built-in attention family, which reads its memory as a carried one
    (:func:`vizlm.inspect.attribution_methods.row_head`); the current word (``distance`` 1) has no slot, so its
    ``read`` is 0.
    Long frame ``row, target, position, distance`` (vizlm's: 1 = the word just read) and the four changes, over
    the positions attribution covers (not a reading's ``<s>``). ``rows``: only those predicted words (each as in
    the whole text's frame; the reading is computed up to the last of them)."""
    if self_attention(ckpt):
        raise FaithfulnessError(f"{ckpt.label} is a Transformer: it has no recurrent state, so a word reaches the "
                                "prediction through self-attention alone; the two paths are of recurrent attention")
    model = ckpt.model
    wanted = None if rows is None else np.zeros(len(sa.targets), dtype=bool)
    if rows is not None:
        for r in rows:
            wanted[_check_row(sa, r)] = True
    records = []
    for piece in _read(ckpt, sa, wanted):
        Tb, f = len(piece.inputs), piece.first
        if Tb < 2:
            continue
        dev = piece.h.device
        occluded = piece.inputs.expand(Tb - 1, Tb).clone()  # (P, Tb) copy i occludes position i + 1
        occluded[torch.arange(Tb - 1), torch.arange(1, Tb)] = ckpt.vocab.unk_id
        h_all = torch.cat([piece.h, model.encode(occluded)])  # (P + 1, Tb, D): the reading as read, then copies
        pos, rows = np.nonzero(np.arange(Tb)[None, :] >= np.arange(1, Tb)[:, None])  # pairs: copy, row >= position
        if wanted is not None:
            keep = wanted[f + rows]
            pos, rows = pos[keep], rows[keep]
        copy_, rows_t = torch.from_numpy(pos + 1).to(dev), torch.from_numpy(rows).to(dev)
        zero = torch.zeros_like(copy_)
        tgt = piece.targets[rows_t]
        out = {}
        per_call = max(1, (1 << 17) // Tb)  # positions per call, as the attribution's budget
        for name, now, mem in (("base", zero, zero), ("total", copy_, copy_), ("read", zero, copy_),
                               ("state", copy_, zero)):
            parts = []
            for i in range(0, len(rows_t), per_call):
                sl = slice(i, i + per_call)
                ro = row_head(model, h_all[now[sl]], rows_t[sl], memory_h=h_all[mem[sl]]).readout
                logp = F.linear(ro.features[:, 0], ro.weight, ro.bias).log_softmax(-1)  # (n, V)
                parts.append(logp.gather(1, tgt[sl, None])[:, 0])
            out[name] = torch.cat(parts).double().cpu().numpy()
        position = pos + 1
        rec = {"row": f + rows, "position": f + position, "distance": distance(rows - position),
               **{k: out["base"] - out[k] for k in ("total", "read", "state")}}
        rec["interaction"] = rec["total"] - rec["read"] - rec["state"]
        records.append(pd.DataFrame(rec))
    frame = pd.concat(records, ignore_index=True) if records else pd.DataFrame(
        columns=["row", "position", "distance", "total", "read", "state", "interaction"])
    frame.insert(1, "target", [sa.targets[r] for r in frame.row])
    return frame

