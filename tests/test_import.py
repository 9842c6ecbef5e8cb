"""`vizlm import pytorch-examples`: pytorch/examples' word_language_model checkpoints become vizlm checkpoints.

The models here are built in the test with the state-dict layout of its ``RNNModel`` (``encoder``,
``rnn``, ``decoder``; sequence-first recurrent layers, optionally tied), saved as a state dict and
as the whole module (``torch.save(model, f)``, as its ``main.py`` does, under the class name
``model.RNNModel``). Where ``../shared/anchors/word_language_model`` is present, its own ``main.py``
trains a tiny model and prints its test perplexity, which ``vizlm eval --context stream`` must give.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest
import torch
from torch import nn

from conftest import ROOT, assert_same_math
from vizlm.core import paths
from vizlm.modeling.checkpoint import load_checkpoint
from vizlm.cli import main
from vizlm.data.registry import corpus_folder, load_corpus
from vizlm.modeling.importer import IMPOSSIBLE, SAVE_STATE_DICT, source_vocabulary

ANCHOR = ROOT.parent / "shared" / "anchors" / "word_language_model"
CELLS = ("LSTM", "GRU", "RNN_TANH", "RNN_RELU")
VIZLM_CELL = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}


class RNNModel(nn.Module):
    """A model with pytorch/examples' RNNModel state-dict layout and attributes (written for this test)."""

    def __init__(self, rnn_type: str, ntoken: int, ninp: int, nhid: int, nlayers: int, tie: bool = False):
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ("LSTM", "GRU"):
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers)
        else:
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=rnn_type[4:].lower())
        self.decoder = nn.Linear(nhid, ntoken)
        if tie:
            self.decoder.weight = self.encoder.weight
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers

    def forward(self, x, hidden=None):  # x (T, B) ids -> logits (T, B, V), recurrent outputs (T, B, H)
        out, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        return self.decoder(self.drop(out)), out


RNNModel.__module__ = "model"  # what a model saved by pytorch/examples' main.py names


@pytest.fixture
def as_model_module(monkeypatch):
    """``model.RNNModel`` importable while a whole module is saved (pickle checks the name), as in its folder."""
    mod = types.ModuleType("model")
    mod.RNNModel = RNNModel
    monkeypatch.setitem(sys.modules, "model", mod)


@pytest.fixture
def data(tmp_path):
    folder = tmp_path / "wlm"
    folder.mkdir()
    (folder / "train.txt").write_text(" the cat sat on the mat \n\n a dog sat <unk> the mat\n", encoding="utf-8")
    (folder / "valid.txt").write_text("the dog ran\n", encoding="utf-8")
    (folder / "test.txt").write_text("a cat ran on a dog\n\nthe end\n", encoding="utf-8")
    return folder


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    out = tmp_path / "vizlm-data"
    monkeypatch.setenv("VIZLM_DATA", str(out))
    monkeypatch.setenv("VIZLM_CORPORA", str(out))  # imported corpora go to the corpora folder: the same one here
    paths.clear_overrides()
    return out


def run(args, capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def original_logits(model: RNNModel, ids: torch.Tensor, outputs: bool = False) -> torch.Tensor:
    """The model's logits (B, T, V) for its own ids (B, T), read sequence first as it reads them
    (``outputs``: its top layer's outputs (B, T, H) instead)."""
    with torch.no_grad():
        return model(ids.t())[int(outputs)].transpose(0, 1)


def vizlm_ids(words: list[str], vocab) -> torch.Tensor:
    """The vizlm id of each of the model's ids."""
    special = {"<eos>": vocab.eos_id, "<unk>": vocab.unk_id}
    return torch.tensor([special.get(w, vocab.stoi.get(w, -1)) for w in words])


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("whole", [False, True], ids=["state_dict", "whole_module"])
def test_import_reproduces_the_models_logits(cell, layers, tie, whole, data, data_dir, tmp_path, as_model_module,
                                             capsys):
    words = source_vocabulary(data)
    torch.manual_seed(layers * 10 + tie)
    model = RNNModel(cell, len(words), 6, 6 if tie else 7, layers, tie).eval()
    f = tmp_path / "model.pt"
    torch.save(model if whole else model.state_dict(), f)
    extra = ["--nonlinearity", cell[4:].lower()] if cell.startswith("RNN_") and not whole else []
    code, out, err = run(["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm",
                          "--out", str(tmp_path / "ckpt"), *extra], capsys)
    assert code == 0, err
    summary = json.loads(out)
    # people are told what was written and what to run next (the JSON line alone said neither)
    assert f"wrote the checkpoint {tmp_path / 'ckpt'}" in err and "Next:" in err
    assert f"--checkpoint {tmp_path / 'ckpt'} --corpus wlm" in err and f"--checkpoints {tmp_path}" in err
    assert (summary["rnn"], summary["layers"], summary["tie"]) == (VIZLM_CELL[cell], layers, tie)
    ckpt = load_checkpoint(tmp_path / "ckpt")
    c = ckpt.model.config
    assert (c.rnn, c.layers, c.tie, c.emb_dim, c.hidden_dim, c.context) == (
        VIZLM_CELL[cell], layers, tie, 6, model.nhid, "document")
    # the vocabulary: vizlm's specials, then the model's words in its order without <eos> and <unk>
    assert ckpt.vocab.itos == ["<pad>", "<s>", "</s>", "<unk>"] + [w for w in words if w not in ("<eos>", "<unk>")]
    to_vizlm = vizlm_ids(words, ckpt.vocab)
    assert (to_vizlm >= 0).all() and len(set(to_vizlm.tolist())) == len(words)

    ids = torch.randint(0, len(words), (3, 8), generator=torch.Generator().manual_seed(5))  # the model's ids
    expected = original_logits(model, ids)  # (B, T, V)
    m = ckpt.model
    with torch.no_grad():
        whole = m(to_vizlm[ids], m.initial_state(3))  # as the model reads it: from a zero state
        first = m(to_vizlm[ids[:, :5]], m.initial_state(3))  # two segments, the state carried
        second = m(to_vizlm[ids[:, 5:]], first.state)
    logits = whole.logits  # (B, T, V')
    # the recurrent layers: the same weights, the same kernels, the same inputs: bit for bit
    assert torch.equal(whole.hidden, original_logits(model, ids, outputs=True))
    # in two segments the input products have other shapes: the same numbers within float32's tolerance
    assert_same_math(torch.cat([first.logits, second.logits], 1), logits)
    # the output layer has vizlm's rows besides the model's, in another order: another matrix shape for the
    # product (its kernel may round the last bit differently), so the logits agree within float32's tolerance
    assert_same_math(logits[..., to_vizlm], expected)
    assert_same_math(logits.log_softmax(-1)[..., to_vizlm], expected.log_softmax(-1))
    # the rows vizlm adds are never predicted: exactly zero probability
    added = [i for i in range(len(ckpt.vocab)) if i not in set(to_vizlm.tolist())]
    assert added and (logits.softmax(-1)[..., added] == 0).all()
    assert (logits[..., added] <= -IMPOSSIBLE / 2).all()


def test_imported_corpus_is_the_data_folder_and_eval_reads_it(data, data_dir, tmp_path, capsys):
    words = source_vocabulary(data)
    # train, valid, test in order of first appearance, <eos> after every line (the blank one too)
    assert words == ["the", "cat", "sat", "on", "mat", "<eos>", "a", "dog", "<unk>", "ran", "end"]
    torch.manual_seed(0)
    f = tmp_path / "m.pt"
    torch.save(RNNModel("LSTM", len(words), 5, 5, 1).state_dict(), f)
    code, _, err = run(["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm",
                        "--out", str(tmp_path / "ckpt")], capsys)
    assert code == 0, err
    test = load_corpus("wlm", "test", data_dir)
    assert test.sentences == [["a", "cat", "ran", "on", "a", "dog"], [], ["the", "end"]]  # the blank line kept
    assert load_corpus("wlm", "train", data_dir).sentences[0] == ["the", "cat", "sat", "on", "the", "mat"]
    code, out, err = run(["eval", "--checkpoint", str(tmp_path / "ckpt"), "--corpus", "wlm", "--split", "test",
                          "--context", "stream", "--streams", "2", "--bptt", "3", "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    # 11 tokens (8 words, 3 </s>) in 2 columns of 5: 2 x 4 targets
    assert (result["context"], result["tokens"], result["sentences"]) == ("stream", 8, 3)
    assert math.isfinite(result["perplexity"])
    code, out, err = run(["eval", "--checkpoint", str(tmp_path / "ckpt"), "--corpus", "wlm", "--split", "test", "--json"],
                         capsys)
    assert code == 0, err
    assert json.loads(out)["context"] == "document"
    code, _, err = run(["eval", "--checkpoint", str(tmp_path / "ckpt"), "--corpus", "nope", "--split", "test"], capsys)
    assert code == 2 and "unknown corpus 'nope'" in err and "wlm" in err  # the imported corpus is listed
    code, _, err = run(["eval", "--checkpoint", str(tmp_path / "ckpt"), "--corpus", "../wlm", "--split", "test"], capsys)
    assert code == 2 and "unknown corpus" in err


def test_stream_eval_equals_reading_the_columns_by_hand(data, data_dir, tmp_path, capsys):
    """--context stream: the split's tokens in contiguous columns, state carried, every target but each column's first."""
    words = source_vocabulary(data)
    torch.manual_seed(1)
    model = RNNModel("GRU", len(words), 5, 6, 2).eval()
    f = tmp_path / "m.pt"
    torch.save(model.state_dict(), f)
    assert main(["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm", "--out",
                 str(tmp_path / "ckpt")]) == 0
    capsys.readouterr()
    stream = [words.index(w) for line in (data / "test.txt").read_text().splitlines() for w in line.split() + ["<eos>"]]
    streams, per = 2, len(stream) // 2
    cols = torch.tensor(stream[: per * streams]).view(streams, per)  # (B, per)
    logp = original_logits(model, cols).log_softmax(-1)  # the whole columns at once, from a zero state
    expected = -logp[:, :-1].gather(2, cols[:, 1:, None]).sum().double() / (streams * (per - 1))
    code, out, err = run(["eval", "--checkpoint", str(tmp_path / "ckpt"), "--corpus", "wlm", "--split", "test",
                          "--context", "stream", "--streams", "2", "--bptt", "2", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["nll"] == pytest.approx(float(expected), rel=1e-5)


class Boom:
    """Unpickling this runs a shell command: exactly what an import must never do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("how", ["torch_save", "plain_pickle", "pickle_protocol_4", "inside_a_state_dict"])
def test_a_pickle_that_would_run_a_command_is_refused_and_runs_nothing(how, data, data_dir, tmp_path, capsys):
    marker = tmp_path / "pwned"
    f = tmp_path / "evil.pt"
    if how == "torch_save":
        torch.save(Boom(marker), f)
    elif how == "plain_pickle":  # torch.load's legacy format is a pickle
        f.write_bytes(pickle.dumps(Boom(marker), protocol=2))
    elif how == "pickle_protocol_4":  # refused at its first frame, before the global is read
        f.write_bytes(pickle.dumps(Boom(marker), protocol=4))
    else:
        torch.save({"encoder.weight": torch.zeros(3, 2), "payload": Boom(marker)}, f)
    assert not marker.exists()
    code, out, err = run(["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm",
                          "--out", str(tmp_path / "ckpt")], capsys)
    assert code == 2 and not marker.exists()
    assert "refused" in err and SAVE_STATE_DICT in err and "Traceback" not in err
    assert "system" in err or how == "pickle_protocol_4"  # the message names the global it refused
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ckpt").exists() and not (data_dir / "wlm").exists()


class MyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(4, 2)


def test_another_class_saved_whole_is_refused_with_the_state_dict_line(data, data_dir, tmp_path, capsys):
    f = tmp_path / "other.pt"
    torch.save(MyLM(), f)
    code, _, err = run(["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm",
                        "--out", str(tmp_path / "ckpt")], capsys)
    assert code == 2 and "MyLM" in err and SAVE_STATE_DICT in err and len(err.strip().splitlines()) == 1


UNUSUAL = {"sparse_coo": lambda t: t.to_sparse(), "sparse_csr": lambda t: t.to_sparse_csr(),
           "meta": lambda t: t.to("meta"), "nested": lambda t: torch.nested.nested_tensor([t[0], t[1][:3]])}


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch: sparse CSR and nested tensors are beta / prototype
@pytest.mark.parametrize("kind", UNUSUAL)
def test_a_state_dict_of_sparse_meta_or_nested_tensors_is_refused(kind, data, data_dir, tmp_path, capsys):
    state = RNNModel("LSTM", len(source_vocabulary(data)), 5, 5, 1).state_dict()
    state["encoder.weight"] = UNUSUAL[kind](state["encoder.weight"])
    f = tmp_path / "m.pt"
    torch.save(state, f)
    code, _, err = run(["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm",
                        "--out", str(tmp_path / "ckpt")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{f}: encoder.weight is a {kind.split('_')[0]}" in err and "dense tensors" in err
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.parametrize("content, message", [
    (b"\x80\x02\x0dgarbage", r"is damaged or not a PyTorch model file: its pickle has an unknown operation \(code 13\)"),
    (b"\x80\x04\x95garbage", r"refused to unpickle \(a pickle of protocol 4 or later, which torch.save does not write\)"),
    (b"\x80\x02cthe\nfoo\n", r"refused to unpickle \(it names the\.foo, which is not allowed\)"),
])
def test_a_corrupt_pickle_is_named_as_such(content, message, data, data_dir, tmp_path, capsys):
    f = tmp_path / "m.pt"
    f.write_bytes(content)
    code, _, err = run(["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm",
                        "--out", str(tmp_path / "ckpt")], capsys)
    assert code == 2 and re.search(message, err) and "it names the," not in err and len(err.strip().splitlines()) == 1


def test_data_that_is_not_utf8_is_named_with_its_line(data, data_dir, tmp_path, capsys):
    f = tmp_path / "m.pt"
    torch.save(RNNModel("LSTM", len(source_vocabulary(data)), 5, 5, 1).state_dict(), f)
    (data / "valid.txt").write_bytes(b"the dog ran\nthe caf\xe9 ran\n")
    code, _, err = run(["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm",
                        "--out", str(tmp_path / "ckpt")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{data / 'valid.txt'}: line 2 is not valid UTF-8 (byte 8 of the line)" in err


def test_an_older_transformer_layout_is_named(data, data_dir, tmp_path, capsys):
    f = tmp_path / "transformer.pt"
    torch.save({"encoder.weight": torch.zeros(9, 4), "transformer_encoder.layers.0.self_attn.in_proj_weight":
                torch.zeros(12, 4), "decoder.weight": torch.zeros(9, 4), "decoder.bias": torch.zeros(9)}, f)
    code, _, err = run(["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm",
                        "--out", str(tmp_path / "ckpt")], capsys)
    assert code == 2 and "older pytorch/examples TransformerModel" in err and len(err.strip().splitlines()) == 1


class TransformerModel(nn.Module):
    """Named as pytorch/examples' TransformerModel (an allowed class), carrying a payload that would run a command."""

    def __init__(self, marker):
        super().__init__()
        self.input_emb = nn.Embedding(11, 4)
        self.payload = Boom(marker)


TransformerModel.__module__ = "model"


def test_a_crafted_transformer_pickle_is_refused_and_runs_nothing(data, data_dir, tmp_path, capsys, monkeypatch):
    mod = types.ModuleType("model")
    mod.TransformerModel = TransformerModel
    monkeypatch.setitem(sys.modules, "model", mod)
    marker, f = tmp_path / "pwned", tmp_path / "t.pt"
    torch.save(TransformerModel(marker), f)
    code, _, err = run(["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm",
                        "--out", str(tmp_path / "ckpt")], capsys)
    assert code == 2 and not marker.exists() and "refused" in err and "system" in err and SAVE_STATE_DICT in err
    assert not (tmp_path / "ckpt").exists()


def test_bad_inputs_get_one_line_and_nothing_is_replaced(data, data_dir, tmp_path, capsys, as_model_module):
    words = source_vocabulary(data)
    f, out = tmp_path / "m.pt", tmp_path / "ckpt"
    torch.manual_seed(0)
    torch.save(RNNModel("RNN_TANH", len(words), 4, 4, 1).state_dict(), f)
    args = ["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm", "--out", str(out)]

    def fails(argv, *needles):
        code, _, err = run(argv, capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        for needle in needles:
            assert needle in err, err

    fails(args, "--nonlinearity")  # an Elman RNN's state dict does not say tanh or relu
    fails(args[:-4] + ["--corpus", "brown", "--out", str(out), "--nonlinearity", "tanh"], "vizlm's own corpora")
    fails(args[:-4] + ["--corpus", "../x", "--out", str(out), "--nonlinearity", "tanh"], "corpus name")
    fails(args[:-4] + ["--corpus", "stats", "--out", str(out), "--nonlinearity", "tanh"], "shipped with the bundled")
    other = tmp_path / "other"
    other.mkdir()
    for split in ("train", "valid", "test"):
        (other / f"{split}.txt").write_text("just two\n", encoding="utf-8")
    fails(["import", "pytorch-examples", str(f), "--data", str(other), "--corpus", "wlm", "--out", str(out),
           "--nonlinearity", "tanh"], "not the data the model was trained on")
    fails(["import", "pytorch-examples", str(tmp_path / "missing.pt"), "--data", str(data), "--corpus", "wlm",
           "--out", str(out)], "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a model at all")
    fails(["import", "pytorch-examples", str(tmp_path / "junk.pt"), "--data", str(data), "--corpus", "wlm",
           "--out", str(out)], "not a PyTorch model file")
    assert not out.exists()

    assert main(args + ["--nonlinearity", "tanh"]) == 0  # an Elman RNN with its nonlinearity given
    capsys.readouterr()
    assert load_checkpoint(out).model.config.rnn == "rnn_tanh"
    before = (out / "model.safetensors").read_bytes()
    torch.save(RNNModel("RNN_TANH", len(words), 4, 4, 1).state_dict(), f)  # another model
    fails(args + ["--nonlinearity", "tanh"], "--force")
    assert (out / "model.safetensors").read_bytes() == before
    # a whole module says its own cell; a different --nonlinearity is refused
    torch.save(RNNModel("RNN_RELU", len(words), 4, 4, 1), tmp_path / "whole.pt")
    fails(["import", "pytorch-examples", str(tmp_path / "whole.pt"), "--data", str(data), "--corpus", "wlm",
           "--out", str(tmp_path / "c2"), "--nonlinearity", "tanh"], "RNN_RELU")
    # the corpus wlm holds another vocabulary now? no: the same data folder gives the same files, no --force needed
    assert main(["import", "pytorch-examples", str(tmp_path / "whole.pt"), "--data", str(data), "--corpus", "wlm",
                 "--out", str(tmp_path / "c2")]) == 0
    assert main(args + ["--nonlinearity", "tanh", "--force"]) == 0
    assert (out / "model.safetensors").read_bytes() != before


def _anchor_corpus(folder):
    """A tiny corpus from a small grammar (deterministic), with blank lines, in pytorch/examples' format."""
    import random

    rng = random.Random(0)
    # enough words that the test perplexity stays above 10: main.py prints it to 2 decimals, < 0.05% of it
    nouns = "cat dog man bird house tree car road city river boat child woman book door".split()
    verbs = "sees likes chases finds takes makes knows wants".split()
    adjs = "big red old small green new long dark".split()

    def sentence():
        np = lambda: ["the"] + ([rng.choice(adjs)] if rng.random() < 0.4 else []) + [rng.choice(nouns)]  # noqa: E731
        return " ".join(np() + [rng.choice(verbs)] + np() + ["."])

    folder.mkdir()
    for split, n in (("train", 400), ("valid", 40), ("test", 60)):
        lines = [sentence() if rng.random() > 0.1 else "" for _ in range(n)]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.mark.skipif(not (ANCHOR / "main.py").is_file(), reason="../shared/anchors/word_language_model is not here")
@pytest.mark.parametrize("cell,layers,tied,dropout", [
    ("LSTM", 2, False, 0.5), ("LSTM", 2, True, 0.5),  # the README's four large configurations, at a tiny size
    ("GRU", 1, False, 0.2), ("RNN_RELU", 2, False, 0.2)])
def test_stream_eval_equals_pytorch_examples_main_py(cell, layers, tied, dropout, data_dir, tmp_path, capsys,
                                                    monkeypatch):
    """Its own main.py trains a tiny model, saves the whole module and prints its test perplexity; the
    imported model read with --context stream --streams 10 --bptt 35 gives it within 0.1%. The README's
    "slower but better" models (2-layer LSTMs of 650 or 1500 units, dropout 0.5, tied or not) are the first
    two at 16 units: the import reads the same structure at any size."""
    corpus = _anchor_corpus(tmp_path / "tiny")
    saved = tmp_path / "model.pt"
    cmd = [sys.executable, "main.py", "--data", str(corpus), "--model", cell, "--emsize", "16", "--nhid", "16",
           "--nlayers", str(layers), "--epochs", "1", "--lr", "5", "--batch_size", "10", "--bptt", "35",
           "--dropout", str(dropout), "--seed", "3", "--save", str(saved)] + (["--tied"] if tied else [])
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ANCHOR, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r"End of training \| test loss\s+([\d.]+) \| test ppl\s+([\d.]+)", proc.stdout)
    assert found, proc.stdout[-2000:]
    theirs = float(found.group(2))
    code, out, err = run(["import", "pytorch-examples", str(saved), "--data", str(corpus), "--corpus", "tiny",
                          "--out", str(tmp_path / "ckpt")], capsys)
    assert code == 0, err
    assert json.loads(out)["tie"] is tied
    code, out, err = run(["eval", "--checkpoint", str(tmp_path / "ckpt"), "--corpus", "tiny", "--split", "test",
                          "--context", "stream", "--streams", "10", "--bptt", "35", "--json"], capsys)
    assert code == 0, err
    ours = json.loads(out)["perplexity"]
    assert theirs > 10  # so that its 2 printed decimals are well within 0.1%
    assert ours == pytest.approx(theirs, rel=1e-3), (ours, theirs)
    assert abs(ours - theirs) <= 0.0051, (ours, theirs)  # in fact equal to the precision it prints
    assert_forward_equals_the_anchors(saved, tmp_path / "ckpt", corpus, monkeypatch)


def anchor_model(saved, monkeypatch):
    """The module main.py saved, loaded with the anchor's own model.py (test only: our own file, so unpickled)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("model", ANCHOR / "model.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "model", mod)
    spec.loader.exec_module(mod)
    return torch.load(saved, weights_only=False).eval()


def assert_forward_equals_the_anchors(saved, ckpt_dir, corpus, monkeypatch):
    """The imported checkpoint's log-probabilities equal the anchor module's own forward pass (sequence first,
    from a zero state) within float32's tolerance, on 35 tokens of the test split in 2 columns."""
    theirs = anchor_model(saved, monkeypatch)
    words = source_vocabulary(corpus)
    ckpt = load_checkpoint(ckpt_dir)
    stream = [words.index(w) for line in (corpus / "test.txt").read_text().splitlines() for w in line.split() + ["<eos>"]]
    ids = torch.tensor(stream[:70]).view(2, 35)  # (B, T) the model's ids
    with torch.no_grad():
        if hasattr(theirs, "init_hidden"):
            expected = theirs(ids.t(), theirs.init_hidden(2))[0].view(35, 2, -1).transpose(0, 1)  # (B, T, V)
        else:
            expected = theirs(ids.t()).transpose(0, 1)  # (B, T, V) log-probabilities
        got = ckpt.model(vizlm_ids(words, ckpt.vocab)[ids]).logits.log_softmax(-1)  # (B, T, V')
    assert_same_math(got[..., vizlm_ids(words, ckpt.vocab)], expected)


@pytest.mark.parametrize("name", ["lstm", "kvp-doc"])
def test_bundled_checkpoints_load_unchanged(name):
    """Checkpoints saved before `layers`, `rnn` and `tie` existed are one-layer, untied LSTM models, read by
    the same kernel as before: the recurrent outputs equal a plain nn.LSTM's with their weights, bit for bit."""
    ckpt = load_checkpoint(ROOT / "checkpoints" / name)
    saved = json.loads((ROOT / "checkpoints" / name / "config.json").read_text(encoding="utf-8"))["config"]
    assert not {"layers", "rnn", "tie"} & set(saved)
    m = ckpt.model
    assert m.config.layers == 1 and getattr(m.config, "rnn", "lstm") == "lstm" and not getattr(m.config, "tie", False)
    assert isinstance(m.rnn, nn.LSTM) and m.rnn.num_layers == 1
    plain = nn.LSTM(m.config.emb_dim, m.rnn.hidden_size, batch_first=True)
    plain.load_state_dict({k[len("rnn."):]: v for k, v in m.state_dict().items() if k.startswith("rnn.")})
    x = torch.randint(4, len(ckpt.vocab), (2, 12), generator=torch.Generator().manual_seed(0))
    x[:, 0] = 1
    with torch.no_grad():
        out = m(x, m.initial_state(2))
        assert torch.equal(out.hidden[..., : m.rnn.hidden_size], plain(m.embed(x))[0])
    assert out.state.h.shape == (1, 2, m.rnn.hidden_size)


@pytest.mark.parametrize("cased", [True, False])
def test_typed_text_is_read_as_the_imported_vocabulary_writes_words(cased, data_dir, tmp_path, capsys):
    """WikiText keeps case and digits, PTB lowercases and writes numbers as N: an imported model reads typed text
    its vocabulary's way (recorded as imported.reading), so "The Cat" is not <unk> to a cased model; vizlm's own
    rule (lowercase, numbers -> N) is the default for every other checkpoint."""
    from vizlm.api import load
    from vizlm.modeling.importer import reading_of

    folder = tmp_path / ("wiki" if cased else "ptb")
    folder.mkdir()
    lines = ["The Cat sat in 1999 .", "A Dog ran ."] if cased else ["the cat sat in N .", "a dog ran ."]
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    words = source_vocabulary(folder)
    assert reading_of(words) == {"lowercase": not cased, "numbers": not cased}
    torch.manual_seed(0)
    f = tmp_path / "m.pt"
    torch.save(RNNModel("LSTM", len(words), 5, 5, 1).state_dict(), f)
    code, _, err = run(["import", "pytorch-examples", str(f), "--data", str(folder), "--corpus", folder.name,
                        "--out", str(tmp_path / "ckpt")], capsys)
    assert code == 0, err
    a = load(tmp_path / "ckpt").analyze("The Cat sat in 1999 .")
    assert a.norms == (["The", "Cat", "sat", "in", "1999", "."] if cased else ["the", "cat", "sat", "in", "N", "."])
    assert not any(a.unk)
    assert load("lstm").analyze("The Cat sat in 1999 .").norms == ["the", "cat", "sat", "in", "N", "."]


def test_force_replaces_the_whole_checkpoint_and_corpus_folders(data, data_dir, tmp_path, capsys):
    """``--force`` replaces a checkpoint's folder and the corpus's folder whole: the old training log,
    resume state and token-id files go with the old weights; a folder holding other files is never deleted."""
    words = source_vocabulary(data)
    f, out = tmp_path / "m.pt", tmp_path / "ckpt"
    torch.manual_seed(0)
    torch.save(RNNModel("LSTM", len(words), 4, 4, 1).state_dict(), f)
    args = ["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm", "--out", str(out)]
    assert main(args) == 0
    (out / "train_log.jsonl").write_text('{"epoch": 1}\n')  # as if trained into since
    (out / "resume").mkdir()
    (out / "resume" / "state.safetensors").write_bytes(b"x")
    corpus = data_dir / "wlm"
    (corpus / "test.tokens.npy").write_bytes(b"stale")
    (data / "test.txt").write_text("the end\n", encoding="utf-8")  # the corpus changes too (its words do not)
    assert main(args + ["--force"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert not list(corpus.glob("*.npy"))
    assert load_corpus("wlm", "test", data_dir).sentences == [["the", "end"]]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left
    assert not [p for p in data_dir.iterdir() if p.name.startswith(".")]
    # a folder holding more than a checkpoint is not replaced, --force or not
    (out / "notes.txt").write_text("mine")
    code, _, err = run(args + ["--force"], capsys)
    assert code == 2 and "notes.txt" in err and "Traceback" not in err, err
    assert (out / "notes.txt").read_text() == "mine"
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    code, _, err = run(args[:-1] + [str(other)], capsys)
    assert code == 2 and "notes.txt" in err, err


def test_weights_no_checkpoint_can_hold_are_refused_before_writing(data, data_dir, tmp_path, capsys):
    """A weight the loader refuses (non-finite, or beyond MAX_ABS_WEIGHT) is refused by import, with the
    tensor named, before anything is written."""
    from vizlm.modeling.checkpoint import MAX_ABS_WEIGHT

    words = source_vocabulary(data)
    for value, needle in ((1e38, "1e+38"), (MAX_ABS_WEIGHT * 2, "2e+04"), (math.inf, "infinite"), (math.nan, "NaN")):
        model = RNNModel("LSTM", len(words), 4, 4, 1)
        with torch.no_grad():
            model.decoder.bias[2] = value
        f, out = tmp_path / "m.pt", tmp_path / "ckpt"
        torch.save(model.state_dict(), f)
        code, _, err = run(["import", "pytorch-examples", str(f), "--data", str(data), "--corpus", "wlm", "--out",
                            str(out)], capsys)
        assert code == 2 and "decoder.bias" in err and needle in err and "Traceback" not in err, err
        assert not out.exists() and not (data_dir / "wlm").exists()


def test_vizlm_corpora_counts_an_imported_corpus(data, data_dir, tmp_path, capsys):
    """`vizlm corpora` gives an imported corpus's sentences and tokens (they were blank: its card has no
    statistics), and --json writes counts as whole numbers (1234, not 1234.0)."""
    words = source_vocabulary(data)
    torch.manual_seed(0)
    torch.save(RNNModel("LSTM", len(words), 4, 4, 1).state_dict(), tmp_path / "m.pt")
    code, _, err = run(["import", "pytorch-examples", str(tmp_path / "m.pt"), "--data", str(data), "--corpus", "wlm",
                        "--out", str(tmp_path / "ckpt")], capsys)
    assert code == 0, err
    code, out, _ = run(["corpora", "--json"], capsys)
    rows = {(r["corpus"], r["split"]): r for r in json.loads(out)}
    test = rows[("wlm", "test")]
    assert (test["sentences"], test["tokens"]) == (2, 8)  # its lines with words, and their words
    assert all(isinstance(r[c], int) or r[c] is None for r in rows.values() for c in ("sentences", "tokens", "vocab_size"))
    code, out, _ = run(["corpora"], capsys)
    line = next(x for x in out.splitlines() if x.split()[:2] == ["wlm", "test"])
    assert " 2 " in line and " 8 " in line


@pytest.mark.skipif(not (ANCHOR / "main.py").is_file(), reason="../shared/anchors/word_language_model is not here")
def test_transformer_stream_eval_equals_pytorch_examples_main_py(data_dir, tmp_path, capsys, monkeypatch):
    """main.py --model Transformer (2 layers, 2 heads) trains a few batches and prints its test perplexity: the
    imported transformer read with --context stream --streams 10 --bptt 35 gives it to its 2 decimals, its
    forward pass is the anchor module's, its state dict imports the same (with --nhead), and analyze reads it."""
    corpus = _anchor_corpus(tmp_path / "tiny")
    saved = tmp_path / "model.pt"
    cmd = [sys.executable, "main.py", "--data", str(corpus), "--model", "Transformer", "--emsize", "16", "--nhid",
           "32", "--nlayers", "2", "--nhead", "2", "--epochs", "1", "--lr", "1", "--batch_size", "10", "--bptt", "35",
           "--dropout", "0.2", "--seed", "3", "--log-interval", "4", "--save", str(saved)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ANCHOR, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = float(re.search(r"End of training \| test loss\s+[\d.]+ \| test ppl\s+([\d.]+)", proc.stdout).group(1))
    out_dir = tmp_path / "ckpt"
    code, out, err = run(["import", "pytorch-examples", str(saved), "--data", str(corpus), "--corpus", "tiny",
                          "--out", str(out_dir)], capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["model"], summary["layers"], summary["heads"], summary["emb_dim"], summary["hidden_dim"],
            summary["block"]) == ("transformer", 2, 2, 16, 32, 35)
    code, out, err = run(["eval", "--checkpoint", str(out_dir), "--corpus", "tiny", "--split", "test",
                          "--context", "stream", "--streams", "10", "--bptt", "35", "--json"], capsys)
    assert code == 0, err
    ours = json.loads(out)["perplexity"]
    assert theirs > 10 and abs(ours - theirs) <= 0.0051, (ours, theirs)
    assert_forward_equals_the_anchors(saved, out_dir, corpus, monkeypatch)

    state_file = tmp_path / "state.pt"
    torch.save(anchor_model(saved, monkeypatch).state_dict(), state_file)
    args = ["import", "pytorch-examples", str(state_file), "--data", str(corpus), "--corpus", "tiny"]
    code, _, err = run(args + ["--out", str(tmp_path / "sd")], capsys)
    assert code == 2 and "--nhead" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(args + ["--out", str(tmp_path / "sd"), "--nhead", "3"], capsys)
    assert code == 2 and "--nhead 3 does not divide" in err
    assert main(args + ["--out", str(tmp_path / "sd"), "--nhead", "2"]) == 0
    capsys.readouterr()
    a, b = load_checkpoint(tmp_path / "sd").model.state_dict(), load_checkpoint(out_dir).model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # the same weights either way
    code, _, err = run(["import", "pytorch-examples", str(saved), "--data", str(corpus), "--corpus", "tiny",
                        "--out", str(tmp_path / "c3"), "--nhead", "4"], capsys)
    assert code == 2 and "saved its TransformerModel with 2 heads" in err

    from vizlm.api import load

    a = load(out_dir).analyze("the big cat sees the dog .")
    assert len(a.targets) == 8 and all(math.isfinite(x) for x in a.logprobs) and a.top_words[0]

    # --vocab-of: the same words in a vizlm corpus's own order (here: reversed), no corpus written; it reads that
    # corpus with the same numbers
    tiny = corpus_folder("tiny")
    other = tiny.parent / "tiny-reordered"
    shutil.copytree(tiny, other)
    itos = [w for w in (other / "vocab.txt").read_text(encoding="utf-8").split("\n") if w]
    (other / "vocab.txt").write_text("\n".join(itos[:4] + itos[4:][::-1]) + "\n", encoding="utf-8")
    (tmp_path / "log.txt").write_text(proc.stdout)  # what main.py printed: kept as the training log
    (tmp_path / "junk.txt").write_text("not a log\n")
    code, _, err = run(["import", "pytorch-examples", str(saved), "--data", str(corpus), "--vocab-of",
                        "tiny-reordered", "--out", str(tmp_path / "re"), "--log", str(tmp_path / "junk.txt")], capsys)
    assert code == 2 and "not the output of pytorch/examples' main.py" in err and not (tmp_path / "re").exists()
    code, out, err = run(["import", "pytorch-examples", str(saved), "--data", str(corpus), "--vocab-of",
                          "tiny-reordered", "--out", str(tmp_path / "re"), "--log", str(tmp_path / "log.txt")], capsys)
    assert code == 0, err
    (epoch,) = [json.loads(x) for x in (tmp_path / "re" / "train_log.jsonl").read_text().splitlines()]
    assert epoch["epoch"] == 1 and epoch["lr"] == 1 and epoch["valid_perplexity"] > 1 and epoch["train_perplexity"] > 1
    metrics = load_checkpoint(tmp_path / "re").meta["metrics"]
    assert metrics["source_test_perplexity"] == theirs and metrics["epochs_trained"] == 1
    assert metrics["test_perplexity"] > 1 and metrics["valid_perplexity"] > 1  # vizlm's reading of tiny-reordered
    assert json.loads(out)["corpus"] == "tiny-reordered" and "with the vocabulary of the corpus" in err
    assert load_checkpoint(tmp_path / "re").vocab.itos[4:] == itos[4:][::-1]
    b = load(tmp_path / "re").analyze("the big cat sees the dog .")
    np.testing.assert_allclose(b.logprobs, a.logprobs, rtol=0, atol=1e-5)  # float32: another row order
    np.testing.assert_allclose(b.heads, a.heads, rtol=0, atol=1e-6)
    code, out, err = run(["eval", "--checkpoint", str(tmp_path / "re"), "--corpus", "tiny-reordered", "--split",
                          "test", "--context", "stream", "--streams", "10", "--bptt", "35", "--json"], capsys)
    assert code == 0 and abs(json.loads(out)["perplexity"] - theirs) <= 0.0051, err
    # scripts/anchor_corpus.py writes a vizlm corpus back out as main.py reads it: here the data itself
    script = [sys.executable, str(ROOT / "scripts" / "anchor_corpus.py"), "tiny", str(tmp_path / "back")]
    proc = subprocess.run(script, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    for split in ("train", "valid", "test"):
        assert (tmp_path / "back" / f"{split}.txt").read_text() == (corpus / f"{split}.txt").read_text()
    (tmp_path / "back" / "test.txt").write_text("mine\n")
    proc = subprocess.run(script, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "pass --force" in proc.stderr  # nothing replaced unasked
    assert (tmp_path / "back" / "test.txt").read_text() == "mine\n"
    (other / "vocab.txt").write_text("\n".join(itos[:-1]) + "\n", encoding="utf-8")  # a word fewer
    code, _, err = run(["import", "pytorch-examples", str(saved), "--data", str(corpus), "--vocab-of",
                        "tiny-reordered", "--out", str(tmp_path / "re2")], capsys)
    assert code == 2 and "are not the corpus tiny-reordered's: 1 are not in its vocabulary" in err
    assert not (tmp_path / "re2").exists()
