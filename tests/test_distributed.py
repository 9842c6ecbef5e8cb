"""Data-parallel training under torchrun (gloo on the CPU, loopback only): the same steps as one
process at the same global batch, and a run killed mid-epoch resumes without losing anything.

Dropout is 0 throughout: with dropout each rank draws its own masks, so a data-parallel run
equals one process in distribution only. AMSRN runs with an entropy weight, so that the
regulariser's normalisation is checked too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from corpora import make_corpus
from safetensors.torch import load_file

from vizlm import cli
from vizlm.core import paths

pytestmark = pytest.mark.slow

SENTENCE = ["--model", "amsrn", "--entropy-weight", "0.1", "--batch-size", "16"]
DOCUMENT = ["--model", "kvp", "--context", "document", "--bptt", "10", "--streams", "7"]
COMMON = ["--emb-dim", "8", "--hidden-dim", "8", "--threads", "1", "--device", "cpu", "--log-steps"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    # 601 sentences: the last batch of 16 holds 1 sentence, so rank 1 has none (an idle step);
    # 16 documents on 7 streams: the epoch's last steps have fewer streams than ranks, too
    return make_corpus(tmp_path_factory.mktemp("corpus") / "data", train=601)


@pytest.fixture(autouse=True)
def _in_process_runs_leave_no_trace():
    """``cli.main(["--data", ..., "--threads", "1"])`` in this process sets both for the session."""
    threads = torch.get_num_threads()
    yield
    paths.clear_overrides()
    torch.set_num_threads(threads)


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}


def _torchrun(n: int, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", "-m", "vizlm.cli", *args]


def _train(data: Path, out: Path, flags: list[str], processes: int = 1, extra: tuple = ()) -> dict:
    args = ["--data", str(data), "train", *flags, *COMMON, "--out", str(out), *extra]
    if processes == 1:
        assert cli.main(args) == 0
    else:
        run = subprocess.run(_torchrun(processes, args), env=_env(), capture_output=True, text=True, check=False, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stdout.count("{") == 1  # rank 0 alone prints the result
    return json.loads((out / "config.json").read_text())


def _steps(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]


def _same_curve(a: list[dict], b: list[dict], tol: float) -> bool:
    """The same steps (epoch, step, tokens) in the same order, NLLs within ``tol``."""
    keys = [(s["epoch"], s["step"], s["tokens"]) for s in a]
    return keys == [(s["epoch"], s["step"], s["tokens"]) for s in b] and all(
        abs(x["nll"] - y["nll"]) < tol for x, y in zip(a, b))


def _max_weight_difference(a: Path, b: Path) -> float:
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert wa.keys() == wb.keys()
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)


@pytest.mark.parametrize("flags", [SENTENCE, DOCUMENT], ids=["sentence", "document"])
def test_two_processes_equal_one_at_the_same_global_batch(data, tmp_path, flags):
    one = _train(data, tmp_path / "one", flags + ["--epochs", "2"])
    two = _train(data, tmp_path / "two", flags + ["--epochs", "2"], processes=2)
    assert len(_steps(tmp_path / "one")) > 60
    assert _same_curve(_steps(tmp_path / "one"), _steps(tmp_path / "two"), 1e-4)  # the loss curve
    assert _max_weight_difference(tmp_path / "one", tmp_path / "two") < 1e-4
    for key in ("valid_perplexity", "test_perplexity", "wsj_perplexity"):
        assert one["metrics"][key] == pytest.approx(two["metrics"][key], rel=1e-4)
    # the same checkpoint format, recording the world size
    assert one["train"].pop("world_size") == 1 and two["train"].pop("world_size") == 2
    for doc in (one, two):
        del doc["train"]["command"], doc["metrics"]["wall_time_s"]
    assert one.keys() == two.keys() and one["train"] == two["train"] and one["config"] == two["config"]
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == sorted(p.name for p in (tmp_path / "two").iterdir())


def _descendants(pid: int) -> list[int]:
    """Processes under ``pid`` (torchrun starts its workers in sessions of their own)."""
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def _kill_mid_epoch(data: Path, out: Path, flags: list[str], tries: int = 3) -> dict:
    """Start a two-process run and SIGKILL all its processes once it has saved a mid-epoch state
    and logged steps after it. On a loaded machine the kill can land just after a newer state was
    saved (no step after it): that run is discarded and another started, up to ``tries`` times."""
    for _ in range(tries - 1):
        shutil.rmtree(out, ignore_errors=True)
        state = _kill_once(data, out, flags)
        if len(_steps(out)) > state["step"]:
            return state
    shutil.rmtree(out, ignore_errors=True)
    state = _kill_once(data, out, flags)
    assert len(_steps(out)) > state["step"], f"no step logged after the saved state, {tries} times"
    return state


def _kill_once(data: Path, out: Path, flags: list[str]) -> dict:
    args = ["--data", str(data), "train", *flags, *COMMON, "--out", str(out), "--epochs", "2", "--save-every", "7"]
    proc = subprocess.Popen(_torchrun(2, args), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_path, steps_path = out / "resume" / "state.json", out / "steps.jsonl"
    deadline = time.time() + 120
    try:
        while time.time() < deadline and proc.poll() is None:
            # a saved mid-epoch state, and steps logged after it: the resume must drop those
            step = json.loads(state_path.read_text() or "{}").get("step", 0) if state_path.exists() else 0
            if step and steps_path.exists() and steps_path.read_text().count("\n") >= step + 2:
                break
            time.sleep(0.002)
        for pid in [*_descendants(proc.pid), proc.pid]:  # the workers first: a crash, not a shutdown
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    finally:
        proc.wait(timeout=30)
    state = json.loads(state_path.read_text())
    assert state["epoch"] == 0 and state["step"] > 0, f"not killed mid-epoch: {state}"
    return state


@pytest.mark.parametrize("flags", [SENTENCE + ["--batch-size", "4"], DOCUMENT], ids=["sentence", "document"])
def test_a_run_killed_mid_epoch_resumes_without_losing_anything(data, tmp_path, flags):
    """SIGKILL to every process of a two-process run once it has saved a state in its first
    epoch (every 7 steps) and logged steps beyond it; --resume then gives the steps and weights
    of an uninterrupted run, with two processes or with one."""
    whole = tmp_path / "whole"
    _train(data, whole, flags + ["--epochs", "2", "--save-every", "7"], processes=2)
    cut = tmp_path / "cut"
    state = _kill_mid_epoch(data, cut, flags)
    shutil.copytree(cut, tmp_path / "cut-one")
    _train(data, cut, flags + ["--epochs", "2", "--save-every", "7"], processes=2, extra=("--resume",))
    # the same steps, once each, and the same weights: nothing lost, nothing repeated
    assert _same_curve(_steps(cut), _steps(whole), 1e-6)
    assert _max_weight_difference(whole, cut) < 1e-6
    logs = [[json.loads(line) for line in (f / "train_log.jsonl").read_text().splitlines()] for f in (whole, cut)]
    assert [r["epoch"] for r in logs[0]] == [r["epoch"] for r in logs[1]] == [1, 2]
    for key in ("train_perplexity", "valid_perplexity"):
        assert [r[key] for r in logs[0]] == pytest.approx([r[key] for r in logs[1]], rel=1e-6)
    # the resume state holds every stream's carried state, so one process can resume it too
    resumed = _train(data, tmp_path / "cut-one", flags + ["--epochs", "2", "--save-every", "7"], extra=("--resume",))
    assert _max_weight_difference(whole, tmp_path / "cut-one") < 1e-4
    assert resumed["train"]["world_size"] == 1 and state["world_size"] == 2


def test_uneven_shards_scale_the_loss_to_the_whole_step():
    """Without torchrun: a rank's loss (its NLL / (global tokens / world)), averaged over the
    ranks, is one process's loss of the whole step, entropy term included."""
    from vizlm.data.batches import collate
    from vizlm.models import build_model
    from vizlm.modeling.train import output_loss

    torch.manual_seed(0)
    model = build_model("amsrn", vocab_size=30, emb_dim=5, hidden_dim=4, entropy_weight=0.3).double()
    seqs = [[5, 6, 7, 8, 9], [4], [10, 11], [12, 13, 14]]
    inputs, targets = collate(seqs)
    whole, _, n = output_loss(model, model(inputs), targets)
    parts = []
    for r in range(2):
        x, y = collate(seqs[r::2])
        parts.append(output_loss(model, model(x), y, denominator=n / 2)[0])
    assert torch.allclose(sum(parts) / 2, whole, atol=1e-12)


def test_corpus_statistics_under_torchrun_equal_one_process(data, tmp_path, capsys):
    """``vizlm positions`` and ``vizlm compare`` on a corpus split: two ranks score their shares."""
    from vizlm.modeling.checkpoint import save_checkpoint
    from vizlm.data.vocab import Vocab
    from vizlm.models import build_model

    vocab = Vocab.for_corpus("brown", data)
    folders = {}
    for seed, (name, kw) in enumerate([("lstm", {}), ("amsrn", {}), ("kvp", {"context": "document", "window": 3})]):
        torch.manual_seed(seed)
        model = build_model(name, vocab_size=len(vocab), emb_dim=6, hidden_dim=5, **kw)
        folders[name] = str(tmp_path / name)
        save_checkpoint(folders[name], model, name, vocab)
    commands = [
        ["positions", "--checkpoint", folders["amsrn"], folders["lstm"], "--corpus", "brown", "--split", "train",
         "--window", "4", "--json"],
        ["compare", "--a", folders["lstm"], "--b", folders["kvp"], "--corpus", "brown", "--split", "train", "--top", "5",
         "--min-length", "0", "--json"],
    ]
    for argv in commands:
        args = ["--data", str(data), "--cache", str(tmp_path / "cache"), *argv]
        capsys.readouterr()
        assert cli.main(args) == 0
        one = json.loads(capsys.readouterr().out)
        run = subprocess.run(_torchrun(2, args), env=_env(), capture_output=True, text=True, check=False, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        two = json.loads(run.stdout)
        if argv[0] == "positions":
            assert one["skipped"] == two["skipped"] == [Path(folders["lstm"]).name]
            assert [r["count"] for r in one["positions"]] == [r["count"] for r in two["positions"]]
            assert [r["mean"] for r in one["positions"]] == pytest.approx([r["mean"] for r in two["positions"]], rel=1e-6)
            assert one["entropy"] == pytest.approx(two["entropy"], rel=1e-6)
        else:
            assert one["summary"].pop("resampled") == two["summary"].pop("resampled")
            assert one["summary"] == pytest.approx(two["summary"], rel=1e-6)
            assert [r["sentence_id"] for r in one["most_improved"]] == [r["sentence_id"] for r in two["most_improved"]]


def test_two_nodes_by_rendezvous_equal_one_process(data, tmp_path):
    """docs/SCALING.md's several-nodes command, as two torchrun launchers ("nodes") on this
    machine meeting at a c10d rendezvous on loopback: the same loss curve as one process."""
    import socket

    flags = DOCUMENT + ["--epochs", "1"]
    _train(data, tmp_path / "one", flags)
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["--data", str(data), "train", *flags, *COMMON, "--out", str(tmp_path / "nodes")]
    launch = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
              "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "vizlm-test",
              "-m", "vizlm.cli", *args]
    nodes = [subprocess.Popen(launch, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [node.communicate(timeout=300) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], [err[-2000:] for _, err in outs]
    assert sum(out.count("{") for out, _ in outs) == 1  # one rank 0 over both nodes prints the result
    meta = json.loads((tmp_path / "nodes" / "config.json").read_text())
    assert meta["train"]["world_size"] == 2
    assert _same_curve(_steps(tmp_path / "one"), _steps(tmp_path / "nodes"), 1e-4)
