"""The passes that compute an attribution method's scores of one piece of a text
(:func:`vizlm.inspect.attribution.attribute` runs them): gradient x input and integrated gradients through captum
(``InputXGradient``, ``IntegratedGradients``, with the steps doubled where the convergence delta is large),
occlusion by ``<unk>`` (captum ``FeatureAblation``), in blocks of rows and batches of positions; their progress
and cancellation; and how a text is read for them and for the faithfulness tests (:mod:`vizlm.inspect.faithfulness`):
the pieces read from a zero state (:func:`reading_pieces`), the slot of each position (:func:`slot_positions`), the
head of one row alone (:func:`row_head`).

captum is imported when a method first runs, so importing this module stays light.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vizlm.core.errors import VizlmError
from vizlm.data.vocab import Vocab
from vizlm.inspect.analysis import SentenceAnalysis
from vizlm.inspect.reading import piece_words
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.models import REGISTRY
from vizlm.models.base import RecurrentLM, device_of, memory_of

ROW_BLOCK = 64  # targets attributed in one batch: the block's copies of the text read up to its last row
# Integrated gradients' blocks are smaller: each copy is read n_steps times, so reading a block only up to its
# own last row matters more than the passes it adds (a 40-token sentence, 32 steps, one core: 8-row blocks take
# 45-55% less time than one 41-row block for lstm, amsrn and kvp-doc; gradient x input is fastest in one block).
IG_ROW_BLOCK = 8
POSITION_BUDGET = 1 << 17  # text positions per forward pass (copies x length): bounds memory on long passages
# The families whose head reads a carried memory exactly as its own slots (row_head): vizlm's own recurrent ones
# (the Transformer's head is its output layer alone: its whole head is computed and the row taken).
_ROW_HEAD_FAMILIES = frozenset(cls for _, cls, _ in REGISTRY.values() if issubclass(cls, RecurrentLM))


class AttributionError(VizlmError, ValueError):
    """An attribution that cannot be computed from the input (a message meant for the user)."""


class AttributionCancelled(AttributionError):
    """:func:`~vizlm.inspect.attribution.attribute` stopped because its ``cancel`` said so (between two batches of
    its passes)."""


class Meter:
    """Progress and cancellation of one :func:`~vizlm.inspect.attribution.attribute`: units done of the planned
    total, reported as a fraction; ``cancel`` asked before every batch (its passes' forward calls)."""

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


def reading_pieces(ckpt: Checkpoint, sa: SentenceAnalysis):
    """``(first row, inputs (Tb,), targets (Tb,))`` of each piece the model reads from a zero state: the
    text cut after its restarts (:func:`vizlm.inspect.reading.piece_words`), ``<s>`` first, as
    :func:`vizlm.inspect.analysis.analyze_sentences` reads it."""
    device = device_of(ckpt.model)  # read where the model is; results come back to the CPU
    for first, words in piece_words(sa.norms, sa.restarts):
        ids = ckpt.vocab.encode(words)
        yield first, torch.tensor([Vocab.bos_id, *ids], device=device), torch.tensor([*ids, Vocab.eos_id], device=device)


def slot_positions(sa: SentenceAnalysis) -> np.ndarray:
    """[T, T] the memory slot holding position p for row r (``p + 1``), -1 where there is none: the
    current word and later, positions outside the row's reading (a reading's start slot holds nothing).
    Self-attention (a Transformer): slot ``p`` is position ``p``, the current word included."""
    T = len(sa.targets)
    rows, pos = np.arange(T)[:, None], np.arange(T)[None, :]
    if sa.self_attention:
        return np.where((pos <= rows) & (pos >= sa.first_rows()[:, None]), pos, -1)
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


def gradients(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, method: str, n_steps: int,
               tolerance: float | None = None, rows: torch.Tensor | None = None,
               meter: Meter | None = None, *, max_steps: int) -> tuple[torch.Tensor, np.ndarray | None,
                                                                          np.ndarray | None, np.ndarray | None]:
    """``(scores (Tb, Tb), baseline log P (Tb,), convergence delta (Tb,), steps (Tb,))`` of one piece
    (``inputs`` ``<s>`` first, ``targets`` (Tb,)): row r's attribution to input position p, for every row;
    the last three None for gradient x input. Integrated gradients: the rows whose delta exceeds
    ``tolerance`` times ``|log P - log P(baseline)|`` are computed again with twice the steps, up to
    ``max_steps`` (:data:`vizlm.inspect.attribution.MAX_STEPS`). ``rows``: those rows only (ascending; the others
    stay 0); ``meter``: progress and cancellation (:class:`Meter`)."""
    from captum.attr import InputXGradient, IntegratedGradients

    meter = meter or Meter(1, None, None)
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
            if not ig or tolerance is None or 2 * n > max_steps:
                break
            gap = np.abs(scores.sum(1).numpy() - delta)  # |log P(target) - log P(target | baseline)|
            todo = torch.from_numpy(np.flatnonzero(np.abs(delta) > tolerance * gap))
            n *= 2
    return scores, base, delta, steps


# --------------------------------------------------------------------------- occlusion
def occlusion(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, unk: int,
               meter: Meter | None = None) -> torch.Tensor:
    """(Tb, Tb): row r's log P(target) minus the same with input position p read as ``<unk>``, from
    captum's FeatureAblation over one piece; every target comes from each replaced copy's one pass."""
    from captum.attr import FeatureAblation

    Tb = len(inputs)
    meter = meter or Meter(1, None, None)

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



__all__ = ["AttributionCancelled", "AttributionError", "Meter", "gradients", "occlusion", "reading_pieces",
           "row_head", "slot_positions"]
