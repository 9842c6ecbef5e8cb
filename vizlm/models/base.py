"""Pieces shared by every model family: the output type (its fused loss: :mod:`vizlm.models.loss`), the
recurrent encoder, the state carried between segments of a document, and the causal slot masks used by
the attention models.

Slot layout (see ``docs/models.md`` of the shared docs): the model reads inputs
``x_1..x_T`` (``x_1 = <s>``) and produces LSTM outputs ``h_1..h_T``. Memory slot 0
is the zero start state ``h_0``; slot ``i >= 1`` holds ``h_i``. The row for step
``t`` (0-based row ``r = t - 1``) may use slots ``0..r`` only: memory never holds
``h_t`` itself, and never anything later.

Document context (``forward(inputs, state)``): a segment is read after a carried
memory of ``M = model.memory_size()`` slots, the newest last (:class:`State`). The
slot axis is then ``[carried_0 .. carried_{M-1}, h_1 .. h_{T-1}]`` (``S = M + T - 1``):
slot ``M - 1 + i`` holds this segment's ``h_i``, and row ``r`` may use slots up to
``M - 1 + r``. Only the newest ``valid`` carried slots are real (a stream that started
its document less than ``M`` steps ago has fewer); the older ones are masked. At a
document start the carried memory is all zero with one valid slot, the zero start
state ``h_0``, so a sentence read without a state is the special case ``M = 1``:
``S = T`` and the layout above. A model without the start slot (AMSRN with
``start_slot=False``) masks slot 0 of the sentence layout, and its documents start with
no valid slot (:attr:`State.start_slots`): its first row has nothing to attend to.

What a slot holds is the model's: its recurrent outputs, the LSTM's ``h_t`` for every
family but RM, whose outputs also carry the embeddings of the word read at each step
(:meth:`RecurrentLM.recur`, :meth:`RecurrentLM.to_slots`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vizlm.models.loss import LOSS_CHUNK, LinearNLL

CONTEXTS = ("sentence", "document")


@dataclass
class BaseConfig:
    """Hyper-parameters every family has."""

    vocab_size: int = 10_000
    emb_dim: int = 50
    hidden_dim: int = 50  # LSTM output size
    dropout: float = 0.0
    init_range: float = 0.1  # uniform init, as Daniluk et al.
    context: str = "sentence"  # sentence | document: how the model reads text (docs/MODELS.md)
    layers: int = 1  # stacked recurrent layers; attention and output layer read the top layer's outputs

    def __post_init__(self) -> None:
        if self.context not in CONTEXTS:
            raise ValueError(f"unknown context {self.context!r}; valid: {', '.join(CONTEXTS)}")
        if self.layers < 1:
            raise ValueError("layers must be >= 1")


DEFAULT_MEMORY = 100  # states AMSRN and Salton attend to in document context unless `memory` is set


def check_memory(config: BaseConfig) -> None:
    """A ``memory`` field (AMSRN, Salton): None (the whole sentence) or >= 1.

    A document is read as one stream, so its memory must be finite: the last
    ``DEFAULT_MEMORY`` states unless set.
    """
    if config.memory is None and config.context == "document":
        config.memory = DEFAULT_MEMORY
    if config.memory is not None and config.memory < 1:
        raise ValueError("memory must be >= 1")


def check_window(config: BaseConfig) -> None:
    """A ``window`` field (Daniluk et al.'s models, RM): how many slots a row attends to, >= 1."""
    if config.window < 1:
        raise ValueError("window must be >= 1")


@dataclass
class State:
    """What a model carries from one segment of a document to the next.

    ``memory`` holds the last ``M`` memory slots (LSTM outputs, the zero start slot
    ``h_0`` included), oldest first; ``M = model.memory_size()`` is fixed per model:
    the window L for Daniluk et al.'s models, ``memory`` for AMSRN and Salton, N - 2
    outputs for the N-gram RNN, none for the LSTM. Streams start documents at
    different times, so ``valid`` says per stream how many of the newest slots are
    real; the others are padding and masked. ``start_slots`` is how many a document
    starts with: 1, the zero start slot ``h_0``, or 0 for a model without it (then
    ``valid`` counts the states read since the document start).

    A slot's width ``D`` is the model's (:meth:`RecurrentLM.slot_size`): the LSTM's size
    ``H`` for every family but RM, which carries the two embeddings of each word read.
    """

    h: torch.Tensor  # (layers, B, H) recurrent hidden state
    c: torch.Tensor  # (layers, B, H) LSTM cell state (zeros, unused, for GRU and tanh / ReLU RNN cells)
    memory: torch.Tensor  # (B, M, D) carried memory slots, newest last
    valid: torch.Tensor  # (B,) long, 0 <= valid <= M
    start_slots: int = 1  # valid slots at a document start: the zero start slot h_0, or none

    def _with(self, h, c, memory, valid) -> State:
        return State(h, c, memory, valid, self.start_slots)

    def detach(self) -> State:
        """The same state cut from the graph (truncated BPTT)."""
        return self._with(self.h.detach(), self.c.detach(), self.memory.detach(), self.valid)

    def narrow(self, streams: int) -> State:
        """The state of the first ``streams`` streams (the others have no document left)."""
        if streams == self.valid.shape[0]:
            return self
        return self._with(self.h[:, :streams], self.c[:, :streams], self.memory[:streams], self.valid[:streams])

    def reset(self, starts: torch.Tensor) -> State:
        """Streams where ``starts`` (B,) is True begin a new document: zero LSTM state, and a
        memory holding only the zero start slot ``h_0`` (nothing without a start slot)."""
        if not bool(starts.any()):
            return self
        new = starts.to(self.h.device)
        zero = self.h.new_zeros(())
        return self._with(
            torch.where(new[None, :, None], zero, self.h),  # (layers, B, H)
            torch.where(new[None, :, None], zero, self.c),  # (layers, B, H)
            torch.where(new[:, None, None], zero, self.memory),  # (B, M, D)
            torch.where(new, min(self.start_slots, self.memory.shape[1]), self.valid),  # (B,)
        )


@dataclass
class Readout:
    """A model's output layer before it is applied: ``logits = features @ weight.T + bias``.

    Kept apart so that training's loss (:meth:`nll`) and evaluation's per-token scores
    (:meth:`token_nll`) never hold the (B, T, V) logits; :meth:`logits` multiplies them out.
    """

    features: torch.Tensor  # (B, T, F)
    weight: torch.Tensor  # (V, F)
    bias: torch.Tensor | None = None  # (V,)

    def logits(self) -> torch.Tensor:
        return F.linear(self.features, self.weight, self.bias)  # (B, T, V)

    def nll(self, targets: torch.Tensor) -> torch.Tensor:
        """Summed NLL over the targets (B, T) that are not padding (id 0), differentiable."""
        return LinearNLL.apply(self.features.flatten(0, 1), self.weight, self.bias, targets.reshape(-1))

    @torch.no_grad()
    def token_nll(self, targets: torch.Tensor) -> torch.Tensor:
        """NLL of every target (B, T) (0 at padding), chunk by chunk: (B, T)."""
        x, t = self.features.flatten(0, 1), targets.reshape(-1)
        out = torch.empty(t.shape, dtype=x.dtype, device=x.device)
        for s in range(0, x.shape[0], LOSS_CHUNK):
            z = torch.log_softmax(F.linear(x[s : s + LOSS_CHUNK], self.weight, self.bias), 1)
            out[s : s + LOSS_CHUNK] = -z.gather(1, t[s : s + LOSS_CHUNK, None])[:, 0]
        return out.masked_fill_(t == 0, 0.0).view(targets.shape)


class LMOutput:
    """What every model returns for a batch: the output layer (:class:`Readout`), its logits
    (multiplied out when first asked for), the attention weights and per-step extras, and the
    state after the segment."""

    def __init__(self, readout: Readout, attention: torch.Tensor | None = None,
                 extras: dict[str, torch.Tensor] | None = None, state: State | None = None):
        self.readout = readout
        self._logits: torch.Tensor | None = None  # (B, T, V), computed on first use
        self.attention = attention  # (B, T, S) weights over memory slots, rows sum to 1; S = T from a zero
        # state, S = M + T - 1 after a State carrying M slots (module docstring)
        self.extras = extras if extras is not None else {}  # e.g. AMSRN gates (B, T, d)
        self.state = state  # after the segment, when forward() was given a state

    @property
    def logits(self) -> torch.Tensor:
        """Next-word logits (B, T, V)."""
        if self._logits is None:
            self._logits = self.readout.logits()
        return self._logits

    def nll(self, targets: torch.Tensor) -> torch.Tensor:
        """Summed NLL of the non-padding ``targets`` (B, T), differentiable, without the (B, T, V) logits."""
        return self.readout.nll(targets)

    def token_nll(self, targets: torch.Tensor) -> torch.Tensor:
        """NLL of every target (B, T), 0 at padding (id 0); no gradient."""
        return self.readout.token_nll(targets)


def device_of(model: nn.Module) -> torch.device:
    """Where a model's weights are: its inputs go there, and its outputs come back from there."""
    return next(model.parameters()).device


def slot_mask(
    T: int, window: int | None = None, device=None, carried: int = 1, valid: torch.Tensor | None = None,
    start: bool = True,
) -> torch.Tensor:
    """Allowed (row, slot) pairs over ``S = carried + T - 1`` slots (the module docstring's layout).

    Row ``r`` may use slot ``j`` when ``j <= carried - 1 + r`` (nothing later than its own
    memory), ``j > carried - 1 + r - window`` (the last ``window`` slots) and, given
    ``valid`` (B,), ``j >= carried - valid`` (a real carried slot). (T, S) bool, or
    (B, T, S) with ``valid``. The defaults give the sentence layout: slot j <= r.
    ``start=False`` without ``valid``: no carried slot is real, so the sentence layout loses
    slot 0, the zero start slot (with ``valid``, the state's count already leaves it out).
    """
    rows = torch.arange(T, device=device)[:, None] + (carried - 1)  # (T, 1) newest slot of each row
    slots = torch.arange(carried + T - 1, device=device)[None, :]  # (1, S)
    allowed = slots <= rows
    if window is not None:
        allowed = allowed & (slots > rows - window)
    if valid is not None:
        real = slots >= (carried - valid.to(slots.device))[:, None]  # (B, S)
        allowed = allowed[None] & real[:, None, :]  # (B, T, S)
    elif not start:
        allowed = allowed & (slots >= carried)  # (T, S)
    return allowed  # (T, S) or (B, T, S)


def memory_of(h: torch.Tensor) -> torch.Tensor:
    """Slots ``[h_0 = 0, h_1, ..., h_{T-1}]`` from outputs ``h_1..h_T``: (B, T, d) -> (B, S=T, d)."""
    return F.pad(h, (0, 0, 1, 0))[:, :-1]


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over allowed slots; a row with none (the first row without a start slot) is all zero.

    An empty row is a softmax over its raw scores, then zeroed: all ``-inf`` would give NaN,
    and NaN times the zero gradient is NaN again. Rows with a slot are untouched, bit for bit.
    """
    empty = ~mask.any(-1, keepdim=True)  # (..., T, 1)
    alpha = scores.masked_fill(~(mask | empty), float("-inf")).softmax(dim=-1)  # (..., T, S)
    return alpha.masked_fill(empty, 0.0)


def attention_entropy(alpha: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """H(alpha) over allowed slots only, (B, T, S) -> (B, T); masked 0*log0 is 0, not NaN."""
    logs = torch.log(alpha.clamp_min(torch.finfo(alpha.dtype).tiny))
    return -torch.where(mask, alpha * logs, torch.zeros_like(alpha)).sum(-1)


def band(mem: torch.Tensor, window: int, carried: int = 1) -> torch.Tensor:
    """The ``window`` slots before each row, oldest first: (B, S, d) -> (B, T, L, d).

    ``mem`` has ``S = carried + T - 1`` slots (``carried <= L``). Band position ``l``
    of row ``r`` is slot ``carried - 1 + r + 1 - L + l``; positions before slot 0 are
    zero and must be masked with :func:`band_mask`.
    """
    padded = F.pad(mem, (0, 0, window - carried, 0))  # (B, T + L - 1, d)
    return padded.unfold(1, window, 1).transpose(2, 3)  # (B, T, L, d)


def band_mask(
    T: int, window: int, device=None, carried: int = 1, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Which band positions are real slots: (T, L) bool, or (B, T, L) given ``valid`` (B,)
    (then only the newest ``valid`` carried slots are real)."""
    rows = torch.arange(T, device=device)[:, None]
    offs = torch.arange(window, device=device)[None, :]
    if valid is None:
        return rows + offs >= window - carried  # (T, L)
    return (rows + offs)[None] >= (window - valid.to(rows.device))[:, None, None]  # (B, T, L)


def slots_to_band(weights: torch.Tensor, window: int, carried: int = 1) -> torch.Tensor:
    """Gather slot weights into the band, the inverse of :func:`band_to_slots`: (B, T, S) -> (B, T, L).

    Band position ``l`` of row ``r`` is slot ``carried - L + r + l`` (see :func:`band`); positions
    before slot 0 get 0, and weight on a slot outside the row's band is dropped.
    """
    B, T, _ = weights.shape
    padded = F.pad(weights, (window - carried, 0))  # (B, T, T + L - 1): slot s at column s + L - carried
    idx = torch.arange(T, device=weights.device)[:, None] + torch.arange(window, device=weights.device)[None, :]
    return padded.gather(2, idx.expand(B, T, window))  # (B, T, L)


def check_weights(weights: torch.Tensor, B: int, T: int, S: int) -> None:
    """Given attention weights must have the shape the model's own would have."""
    if tuple(weights.shape) != (B, T, S):
        raise ValueError(f"weights must have shape (B, T, S) = {(B, T, S)}, not {tuple(weights.shape)}")


def band_to_slots(weights: torch.Tensor, carried: int = 1) -> torch.Tensor:
    """Scatter band weights back to the slot axis: (B, T, L) -> (B, T, S = carried + T - 1)."""
    B, T, L = weights.shape
    idx = torch.arange(T, device=weights.device)[:, None] + torch.arange(L, device=weights.device)[None, :]
    full = weights.new_zeros(B, T, T + L - 1)
    full.scatter_(2, idx.expand(B, T, L), weights)
    return full[:, :, L - carried :]  # (B, T, S)


CELLS = ("lstm", "gru", "rnn_tanh", "rnn_relu")  # recurrent cells (the plain LM's `rnn` option)


def recurrent_layer(cell: str, input_size: int, hidden_size: int, layers: int = 1, dropout: float = 0.0) -> nn.RNNBase:
    """The recurrent layers of a model: ``nn.LSTM``, ``nn.GRU`` or ``nn.RNN`` (tanh / ReLU), batch first.

    With several layers, dropout ``dropout`` is applied between them (as pytorch/examples'
    ``word_language_model`` does); a single layer has none inside (PyTorch warns otherwise).
    """
    if cell not in CELLS:
        raise ValueError(f"unknown rnn {cell!r}; valid: {', '.join(CELLS)}")
    inner = dropout if layers > 1 else 0.0
    if cell == "lstm":
        return nn.LSTM(input_size, hidden_size, layers, batch_first=True, dropout=inner)
    if cell == "gru":
        return nn.GRU(input_size, hidden_size, layers, batch_first=True, dropout=inner)
    return nn.RNN(input_size, hidden_size, layers, nonlinearity=cell[4:], batch_first=True, dropout=inner)


class RecurrentLM(nn.Module):
    """Embedding -> recurrent layers (an LSTM unless the config's ``rnn`` says otherwise, ``layers``
    deep); subclasses add attention and the output layer, which read the top layer's outputs."""

    config: BaseConfig
    has_attention = False  # True where forward() returns attention weights

    def __init__(self, config: BaseConfig, rnn_size: int | None = None):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.emb_dim, padding_idx=0)
        self.rnn = recurrent_layer(getattr(config, "rnn", "lstm"), config.emb_dim, rnn_size or config.hidden_dim,
                                   config.layers, config.dropout)
        self.drop = nn.Dropout(config.dropout)

    @property
    def is_lstm(self) -> bool:
        """Whether the recurrent layers are an LSTM (a cell state ``c`` besides ``h``)."""
        return isinstance(self.rnn, nn.LSTM)

    def reset_parameters(self) -> None:
        """Uniform +-init_range everywhere, forget-gate bias 1 in every LSTM layer (Daniluk et al., Sec. 4)."""
        r = self.config.init_range
        for name, p in self.named_parameters():
            nn.init.uniform_(p, -r, r)
        if not self.is_lstm:
            return
        d = self.rnn.hidden_size
        with torch.no_grad():
            for layer in range(self.rnn.num_layers):
                getattr(self.rnn, f"bias_ih_l{layer}").zero_()
                getattr(self.rnn, f"bias_hh_l{layer}").zero_()
                getattr(self.rnn, f"bias_ih_l{layer}")[d : 2 * d] = 1.0  # PyTorch gate order: i, f, g, o

    def embed_lstm(self, lstm: dict[str, torch.Tensor], unit_offset: int) -> dict[str, torch.Tensor | None]:
        """Copy a trained LSTM LM (state dict, LSTM of ``hidden_dim`` units) into this wider one.

        Its units go to ``unit_offset .. unit_offset + hidden_dim`` of this LSTM, with no
        weights into them from the other units, so they compute exactly what they computed
        there; embedding and output layer (``decoder``) are copied too. The other units keep
        their random initialisation. Returns what was copied: tensor name -> None (all of it)
        or a bool mask of its copied entries (the LSTM's rows of those units).
        """
        k, H = self.config.hidden_dim, self.rnn.hidden_size
        if not self.is_lstm or self.rnn.num_layers != 1 or "rnn.weight_hh_l1" in lstm or "decoder.weight" not in lstm:
            raise ValueError("only an untied one-layer LSTM can start a one-layer model of this family")
        if lstm["rnn.weight_hh_l0"].shape != (4 * k, k) or lstm["embed.weight"].shape != self.embed.weight.shape:
            raise ValueError(f"the LSTM's sizes do not match this model (part size {k})")
        units = slice(unit_offset, unit_offset + k)
        rows = torch.cat([torch.arange(g * H, (g + 1) * H)[units] for g in range(4)])  # gates i, f, g, o
        with torch.no_grad():
            self.embed.weight.copy_(lstm["embed.weight"])
            self.decoder.weight.copy_(lstm["decoder.weight"])
            self.decoder.bias.copy_(lstm["decoder.bias"])
            self.rnn.weight_ih_l0[rows] = lstm["rnn.weight_ih_l0"]
            self.rnn.weight_hh_l0[rows] = 0.0
            self.rnn.weight_hh_l0[rows, units] = lstm["rnn.weight_hh_l0"]
            for b in ("bias_ih_l0", "bias_hh_l0"):
                getattr(self.rnn, b)[rows] = lstm[f"rnn.{b}"]
        copied: dict[str, torch.Tensor | None] = dict.fromkeys(["embed.weight", "decoder.weight", "decoder.bias"])
        for name, p in self.rnn.named_parameters():  # whole rows of the copied units, zeros from the others included
            copied[f"rnn.{name}"] = torch.zeros(p.shape, dtype=torch.bool).index_fill_(0, rows, True)
        return copied

    def recur(
        self, inputs: torch.Tensor, hc: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Token ids (B, T) -> (outputs (B, T, D), the LSTM's last ``(h, c)``), from ``hc`` or zeros.

        The outputs are what :meth:`head` reads: the top layer's outputs ``h_1..h_T`` (``D = d``),
        and for RM the embeddings of each step's word beside them. ``h`` and ``c`` are
        (layers, B, d); a GRU or tanh / ReLU RNN has no cell state and carries ``c`` as given
        (zeros).
        """
        x = self.drop(self.embed(inputs))  # (B, T, d_e)
        if hc is not None:  # cuDNN refuses a non-contiguous state: State.narrow slices dim 1 of (layers, B, d)
            hc = (hc[0].contiguous(), hc[1].contiguous())
        if self.is_lstm:
            h, hc = self.rnn(x, hc)  # (B, T, d)
            return self.drop(h), hc
        h, h_n = self.rnn(x, None if hc is None else hc[0])  # (B, T, d), (layers, B, d)
        return self.drop(h), (h_n, torch.zeros_like(h_n) if hc is None else hc[1])

    def encode(self, inputs: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> outputs h_1..h_T (B, T, D) (:meth:`recur`). State starts at zero."""
        return self.recur(inputs)[0]

    def to_slots(self, outputs: torch.Tensor) -> torch.Tensor:
        """What a memory slot keeps of each step's outputs: (B, T, D) -> (B, T, slot_size()); here all of it."""
        return outputs

    def slot_size(self) -> int:
        """The width of a memory slot (:meth:`to_slots`): the LSTM's output size."""
        return self.rnn.hidden_size

    def start_slots(self) -> int:
        """Slots before the first word: 1, the zero start slot ``h_0`` (0 for AMSRN without it)."""
        return 1

    def head(
        self, h: torch.Tensor, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None
    ) -> LMOutput:  # pragma: no cover - abstract
        """Attention (if any) and the output layer over LSTM outputs ``h`` (B, T, d), all steps at once.

        ``memory`` (B, M, d) and ``valid`` (B,) are a :class:`State`'s carried slots; without
        them the memory starts with the zero start slot alone (the sentence layout).
        """
        raise NotImplementedError

    # ---------------------------------------------------------------- document context
    def memory_size(self) -> int:
        """How many memory slots a :class:`State` carries between segments (none here)."""
        return 0

    def window_size(self) -> int | None:
        """How many of the newest slots a row may attend to (None: all of them)."""
        return None

    def allowed_slots(self, T: int, state: State | None = None, device=None) -> torch.Tensor:
        """The attention mask of a segment of T steps read after ``state``: (T, S) or (B, T, S)."""
        if state is None:
            return self._slot_mask(T, device=device)
        return self._slot_mask(T, state.memory.shape[1], state.valid, device)

    def _slot_mask(self, T: int, carried: int = 1, valid: torch.Tensor | None = None, device=None) -> torch.Tensor:
        """:func:`slot_mask` with this model's window and start slot: (T, S) or (B, T, S)."""
        return slot_mask(T, self.window_size(), device, carried, valid, start=bool(self.start_slots()))

    def initial_state(self, batch_size: int) -> State:
        """The state at a document start for ``batch_size`` streams: zeros, one valid slot (h_0; none
        without a start slot)."""
        w = self.embed.weight  # dtype and device of the model
        H, M, first = self.rnn.hidden_size, self.memory_size(), self.start_slots()
        return State(
            w.new_zeros(self.rnn.num_layers, batch_size, H),
            w.new_zeros(self.rnn.num_layers, batch_size, H),
            w.new_zeros(batch_size, M, self.slot_size()),
            torch.full((batch_size,), min(first, M), dtype=torch.long, device=w.device),
            first,
        )

    def forward(self, inputs: torch.Tensor, state: State | None = None) -> LMOutput:
        """Logits for token ids (B, T). Without ``state``: a sentence read from a zero state.

        With ``state`` (document context): the LSTM continues from ``state.h, state.c`` and the
        memory is ``[state.memory; this segment's outputs]``; the returned ``LMOutput.state`` is
        the state after this segment (not detached: call :meth:`State.detach` between segments).
        """
        if state is None:
            h = self.encode(inputs)  # (B, T, d)
            out = self.head(h)
            out.hidden = h
            return out
        M = self.memory_size()
        if state.memory.shape[1] != M:
            raise ValueError(f"state carries {state.memory.shape[1]} memory slots; this model carries {M}")
        h, (h_n, c_n) = self.recur(inputs, (state.h, state.c))  # (B, T, D)
        out = self.head(h, state.memory, state.valid)
        T = inputs.shape[1]
        slots = self.to_slots(h)  # (B, T, slot)
        memory = torch.cat([state.memory, slots], 1)[:, T:] if M else state.memory  # (B, M, slot): the last M slots
        out.state = State(h_n, c_n, memory, (state.valid + T).clamp_max(M), state.start_slots)
        out.hidden = h
        return out


class AttentionLM(RecurrentLM):
    """A recurrent LM with attention on top of its LSTM: :meth:`attend`, then :meth:`readout`.

    The split lets the attention effects (:mod:`vizlm.models.effects`) recompute the
    prediction from other attention weights without running the LSTM again: ``head(h,
    weights=w)`` uses ``w`` (B, T, S) in place of the softmax output, everything else as
    computed. All-zero weights give a zero read ``r_t = 0``, each family's own path
    without attention (the read enters every family linearly, so zero weights read zero).
    """

    has_attention = True

    def attend(
        self, h: torch.Tensor, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:  # pragma: no cover - abstract
        """``(read (B, T, k), weights (B, T, S), extras)`` for LSTM outputs ``h`` (B, T, d).

        Without ``weights`` the attention weights are the model's own; with them (slot layout,
        (B, T, S)) those are used instead, with the weight on slots a row may not use (later
        slots, outside the window, padding of a carried memory) set to zero, and returned.
        """
        raise NotImplementedError

    def output_layer(self, h: torch.Tensor, read: torch.Tensor) -> Readout:  # pragma: no cover - abstract
        """The output layer (:class:`Readout`) for LSTM outputs ``h`` (B, T, d) and reads (B, T, k),
        row by row: row ``t`` depends on ``h[:, t]`` and ``read[:, t]`` only."""
        raise NotImplementedError

    def readout(self, h: torch.Tensor, read: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) from LSTM outputs ``h`` (B, T, d) and reads (B, T, k) (:meth:`output_layer`)."""
        return self.output_layer(h, read).logits()

    def head(
        self, h: torch.Tensor, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> LMOutput:
        """:meth:`RecurrentLM.head`; ``weights`` (B, T, S) replace the attention weights (see :meth:`attend`)."""
        read, alpha, extras = self.attend(h, memory, valid, weights)  # (B, T, k), (B, T, S)
        return LMOutput(self.output_layer(h, read), alpha, extras)


class StateMemoryLM(AttentionLM):
    """Attention over the LSTM's own earlier states (AMSRN, Salton): the whole sentence, or in
    document context the last ``config.memory`` states carried across segments."""

    def memory_size(self) -> int:
        if self.config.memory is None:
            raise ValueError("a state needs a finite memory: set `memory` (document context: 100)")
        return self.config.memory

    def window_size(self) -> int | None:
        return self.config.memory

    def memory_slots(
        self, h: torch.Tensor, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The slots a segment may attend to and which each row may use: (B, S, d), (T, S) or (B, T, S)."""
        T = h.shape[1]
        if memory is None:
            mem = memory_of(h)  # (B, S=T, d)
            mask = self._slot_mask(T, device=h.device)  # (T, S)
        else:
            mem = torch.cat([memory, h[:, :-1]], 1)  # (B, S=M+T-1, d)
            mask = self._slot_mask(T, memory.shape[1], valid, h.device)  # (B, T, S)
        return mem, mask


class WindowLM(AttentionLM):
    """Attention over a sliding window of the last ``config.window`` slots (Daniluk et al.'s
    models, RM), carried across segments in document context.

    Every row is computed at once on a (B, T, L, D) band of the slots (:func:`band`), then
    scattered to the (B, T, S) slot axis. A family gives :meth:`band_scores` (the scores of a
    row's band) and :meth:`band_values` (what is read from it).
    """

    def memory_size(self) -> int:
        return self.config.window  # the last L slots

    def window_size(self) -> int | None:
        return self.config.window

    def band_scores(self, h: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        """Attention scores (B, T, L) of outputs ``h`` (B, T, D) over their bands ``slots`` (B, T, L, slot)."""
        raise NotImplementedError

    def band_values(self, slots: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        """What a row reads from its band: (B, T, L, slot) -> (B, T, L, k)."""
        raise NotImplementedError

    def attend(
        self, h: torch.Tensor, memory: torch.Tensor | None = None, valid: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        # h: outputs (B, T, D); memory: the carried last L slots (B, L, slot)
        B, T, L = h.shape[0], h.shape[1], self.config.window
        new = self.to_slots(h)  # (B, T, slot)
        if memory is None:
            M, mem = 1, memory_of(new)  # the zero start slot; (B, S=T, slot)
        else:
            M, mem = memory.shape[1], torch.cat([memory, new[:, :-1]], 1)  # (B, S=M+T-1, slot)
        slots = band(mem, L, carried=M)  # (B, T, L, slot)
        mask = band_mask(T, L, device=h.device, carried=M, valid=valid)  # (T, L) or (B, T, L)
        if weights is None:
            scores = self.band_scores(h, slots)  # (B, T, L)
            alpha = scores.masked_fill(~mask, float("-inf")).softmax(-1)  # (B, T, L)
        else:
            check_weights(weights, B, T, M + T - 1)
            alpha = slots_to_band(weights, L, carried=M).masked_fill(~mask, 0.0)  # (B, T, L)
        read = (alpha[..., None] * self.band_values(slots)).sum(2)  # (B, T, k): the weighted sum of the band
        return read, band_to_slots(alpha, carried=M), {}
