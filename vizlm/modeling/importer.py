"""Import a model trained elsewhere: pytorch/examples' ``word_language_model`` (``RNNModel``, ``TransformerModel``).

``vizlm import pytorch-examples MODEL.pt --data FOLDER --corpus NAME --out DIR`` turns one of
its checkpoints into a vizlm checkpoint (``model.safetensors`` + ``config.json``, the ``lstm``
family with the same cell, layers, sizes and tying, read from the weights) and prepares
``FOLDER`` (its ``train.txt``, ``valid.txt``, ``test.txt``) as the vizlm corpus ``NAME`` with
exactly the model's vocabulary. Its ``TransformerModel`` becomes a ``transformer`` checkpoint
(:mod:`vizlm.models.transformer`) of the same layers, heads and sizes, its encoder's weights as
they are, read in blocks of its ``--bptt`` (``block``); its embedding and output rows move as an
``RNNModel``'s do (below).

Reading the file, no pickled code runs: ``torch.load(weights_only=True)`` with an allow-list of
inert stand-ins (:class:`Inert`). A whole module saved by its ``main.py`` (``torch.save(model,
f)``) names ``model.RNNModel`` and torch's layer classes; each is rebuilt as a stand-in that
only keeps its attributes (``_parameters``, ``_modules``, ``rnn_type``...), and nothing of
either class is imported or called. Any other global (``os.system`` in a crafted
``__reduce__``, a class of the user's own) stops the load before it is called.

Vocabulary (pytorch/examples' ``data.Corpus``): the words of ``train.txt``, then ``valid.txt``,
then ``test.txt``, in order of first appearance, every line split on whitespace plus ``<eos>``;
the model's id of a word is its position in that list. vizlm's vocabulary starts with its four
special tokens (:data:`vizlm.data.vocab.SPECIALS`), so the imported one is::

    <pad> <s> </s> <unk>  then the model's words in its own order, without <eos> and <unk>

``</s>`` is the model's ``<eos>`` (a sentence ends where a line ended), ``<unk>`` the model's
``<unk>`` when it has one (WikiText and PTB do). ``<s>``, which vizlm reads before a sentence
read alone, is read as ``<eos>`` (the token before every line in the model's stream); it is never
predicted. The rows vizlm adds get a zero weight and a bias of ``-IMPOSSIBLE`` in the output
layer: a probability of exactly 0 in float32, so the softmax over the model's words is the
model's own (a row without a word: ``<pad>``, ``<s>``, and ``<unk>`` when the model has none;
zero embedding rows except ``<s>``'s). Each of the model's words keeps its rows: the recurrent
outputs of the imported checkpoint equal the original model's bit for bit, and its logits at vizlm
ids the original's at the model's ids within float32's tolerance (the output layer is a matrix
product of another shape, whose kernel may round the last bit differently; ``tests/test_import.py``).

A model trained on a vizlm corpus written out for ``main.py`` (``scripts/anchor_corpus.py``: the corpus's
tokens, out-of-vocabulary words as ``<unk>``) has that corpus's words: ``--vocab-of NAME`` imports it
with the vizlm corpus ``NAME``'s vocabulary (its order, the rows moved the same way) and writes no
corpus, so it reads ``NAME`` itself, its documents as vizlm's models read them, and pairs with them
sentence by sentence (:func:`corpus_vocabulary`).
"""

from __future__ import annotations

import json
import math
import pickle
import re
import stat
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from vizlm.core import files, paths
from vizlm.core.choices import IMPORT_SOURCES as SOURCES  # what `vizlm import` reads
from vizlm.modeling.checkpoint import MAX_ABS_WEIGHT, CheckpointError, _check_vocab, check_memory, save_checkpoint
from vizlm.data.folder import CARD_FILE, CARD_FORMAT, VOCAB_FILE, card_text, split_files, vocab_text, write_folder
from vizlm.data.registry import SPLITS, check_corpus_name, corpus_folder
from vizlm.data.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab
from vizlm.core.errors import VizlmError
from vizlm.models import build_model, count_parameters, parameter_count
from vizlm.modeling.evaluate import perplexity, score_split
from vizlm.data.tokens import open_split
from vizlm.data.text import reading_of

SOURCE_EOS, SOURCE_UNK = "<eos>", "<unk>"  # pytorch/examples' end of line; the unknown word of WikiText / PTB
IMPOSSIBLE = 1e4  # output bias of the rows vizlm adds: exp(-1e4) is 0 in float32 and float64 (checkpoint limit: 1e4)
# A model file is read whole, then converted and saved: about four times its bytes at the peak.
IMPORT_COPIES = 4
SAVE_STATE_DICT = 'torch.save(model.state_dict(), "model_state.pt")'  # the one line that makes a file vizlm reads
TRANSFORMER = "transformer"  # what state_dict_of says of a TransformerModel (in place of an RNN's cell)
CELLS = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}  # RNNModel's rnn_type -> vizlm
GATES = {4: "lstm", 3: "gru"}  # rows of weight_ih per hidden unit -> cell (1: an Elman RNN, tanh or ReLU)


class ImportModelError(VizlmError, ValueError):
    """A model file or data folder that cannot be imported, with a message meant for the user."""


# --------------------------------------------------------------------------- reading without running code
class Inert:
    """An object of an allow-listed pickled class, rebuilt as data: its attributes and nothing else.

    The unpickler creates it with ``__new__`` and fills ``__dict__`` from the pickled state
    (:meth:`__setstate__`); no method of the class it stands in for exists here, so none runs.
    """

    pickled_name = ""  # the class it stands in for, "module.Class"

    def __init__(self, *args, **kwargs):  # a REDUCE on the stand-in: keep the arguments, do nothing
        self.__dict__["args"] = args

    def __setstate__(self, state) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict state, slot state), as pickle's BUILD
            state = {**(state[0] or {}), **(state[1] or {})}
        if isinstance(state, dict):
            self.__dict__.update(state)


# The classes a pytorch/examples checkpoint saved whole may name (main.py's own allow-list), each
# rebuilt as an Inert stand-in: the RNNModel's and the TransformerModel's.
ALLOWED = (
    "model.RNNModel",
    "torch.nn.modules.sparse.Embedding", "torch.nn.modules.rnn.LSTM", "torch.nn.modules.rnn.GRU",
    "torch.nn.modules.rnn.RNN", "torch.nn.modules.linear.Linear", "torch.nn.modules.dropout.Dropout",
    "model.TransformerModel", "model.PositionalEncoding", "torch.nn.functional.relu",
    "torch.nn.modules.activation.MultiheadAttention", "torch.nn.modules.container.ModuleList",
    "torch.nn.modules.linear.NonDynamicallyQuantizableLinear", "torch.nn.modules.normalization.LayerNorm",
    "torch.nn.modules.transformer.TransformerEncoder", "torch.nn.modules.transformer.TransformerEncoderLayer",
)
STAND_INS = {name: type(name.rpartition(".")[2], (Inert,), {"pickled_name": name}) for name in ALLOWED}


def _refused(path: Path, why: str) -> ImportModelError:
    return ImportModelError(
        f"{path}: {why}; vizlm reads a state dict or pytorch/examples' RNNModel or TransformerModel saved whole, and "
        "never runs code "
        f"from a file. Save a state dict where the model is defined and import that: {SAVE_STATE_DICT}")


def read_model_file(path: Path | str) -> dict[str, torch.Tensor] | Inert:
    """A state dict (name -> tensor) or the root stand-in of a module saved whole, read with
    ``torch.load(weights_only=True)`` and only :data:`STAND_INS` allowed besides torch's tensors."""
    path = Path(path)
    try:
        info = path.stat()
    except OSError as exc:
        raise ImportModelError(f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ImportModelError(f"{path} is not a regular file; give a PyTorch model file (.pt)")
    check_memory(IMPORT_COPIES * info.st_size, f"importing {path} ({info.st_size / 2**20:,.0f} MB)", ImportModelError)
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head[:4] != b"PK\x03\x04" and head[:1] != b"\x80":  # torch.save's zip, or its legacy format (a pickle)
        raise ImportModelError(f"{path} is not a PyTorch model file (neither torch.save's zip format nor a pickle)")
    try:
        with torch.serialization.safe_globals([(cls, name) for name, cls in STAND_INS.items()]), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # e.g. "Detected pickle protocol 4": the refusal says enough
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        said = str(exc).partition("WeightsUnpickler error:")[2] or str(exc)  # torch's own words, past its advice
        found = re.search(r"GLOBAL (\S+)", said) or re.search(r"(?:function|got) (<[^>]*>|\S+)", said)
        if found:
            what = f"it names {found.group(1).rstrip('.,')}, which is not allowed"
        elif (op := re.search(r"Unsupported operand (\d+)", said)) and op.group(1) == str(pickle.FRAME[0]):
            what = "a pickle of protocol 4 or later, which torch.save does not write"  # refused at its first frame
        elif op:
            raise ImportModelError(f"{path} is damaged or not a PyTorch model file: its pickle has an unknown "
                                   f"operation (code {op.group(1)})") from None
        else:
            what = "it is not plain data"
        raise _refused(path, f"refused to unpickle ({what})") from None
    except (RuntimeError, EOFError, ValueError, OSError, KeyError, TypeError, AttributeError, IndexError) as exc:
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise ImportModelError(f"{path} is not a PyTorch model file torch.load can read ({first})") from None
    return obj


def module_tensors(root: Inert) -> dict[str, torch.Tensor]:
    """The state dict of a module saved whole, from its stand-ins: ``_parameters`` and
    ``_buffers`` of every submodule under its dotted name (a tied weight is the same tensor twice)."""
    out: dict[str, torch.Tensor] = {}
    todo, seen = [("", root)], set()
    while todo:
        prefix, node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for kind in ("_parameters", "_buffers"):
            for key, t in _mapping(node, kind).items():
                if isinstance(t, torch.Tensor):
                    out[prefix + str(key)] = t
        for key, child in _mapping(node, "_modules").items():
            if isinstance(child, Inert):
                todo.append((f"{prefix}{key}.", child))
    return out


def _mapping(node: Inert | None, name: str) -> dict:
    """A stand-in's attribute ``name`` if it is a dict (what a module's ``_parameters`` are), else empty (also
    for anything that is not a stand-in)."""
    value = node.__dict__.get(name) if isinstance(node, Inert) else None
    return value if isinstance(value, dict) else {}


# --------------------------------------------------------------------------- what the weights say
@dataclass
class Spec:
    """An RNNModel read from its weights."""

    cell: str  # lstm | gru | rnn_tanh | rnn_relu
    layers: int
    vocab_size: int
    emb_dim: int
    hidden_dim: int
    tied: bool


def state_dict_of(obj, path: Path, nonlinearity: str | None = None) -> tuple[dict[str, torch.Tensor], str | None]:
    """``(state dict, cell)`` of what :func:`read_model_file` returned; ``cell`` is known from a
    module saved whole (its ``rnn_type``), or from ``nonlinearity`` for a state dict of an Elman RNN."""
    cell = None if nonlinearity is None else f"rnn_{nonlinearity}"
    if isinstance(obj, Inert):
        kind = type(obj).pickled_name  # the class the file named (not an attribute its state could set)
        if kind == "model.TransformerModel":
            return _checked_tensors(module_tensors(obj), path), TRANSFORMER
        if kind != "model.RNNModel":
            raise _refused(path, f"it holds a {kind} object, not an RNNModel or a TransformerModel")
        state = module_tensors(obj)
        rnn = _mapping(obj, "_modules").get("rnn")
        layer = rnn.__dict__ if isinstance(rnn, Inert) else {}
        mode = layer.get("mode") or obj.__dict__.get("rnn_type")
        if not isinstance(mode, str) or mode not in CELLS:
            raise _refused(path, f"its RNNModel has the recurrent cell {str(mode)[:40]!r}, not one of {', '.join(CELLS)}")
        if any(layer.get(k) not in (None, False, 0) for k in ("bidirectional", "proj_size", "batch_first")):
            raise ImportModelError(f"{path}: a bidirectional, projected or batch-first RNN is not an RNNModel vizlm imports")
        if cell is not None and cell != CELLS[mode]:
            raise ImportModelError(f"{path} saved its RNN as {mode}; --nonlinearity {nonlinearity} says otherwise")
        cell = CELLS[mode]
    elif isinstance(obj, dict):
        state = dict(obj)
        if state and all(isinstance(k, str) and k.startswith("module.") for k in state):  # saved from DataParallel
            state = {k[len("module."):]: v for k, v in state.items()}
    else:
        raise _refused(path, f"it holds a {type(obj).__name__}, not a state dict or an RNNModel")
    state = _checked_tensors(state, path)
    if any(k.startswith("transformer_encoder.") for k in state):
        raise ImportModelError(f"{path} is a state dict of an older pytorch/examples TransformerModel (its "
                               "transformer_encoder without a final LayerNorm); vizlm imports the TransformerModel "
                               "of the current example (a subclass of nn.Transformer: encoder.layers, encoder.norm)")
    if any(k.startswith(("pos_encoder.", "input_emb.")) for k in state):
        return state, TRANSFORMER
    return state, cell


def _checked_tensors(state: dict, path: Path) -> dict[str, torch.Tensor]:
    """``state`` if it maps names to dense tensors holding values; else the reason, in one line."""
    bad = [str(k)[:40] for k, v in state.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise _refused(path, f"its entries {bad[:3]} are not named tensors: not a state dict")
    for key, t in state.items():  # a model's weights are dense tensors with values: nothing else is read further
        kind = _unusual(t)
        if kind:
            raise ImportModelError(f"{path}: {key[:80]} is a {kind} tensor; a model's weights are dense tensors "
                                   "with their values (save the state dict of the trained model as it is)")
    return state


def read_spec(state: dict[str, torch.Tensor], cell: str | None, path: Path) -> Spec:
    """Cell, layers, sizes and tying from an RNNModel state dict (keys ``encoder``, ``rnn``, ``decoder``),
    every tensor's name and shape checked."""
    _require(state, ["encoder.weight", "decoder.weight", "decoder.bias", "rnn.weight_ih_l0", "rnn.weight_hh_l0"],
             path, "RNNModel")
    V, E = _shape(state, "encoder.weight", 2)
    gH, H = _shape(state, "rnn.weight_hh_l0", 2)
    if H < 1 or gH % H:
        raise ImportModelError(f"{path}: rnn.weight_hh_l0 is {gH} x {H}, not gates x hidden by hidden")
    gates = gH // H
    seen = GATES.get(gates, "rnn" if gates == 1 else None)
    if seen is None:
        raise ImportModelError(f"{path}: rnn.weight_hh_l0 has {gates} gates per unit; an LSTM has 4, a GRU 3, an RNN 1")
    if seen == "rnn":
        if cell is None:
            raise ImportModelError(f"{path} is a state dict of an Elman RNN (RNN_TANH or RNN_RELU), which the weights "
                                   "do not tell apart: pass --nonlinearity tanh or --nonlinearity relu")
        if not cell.startswith("rnn_"):
            raise ImportModelError(f"{path}: the weights are an Elman RNN's, not a {cell}'s")
    elif cell is not None and cell != seen:
        raise ImportModelError(f"{path}: the weights are a {seen.upper()}'s, not a {cell}'s")
    cell = cell or seen
    layers = 0
    while f"rnn.weight_ih_l{layers}" in state:
        layers += 1
    expected = {"encoder.weight": (V, E), "decoder.weight": (V, H), "decoder.bias": (V,)}
    for k in range(layers):
        expected |= {f"rnn.weight_ih_l{k}": (gH, E if k == 0 else H), f"rnn.weight_hh_l{k}": (gH, H),
                     f"rnn.bias_ih_l{k}": (gH,), f"rnn.bias_hh_l{k}": (gH,)}
    extra = sorted(set(state) - set(expected))
    if extra:
        raise ImportModelError(f"{path}: unexpected tensors {extra[:4]} (a bidirectional or projected RNN, or not an "
                               "RNNModel); vizlm imports pytorch/examples' RNNModel")
    _check_expected(state, expected, path, "an RNN without biases is not an RNNModel")
    for key in expected:
        if not bool(torch.isfinite(state[key]).all()):
            raise ImportModelError(f"{path}: {key} contains NaN or infinite values")
    enc, dec = state["encoder.weight"], state["decoder.weight"]
    tied = _same_storage(enc, dec) or (enc.shape == dec.shape and torch.equal(enc, dec))
    return Spec(cell, layers, V, E, H, tied)


def _require(state: dict[str, torch.Tensor], need: list[str], path: Path, kind: str) -> None:
    """The tensors that make a state dict pytorch/examples' ``kind``, before its sizes are read from them."""
    missing = [k for k in need if k not in state]
    if missing:
        raise ImportModelError(f"{path} is not a pytorch/examples {kind}: it has no {', '.join(missing)} "
                               f"(its tensors: {', '.join(list(state)[:6])}{', ...' if len(state) > 6 else ''})")


def _check_expected(state: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]], path: Path,
                    missing_why: str) -> None:
    """Every tensor the layout ``expected`` names is in ``state``, of its shape, floating point (``missing_why``:
    what a missing one says about the file)."""
    for key, shape in expected.items():
        if key not in state:
            raise ImportModelError(f"{path}: {key} is missing ({missing_why})")
        if tuple(state[key].shape) != shape:
            raise ImportModelError(f"{path}: {key} is {tuple(state[key].shape)}; the other tensors call for {shape}")
        if not state[key].is_floating_point():
            raise ImportModelError(f"{path}: {key} is {state[key].dtype}, not floating point")


@dataclass
class TransformerSpec:
    """A TransformerModel read from its weights (``heads`` from the module saved whole, or ``--nhead``)."""

    layers: int
    vocab_size: int
    d_model: int
    feedforward: int
    heads: int


def transformer_layer_tensors(d: int, ff: int, layers: int) -> dict[str, tuple[int, ...]]:
    """Name -> shape of the encoder of a TransformerModel (torch's names, as vizlm's transformer keeps them)."""
    shapes: dict[str, tuple[int, ...]] = {"encoder.norm.weight": (d,), "encoder.norm.bias": (d,)}
    for k in range(layers):
        pre = f"encoder.layers.{k}."
        shapes |= {pre + "self_attn.in_proj_weight": (3 * d, d), pre + "self_attn.in_proj_bias": (3 * d,),
                   pre + "self_attn.out_proj.weight": (d, d), pre + "self_attn.out_proj.bias": (d,),
                   pre + "linear1.weight": (ff, d), pre + "linear1.bias": (ff,),
                   pre + "linear2.weight": (d, ff), pre + "linear2.bias": (d,),
                   pre + "norm1.weight": (d,), pre + "norm1.bias": (d,), pre + "norm2.weight": (d,), pre + "norm2.bias": (d,)}
    return shapes


def read_transformer_spec(state: dict[str, torch.Tensor], heads: int | None, path: Path) -> TransformerSpec:
    """Layers and sizes of a TransformerModel state dict (``input_emb``, ``encoder``, ``decoder``, the buffer
    ``pos_encoder.pe``), every tensor's name and shape checked; ``heads`` must divide d_model."""
    _require(state, ["input_emb.weight", "decoder.weight", "decoder.bias", "encoder.layers.0.linear1.weight",
                     "encoder.norm.weight"], path, "TransformerModel")
    V, d = _shape(state, "input_emb.weight", 2)
    ff = _shape(state, "encoder.layers.0.linear1.weight", 2)[0]
    layers = 0
    while f"encoder.layers.{layers}.linear1.weight" in state:
        layers += 1
    expected = {"input_emb.weight": (V, d), "decoder.weight": (V, d), "decoder.bias": (V,),
                **transformer_layer_tensors(d, ff, layers)}
    pe = state.get("pos_encoder.pe")  # the example's table of position encodings: vizlm computes them
    if pe is not None and (pe.dim() != 3 or pe.shape[1:] != (1, d)):
        raise ImportModelError(f"{path}: pos_encoder.pe is {tuple(pe.shape)}; a TransformerModel's is (max_len, 1, {d})")
    extra = sorted(set(state) - set(expected) - {"pos_encoder.pe"})
    if extra:
        raise ImportModelError(f"{path}: unexpected tensors {extra[:4]} (not the TransformerModel of pytorch/examples: "
                               "a decoder stack, or another layer layout)")
    _check_expected(state, expected, path, "not a TransformerModel of pytorch/examples")
    if heads is None:
        raise ImportModelError(f"{path} is a state dict of a TransformerModel, whose weights do not say its heads: "
                               "pass --nhead N (main.py's --nhead, default 2)")
    if d % heads:
        raise ImportModelError(f"{path}: --nhead {heads} does not divide the model's size {d}")
    return TransformerSpec(layers, V, d, ff, heads)


def module_heads(root: Inert, path: Path) -> int:
    """The heads of a TransformerModel saved whole (its first layer's attention's ``num_heads``); its layers
    checked to be what vizlm's transformer computes: post-norm (``norm_first`` False), ReLU, sequence first."""
    layer = _mapping(_mapping(_mapping(root, "_modules").get("encoder"), "_modules").get("layers"), "_modules").get("0")
    attn = _mapping(layer, "_modules").get("self_attn") if isinstance(layer, Inert) else None
    heads = attn.__dict__.get("num_heads") if isinstance(attn, Inert) else None
    if type(heads) is not int or heads < 1:
        raise ImportModelError(f"{path}: its TransformerModel's first layer has no attention with a number of heads")
    if layer.__dict__.get("norm_first") or attn.__dict__.get("batch_first"):
        raise ImportModelError(f"{path}: its encoder layers are pre-norm or batch-first, not the TransformerModel of "
                               "pytorch/examples (post-norm, sequence first)")
    act = layer.__dict__.get("activation")
    if act is not None and act is not STAND_INS["torch.nn.functional.relu"]:
        raise ImportModelError(f"{path}: its encoder layers' activation is not ReLU")
    return heads


def _unusual(t: torch.Tensor) -> str | None:
    """What makes ``t`` other than a dense tensor holding its values (sparse, meta, nested, quantized); None if it is one."""
    if getattr(t, "is_nested", False):
        return "nested"
    if t.is_meta:
        return "meta (shape only, no values)"
    if t.layout is not torch.strided:
        return f"sparse ({str(t.layout).removeprefix('torch.')})"
    if t.is_quantized:
        return "quantized"
    return None


def _shape(state: dict[str, torch.Tensor], key: str, dims: int) -> tuple[int, ...]:
    shape = tuple(state[key].shape)
    if len(shape) != dims:
        raise ImportModelError(f"{key} has shape {shape}; expected {dims} dimensions")
    return shape


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.storage_offset() == b.storage_offset()
            and a.shape == b.shape and a.stride() == b.stride())


# --------------------------------------------------------------------------- vocabulary and corpus
def source_vocabulary(folder: Path) -> list[str]:
    """pytorch/examples' ``data.Corpus`` dictionary of ``folder``: the words of train.txt, then
    valid.txt, then test.txt in order of first appearance, every line split on whitespace plus
    ``<eos>`` (a blank line included). Index = the model's id."""
    words: dict[str, None] = {}
    for split in SPLITS:
        for line in _split_lines(folder, split):
            for w in line.split():
                words.setdefault(w, None)
            words.setdefault(SOURCE_EOS, None)
    return list(words)


_NOT_UTF8 = re.compile("[\udc80-\udcff]")  # a byte that is not UTF-8, as errors="surrogateescape" reads it


def _split_lines(folder: Path, split: str) -> Iterator[str]:
    """The lines of ``split``'s file as pytorch/examples reads them (UTF-8, universal newlines); a byte that
    is not UTF-8 raises :class:`ImportModelError` naming the file, the line and the byte."""
    path = _split_file(folder, split)
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        for n, line in enumerate(fh, 1):
            if bad := _NOT_UTF8.search(line):
                byte = len(line[: bad.start()].encode("utf-8", "surrogateescape")) + 1
                raise ImportModelError(f"{path}: line {n:,} is not valid UTF-8 (byte {byte:,} of the line); "
                                       "convert the file to UTF-8")
            yield line


def _split_file(folder: Path, split: str) -> Path:
    path = Path(folder) / f"{split}.txt"
    if not path.is_file():
        raise ImportModelError(f"{path} is missing: --data must be a folder with train.txt, valid.txt and test.txt "
                               "(the data the model was trained on, as pytorch/examples reads it)")
    return path


def vizlm_vocabulary(words: list[str]) -> tuple[list[str], list[int]]:
    """``(vizlm words, model id of each)``: the specials first, then the model's words in its own
    order (module docstring); -1 where a special has no row of the model (``<pad>``, ``<s>``,
    ``<unk>`` when the model has none). ``<s>``'s entry is -1: it reads the ``<eos>`` embedding
    but is never predicted (:func:`convert`)."""
    for special in (PAD, BOS, EOS):
        if special in words:
            raise ImportModelError(f"the corpus uses {special!r} as a word; vizlm keeps it for its own special token")
    index = {w: i for i, w in enumerate(words)}
    itos = list(SPECIALS)
    rows = [-1, -1, index[SOURCE_EOS], index.get(SOURCE_UNK, -1)]
    for i, w in enumerate(words):
        if w not in (SOURCE_EOS, SOURCE_UNK):
            itos.append(w)
            rows.append(i)
    try:
        _check_vocab(itos, len(itos))
    except CheckpointError as exc:
        raise ImportModelError(f"the corpus's vocabulary cannot be a vizlm vocabulary: {exc}") from None
    return itos, rows


def corpus_vocabulary(words: list[str], itos: list[str], name: str) -> list[int]:
    """The model id of each word of the vizlm vocabulary ``itos`` (the corpus ``name``'s), as
    :func:`vizlm_vocabulary` gives them for its own order: the model's words must be exactly the corpus's
    (``<eos>`` its ``</s>``, ``<unk>`` its ``<unk>``), else :class:`ImportModelError` names the difference."""
    index = {w: i for i, w in enumerate(words)}
    mine = set(words) - {SOURCE_EOS, SOURCE_UNK}
    theirs = set(itos) - set(SPECIALS)
    if mine != theirs:
        extra, missing = sorted(mine - theirs), sorted(theirs - mine)
        raise ImportModelError(
            f"the model's words are not the corpus {name}'s: {len(extra):,} are not in its vocabulary"
            + (f" (e.g. {', '.join(map(repr, extra[:3]))})" if extra else "") + f", {len(missing):,} of its are missing"
            + (f" (e.g. {', '.join(map(repr, missing[:3]))})" if missing else "")
            + "; --vocab-of takes a model trained on that corpus as scripts/anchor_corpus.py writes it")
    if SOURCE_EOS not in index:
        raise ImportModelError("the model has no <eos>: it was not trained by pytorch/examples' main.py")
    special = {PAD: -1, BOS: -1, EOS: index[SOURCE_EOS], UNK: index.get(SOURCE_UNK, -1)}
    return [special[w] if w in special else index[w] for w in itos]


def convert(state: dict[str, torch.Tensor], spec: Spec, rows: list[int], vocab_size: int):
    """The vizlm ``lstm`` model of the RNNModel ``state``: the recurrent weights as they are, the
    embedding and output rows moved to the vizlm ids (``rows``: model id of each vizlm id)."""
    config = {"vocab_size": vocab_size, "emb_dim": spec.emb_dim, "hidden_dim": spec.hidden_dim, "rnn": spec.cell,
              "layers": spec.layers, "tie": spec.tied, "context": "document"}
    n = parameter_count("lstm", **config)
    # the state dict read, the converted tensors, the model and the saved file: ~4 float32 copies
    check_memory(4 * 4 * n, f"importing this model ({n:,} parameters)", ImportModelError)
    model = build_model("lstm", **config)
    new = _vocabulary_rows(state, "encoder.weight", rows)
    if spec.tied:
        del new["decoder.weight"]  # the embedding's
    for k in range(spec.layers):
        for part in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            new[f"rnn.{part}_l{k}"] = state[f"rnn.{part}_l{k}"].float()
    model.load_state_dict(new)
    return model.eval()


def _vocabulary_rows(state: dict[str, torch.Tensor], embedding: str, rows: list[int]) -> dict[str, torch.Tensor]:
    """The embedding (``state[embedding]``) and output layer (``decoder``) with their rows moved to the vizlm ids
    (``rows``: model id of each vizlm id); the rows vizlm adds are zero and never predicted."""
    idx = torch.tensor(rows)
    has = idx >= 0
    src = idx.clamp_min(0)
    enc = state[embedding].float()
    embed = torch.where(has[:, None], enc[src], 0.0)  # (V', E)
    embed[Vocab.bos_id] = enc[rows[Vocab.eos_id]]  # <s> is read as <eos>, the token before every line
    weight = torch.where(has[:, None], state["decoder.weight"].float()[src], 0.0)  # (V', H)
    bias = torch.where(has, state["decoder.bias"].float()[src], -IMPOSSIBLE)  # (V',): the added rows are never predicted
    return {"embed.weight": embed, "decoder.weight": weight, "decoder.bias": bias}


def convert_transformer(state: dict[str, torch.Tensor], spec: TransformerSpec, rows: list[int], vocab_size: int,
                        block: int):
    """The vizlm ``transformer`` model of the TransformerModel ``state``: the encoder's weights as they are,
    the embedding and output rows moved to the vizlm ids; text read in blocks of ``block`` (its ``--bptt``)."""
    config = {"vocab_size": vocab_size, "emb_dim": spec.d_model, "hidden_dim": spec.feedforward, "layers": spec.layers,
              "heads": spec.heads, "block": block, "context": "document"}
    n = parameter_count(TRANSFORMER, **config)
    check_memory(4 * 4 * n, f"importing this model ({n:,} parameters)", ImportModelError)
    model = build_model(TRANSFORMER, **config)
    new = _vocabulary_rows(state, "input_emb.weight", rows)
    for key in transformer_layer_tensors(spec.d_model, spec.feedforward, spec.layers):
        new[key] = state[key].float()
    model.load_state_dict(new)
    return model.eval()


def write_corpus(folder: Path, name: str, itos: list[str], data_dir: Path | None = None, force: bool = False,
                 source: dict | None = None) -> Path:
    """Write ``folder``'s splits as the vizlm corpus ``name`` (the layout :func:`vizlm.data.registry.load_corpus`
    reads) with the vocabulary ``itos``, in ``data_dir`` (default: the corpora folder,
    :func:`vizlm.core.paths.corpora_dir`): every line a sentence, its words as they are (no
    normalisation: the model's words), a blank line an empty sentence (the model's lone
    ``<eos>``), each split one document (the model read it as one stream). Nothing is replaced
    without ``force``; every file is checked before the first is written."""
    check_corpus_name(name)
    out = Path(data_dir or paths.corpora_dir()) / name
    texts: dict[str, str] = {}
    for split in SPLITS:
        sents = [line.split() for line in _split_lines(folder, split)]
        lines = [" ".join(s) for s in sents]
        texts |= {path.name: text for path, text in split_files(out, split, {
            "txt": lines, "orig": lines, "tags": [" ".join("-" * bool(w) for w in s) for s in sents],
            "ids": [f"{split}:{i}" for i in range(len(sents))]}).items()}
    texts[VOCAB_FILE] = vocab_text(itos)
    texts[CARD_FILE] = card_text({"format": CARD_FORMAT, "name": name, "splits": list(SPLITS), "source": source or {},
                                  "vocab_size": len(itos)})
    # the same corpus again is left as it is (its token-id files stay valid)
    return write_folder(out, texts, force, "pass --force (vizlm import)")


def check_weights(state: dict[str, torch.Tensor], path: Path) -> None:
    """Refuse weights no vizlm checkpoint can hold (the loader's rule, :data:`vizlm.modeling.checkpoint.MAX_ABS_WEIGHT`):
    a NaN, an infinity, or a magnitude beyond the limit (also where float32 would make it infinite), naming
    the tensor, before anything is written."""
    for key, t in state.items():
        if not t.is_floating_point() or not t.numel():
            continue
        t32 = t.detach().float()
        if not bool(t32.isfinite().all()):
            bad = t.detach().double()[~t32.isfinite()].flatten()[0].item()
            raise ImportModelError(f"{path}: tensor {key!r} holds {bad:g}; vizlm checkpoints hold only finite weights "
                                   f"within ±{MAX_ABS_WEIGHT:g} (in float32): this model cannot be imported")
        peak = t32.abs().max().item()
        if peak > MAX_ABS_WEIGHT:
            raise ImportModelError(f"{path}: tensor {key!r} holds a weight of magnitude {peak:.3g}; vizlm checkpoints hold "
                                   f"weights within ±{MAX_ABS_WEIGHT:g} (trained models stay near 1-10, and such values "
                                   "overflow the forward pass): this model cannot be imported")


def _check_out(out: Path, force: bool) -> None:
    """``out`` may become the imported checkpoint: absent or empty, a checkpoint with ``force``; never a folder
    holding anything else (it is replaced whole), nor one a training holds."""
    if out.exists() and not out.is_dir():
        raise ImportModelError(f"--out {out} is a file; give a folder")
    if files.training_now(out):
        raise files.BusyError(f"{out} is being trained into by another process right now; import elsewhere")
    if files.checkpoint_files(out) and not force:
        raise files.OverwriteError(f"{out} holds a checkpoint ({', '.join(files.checkpoint_files(out))}); pass --force "
                                   "to replace it, or import elsewhere")
    others = files.other_entries(out)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3:,} more" if len(others) > 3 else "")
        raise files.OverwriteError(f"{out} holds files that are not a checkpoint's ({shown}); import into a new or empty "
                                   "folder (a checkpoint's folder is replaced whole, so these would be deleted)")


def corpus_metrics(model, vocab: Vocab, corpus: str, data_dir: Path | None = None) -> dict:
    """The valid and test perplexity (and WSJ's for a Brown model) of ``model`` reading the vizlm corpus ``corpus``
    in its context, as a vizlm run's are measured (:func:`vizlm.modeling.train.finalize`)."""
    splits = {"valid": (corpus, "valid"), "test": (corpus, "test"), **({"wsj": ("wsj", "test")} if corpus == "brown" else {})}
    out = {}
    for key, (name, split) in splits.items():
        t = score_split(model, open_split(name, split, vocab, data_dir))
        out[f"{key}_perplexity"] = perplexity(t.nll, t.tokens)
    return out


# --------------------------------------------------------------------------- main.py's printed log
MAX_LOG_BYTES = 64 * 2**20  # a 40-epoch log is ~0.5 MB; anything far larger is not one
MAX_LOG_LINE = 500  # characters: its lines have about 100
# its lines: "| epoch 1 | 200/ 1394 batches | lr 5.00 | ms/batch 96.96 | loss 6.36 | ppl 576.88", "| end of epoch 1 |
# time: 147.27s | valid loss 5.18 | valid ppl 178.10", "| End of training | test loss 4.85 | test ppl 127.40"
_NUMBER = r"([\d.]+(?:[eE][+-]?\d+)?|inf|nan)"
_EPOCH_END = re.compile(r"\|\s*end of epoch\s+(\d+)\s*\|\s*time:\s*([\d.]+)s\s*\|.*valid ppl\s+" + _NUMBER)
_INTERVAL = re.compile(r"\|\s*epoch\s+(\d+)\s*\|.*\|\s*lr\s+" + _NUMBER + r"\s*\|.*\|\s*ppl\s+" + _NUMBER)
_TEST = re.compile(r"\|\s*End of training\s*\|.*test ppl\s+" + _NUMBER)


def read_training_log(path: Path | str) -> tuple[list[dict], float | None]:
    """``(epochs, test perplexity)`` of the output pytorch/examples' ``main.py`` printed while it trained: per epoch
    ``epoch``, ``train_perplexity`` (exp of the mean loss of the epoch's printed intervals, every
    ``--log-interval`` batches; the last partial interval is not printed), ``valid_perplexity``, ``lr`` (the
    last printed in the epoch) and ``seconds``; the test perplexity of its ``End of training`` line (None
    without one). Lines of anything else are skipped; a file without an epoch's end is refused."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ImportModelError(f"--log {path}: {exc.strerror or exc}") from None
    if size > MAX_LOG_BYTES:
        raise ImportModelError(f"--log {path} has {size:,} bytes; main.py's log of a run is far smaller "
                               f"(at most {MAX_LOG_BYTES // 2**20} MB read)")
    epochs, losses, lr, test = [], [], None, None
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if len(line) > MAX_LOG_LINE:  # not one of its lines; a long one would cost the patterns far more than linear
                continue
            if m := _INTERVAL.search(line):
                ppl = float(m[3])
                losses.append(math.log(ppl) if 0 < ppl < math.inf else math.nan)
                lr = float(m[2])
            elif m := _EPOCH_END.search(line):
                mean = sum(losses) / len(losses) if losses else math.nan
                epochs.append({"epoch": int(m[1]), "train_perplexity": math.exp(mean) if math.isfinite(mean) else None,
                               "valid_perplexity": float(m[3]), "lr": lr, "seconds": float(m[2])})
                losses = []
            elif m := _TEST.search(line):
                test = float(m[1])
    if not epochs:
        raise ImportModelError(f"--log {path}: no '| end of epoch' line: not the output of pytorch/examples' main.py")
    return epochs, test


# --------------------------------------------------------------------------- the command
def import_pytorch_examples(model_file: Path | str, data: Path | str, corpus: str, out: Path | str,
                            nonlinearity: str | None = None, force: bool = False,
                            data_dir: Path | None = None, heads: int | None = None, block: int = 35,
                            vocab_of: str | None = None, log: Path | str | None = None) -> dict:
    """Import a pytorch/examples ``word_language_model`` checkpoint (module docstring); returns a
    summary. Everything is checked before anything is written; ``out`` or a corpus that would
    change is replaced only with ``force``. ``vocab_of``: a vizlm corpus whose words the model has, whose
    vocabulary it takes (``corpus`` is then that corpus; none is written). ``log``: what its ``main.py`` printed
    (:func:`read_training_log`), kept as the checkpoint's ``train_log.jsonl`` (the Models page draws it)."""
    model_file, data, out = Path(model_file), Path(data), Path(out)
    if vocab_of is not None:
        corpus = vocab_of  # an existing corpus, vizlm's own or yours: read, never written
    else:
        check_corpus_name(corpus)
    if not data.is_dir():
        raise ImportModelError(f"--data {data}: not a folder (give the folder with train.txt, valid.txt, test.txt)")
    _check_out(out, force)
    epochs, source_test = read_training_log(log) if log is not None else (None, None)
    obj = read_model_file(model_file)
    state, cell = state_dict_of(obj, model_file, nonlinearity)
    if cell == TRANSFORMER:
        saved = module_heads(obj, model_file) if isinstance(obj, Inert) else None
        if saved is not None and heads is not None and heads != saved:
            raise ImportModelError(f"{model_file} saved its TransformerModel with {saved} heads; --nhead {heads} "
                                   "says otherwise")
        spec = read_transformer_spec(state, saved or heads, model_file)
    else:
        spec = read_spec(state, cell, model_file)
    check_weights(state, model_file)
    words = source_vocabulary(data)
    if len(words) != spec.vocab_size:
        raise ImportModelError(
            f"{model_file} has {spec.vocab_size:,} words but {data}'s train.txt, valid.txt and test.txt give "
            f"{len(words):,}: that is not the data the model was trained on")
    if vocab_of is None:
        itos, rows = vizlm_vocabulary(words)
    else:
        try:
            itos = Vocab.for_corpus(vocab_of, data_dir).itos
        except (OSError, ValueError) as exc:
            raise ImportModelError(f"--vocab-of {vocab_of}: no vizlm corpus of that name can be read ({exc})") from None
        rows = corpus_vocabulary(words, itos, vocab_of)
    source = {"kind": "pytorch-examples", "file": str(model_file.name), "data": str(data)}
    if isinstance(spec, TransformerSpec):
        name, model = TRANSFORMER, convert_transformer(state, spec, rows, len(itos), block)
        source |= {"model": "TransformerModel", "layers": spec.layers, "heads": spec.heads, "bptt": block}
        sizes = {"layers": spec.layers, "heads": spec.heads, "emb_dim": spec.d_model, "hidden_dim": spec.feedforward,
                 "block": block}
    else:
        name, model = "lstm", convert(state, spec, rows, len(itos))
        source |= {"cell": spec.cell, "layers": spec.layers, "tied": spec.tied}
        sizes = {"rnn": spec.cell, "layers": spec.layers, "emb_dim": spec.emb_dim, "hidden_dim": spec.hidden_dim,
                 "tie": spec.tied}
    source |= {"model_vocab_size": spec.vocab_size, "reading": reading_of(words)}
    if vocab_of is None:
        corpus_dir = write_corpus(data, corpus, itos, data_dir, force, {"kind": source["kind"], "data": source["data"]})
    else:
        source["vocab_of"] = vocab_of
        corpus_dir = corpus_folder(vocab_of, data_dir)
    metrics = {} if vocab_of is None else corpus_metrics(model, Vocab(itos), vocab_of, data_dir)
    if epochs is not None:
        best = min(epochs, key=lambda e: e["valid_perplexity"])
        source["log"] = Path(log).name
        metrics |= {"epochs_trained": len(epochs), "best_epoch": best["epoch"],
                   "source_valid_perplexity": best["valid_perplexity"],
                   **({} if source_test is None else {"source_test_perplexity": source_test})}
    with files.new_folder(out) as tmp:  # replaced whole: no training log or resume state of another model stays
        save_checkpoint(tmp, model, name, Vocab(itos), label=out.name, parameters=count_parameters(model),
                        corpus={"name": corpus}, imported=source, **({"metrics": metrics} if metrics else {}))
        if epochs is not None:
            files.write_text(tmp / "train_log.jsonl", "".join(json.dumps(e) + "\n" for e in epochs), force=True)
    return {"checkpoint": str(out), "corpus": corpus, "corpus_folder": str(corpus_dir), "model": name, **sizes,
            "vocab_size": len(itos), "model_vocab_size": spec.vocab_size, "parameters": count_parameters(model)}


__all__ = ["ImportModelError", "SOURCES", "import_pytorch_examples", "reading_of", "read_model_file", "read_spec", "state_dict_of",
           "source_vocabulary", "vizlm_vocabulary", "corpus_vocabulary", "corpus_metrics", "read_training_log", "convert", "convert_transformer", "read_transformer_spec", "write_corpus", "check_weights", "Inert", "STAND_INS"]
