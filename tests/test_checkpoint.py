"""The one loader: round trip, and clear refusals of anything malformed."""

from __future__ import annotations

import json
import math
import os
import pickle
import random
import resource
import shutil
import struct
import time
from pathlib import Path

import pytest
import torch
from conftest import TINY
from safetensors.torch import save as safetensors_save
from safetensors.torch import save_file

from vizlm.modeling import checkpoint as ckmod
from vizlm.modeling.checkpoint import CheckpointError, checkpoint_from_bytes, load_checkpoint, save_checkpoint
from vizlm.data.vocab import SPECIALS, Vocab
from vizlm.models import LIMITS, REGISTRY, build_model, check_config

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


def _padded_weights(model, residue: int, modulus: int) -> bytes:
    """The model's weights as safetensors whose header length is ``residue`` mod ``modulus``
    (padded with a metadata string; safetensors pads its header to a multiple of 8)."""
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    for pad in range(0, modulus + 8):
        data = safetensors_save(state, metadata={"format": "vizlm-checkpoint", "pad": "x" * pad})
        if struct.unpack("<Q", data[:8])[0] % modulus == residue:
            return data
    raise AssertionError("no padding gives that header length")


@pytest.mark.parametrize("residue,modulus,first", [(128, 256, b"\x80"), (19_280, 65_536, b"PK")])
def test_safetensors_whose_length_bytes_look_like_pickle_or_zip_load(saved, batch, residue, modulus, first):
    """A safetensors file begins with its header length: 0x80 when it is 128 mod 256, ``PK`` at
    19,280 mod 65,536. Such files are valid and load (the header is tried before foreign formats)."""
    model, folder = saved
    data = _padded_weights(model, residue, modulus)
    assert data[: len(first)] == first
    (folder / "model.safetensors").write_bytes(data)
    model.eval()
    with torch.no_grad():
        assert torch.equal(load_checkpoint(folder).model(batch.long()).logits, model(batch.long()).logits)


def test_a_model_too_big_for_this_machine_is_refused_before_allocating(saved, monkeypatch):
    """No fixed parameter cap: the bytes loading needs are checked against the memory available."""
    _, folder = saved
    monkeypatch.setattr(ckmod, "available_memory", lambda: 1000)
    _expect(folder, r"loading this amsrn model \([\d,]+ parameters\) needs about .* GiB of memory; this machine has "
                    r"0.0 GiB available")
    monkeypatch.setattr(ckmod, "available_memory", lambda: None)  # unknown: nothing to check against
    assert load_checkpoint(folder).name == "amsrn"


def test_a_weights_file_larger_than_its_tensors_is_refused_before_reading(saved):
    _, folder = saved
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes() + b" " * (ckmod.MAX_HEADER_BYTES + 64))
    _expect(folder, "the limit is")


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
    from vizlm.inspect.cache import checkpoint_digest

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
    from vizlm.inspect.cache import checkpoint_digest
    from vizlm.modeling.checkpoint import Checkpoint

    model, _ = saved
    a = Checkpoint(model, VOCAB, "amsrn")
    assert a.digest is None and a.path is None
    assert checkpoint_digest(a) == a.digest == checkpoint_digest(Checkpoint(model, VOCAB, "amsrn"))
    assert a.meta == {}


# --------------------------------------------------------------------------- crafted configs
BUNDLED_LSTM = ckmod.bundled_dir() / "lstm"


def _cfg(**kw):
    return lambda d: {**d, "config": {**d["config"], **kw}}


def _nested(levels):
    return lambda d: '{"format": "vizlm-checkpoint", "model": "amsrn", "config": ' + "[" * levels + "]" * levels + "}"


@pytest.fixture
def spy(monkeypatch):
    """Records every model built for real (not on the meta device) and every weights read."""
    built, loaded = [], []
    real_build, real_load = ckmod.build_model, ckmod.st_load

    def build(name, config=None, **kw):
        if torch.empty(0).device.type != "meta":
            built.append(name)
        return real_build(name, config, **kw)

    def load(data):
        loaded.append(len(data))
        return real_load(data)

    monkeypatch.setattr(ckmod, "build_model", build)
    monkeypatch.setattr(ckmod, "st_load", load)
    return built, loaded


def _elapsed(wall0, cpu0):
    """Seconds since (wall0, cpu0): the smaller of wall-clock and this process's CPU time
    (all threads, user + system), so that other processes on a busy machine do not count,
    while any real work (computing, allocating and touching memory) does."""
    return min(time.perf_counter() - wall0, time.process_time() - cpu0)


def _refused_fast(load, match, spy):
    """``load()`` raises a CheckpointError matching ``match`` within 1 s, having built and read nothing."""
    built, loaded = spy
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    t, cpu = time.perf_counter(), time.process_time()
    with pytest.raises(CheckpointError, match=match):
        load()
    assert _elapsed(t, cpu) < 1.0
    assert built == [] and loaded == [], "a refused file must not allocate a model or read its weights"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 200 * 1024


@pytest.mark.parametrize(
    "edit,match",
    [
        # sizes that used to allocate gigabytes (10.7 GB for 20000) before failing
        (_cfg(hidden_dim=20000), r"'hidden_dim' is 20000; it must be an integer from 1 to 4,096"),
        (_cfg(hidden_dim=10**6), "'hidden_dim' is 1000000"),
        (_cfg(emb_dim=10**6), "'emb_dim' is 1000000"),
        (_cfg(vocab_size=10**9), "'vocab_size' is 1000000000"),
        # types and ranges
        (_cfg(hidden_dim=0), "'hidden_dim' is 0"),
        (_cfg(hidden_dim=-1), "'hidden_dim' is -1"),
        (_cfg(hidden_dim=50.5), "'hidden_dim' must be an integer from 1 to 4,096, not 50.5"),
        (_cfg(hidden_dim=5.0), "not 5.0"),
        (_cfg(hidden_dim="50"), r"not '50' \(a string\)"),
        (_cfg(hidden_dim=None), "not null"),
        (_cfg(hidden_dim=True), r"not true \(a boolean\)"),
        (_cfg(hidden_dim=[5]), "not a list"),
        (_cfg(dropout=5), r"'dropout' is 5.0; it must be a number from 0 to 1 \(less than 1\)"),
        (_cfg(dropout=1), "'dropout' is 1.0"),
        (_cfg(dropout="x"), "'dropout' must be a number"),
        (_cfg(dropout=float("nan")), "not nan"),
        (_cfg(init_range=float("inf")), "not inf"),
        (_cfg(entropy_weight=-1), "'entropy_weight' is -1.0"),
        (_cfg(selection=3), "'selection' must be one of 'none'"),
        # booleans: JSON true or false only
        (_cfg(start_slot=1), r"'start_slot' must be true or false, not 1$"),
        (_cfg(start_slot=0), r"'start_slot' must be true or false, not 0$"),
        (_cfg(start_slot="false"), r"'start_slot' must be true or false, not 'false' \(a string\)"),
        (_cfg(start_slot=None), "'start_slot' must be true or false, not null"),
        (_cfg(window=3), r"amsrn has no option\(s\) \['window'\]; valid: \[.*'dropout'"),
        (lambda d: {**d, "config": ["not", "an", "object"]}, "'config' is missing or not a dict"),
        # the file's own fields
        (lambda d: {**d, "format_version": "2"}, r"\"format_version\" must be an integer from 1 to 1, not \"2\""),
        (lambda d: {**d, "format_version": None}, "\"format_version\" must be an integer from 1 to 1, not null"),
        (lambda d: {**d, "format_version": 2}, "newer than this vizlm"),
        (lambda d: {**d, "model": 7}, "'model' is missing or not a str"),
        (lambda d: {**d, "metrics": [1, 2]}, r"'metrics' must be an object, not \[1, 2\]"),
        (lambda d: {**d, "parameters": True}, "'parameters' must be an integer, not true"),
        # vocabulary: strings only, unique, non-empty, the configured size
        (lambda d: {**d, "vocab": d["vocab"][:4] + list(range(36))}, "vocabulary entry 4 is 0; every word must be a non-empty string"),
        (lambda d: {**d, "vocab": d["vocab"][:4] + [True] * 36}, "vocabulary entry 4 is true"),
        (lambda d: {**d, "vocab": list(range(40))}, "vocabulary entry 0 is 0"),
        (lambda d: {**d, "vocab": d["vocab"][:-1] + [""]}, "vocabulary entry 39 is \"\""),
        (lambda d: {**d, "vocab": d["vocab"][:-1] + ["two words"]}, "without spaces"),
        (lambda d: {**d, "vocab": d["vocab"][:-1] + ["x" * 101]}, "at most 100"),
        (lambda d: {**d, "vocab": d["vocab"][:-1] + [d["vocab"][-2]]}, "duplicate"),
        (lambda d: {**d, "vocab": d["vocab"][:-1] + [["w"]]}, "vocabulary entry 39 is list"),
        # JSON itself: depth is measured before parsing, so no RecursionError
        (_nested(100_000), "nests 100001 levels deep; the limit is 32"),
        (_nested(33), "nests 34 levels deep"),
        (lambda d: json.dumps(d).replace('"hidden_dim": 5', '"hidden_dim": ' + "9" * 5000), "not valid JSON"),
        (lambda d: '"just a string"', "not a vizlm checkpoint"),
        (lambda d: b"\xff\xfe\x00garbage", "not valid JSON"),
    ],
)
def test_crafted_config_is_refused_fast_without_allocating(saved, spy, monkeypatch, edit, match):
    _, folder = saved
    doc = json.loads((folder / "config.json").read_text())
    new = edit(doc)
    raw = new if isinstance(new, bytes) else (new if isinstance(new, str) else json.dumps(new)).encode()
    weights = (folder / "model.safetensors").read_bytes()
    _refused_fast(lambda: checkpoint_from_bytes(weights, raw), match, spy)
    (folder / "config.json").write_bytes(raw)
    opened = []
    monkeypatch.setattr(ckmod, "open", lambda f, *a, **k: opened.append(Path(f).name) or open(f, *a, **k), raising=False)  # noqa: SIM115
    _refused_fast(lambda: load_checkpoint(folder), match, spy)
    assert opened == ["config.json"], "the config is checked before the weights are read"


@pytest.mark.parametrize("window,match", [(10**9, "'window' is 1000000000; it must be an integer from 1 to 100"), (0, "'window' is 0")])
def test_kvp_window_is_bounded(tmp_path, spy, window, match):
    torch.manual_seed(0)
    folder = save_checkpoint(tmp_path / "kvp", build_model("kvp", **TINY, window=3), "kvp", VOCAB)
    doc = json.loads((folder / "config.json").read_text())
    doc["config"]["window"] = window
    (folder / "config.json").write_text(json.dumps(doc))
    _refused_fast(lambda: load_checkpoint(folder), match, spy)
    doc["config"].update(window=4, variant="kv")  # model "kvp" with another variant's config
    (folder / "config.json").write_text(json.dumps(doc))
    _refused_fast(lambda: load_checkpoint(folder), "'variant' is 'kv', but a kvp model has variant 'kvp'", spy)


@pytest.mark.skipif(not (BUNDLED_LSTM / "model.safetensors").is_file(), reason="no bundled lstm checkpoint")
@pytest.mark.parametrize("hidden,match", [(8000, "'hidden_dim' is 8000"), (4000, r"expected \(16000, 50\)"),
                                          (1000, r"tensor 'rnn.weight_ih_l0' is \(200, 50\) torch.float32; expected \(4000, 50\)")])
def test_real_weights_with_a_bigger_config_are_refused_before_reading_them(spy, hidden, match):
    """The issue's 'hidden_dim 8000 with the real weights' cost 2.1 GB and 7.9 s per upload."""
    weights = (BUNDLED_LSTM / "model.safetensors").read_bytes()
    doc = json.loads((BUNDLED_LSTM / "config.json").read_text())
    doc["config"]["hidden_dim"] = hidden
    _refused_fast(lambda: checkpoint_from_bytes(weights, json.dumps(doc)), match, spy)


def test_oversized_config_json_is_refused_before_reading(saved, spy, monkeypatch):
    _, folder = saved
    doc = json.loads((folder / "config.json").read_text())
    doc["notes"] = "x" * (ckmod.MAX_META_BYTES + 1)
    raw = json.dumps(doc)
    weights = (folder / "model.safetensors").read_bytes()
    _refused_fast(lambda: checkpoint_from_bytes(weights, raw), "config.json is larger than the limit of 5 MB", spy)
    _refused_fast(lambda: checkpoint_from_bytes(weights, raw.encode()), "config.json is 5.0 MB; the limit is 5 MB", spy)
    (folder / "config.json").write_text(raw)
    reads = []
    monkeypatch.setattr(ckmod, "open", lambda *a, **k: reads.append(a) or open(*a, **k), raising=False)  # noqa: SIM115
    _refused_fast(lambda: load_checkpoint(folder), r"config.json is 5.0 MB; the limit is 5 MB", spy)
    assert not any(str(a[0]).endswith("config.json") for a in reads), "the size comes from stat, before reading"


def test_config_limits_cover_every_registered_field():
    """One table holds every field's limits; every default lies within them."""
    import dataclasses

    for name, (config_cls, _, fixed) in REGISTRY.items():
        fields = {f.name for f in dataclasses.fields(config_cls)}
        assert fields <= set(LIMITS), f"{name}: no limit for {fields - set(LIMITS)}"
        default = dataclasses.asdict(config_cls(**fixed))
        assert check_config(name, default) == config_cls(**fixed)


# --------------------------------------------------------------------------- crafted weights
def _header(data):
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def _with_header(header, body):
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda h: h["key.weight"].update(shape=[5, 6]), r"tensor 'key.weight' is \(5, 6\)"),
        (lambda h: h["key.weight"].update(shape=[10**6, 10**6]), r"is \(1000000, 1000000\)"),
        (lambda h: h["key.weight"].update(shape=[5, -5]), "header entry of tensor 'key.weight' is malformed"),
        (lambda h: h["key.weight"].update(shape="5x5"), "malformed"),
        (lambda h: h["key.weight"].update(dtype="BF16"), "torch.bfloat16; expected"),
        (lambda h: h["key.weight"].update(dtype="I32"), "torch.int32; expected"),
        # float16 storage is allowed, but then the data must be half as long
        (lambda h: h["key.weight"].update(dtype="F16"), "has 100 bytes of data; its shape needs 50"),
        (lambda h: h["key.weight"].update(dtype="Q7"), "Q7; expected"),
        (lambda h: h["key.weight"].update(data_offsets=[0, 10**12]), "corrupt or truncated"),
        (lambda h: h["key.weight"].update(data_offsets=[-4, 96]), "malformed"),
        (lambda h: h["key.weight"].update(extra=1), "malformed"),
        (lambda h: h.update({"key.weight": h["key.bias"]}), r"tensor 'key.weight' is \(5,\)"),
        (lambda h: h["key.weight"].update(data_offsets=h["key.bias"]["data_offsets"]), "corrupt or truncated"),
        (lambda h: h.pop("key.weight"), r"missing \['key.weight'\]"),
        (lambda h: h.update({"__metadata__": {"a": 1}}), "__metadata__"),
        (lambda h: h.update({"__metadata__": json.loads("[" * 35 + "]" * 35)}), "nests 36 levels deep"),
    ],
)
def test_crafted_header_is_refused_before_reading_the_weights(saved, spy, edit, match):
    _, folder = saved
    header, body = _header((folder / "model.safetensors").read_bytes())
    edit(header)
    meta = (folder / "config.json").read_bytes()
    _refused_fast(lambda: checkpoint_from_bytes(_with_header(header, body), meta), match, spy)


def test_header_size_and_json_are_bounded(saved, spy):
    _, folder = saved
    data = (folder / "model.safetensors").read_bytes()
    meta = (folder / "config.json").read_bytes()
    deep = b"[" * 40_000 + b"]" * 40_000
    crafted = struct.pack("<Q", len(deep) + 2) + b"{" + deep + b"}"
    _refused_fast(lambda: checkpoint_from_bytes(crafted, meta), "header nests 40001 levels deep; the limit is 32", spy)
    big = b'{"a": "' + b"x" * 100_000 + b'"}'
    crafted = struct.pack("<Q", len(big)) + big
    _refused_fast(lambda: checkpoint_from_bytes(crafted, meta), "header is 100,009 bytes; the limit is 100,000", spy)
    header, body = _header(data)
    twice = json.dumps(header)[:-1] + ', "key.bias": ' + json.dumps(header["key.bias"]) + "}"
    crafted = struct.pack("<Q", len(twice)) + twice.encode() + body
    _refused_fast(lambda: checkpoint_from_bytes(crafted, meta), "header: the key 'key.bias' appears twice", spy)
    small = b"[" * 40 + b"]" * 40
    crafted = struct.pack("<Q", len(small) + 6) + b'{"a":' + small + b"}"
    _refused_fast(lambda: checkpoint_from_bytes(crafted, meta), "nests 41 levels deep", spy)
    _refused_fast(lambda: checkpoint_from_bytes(data + b"\0" * 8, meta), "the file holds", spy)


@pytest.mark.parametrize("value", [1e38, -2e4, float("inf")])
def test_huge_weights_are_refused(saved, value):
    """Finite 1e38 weights used to load and give a NaN perplexity."""
    model, folder = saved
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["decoder.weight"][3, 2] = value
    save_file(state, str(folder / "model.safetensors"))
    _expect(folder, "magnitude" if math.isfinite(value) else "NaN or infinite")


def test_weights_at_the_bound_load(saved):
    model, folder = saved
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["decoder.weight"][3, 2] = ckmod.MAX_ABS_WEIGHT
    save_file(state, str(folder / "model.safetensors"))
    assert load_checkpoint(folder).model.decoder.weight[3, 2] == ckmod.MAX_ABS_WEIGHT


# --------------------------------------------------------------------------- files on disk
def test_symlinks_out_of_the_folder_are_refused(saved, tmp_path):
    _, folder = saved
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for name in ("model.safetensors", "config.json"):
        other = tmp_path / "ln" / name
        other.parent.mkdir(exist_ok=True)
        shutil.copytree(folder, tmp_path / "ln", dirs_exist_ok=True)
        (outside / name).write_bytes((folder / name).read_bytes())
        other.unlink()
        other.symlink_to(outside / name)
        _expect(tmp_path / "ln", "symbolic link out of its checkpoint folder")
    # relative links out are refused as well; links inside the folder, and a linked folder, are fine
    (tmp_path / "ln" / "config.json").unlink()
    (tmp_path / "ln" / "config.json").symlink_to("../elsewhere/config.json")
    _expect(tmp_path / "ln", "symbolic link out")
    (folder / "best.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to("best.safetensors")
    (tmp_path / "linked").symlink_to(folder)
    assert load_checkpoint(tmp_path / "linked").label == "linked"
    # a dangling link is simply missing
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to("gone.safetensors")
    _expect(folder, "not found")


def test_non_regular_files_are_refused_without_reading(saved):
    _, folder = saved
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")  # opening it would block forever
    _expect(folder, "not a regular file")
    (folder / "config.json").unlink()
    (folder / "config.json").mkdir()
    _expect(folder, "not a regular file")


# --------------------------------------------------------------------------- fuzz
# at least FUZZ_MIN iterations (the seeded sequence makes those reproducible), then more until
# FUZZ_SECONDS or FUZZ_MAX; about 25 ms each on a laptop core
FUZZ_MIN, FUZZ_MAX, FUZZ_SECONDS = 120, 400, 8.0
ODD_VALUES = [None, True, False, "", "50", "x", "shared", "kvp", [], {}, [[[[50]]]], {"a": 1}, 0, -1, 1, 2, 3, 5, 50, 51,
              4096, 4097, 20000, 10**6, 10**9, 2**63, -(2**63), 10**30, 0.0, 0.5, 0.999, 50.0, 50.5, -0.1, 1e38, 1e308,
              float("nan"), float("inf"), float("-inf")]


def _mutate_config(rng, doc, raw):
    doc = json.loads(json.dumps(doc))  # a deep copy
    kind = rng.randrange(9)
    if kind <= 3:  # a config field: odd value, deleted, nested, or a new key
        keys = list(doc["config"]) + ["window", "n", "variant", "bogus"]
        key = rng.choice(keys)
        choice = rng.random()
        if choice < 0.15:
            doc["config"].pop(key, None)
        elif choice < 0.25:
            doc["config"][key] = json.loads("[" * 40 + "1" + "]" * 40)
        else:
            doc["config"][key] = rng.choice(ODD_VALUES)
    elif kind == 4:  # a top-level field
        key = rng.choice(["format", "format_version", "model", "config", "vocab", "metrics", "parameters", "label", "corpus"])
        if rng.random() < 0.3:
            doc.pop(key, None)
        else:
            doc[key] = rng.choice(ODD_VALUES + list(REGISTRY) + ["vizlm-checkpoint"])
    elif kind == 5:  # the vocabulary
        i = rng.randrange(len(doc["vocab"]))
        op = rng.randrange(4)
        if op == 0:
            doc["vocab"][i] = rng.choice(ODD_VALUES)
        elif op == 1:
            del doc["vocab"][i]
        elif op == 2:
            doc["vocab"][i] = doc["vocab"][rng.randrange(len(doc["vocab"]))]
        else:
            doc["vocab"].append(f"new{i}")
    elif kind == 6:  # the model family, with or without its options
        doc["model"] = rng.choice(list(REGISTRY))
        if rng.random() < 0.5:
            doc["config"] = {k: v for k, v in doc["config"].items() if k in ("vocab_size", "emb_dim", "hidden_dim")}
    elif kind == 7:  # raw text: truncate or corrupt a byte
        text = bytearray(raw)
        pos = rng.randrange(len(text))
        if rng.random() < 0.5:
            return bytes(text[:pos])
        text[pos] = rng.randrange(256)
        return bytes(text)
    else:  # deep nesting
        levels = rng.choice([10, 33, 1000, 100_000])
        return json.dumps(doc).replace('"metrics": ', '"metrics": ' + "[" * levels, 1).replace("}", "]" * levels + "}", 1).encode()
    return json.dumps(doc).encode()


def _mutate_weights(rng, data):
    header, body = _header(data)
    kind = rng.randrange(8)
    if kind <= 3:  # the header's JSON: shapes, dtypes, offsets, names
        key = rng.choice([k for k in header if k != "__metadata__"])
        field_ = rng.choice(["shape", "dtype", "data_offsets", "name"])
        entry = header[key]
        if field_ == "shape":
            shape = list(entry["shape"])
            i = rng.randrange(len(shape))
            shape[i] = rng.choice([shape[i] + 1, shape[i] - 1, 0, -1, 2 * shape[i], 10**9, "5", None, 1.5])
            entry["shape"] = rng.choice([shape, shape[::-1], shape + [1], shape[:-1]])
        elif field_ == "dtype":
            entry["dtype"] = rng.choice(["F64", "F16", "BF16", "I64", "U8", "BOOL", "f32", "", 32])
        elif field_ == "data_offsets":
            b, e = entry["data_offsets"]
            entry["data_offsets"] = rng.choice([[b, e + 4], [b + 4, e], [e, b], [b, 10**15], [-1, e], [b], [b, e, e], "x"])
        else:
            header[key + rng.choice(["", "x"])] = header.pop(key) if rng.random() < 0.5 else entry
        return _with_header(header, body)
    raw = bytearray(data)
    (n,) = struct.unpack("<Q", data[:8])
    if kind == 4:  # flip bytes in the header
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(8 + n)] ^= 1 << rng.randrange(8)
        return bytes(raw)
    if kind == 5:  # truncate or extend
        return bytes(raw[: rng.randrange(len(raw))]) if rng.random() < 0.7 else bytes(raw) + b"\0" * rng.randint(1, 64)
    if kind == 6:  # the length prefix
        raw[:8] = struct.pack("<Q", rng.choice([0, 1, n - 1, n + 1, n + 4, len(raw), 2**40, 2**64 - 1]))
        return bytes(raw)
    # the tensor data: a huge, NaN or infinite float somewhere in one tensor
    begin, end = rng.choice([v for k, v in header.items() if k != "__metadata__"])["data_offsets"]
    pos = 8 + n + begin + 4 * rng.randrange((end - begin) // 4)
    raw[pos : pos + 4] = struct.pack("<f", rng.choice([1e38, -1e30, 2e4, float("nan"), float("inf"), 3.0]))
    return bytes(raw)


@pytest.mark.skipif(not (BUNDLED_LSTM / "model.safetensors").is_file(), reason="no bundled lstm checkpoint")
def test_fuzz_mutated_real_checkpoint_loads_or_is_refused_quickly():
    """Mutated configs and headers of a real checkpoint: every outcome is a load or a CheckpointError, each within 1 s."""
    weights = (BUNDLED_LSTM / "model.safetensors").read_bytes()
    meta_raw = (BUNDLED_LSTM / "config.json").read_bytes()
    doc = json.loads(meta_raw)
    checkpoint_from_bytes(weights, meta_raw)  # warm up (imports, allocator)
    # One intra-op thread: the loader's own cost is what is timed, not OpenMP's scheduling on a
    # busy machine (with 2 threads and other processes running, a 20 ms load can take 200 ms).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _fuzz(weights, meta_raw, doc)
    finally:
        torch.set_num_threads(threads)


def _fuzz(weights, meta_raw, doc):
    probe = torch.tensor([[1, 4, 5, 6, 7, 2, 9999]])
    rng = random.Random(20240611)
    outcomes, slowest, start = {"loaded": 0, "refused": 0}, 0.0, time.perf_counter()
    for i in range(FUZZ_MAX):
        if i >= FUZZ_MIN and time.perf_counter() - start > FUZZ_SECONDS:
            break
        w, m = weights, meta_raw
        which = rng.random()
        if which < 0.55:
            m = _mutate_config(rng, doc, meta_raw)
        if which >= 0.45:
            w = _mutate_weights(rng, weights)
        t, cpu = time.perf_counter(), time.process_time()
        try:
            ckpt = checkpoint_from_bytes(w, m)
        except CheckpointError as exc:
            assert str(exc) and "Traceback" not in str(exc)
            outcomes["refused"] += 1
        except Exception as exc:  # noqa: BLE001 - the point of the test
            pytest.fail(f"iteration {i}: {type(exc).__name__}: {str(exc)[:300]}")
        else:  # a loaded model keeps the loader's promises and is usable
            peak = max(p.abs().max().item() for p in ckpt.model.parameters())
            assert peak <= ckmod.MAX_ABS_WEIGHT, f"iteration {i}: loaded a weight of {peak:.3g}"
            with torch.no_grad():
                logits = ckpt.model(probe[:, :-1]).logits
                nll = torch.nn.functional.cross_entropy(logits[0], probe[0, 1:], reduction="sum")
            assert torch.isfinite(logits).all() and torch.isfinite(nll), f"iteration {i}: loaded, but the forward pass overflows"
            outcomes["loaded"] += 1
        elapsed = _elapsed(t, cpu)
        slowest = max(slowest, elapsed)
        assert elapsed < 1.0, f"iteration {i} took {elapsed:.2f} s"
    assert outcomes["refused"] >= 80 and outcomes["loaded"] >= 5, outcomes
    print(f"fuzz: {outcomes} in {time.perf_counter() - start:.1f} s, slowest {slowest * 1000:.0f} ms")
