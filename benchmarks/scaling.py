"""Scaling benchmark: training tokens/s of one process against torchrun's data-parallel
processes at the same global batch, and peak memory against corpus size.

    python benchmarks/scaling.py [--steps 150] [--dim 50] [--context sentence] [--processes 2]
                                 [--device cpu] [--sizes 1 2 4] [--skip-memory] [--skip-speed] [--json]

(a) Speed: ``vizlm train`` on Brown for ``--steps`` global steps (64 sentences, or 64 streams x
    20 tokens in document context), LSTM with ``--dim`` units, validation cut to one batch. The
    figure is ``tokens_per_s`` of train_log.jsonl: the training loop only, all processes'
    tokens. Runs: 1 process x 1 thread, 1 process x N threads, torchrun N processes x 1 thread
    (gloo on the CPU, NCCL with ``--device cuda``). On a machine where other work runs, the
    figures move with it: run twice.
(b) Memory: generated corpora of ``--sizes`` million tokens (tests/corpora.py), token-id files
    written; peak resident memory (VmHWM) of ``vizlm eval`` over the training split and of one
    training epoch, from the token-id files and, for contrast, from the text.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout's vizlm, and the corpus generator

from corpora import make_corpus  # noqa: E402

from vizlm.data.prepare import prepare_token_ids  # noqa: E402

PEAK = """
import sys
from vizlm import cli
code = cli.main(sys.argv[1:])
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
print("PEAK_KB", hwm.split()[1], file=sys.stderr)
sys.exit(code)
"""


def _env(threads: int) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads), "GLOO_SOCKET_IFNAME": "lo"}


def _run(cmd: list[str], env: dict) -> subprocess.CompletedProcess:
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{run.stderr[-3000:]}")
    return run


def speed(steps: int, dim: int, context: str, processes: int, device: str, work: Path) -> list[dict]:
    train = ["train", "--model", "lstm", "--emb-dim", str(dim), "--hidden-dim", str(dim), "--context", context,
             "--epochs", "1", "--max-batches", str(steps), "--eval-batches", "1", "--save-every", "0",
             "--device", device]
    rows = []
    for procs, threads in ((1, 1), (1, processes), (processes, 1)):
        out = work / f"speed-{procs}x{threads}"
        args = [*train, "--threads", str(threads), "--out", str(out)]
        if procs == 1:
            cmd = [sys.executable, "-m", "vizlm.cli", *args]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}",
                   "-m", "vizlm.cli", *args]
        _run(cmd, _env(threads))
        record = json.loads((out / "train_log.jsonl").read_text().splitlines()[-1])
        rows.append({"processes": procs, "threads": threads, "tokens_per_s": record["tokens_per_s"],
                     "seconds": record["seconds"], "steps": steps, "dim": dim, "context": context, "device": device})
        print(f"speed: {procs} process(es) x {threads} thread(s), d={dim}, {context}: "
              f"{record['tokens_per_s']:,} tokens/s ({steps} steps in {record['seconds']} s)", flush=True)
    return rows


def _peak_mb(args: list[str], env: dict) -> float:
    run = _run([sys.executable, "-c", PEAK, *args], env)
    return int(run.stderr.rsplit("PEAK_KB", 1)[1].split()[0]) / 1024


def memory(sizes: list[float], work: Path) -> list[dict]:
    env = _env(1)
    rows = []
    ckpt = None
    for size in sizes:
        root = make_corpus(work / f"corpus-{size}", train=int(size * 1e6 / 11), valid=2000, test=500, doc_sentences=200)
        tokens = prepare_token_ids(root)["brown/train"]
        if ckpt is None:
            ckpt = work / "ckpt"
            _run([sys.executable, "-m", "vizlm.cli", "--data", str(root), "train", "--model", "lstm", "--emb-dim", "8",
                  "--hidden-dim", "8", "--dry-run", "--out", str(ckpt)], env)
        evaluate = ["--data", str(root), "eval", "--checkpoint", str(ckpt), "--corpus", "brown", "--split", "train", "--json"]
        train = ["--data", str(root), "train", "--model", "lstm", "--emb-dim", "8", "--hidden-dim", "8", "--epochs", "1",
                 "--batch-size", "256", "--save-every", "0", "--threads", "1", "--out", str(work / f"train-{size}")]
        row = {"tokens": tokens, "eval_files_mb": _peak_mb(evaluate, env), "train_files_mb": _peak_mb(train, env)}
        for f in root.rglob("*.tokens.json"):  # the same corpus read from its text
            f.unlink()
        row["eval_text_mb"] = _peak_mb(evaluate, env)
        rows.append(row)
        print(f"memory: {tokens:>11,} tokens  eval {row['eval_files_mb']:6.0f} MB (text: {row['eval_text_mb']:6.0f} MB)"
              f"  train epoch {row['train_files_mb']:6.0f} MB", flush=True)
        shutil.rmtree(root)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=150, help="global training steps per speed run")
    p.add_argument("--dim", type=int, default=50, help="LSTM units (and embedding size)")
    p.add_argument("--context", choices=["sentence", "document"], default="sentence", help="training context")
    p.add_argument("--processes", type=int, default=2, help="torchrun processes (and threads of the 1-process run)")
    p.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu", help="training device")
    p.add_argument("--sizes", type=float, nargs="+", default=[1, 2, 4], help="generated corpus sizes, million tokens")
    p.add_argument("--skip-speed", action="store_true", help="only the memory part")
    p.add_argument("--skip-memory", action="store_true", help="only the speed part")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vizlm-scaling-") as tmp:
        work = Path(tmp)
        result = {}
        if not args.skip_speed:
            result["speed"] = speed(args.steps, args.dim, args.context, args.processes, args.device, work)
            base = result["speed"][0]["tokens_per_s"]
            for row in result["speed"][1:]:
                print(f"speed-up over 1 x 1: {row['processes']} x {row['threads']}: {row['tokens_per_s'] / base:.2f}")
        if not args.skip_memory:
            result["memory"] = memory(args.sizes, work)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
