"""Training speed of every model family against the anchor on a GPU, at four model sizes, in one run.

    python benchmarks/gpu_train_speed.py [--batches 50] [--warmup 10] [--out results.md]
    python benchmarks/gpu_train_speed.py --device cpu --tiny --out r.json   # the same path, small and quick

For each shape (units x layers: 50 x 1, 256 x 1, 650 x 1, 650 x 2; ``--tiny``: 8 x 1, 8 x 2)
the anchor, pytorch/examples' word_language_model (``../shared/anchors``, run from where it lives,
never copied), trains ``main.py --accel`` on Brown train (out-of-vocabulary words as ``<unk>``),
batch 64, BPTT 35, no dropout; then every vizlm family trains through :func:`vizlm.modeling.train.train`
with the same sizes on running text, 64 streams, BPTT 35. Both sides are timed the same way:
tokens per second over ``--batches`` batches after ``--warmup`` batches, the device synchronised
at both ends of the timed region (the anchor reads its loss every batch, which waits for the
device; vizlm's ``steady_tokens_per_s`` synchronises where it starts and stops timing). The
table gives each family's ratio to the anchor; the goal is >= 0.9x (docs/SCALING.md).

The vizlm side runs in this process, every family and shape after the other; the anchor in a
subprocess per shape. Nothing here imports the app (streamlit, altair) or the attribution
methods (captum): a GPU machine with PyTorch and vizlm's training dependencies runs it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_speed import ANCHOR, BATCH, BPTT, FAMILIES, _anchor_data  # the anchor's data, in one place

SHAPES = ((50, 1), (256, 1), (650, 1), (650, 2))  # units x layers
TINY_SHAPES = ((8, 1), (8, 2))
GOAL = 0.9


def anchor_tokens_per_s(units: int, layers: int, warmup: int, batches: int, device: str) -> float:
    """The anchor's tokens/s over the log intervals after the first (``warmup`` batches)."""
    with tempfile.TemporaryDirectory() as tmp:
        _anchor_data(Path(tmp), warmup + batches + 1)
        cmd = [sys.executable, "main.py", "--data", tmp, "--emsize", str(units), "--nhid", str(units),
               "--nlayers", str(layers), "--dropout", "0", "--batch_size", str(BATCH), "--bptt", str(BPTT),
               "--epochs", "1", "--log-interval", str(warmup), "--save", str(Path(tmp) / "model.pt")]
        if device == "cuda":
            cmd.append("--accel")
        env = dict(os.environ)
        if device == "cpu":  # one thread, as vizlm's side here; no GPU for the anchor's --accel to take
            env |= {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        run = subprocess.run(cmd, cwd=ANCHOR, env=env, capture_output=True, text=True, timeout=900, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"the anchor failed ({units} x {layers}):\n{run.stderr[-2000:]}")
    ms = [float(m) for m in re.findall(r"ms/batch\s+([\d.]+)", run.stdout)][1:]  # the first interval warms up
    if not ms:
        raise RuntimeError(f"too few batches for a timed interval in the anchor's output:\n{run.stdout[-2000:]}")
    return BATCH * BPTT / (sum(ms) / len(ms) / 1000)


def read_splits_once() -> None:
    """:func:`vizlm.modeling.train.train` opens the corpus's splits (text read and encoded) at every call; here
    they are opened once for all the runs. Nothing timed reads them: this only shortens the benchmark."""
    import vizlm.modeling.train
    from vizlm.data.tokens import vocab_digest

    opened: dict = {}
    original = vizlm.modeling.train.open_split

    def open_split(corpus, split, vocab, *args):
        key = (corpus, split, vocab_digest(vocab.itos), args)
        if key not in opened:
            opened[key] = original(corpus, split, vocab, *args)
        return opened[key]

    vizlm.modeling.train.open_split = open_split


def vizlm_tokens_per_s(family: str, units: int, layers: int, warmup: int, batches: int, ctx) -> float:
    """tokens/s of :func:`vizlm.modeling.train.train` after ``warmup`` steps (train_log's ``steady_tokens_per_s``)."""
    from vizlm.modeling.config import TrainConfig
    from vizlm.modeling.train import train

    with tempfile.TemporaryDirectory() as tmp:
        tc = TrainConfig(epochs=1, bptt=BPTT, streams=BATCH, max_batches=warmup + batches, eval_batches=1,
                         warmup_steps=warmup, plateau=None, save_every=None)
        kwargs = {"emb_dim": units, "hidden_dim": units, "layers": layers, "context": "document", **FAMILIES[family]}
        train(family, kwargs, "brown", Path(tmp) / family, tc, ctx=ctx)
        log = [json.loads(line) for line in (Path(tmp) / family / "train_log.jsonl").read_text().splitlines()]
    return float(log[-1]["steady_tokens_per_s"])


def markdown(result: dict) -> str:
    fams = result["families"]
    lines = [f"| units x layers | anchor tokens/s | {' | '.join(fams)} |", "|---|---:|" + "---:|" * len(fams)]
    for row in result["shapes"]:
        cells = []
        for f in fams:
            r = row["families"][f]
            cells.append(f"{r['ratio']:.2f}x" if "ratio" in r else "fails")
        lines.append(f"| {row['units']} x {row['layers']} | {row['anchor_tokens_per_s']:,} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="where both sides train (default cuda)")
    p.add_argument("--tiny", action="store_true", help="shapes 8 x 1 and 8 x 2, 2 + 2 batches: checks the path, times nothing useful")
    p.add_argument("--shapes", nargs="+", metavar="UNITSxLAYERS", help="only these shapes, e.g. 650x2")
    p.add_argument("--batches", type=int, help="timed batches per model after the warm-up (default 50; --tiny 2)")
    p.add_argument("--warmup", type=int, help="batches before timing starts (default 10; --tiny 2)")
    p.add_argument("--families", nargs="+", choices=[f for f in FAMILIES if "-" not in f],
                   default=[f for f in FAMILIES if "-" not in f], help="vizlm families to time")
    p.add_argument("--out", type=Path, help="write the table here: .md as markdown, anything else as JSON")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    args = p.parse_args(argv)
    shapes = TINY_SHAPES if args.tiny else SHAPES
    if args.shapes:
        try:
            shapes = tuple(tuple(int(v) for v in s.lower().split("x")) for s in args.shapes)
        except ValueError:
            p.error("--shapes: give UNITSxLAYERS, e.g. 650x2")
        if any(len(s) != 2 or min(s) < 1 for s in shapes):
            p.error("--shapes: give UNITSxLAYERS, e.g. 650x2")
    batches = args.batches or (2 if args.tiny else 50)
    warmup = args.warmup or (2 if args.tiny else 10)
    if batches < 1 or warmup < 1:
        p.error("--batches and --warmup must be >= 1")
    from vizlm.core import files

    if args.out:
        try:
            files.check_replace(args.out, force=args.force)
        except files.OverwriteError as e:
            print(e, file=sys.stderr)
            return 2
    if not (ANCHOR / "main.py").is_file():
        print(f"the anchor is not at {ANCHOR}", file=sys.stderr)
        return 2
    import torch

    from vizlm.core.distributed import Context, resolve_device

    try:
        device = resolve_device(args.device)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    ctx = Context(device=device)
    if device.type == "cpu":  # on a busy machine, threads of one small step wait for each other at every step
        torch.set_num_threads(1)
    read_splits_once()
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    result = {"device": card, "torch": torch.__version__, "date": datetime.date.today().isoformat(),
              "streams": BATCH, "bptt": BPTT, "warmup": warmup, "batches": batches, "goal": GOAL,
              "families": args.families, "shapes": []}
    for units, layers in shapes:
        anchor = anchor_tokens_per_s(units, layers, warmup, batches, device.type)
        row = {"units": units, "layers": layers, "anchor_tokens_per_s": round(anchor), "families": {}}
        print(f"{units} x {layers}: anchor {anchor:,.0f} tokens/s", file=sys.stderr)
        for family in args.families:
            try:
                tps = vizlm_tokens_per_s(family, units, layers, warmup, batches, ctx)
            except (RuntimeError, ValueError, MemoryError) as e:  # a shape that does not train: a row says so
                row["families"][family] = {"error": str(e).splitlines()[0][:300]}
                print(f"  {family}: fails: {row['families'][family]['error']}", file=sys.stderr)
                continue
            row["families"][family] = {"tokens_per_s": round(tps), "ratio": round(tps / anchor, 3)}
            print(f"  {family}: {tps:,.0f} tokens/s  {tps / anchor:.2f}x", file=sys.stderr)
        result["shapes"].append(row)
    ratios = [r["ratio"] for row in result["shapes"] for r in row["families"].values() if "ratio" in r]
    result["min_ratio"] = min(ratios) if ratios else math.nan
    result["failures"] = [f"{f} at {row['units']} x {row['layers']}" for row in result["shapes"]
                          for f, r in row["families"].items() if "error" in r]
    table = markdown(result)
    result["markdown"] = table
    print(f"{card}, torch {torch.__version__}, {result['date']}; tokens/s after {warmup} batches, over {batches}\n")
    print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        files.write_text(args.out, table if args.out.suffix == ".md" else json.dumps(result, indent=1) + "\n",
                         force=args.force)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
