"""Nothing lost, nothing hangs: every command that writes refuses to replace what a user has
unless asked (``--force``, ``--resume``), writes whole files or none, and a checkpoint that
passes validation never ends in a traceback."""

from __future__ import annotations

import json
import random
import time
import warnings

import pytest
import torch

from vizlm import cli
from vizlm.core import files
from vizlm.modeling.checkpoint import CheckpointError, json_depth, load_checkpoint, parse_meta, save_checkpoint
from vizlm.models import build_model

TEXT = "The committee approved the budget ."


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def snapshot(folder) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def checkpoint(tmp_path):
    """A finished tiny checkpoint (weights, config, log) that must survive the commands below."""
    folder = tmp_path / "mine"
    torch.manual_seed(0)
    vocab = load_checkpoint("lstm").vocab
    save_checkpoint(folder, build_model("lstm", vocab_size=len(vocab), emb_dim=4, hidden_dim=4), "lstm", vocab,
                    corpus={"name": "brown"}, metrics={"valid_perplexity": 1e4, "test_perplexity": 1e4})
    (folder / "train_log.jsonl").write_text('{"epoch": 1, "valid_perplexity": 10000.0}\n')
    return folder


# --------------------------------------------------------------------------- train
def test_train_refuses_a_folder_that_holds_a_checkpoint(checkpoint, capsys):
    before = snapshot(checkpoint)
    for extra in ([], ["--resume"]):  # --resume: this one has no resume state to continue
        code, _, err = run(capsys, "train", "--model", "lstm", "--max-batches", "2", "--eval-batches", "1", "--epochs",
                           "1", "--out", str(checkpoint), "--threads", "1", *extra)
        assert code == 2 and "already holds a checkpoint" in err and "--force" in err and len(err.splitlines()) == 1
        assert snapshot(checkpoint) == before, "the checkpoint and its log were touched"


def test_train_without_out_never_writes_into_the_bundled_checkpoints(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("VIZLM_RUNS", str(tmp_path / "runs"))
    from vizlm.modeling.checkpoint import bundled_dir

    before = snapshot(bundled_dir() / "lstm")
    code, out, _ = run(capsys, "train", "--model", "lstm", "--max-batches", "2", "--eval-batches", "1", "--epochs", "1",
                       "--threads", "1", "--emb-dim", "4", "--hidden-dim", "4")
    assert code == 0 and json.loads(out)["checkpoint"] == str(tmp_path / "runs" / "lstm")
    assert snapshot(bundled_dir() / "lstm") == before


def test_train_with_force_replaces_the_checkpoint(checkpoint, capsys):
    code, out, _ = run(capsys, "train", "--model", "lstm", "--max-batches", "2", "--eval-batches", "1", "--epochs", "1",
                       "--out", str(checkpoint), "--threads", "1", "--emb-dim", "4", "--hidden-dim", "4", "--force")
    assert code == 0 and json.loads(out)["epochs_trained"] == 1
    assert json.loads((checkpoint / "train_log.jsonl").read_text().splitlines()[0])["epoch"] == 1
    assert not [p for p in checkpoint.iterdir() if p.name.endswith(".tmp")], "a temporary file was left"


def test_one_process_at_a_time_trains_into_a_folder(tmp_path, capsys):
    """While a process trains into a folder (it holds the folder's lock), a second training into it
    is refused at once, saying why, whatever its flags; the lock is the operating system's, so it
    ends with its holder, and a training refused before its first write leaves no folder."""
    import subprocess
    import sys

    folder = tmp_path / "busy"
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sys, time; from vizlm.core import files\n"
                                "with files.training_into(sys.argv[1]): print('held', flush=True); time.sleep(60)"),
         str(folder)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for extra in ([], ["--force"], ["--resume"]):
            code, _, err = run(capsys, "train", "--model", "lstm", "--dry-run", "--out", str(folder), "--threads", "1",
                               *extra)
            assert code == 2 and "is being trained into by another process" in err and len(err.splitlines()) == 1, err
        assert sorted(p.name for p in folder.iterdir()) == [files.TRAINING_LOCK], "the refused training wrote"
    finally:
        holder.kill()
        holder.wait()
    code, out, _ = run(capsys, "train", "--model", "lstm", "--dry-run", "--out", str(folder), "--threads", "1",
                       "--emb-dim", "4", "--hidden-dim", "4")
    assert code == 0 and json.loads(out)["epochs_trained"] == 1, "a killed holder's lock is gone with it"
    code, _, err = run(capsys, "train", "--model", "lstm", "--dry-run", "--out", str(tmp_path / "new"),
                       "--corpus", "nowhere")
    assert code == 2 and not (tmp_path / "new").exists(), "a training refused before its first write made a folder"


def test_a_training_lock_is_exclusive_within_one_process_too(tmp_path):
    with files.training_into(tmp_path / "x"), pytest.raises(files.BusyError, match="another process"), \
            files.training_into(tmp_path / "x"):
        pass
    with files.training_into(tmp_path / "x"):  # released: taken again
        pass
    with pytest.raises(ValueError, match="refused"), files.training_into(tmp_path / "a" / "b" / "x"):
        raise ValueError("refused before the first write")
    assert not (tmp_path / "x").exists() and not (tmp_path / "a").exists(), \
        "a folder the lock made (its parents too) and nothing else used is removed again"
    with files.training_into(tmp_path / "y", hold=False):  # a data-parallel run's other ranks: no lock, no folder
        assert not (tmp_path / "y").exists()


# --------------------------------------------------------------------------- export and other outputs
def test_export_never_replaces_a_checkpoint_or_a_file(checkpoint, tmp_path, capsys):
    before = snapshot(checkpoint)
    for target in (checkpoint / "model.safetensors", checkpoint / "config.json"):
        code, _, err = run(capsys, "export", "--checkpoint", "lstm", "--text", TEXT, "--format", "csv", "--out", str(target))
        assert code == 2 and "exists (a checkpoint's" in err and "--force" in err
    assert snapshot(checkpoint) == before
    mine = tmp_path / "notes.csv"
    mine.write_text("my own notes\n")
    code, _, err = run(capsys, "export", "--checkpoint", "lstm", "--text", TEXT, "--format", "csv", "--out", str(mine))
    assert code == 2 and "exists (a file of 13 bytes)" in err and mine.read_text() == "my own notes\n"
    code, _, _ = run(capsys, "export", "--checkpoint", "lstm", "--text", TEXT, "--format", "csv", "--out", str(mine),
                     "--force")
    assert code == 0 and mine.read_text() != "my own notes\n" and "," in mine.read_text()
    empty = tmp_path / "empty.csv"
    empty.touch()  # an empty file holds nothing to lose
    assert run(capsys, "export", "--checkpoint", "lstm", "--text", TEXT, "--format", "csv", "--out", str(empty))[0] == 0


def test_compare_csv_and_positions_pictures_refuse_existing_files(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text(TEXT + "\n")
    for argv, target in ((["compare", "--a", "lstm", "--b", "amsrn", "--text-file", str(text), "--csv"], "table.csv"),
                         (["positions", "--checkpoint", "amsrn", "--text-file", str(text), "--png"], "plot.png")):
        (tmp_path / target).write_text("keep me")
        code, _, err = run(capsys, *argv, str(tmp_path / target))
        assert code == 2 and "exists" in err and (tmp_path / target).read_text() == "keep me"


def test_a_write_killed_before_its_rename_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    target.write_text("old")

    def killed(src, dst):
        raise KeyboardInterrupt  # as a kill between writing and renaming

    monkeypatch.setattr(files.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        files.write_text(target, "new", force=True)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_writing_the_same_bytes_again_needs_no_force(tmp_path):
    target = tmp_path / "same.txt"
    files.write_text(target, "one\n")
    stamp = target.stat().st_mtime_ns
    files.write_text(target, "one\n")  # regenerating byte for byte (vizlm prepare) is not a change
    assert target.stat().st_mtime_ns == stamp
    with pytest.raises(files.OverwriteError, match="exists"):
        files.write_text(target, "two\n")


def test_save_checkpoint_writes_whole_files(checkpoint, monkeypatch):
    """A kill while a checkpoint is saved (every epoch) leaves the previous weights and config."""
    before = snapshot(checkpoint)
    monkeypatch.setattr(files.os, "replace", lambda src, dst: (_ for _ in ()).throw(KeyboardInterrupt()))
    ckpt = load_checkpoint(checkpoint)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(checkpoint, ckpt.model, ckpt.name, ckpt.vocab, metrics={"valid_perplexity": 1.0})
    assert snapshot(checkpoint) == before


# --------------------------------------------------------------------------- linear-time checks
def _true_depth(doc) -> int:
    if isinstance(doc, dict):
        return 1 + max((_true_depth(v) for v in doc.values()), default=0)
    if isinstance(doc, list):
        return 1 + max((_true_depth(v) for v in doc), default=0)
    return 0


def _random_json(rng: random.Random, depth: int = 0):
    kind = rng.random()
    if depth > 6 or kind < 0.3:
        return rng.choice(["]", "[{", '\\"', "\\", "a\\\\", '"]}', "x", "", "\\\\\\\"[", 7, 1.5, None, True])
    if kind < 0.65:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["k", "[", "\\", '"', "}{"]) + str(i): _random_json(rng, depth + 1) for i in range(rng.randint(0, 3))}


def test_json_depth_is_the_depth_of_valid_json():
    """Strings full of brackets, quotes and backslashes do not count; only real nesting does."""
    rng = random.Random(0)
    for _ in range(3000):
        doc = _random_json(rng)
        raw = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8")
        assert json_depth(raw) == _true_depth(doc), raw


# The shapes of untrusted JSON that used to take seconds to minutes (a quadratic regex) or could:
# 4 MB (under the 5 MB limit) each, refused within the time bound.
HOSTILE = {
    "unterminated string of \\\"": b'{"a": "' + b'\\"' * 2_000_000,
    "deep nesting": b"[" * 4_000_000,
    "long integer": b'{"format": ' + b"9" * 4_000_000 + b"}",
    "long float": b'{"format": 0.' + b"1" * 4_000_000 + b"}",
    "many backslashes": b'{"a": "' + b"\\" * 4_000_000 + b'"}',
    "nested in strings": b'["' + b"[{" * 2_000_000 + b'"]',
}


@pytest.mark.parametrize("shape", HOSTILE, ids=list(HOSTILE))
def test_hostile_json_is_refused_in_bounded_time(shape):
    start = time.process_time()
    with pytest.raises(CheckpointError):
        parse_meta(HOSTILE[shape])
    assert time.process_time() - start < 5, f"{shape}: a check that is not linear in the input's size"


@pytest.mark.parametrize("raw,message", [
    (b'{"format": "vizlm-checkpoint", "model": "lstm", "model": "amsrn"}', "the key 'model' appears twice"),
    (json.dumps({"format": "vizlm-checkpoint"}).encode("utf-16"), "not UTF-8 text"),
    (json.dumps({"format": "vizlm-checkpoint"}).encode("utf-32"), "not UTF-8 text"),
])
def test_duplicate_keys_and_other_encodings_are_refused(raw, message):
    with pytest.raises(CheckpointError, match=message):
        parse_meta(raw)


# --------------------------------------------------------------------------- valid but extreme checkpoints
@pytest.fixture
def overflowing(tmp_path):
    """The bundled LSTM with one output bias at 9999 (under the 1e4 bound): every other word is e^-9999 likely."""
    ckpt = load_checkpoint("lstm")
    with torch.no_grad():
        ckpt.model.decoder.bias[5] = 9999.0
    save_checkpoint(tmp_path / "hot", ckpt.model, ckpt.name, ckpt.vocab, corpus={"name": "brown"})
    return tmp_path / "hot"


def test_an_overflowing_perplexity_is_inf_with_a_note(overflowing, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text(TEXT + "\n")
    code, out, err = run(capsys, "eval", "--checkpoint", str(overflowing), "--text-file", str(text))
    assert code == 0 and "perplexity inf" in out and "note: the perplexity is inf" in out and "Traceback" not in err
    code, out, _ = run(capsys, "eval", "--checkpoint", str(overflowing), "--text-file", str(text), "--json")
    doc = json.loads(out)  # strict JSON: no Infinity
    assert code == 0 and doc["perplexity"] is None and "inf" in doc["note"]
    code, out, err = run(capsys, "compare", "--a", "lstm", "--b", str(overflowing), "--text-file", str(text))
    assert code == 0 and "perplexity is inf" in out and "Traceback" not in err
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no NumPy overflow warning reaches the user
        code, out, _ = run(capsys, "analyze", "--checkpoint", str(overflowing), "--text", TEXT, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["perplexity"] is None and any("perplexity is inf" in n for n in doc["notes"])


def test_a_long_sentence_costs_what_400_tokens_cost(monkeypatch, capsys):
    """A 10,000-word line without a full stop: 400 tokens are read, and slot effects beyond the
    CLI's bound of (word, slot) pairs are skipped with a note instead of half a minute of work."""
    from vizlm.models import effects as fx

    called = []
    real = fx._slot_effects
    monkeypatch.setattr(fx, "_slot_effects", lambda *a, **k: called.append(1) or real(*a, **k))
    words = ("the dogs in the park were barking at the man who had a red hat and a long coat " * 600).split()[:10_000]
    code, out, _ = run(capsys, "analyze", "--checkpoint", "amsrn", "--text", " ".join(words), "--json")
    doc = json.loads(out)
    assert code == 0 and len(doc["tokens"]) == 400 and not called
    assert any("slot effects not computed" in n for n in doc["notes"])
    assert all(t["read_effect_bits"] is not None for t in doc["targets"])
    code, out, _ = run(capsys, "analyze", "--checkpoint", "amsrn", "--text", TEXT, "--json")
    assert called and not any("slot effects not computed" in n for n in json.loads(out)["notes"])


def test_invalid_utf8_in_a_text_file_is_reported_with_its_line(tmp_path, capsys):
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"The dogs are barking .\nThe \xff\xfe cat sat .\nok \xc3 .\n")
    code, out, err = run(capsys, "eval", "--checkpoint", "lstm", "--text-file", str(path))
    assert code == 0 and "perplexity" in out
    assert "3 byte(s) are not UTF-8 (the first on line 2)" in err


# --------------------------------------------------------------------------- vocabulary words are rendered escaped
PAYLOAD = "<script>alert(1)</script>"
FORMULA = "=HYPERLINK(\"x\")"


@pytest.fixture
def hostile_vocab(tmp_path, monkeypatch):
    """An uploaded-looking checkpoint whose two likeliest words are a script tag and a spreadsheet formula."""
    base = load_checkpoint("lstm")
    itos = list(base.vocab.itos)
    itos[-1], itos[-2] = PAYLOAD, FORMULA
    vocab = type(base.vocab)(itos)
    torch.manual_seed(0)
    model = build_model("amsrn", vocab_size=len(vocab), emb_dim=8, hidden_dim=8).eval()
    with torch.no_grad():
        model.decoder.bias[-1], model.decoder.bias[-2] = 30.0, 29.0  # the top predictions everywhere
    folder = save_checkpoint(tmp_path / "hostile", model, "amsrn", vocab, corpus={"name": "brown"})
    monkeypatch.setenv("VIZLM_EXTRA_CHECKPOINTS", str(folder))
    return folder


def test_vocabulary_words_are_escaped_in_exports(hostile_vocab):
    from vizlm.inspect.analysis import analyze
    from vizlm.present.export import export_analysis

    sa = analyze(load_checkpoint(hostile_vocab), TEXT)
    assert sa.top_words[0][:2] == [PAYLOAD, FORMULA]
    for fmt in ("html", "svg"):  # the HTML export has scripts of its own (the chart): the word is not one
        body = export_analysis(sa, fmt).decode("utf-8").lower()
        assert "alert(1)" not in body or ("<script>alert(1)" not in body and "alert(1)</script>" not in body), fmt
    csv = export_analysis(sa, "csv").decode("utf-8")
    assert "\n=HYPERLINK" not in csv and ",=HYPERLINK" not in csv and '"=HYPERLINK' not in csv
    doc = json.loads(export_analysis(sa, "json"))
    assert doc["targets"][0]["top"][0]["word"] == PAYLOAD  # JSON carries the word as data, as it is


def test_vocabulary_words_are_escaped_in_the_app(hostile_vocab):
    from test_app import explorer, html_of, no_exception

    at = explorer(model="hostile", text=TEXT, target="2")
    no_exception(at)
    assert at.selectbox(key="model").value == "hostile"
    tables = [df.value for df in at.dataframe]  # the top predictions: a grid shows its cells as text
    assert any(PAYLOAD in df.astype(str).to_numpy() for df in tables)
    rendered = html_of(at) + " ".join(m.value for kind in ("markdown", "caption") for m in at.get(kind))
    assert "<script" not in rendered.lower()  # HTML the app writes itself (chips, highlights, notes): escaped


def test_a_hostile_weights_header_is_refused_in_bounded_time(checkpoint):
    """The safetensors header is JSON too: an unterminated string of repeated \\" (it took 18 s at 100 kB)."""
    import struct

    header = b'{"a": "' + b'\\"' * 400_000
    (checkpoint / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    start = time.process_time()
    with pytest.raises(CheckpointError):
        load_checkpoint(checkpoint)
    assert time.process_time() - start < 5
