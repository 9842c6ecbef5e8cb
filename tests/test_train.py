"""Training and evaluation through the real code paths and the CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from vizlm import cli
from vizlm.core import files
from vizlm.data.batches import iter_batches
from vizlm.data.registry import load_corpus
from vizlm.data.vocab import Vocab, encode_sentences
from vizlm.modeling.evaluate import score_sentences
from vizlm.models import REGISTRY, build_model
from vizlm.modeling.train import lm_loss


def test_tiny_training_lowers_the_loss():
    torch.manual_seed(0)
    vocab = Vocab.for_corpus("brown")
    seqs = encode_sentences(load_corpus("brown", "valid").sentences[:64], vocab)
    model = build_model("amsrn", vocab_size=len(vocab), emb_dim=16, hidden_dim=16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    _, inputs, targets = next(iter_batches(seqs, 64))
    first = None
    for _ in range(30):
        loss, _, _ = lm_loss(model, inputs, targets)
        first = first if first is not None else float(loss.detach())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < first - 1.0


def test_perplexity_definition():
    """exp(total NLL / tokens), </s> counted, padding not."""
    torch.manual_seed(0)
    model = build_model("lstm", vocab_size=10, emb_dim=4, hidden_dim=4).eval()
    seqs = [[4, 5, 6], [7], [8, 9]]
    scores = score_sentences(model, seqs, batch_size=2)
    assert scores.tokens == [4, 2, 3]
    total = 0.0
    for s in seqs:  # one sentence at a time, no padding at all
        x = torch.tensor([[1] + s])
        with torch.no_grad():
            logp = model(x).logits.log_softmax(-1)[0]
        total -= sum(float(logp[i, t]) for i, t in enumerate(s + [2]))
    assert math.isclose(scores.total_nll, total, rel_tol=1e-5)
    assert math.isclose(scores.perplexity, math.exp(total / 9), rel_tol=1e-5)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_dry_run_every_model(name, tmp_path, capsys):
    assert cli.main(["train", "--model", name, "--dry-run", "--out", str(tmp_path / name)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == name and math.isfinite(result["valid_perplexity"])
    assert (tmp_path / name / "model.safetensors").is_file()
    assert (tmp_path / name / "train_log.jsonl").read_text().count("\n") == 1


def test_resume_continues_where_it_stopped(tmp_path, capsys):
    out = str(tmp_path / "lstm")
    args = ["train", "--model", "lstm", "--hidden-dim", "8", "--emb-dim", "8", "--dry-run", "--out", out]
    assert cli.main(args) == 0
    state = json.loads((tmp_path / "lstm" / "resume" / "state.json").read_text())
    assert state["epoch"] == 1
    capsys.readouterr()
    # a dry run is one epoch, so resuming finds nothing left to do and keeps the log
    assert cli.main(args + ["--resume"]) == 0
    assert (tmp_path / "lstm" / "train_log.jsonl").read_text().count("\n") == 1


def test_a_diverged_training_says_so_and_leaves_nothing_that_needs_force(tmp_path, capsys):
    out = tmp_path / "lstm"
    args = ["train", "--model", "lstm", "--hidden-dim", "8", "--emb-dim", "8", "--dry-run", "--out", str(out)]
    assert cli.main(args + ["--lr", "1e30"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("vizlm train: error: training diverged: loss is not finite at the end of epoch 1 "
                                    "(train perplexity inf, valid inf); lower --lr (it was 1e+30)")
    assert "Traceback" not in err and "config.json" not in err
    assert files.checkpoint_files(out) == []  # the retry needs no --force


def test_a_loss_that_is_not_finite_stops_training_at_its_step(tmp_path, monkeypatch):
    from vizlm.modeling import train as vt

    real, calls = vt.output_loss, []

    def nan_at_step_2(*args, **kwargs):
        loss, nll, n = real(*args, **kwargs)
        calls.append(1)
        return loss, nll * (math.nan if len(calls) == 2 else 1), n

    monkeypatch.setattr(vt, "output_loss", nan_at_step_2)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(vt.TrainingDiverged, match=r"^training diverged: loss is not finite at epoch 1 step 2; lower "
                                                  r"--lr \(it was 0.001\)$"):
        vt.train("lstm", {"emb_dim": 8, "hidden_dim": 8}, "brown", tmp_path / "mine",
                 vt.TrainConfig(epochs=1, max_batches=3, eval_batches=1, save_every=1))
    assert len(calls) == 2 and files.checkpoint_files(tmp_path / "mine") == []
    assert sorted(p.name for p in (tmp_path / "mine").iterdir() if p.name != files.TRAINING_LOCK) == ["notes.txt"]


def test_resume_keeps_the_init_from_lineage(tmp_path):
    from vizlm.modeling.checkpoint import load_checkpoint
    from vizlm.modeling.config import TrainConfig
    from vizlm.modeling.train import train

    small = {"emb_dim": 8, "hidden_dim": 8}
    tc = TrainConfig(epochs=1, max_batches=2, eval_batches=1)
    train("lstm", small, "brown", tmp_path / "lstm", tc)
    train("amsrn", small, "brown", tmp_path / "amsrn", tc, init=str(tmp_path / "lstm"))
    # the resumed epoch has a much higher lr, so it is the one that saves the checkpoint
    tc2 = TrainConfig(epochs=2, max_batches=2, eval_batches=1, lr=0.05)
    train("amsrn", small, "brown", tmp_path / "amsrn", tc2, resume=True)
    meta = load_checkpoint(tmp_path / "amsrn").meta
    assert meta["metrics"]["best_epoch"] == 2
    assert meta["init_from"]["checkpoint"] == str(tmp_path / "lstm")


def test_cli_rejects_options_of_other_models(tmp_path, capsys):
    assert cli.main(["train", "--model", "lstm", "--window", "3", "--dry-run", "--out", str(tmp_path)]) == 2
    assert "no option" in capsys.readouterr().err


@pytest.mark.parametrize("name", list(REGISTRY))
def test_dry_run_every_model_in_document_context(name, tmp_path, capsys):
    from vizlm.modeling.checkpoint import load_checkpoint

    out = tmp_path / name
    args = ["train", "--model", name, "--context", "document", "--bptt", "7", "--streams", "8",
            "--emb-dim", "8", "--hidden-dim", "8", "--dry-run", "--out", str(out)]
    if name in ("amsrn", "salton"):
        args += ["--memory", "30"]
    assert cli.main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == name and result["context"] == "document"
    assert all(math.isfinite(result[k]) for k in ("valid_perplexity", "test_perplexity", "wsj_perplexity"))
    meta = json.loads((out / "config.json").read_text())
    assert meta["config"]["context"] == "document" and meta["train"]["bptt"] == 7 and meta["train"]["streams"] == 8
    assert meta["train"]["device"] == "cpu" and meta["train"]["torch"] == torch.__version__  # what it trained on
    assert meta["parameters"] == result["parameters"] > 0
    ckpt = load_checkpoint(out)
    assert ckpt.model.config.context == "document"
    if name in ("amsrn", "salton"):
        assert ckpt.model.config.memory == 30


@pytest.mark.parametrize("name,ref,size", [("kvp", None, 42), ("lstm", "amsrn", 97)])
def test_match_params_through_the_cli(name, ref, size, tmp_path, capsys):
    """kvp at the LSTM's count (in document context), and the LSTM at AMSRN's; both recorded."""
    from vizlm.modeling.checkpoint import load_checkpoint
    from vizlm.data.registry import read_text_file
    from vizlm.modeling.evaluate import score_documents

    out = tmp_path / name
    args = ["train", "--model", name, "--context", "document", "--match-params", *([ref] if ref else []),
            "--dry-run", "--out", str(out)]
    assert cli.main(args) == 0
    result = json.loads(capsys.readouterr().out)
    meta = json.loads((out / "config.json").read_text())
    assert result["hidden_dim"] == meta["config"]["hidden_dim"] == meta["match_params"]["hidden_dim"] == size
    assert meta["match_params"]["reference"] == (ref or "lstm")
    assert meta["parameters"] == meta["match_params"]["parameters"] == result["parameters"]
    assert abs(meta["match_params"]["ratio"] - 1) <= 0.02
    # eval reads a text file as one document in document context
    text = tmp_path / "text.txt"
    text.write_text("The dogs bark. They are hungry.\nThe park is closed because it rains.\n", encoding="utf-8")
    assert cli.main(["eval", "--checkpoint", str(out), "--text-file", str(text), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ckpt = load_checkpoint(out)
    sents = [ckpt.vocab.encode(s) for s in read_text_file(text)]
    assert doc["context"] == "document" and doc["sentences"] == 3
    assert math.isclose(doc["perplexity"], score_documents(ckpt.model, [sents]).perplexity, rel_tol=1e-9)


@pytest.mark.parametrize("flags, expect", [(["--hidden-dim", "5000"], "hidden_dim"), (["--window", "200"], "window")])
def test_training_refuses_at_once_what_the_loader_would_refuse(flags, expect, tmp_path, capsys):
    """A size the checkpoint loader refuses must not train for hours and fail when it is saved."""
    code = cli.main(["train", "--model", "kvp", "--dry-run", "--out", str(tmp_path / "x"), *flags])
    err = capsys.readouterr().err
    assert code == 2 and expect in err and "must be" in err
    assert not (tmp_path / "x").exists()


def test_scoring_batches_stay_within_a_token_budget(monkeypatch):
    """Long sentences are scored in smaller batches (bounded logits), with the same NLL."""
    import vizlm.modeling.evaluate as ev

    model = build_model("lstm", vocab_size=40, emb_dim=6, hidden_dim=5).double().eval()
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(4, 40, (n,), generator=g).tolist() for n in [3, 5, 300, 310, 2, 290, 7]]
    for _, inputs, _ in iter_batches(seqs, 128, max_tokens=700):
        assert inputs.numel() <= 700 or len(inputs) == 1
    assert len(list(iter_batches(seqs, 128, max_tokens=700))) > len(list(iter_batches(seqs, 128)))
    monkeypatch.setattr(ev, "EVAL_MAX_TOKENS", 700)
    bounded = score_sentences(model, seqs, batch_size=128)
    monkeypatch.setattr(ev, "EVAL_MAX_TOKENS", 10**9)
    whole = score_sentences(model, seqs, batch_size=128)
    assert bounded.tokens == whole.tokens
    assert torch.allclose(torch.as_tensor(bounded.nll), torch.as_tensor(whole.nll), atol=1e-9)


@pytest.fixture(scope="module")
def small_lstm(tmp_path_factory):
    """A tiny LSTM trained for three batches: the checkpoint --init-from starts from."""
    from vizlm.modeling.config import TrainConfig
    from vizlm.modeling.train import train

    out = tmp_path_factory.mktemp("lstm") / "lstm"
    train("lstm", {"emb_dim": 8, "hidden_dim": 8}, "brown", out, TrainConfig(epochs=1, max_batches=3, eval_batches=1))
    return out


@pytest.mark.parametrize("name,kw", [("amsrn", {}), ("kvp", {"window": 2})])
def test_freeze_trains_only_what_init_from_did_not_copy(name, kw, small_lstm, tmp_path, monkeypatch):
    """--freeze: after a few batches the tensors --init-from copied (AMSRN: embedding, LSTM, decoder;
    KVP: those, its LSTM's rows of the copied units) are bit for bit the LSTM's, everything else moved;
    without --freeze the copied tensors move too. The checkpoint records it."""
    from safetensors.torch import load_file

    import vizlm.modeling.train as tr

    start, copies = {}, {}

    def spy(model, copied):  # the weights training starts from, and what was copied
        start.update({k: v.detach().clone() for k, v in model.state_dict().items()})
        copies.update(copied)
        return real(model, copied)

    real = tr.freeze
    monkeypatch.setattr(tr, "freeze", spy)
    small = {"emb_dim": 8, "hidden_dim": 8, **kw}
    tc = tr.TrainConfig(epochs=1, max_batches=4, eval_batches=1, lr=0.01, freeze=True)
    tr.train(name, small, "brown", tmp_path / "frozen", tc, init=str(small_lstm))
    after = load_file(str(tmp_path / "frozen" / "model.safetensors"))
    lstm = load_file(str(small_lstm / "model.safetensors"))
    assert {"embed.weight", "rnn.weight_ih_l0", "decoder.weight", "decoder.bias"} <= set(copies)
    for key, value in after.items():
        mask = copies.get(key, False)
        if mask is None:  # copied whole: the LSTM's tensor, bit for bit
            assert torch.equal(value, lstm[key]) and torch.equal(value, start[key]), key
            continue
        if mask is not False:  # copied in part: those entries fixed, the others trained
            assert torch.equal(value[mask], start[key][mask]), key
            mask = ~mask
        else:
            mask = torch.ones_like(value, dtype=torch.bool)
        assert not torch.equal(value[mask], start[key][mask]), f"{key} did not train"
    meta = json.loads((tmp_path / "frozen" / "config.json").read_text())
    assert meta["train"]["freeze"] is True and set(meta["init_from"]["tensors"]) == set(copies)
    tr.train(name, small, "brown", tmp_path / "free", dataclasses.replace(tc, freeze=False), init=str(small_lstm))
    free = load_file(str(tmp_path / "free" / "model.safetensors"))
    assert not torch.equal(free["embed.weight"], lstm["embed.weight"])
    assert not torch.equal(free["decoder.weight"], lstm["decoder.weight"])


def test_freeze_needs_init_from(tmp_path, capsys):
    out = tmp_path / "x"
    assert cli.main(["train", "--model", "amsrn", "--freeze", "--dry-run", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == ("vizlm train: error: --freeze needs --init-from: it keeps the tensors copied from that checkpoint "
                   "fixed\n")
    assert not out.exists()


def test_freeze_survives_a_resume_and_refuses_an_unfrozen_run(small_lstm, tmp_path):
    """Resuming a frozen run keeps the copied tensors fixed; resuming a run trained without --freeze
    with it is refused (its copied tensors have moved), not silently frozen."""
    from safetensors.torch import load_file

    from vizlm.modeling.config import TrainConfig
    from vizlm.modeling.train import train

    small = {"emb_dim": 8, "hidden_dim": 8}
    one = TrainConfig(epochs=1, max_batches=2, eval_batches=1, lr=0.01, freeze=True)
    train("amsrn", small, "brown", tmp_path / "frozen", one, init=str(small_lstm))
    train("amsrn", small, "brown", tmp_path / "frozen", dataclasses.replace(one, epochs=2), init=str(small_lstm),
          resume=True)
    after = load_file(str(tmp_path / "frozen" / "model.safetensors"))
    lstm = load_file(str(small_lstm / "model.safetensors"))
    assert json.loads((tmp_path / "frozen" / "resume" / "state.json").read_text())["epoch"] == 2
    assert all(torch.equal(after[k], lstm[k]) for k in lstm)
    train("amsrn", small, "brown", tmp_path / "free", dataclasses.replace(one, freeze=False), init=str(small_lstm))
    with pytest.raises(ValueError, match="trained without --freeze"):
        train("amsrn", small, "brown", tmp_path / "free", dataclasses.replace(one, epochs=2), init=str(small_lstm),
              resume=True)


def test_no_start_slot_through_the_cli(tmp_path, capsys):
    out = tmp_path / "amsrn"
    assert cli.main(["train", "--model", "amsrn", "--no-start-slot", "--context", "document", "--memory", "9",
                     "--bptt", "7", "--streams", "8", "--emb-dim", "8", "--hidden-dim", "8", "--dry-run",
                     "--out", str(out)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert math.isfinite(result["valid_perplexity"]) and math.isfinite(result["test_perplexity"])
    assert json.loads((out / "config.json").read_text())["config"]["start_slot"] is False
    assert cli.main(["train", "--model", "lstm", "--no-start-slot", "--dry-run", "--out", str(tmp_path / "x")]) == 2
    assert "no option" in capsys.readouterr().err


@pytest.mark.parametrize("plateau", [0.9, None])
def test_no_lr_decay_and_no_patience_spent_on_the_initial_plateau(plateau, tmp_path, monkeypatch):
    """The same schedule rule for every family: while the best valid perplexity is no better than
    `plateau` x the unigram model's, a non-improving epoch keeps the lr and spends no patience."""
    from types import SimpleNamespace

    from vizlm.modeling import train as trainmod

    script = iter([420.0, 425.0, 415.0, 430.0, 300.0, 310.0, 320.0])  # unigram 400: the plateau is >= 360
    real = trainmod.score_split
    monkeypatch.setattr(trainmod, "unigram_perplexity", lambda *a: 400.0)
    monkeypatch.setattr(trainmod, "score_split", lambda *a, **k: (
        SimpleNamespace(nll=math.log(v), tokens=1) if (v := next(script, None)) is not None else real(*a, **k)))
    tc = trainmod.TrainConfig(epochs=10, max_batches=1, eval_batches=1, save_every=None, plateau=plateau)
    trainmod.train("lstm", {"emb_dim": 4, "hidden_dim": 4}, "brown", tmp_path / "run", tc)
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in log]  # the lr an epoch trained with
    if plateau:
        assert [r.get("plateau", False) for r in log] == [False, True, False, True, False, False, False]
        assert lrs == [1e-3] * 6 + [5e-4]  # halved after epoch 6 (310, off the plateau), stopped after 7
        config = json.loads((tmp_path / "run" / "config.json").read_text())["train"]
        assert config["plateau_perplexity"] == 360.0 and config["unigram_valid_perplexity"] == 400.0
    else:  # every non-improving epoch halves the lr
        assert not any("plateau" in r for r in log)
        assert lrs == [1e-3, 1e-3, 5e-4, 5e-4, 2.5e-4, 2.5e-4, 1.25e-4]


def test_the_train_options_are_the_train_config_s_fields():
    """`vizlm train`'s training options come from TrainConfig (one place for a default, its help and its check):
    no option given is TrainConfig(); each field with a help is an option; 0 means a field's None where it says so;
    --dry-run is TrainConfig.dry_run (as `reproduce`'s)."""
    import dataclasses

    from vizlm.modeling.config import TrainConfig, options

    parser = cli.build_parser()

    def config(*flags: str) -> TrainConfig:
        return dataclasses.replace(cli.train_config(parser.parse_args(["train", "--model", "lstm", *flags])), extra={})

    assert config() == TrainConfig()
    assert {f.name for f in options()} == {f.name for f in dataclasses.fields(TrainConfig)} - {"extra"}
    assert config("--plateau", "0").plateau is None and config("--save-every", "0").save_every is None
    assert config("--epochs", "7", "--lr", "0.01", "--freeze", "--warmup-steps", "0") == TrainConfig(
        epochs=7, lr=0.01, freeze=True, warmup_steps=0)
    assert config("--dry-run") == TrainConfig().dry_run() == TrainConfig(epochs=1, max_batches=3, eval_batches=1)
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--model", "lstm", "--epochs", "0"])  # each option keeps its check


def test_unigram_perplexity_is_the_add_one_unigram_model():
    from vizlm.modeling.evaluate import unigram_perplexity
    from vizlm.data.tokens import TokenSplit

    train, valid = TokenSplit.from_sequences([[4, 4, 5]]), TokenSplit.from_sequences([[4, 6]])
    counts = [1, 1, 2, 1, 3, 2, 1]  # ids 0-6, each plus one: 4 twice, 5 once, </s> (id 2) once
    p = [c / sum(counts) for c in counts]
    want = math.exp(-(math.log(p[4]) + math.log(p[6]) + math.log(p[2])) / 3)
    assert math.isclose(unigram_perplexity(train, valid, 7), want, rel_tol=1e-12)


def test_a_dry_run_without_out_leaves_nothing_behind(tmp_path, monkeypatch, capsys):
    """`vizlm train --dry-run` without --out trains in a temporary folder and removes it (it left megabytes)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    assert cli.main(["train", "--model", "lstm", "--hidden-dim", "8", "--emb-dim", "8", "--dry-run"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["checkpoint"] is None and math.isfinite(result["valid_perplexity"])
    assert not list(tmp_path.iterdir())


BLOCK_APP_IMPORTS = """
import runpy, sys
BLOCKED = ("streamlit", "altair", "captum", "platformdirs")

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed on the GPU machine")

sys.meta_path.insert(0, Block())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
def test_gpu_speed_benchmark_runs_end_to_end_on_the_cpu(tmp_path):
    """benchmarks/gpu_train_speed.py, tiny and on the CPU, through the same code as on a GPU: the anchor
    and every family train 2 layers deep through vizlm.modeling.train, and the ratio table is written. It runs
    where streamlit, altair, captum and platformdirs cannot be imported (a GPU machine may lack them)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "gpu.json"
    run = subprocess.run([sys.executable, "-c", BLOCK_APP_IMPORTS, str(root / "benchmarks" / "gpu_train_speed.py"),
                          "--device", "cpu", "--tiny", "--shapes", "8x2", "--out", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=root, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    (row,) = result["shapes"]
    assert (row["units"], row["layers"]) == (8, 2) and row["anchor_tokens_per_s"] > 0
    assert set(row["families"]) == {name for name in REGISTRY} and not result["failures"]
    assert all(r["tokens_per_s"] > 0 and r["ratio"] > 0 for r in row["families"].values())
    assert "| 8 x 2 |" in result["markdown"] and "| 8 x 2 |" in run.stdout
