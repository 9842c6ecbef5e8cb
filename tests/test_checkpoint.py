"""The one loader: round trip, and clear refusals of anything malformed."""

from __future__ import annotations

import json
import pickle
import shutil

import pytest
import torch
from safetensors.torch import save_file

from conftest import TINY
from vizlm.checkpoint import CheckpointError, checkpoint_from_bytes, load_checkpoint, save_checkpoint
from vizlm.data import SPECIALS, Vocab
from vizlm.models import build_model

VOCAB = Vocab(list(SPECIALS) + [f"w{i}" for i in range(36)])


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = build_model("amsrn", **TINY)
    torch.nn.init.uniform_(model.read_proj.weight, -0.1, 0.1)
    folder = save_checkpoint(tmp_path / "ck", model, "amsrn", VOCAB, metrics={"valid_perplexity": 12.5})
    return model, folder


def test_round_trip_gives_identical_logits(saved, batch):
    model, folder = saved
    ckpt = load_checkpoint(folder)
    assert ckpt.name == "amsrn" and ckpt.vocab.itos == VOCAB.itos
    assert ckpt.meta["metrics"]["valid_perplexity"] == 12.5
    model.eval()
    with torch.no_grad():
        assert torch.equal(ckpt.model(batch.long()).logits, model(batch.long()).logits)
    # the .safetensors path works as well as the folder
    assert load_checkpoint(folder / "model.safetensors").name == "amsrn"


def _expect(folder, match):
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(folder)


def test_pickle_is_refused_without_unpickling(saved, tmp_path):
    _, folder = saved
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (folder / "model.safetensors").write_bytes(pickle.dumps(Evil()))
    _expect(folder, "pickle")
    assert not marker.exists()


def test_torch_save_zip_is_refused(saved):
    model, folder = saved
    torch.save(model.state_dict(), folder / "model.safetensors")
    _expect(folder, "zip file")


def test_truncated_weights(saved):
    _, folder = saved
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    _expect(folder, "corrupt or truncated")
    (folder / "model.safetensors").write_bytes(data[:5])
    _expect(folder, "truncated")


def test_random_bytes(saved):
    _, folder = saved
    (folder / "model.safetensors").write_bytes(b"\x00\x01garbage" * 100)
    _expect(folder, "not valid safetensors")


def test_foreign_safetensors(saved):
    _, folder = saved
    save_file({"bert.embeddings.weight": torch.zeros(3, 4)}, str(folder / "model.safetensors"))
    _expect(folder, "do not match")


def test_wrong_shape_and_dtype(saved):
    model, folder = saved
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["key.weight"] = torch.zeros(7, 7)
    save_file(state, str(folder / "model.safetensors"))
    _expect(folder, "key.weight")
    state["key.weight"] = model.state_dict()["key.weight"].double()
    save_file(state, str(folder / "model.safetensors"))
    _expect(folder, "float64")


def test_nan_weights(saved):
    model, folder = saved
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["key.bias"][0] = float("nan")
    save_file(state, str(folder / "model.safetensors"))
    _expect(folder, "NaN")


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda d: "{not json", "not valid JSON"),
        (lambda d: json.dumps({**d, "format": "something-else"}), "not a vizlm checkpoint"),
        (lambda d: json.dumps({**d, "model": "gpt2"}), "unknown model"),
        (lambda d: json.dumps({**d, "config": {**d["config"], "selection": "magic"}}), "unknown selection"),
        (lambda d: json.dumps({**d, "vocab": d["vocab"][:-1]}), "vocabulary has 39"),
        (lambda d: json.dumps({k: v for k, v in d.items() if k != "vocab"}), "'vocab' is missing"),
    ],
)
def test_bad_config_json(saved, edit, match):
    _, folder = saved
    doc = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(edit(doc))
    _expect(folder, match)


def test_missing_files(saved, tmp_path):
    _, folder = saved
    other = tmp_path / "copy"
    shutil.copytree(folder, other)
    (other / "config.json").unlink()
    _expect(other, "not found")
    _expect(tmp_path / "nowhere.bin", "expected a checkpoint folder")


def test_from_bytes_is_what_uploads_use(saved):
    _, folder = saved
    ckpt = checkpoint_from_bytes((folder / "model.safetensors").read_bytes(), (folder / "config.json").read_text())
    assert ckpt.name == "amsrn" and not ckpt.model.training


# --------------------------------------------------------------------------- runtime fields
def test_meta_is_exactly_the_saved_config_json(saved):
    from vizlm.cache import checkpoint_digest

    _, folder = saved
    ckpt = load_checkpoint(folder)
    assert ckpt.meta == json.loads((folder / "config.json").read_text())  # nothing added: no path, no digest
    assert ckpt.path == folder and ckpt.label == "ck"
    assert checkpoint_digest(ckpt) == ckpt.digest and len(ckpt.digest) == 64
    assert ckpt.meta == json.loads((folder / "config.json").read_text())
    # the upload path has no folder; the same bytes give the same digest
    up = checkpoint_from_bytes((folder / "model.safetensors").read_bytes(), (folder / "config.json").read_bytes())
    assert up.path is None and up.label == "amsrn" and up.digest == ckpt.digest
    # the digest covers config.json too (a different vocabulary or config is a different model)
    doc = json.loads((folder / "config.json").read_text())
    doc["vocab"][-1] = "other"
    (folder / "config.json").write_text(json.dumps(doc))
    assert load_checkpoint(folder).digest != ckpt.digest


def test_in_memory_checkpoint_gets_a_digest_from_its_tensors(saved):
    from vizlm.cache import checkpoint_digest
    from vizlm.checkpoint import Checkpoint

    model, _ = saved
    a = Checkpoint(model, VOCAB, "amsrn")
    assert a.digest is None and a.path is None
    assert checkpoint_digest(a) == a.digest == checkpoint_digest(Checkpoint(model, VOCAB, "amsrn"))
    assert a.meta == {}
