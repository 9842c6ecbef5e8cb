"""Training speed of every model family against the anchor, in one run.

    python benchmarks/train_speed.py [--batches 60] [--threads 1] [--rounds 3] [--json]

The anchor is pytorch/examples' word_language_model (``../shared/anchors``, BSD licence), the
plain PyTorch LSTM language model most users would start from. It is run from where it lives
(never copied) on Brown train with out-of-vocabulary words mapped to ``<unk>``, 50 units, batch
64, BPTT 35, and its ``ms/batch`` is read from its log. Then vizlm's own training loop
(:func:`vizlm.modeling.train.train`: Adam, clipping, the loss) runs the same shapes, running text with 64
streams and BPTT 35, for every family, and the training tokens per second of each are printed
as a ratio to the anchor. The goal is >= 0.9x for every family (docs/SCALING.md).

The runs are interleaved, anchor, family, anchor, family, ..., anchor, for ``--rounds`` rounds:
a family's ratio in a round is its tokens/s over the mean of the two anchor runs beside it, and
the table gives the median ratio over the rounds, so a load that drifts during the run moves
both sides alike. The same threads for all.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ANCHOR = ROOT.parent / "shared" / "anchors" / "word_language_model"
FAMILIES = {"lstm": {}, "amsrn": {"selection": "shared"}, "attention": {"window": 5}, "kv": {"window": 5},
            "kvp": {"window": 5}, "ngram": {"n": 4}, "salton": {"score": "single"},
            "rm": {"window": 15},  # the manifest's rm-doc
            "transformer": {"heads": 2},  # against the anchor's LSTM of the same units, as every family
            # sentence context (batches of 64 sentences) for comparison: document mode must be no slower per token
            "lstm-sentence": {"context": "sentence"}}
BATCH, BPTT, UNITS = 64, 35, 50
GOAL = 0.9
CPU_GOAL = 1.5  # the goal on the CPU: every family at least 1.5x the anchor (docs/SCALING.md)


def _anchor_data(folder: Path, batches: int) -> None:
    """Brown train (first ``batches`` x BATCH x BPTT tokens and a little more), valid, test, as the anchor reads them.

    The anchor builds its output layer from the words of these files; the first batches of
    train hold only ~7,500 of the 10,000, so valid ends with a line of every word of the
    vocabulary (but ``</s>``, for which the anchor has its own ``<eos>``): both output layers
    are 10,000 wide, as in a real run.
    """
    from vizlm.data.registry import load_corpus
    from vizlm.data.vocab import Vocab

    vocab = Vocab.for_corpus("brown")
    for split in ("train", "valid", "test"):
        lines, n = [], 0
        limit = (batches + 2) * BATCH * BPTT if split == "train" else 4 * BATCH * BPTT
        for sent in load_corpus("brown", split).sentences:
            lines.append(" ".join(w if w in vocab else "<unk>" for w in sent))
            n += len(sent) + 1
            if n > limit:
                break
        if split == "valid":
            lines.append(" ".join(w for w in vocab.itos if w != vocab.itos[Vocab.eos_id]))
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def anchor_tokens_per_s(batches: int, threads: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        _anchor_data(Path(tmp), batches)
        interval = max(5, batches // 4)
        cmd = [sys.executable, "main.py", "--data", tmp, "--emsize", str(UNITS), "--nhid", str(UNITS), "--nlayers", "1",
               "--dropout", "0", "--batch_size", str(BATCH), "--bptt", str(BPTT), "--epochs", "1",
               "--log-interval", str(interval), "--save", str(Path(tmp) / "model.pt")]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        out = subprocess.run(cmd, cwd=ANCHOR, env=env, capture_output=True, text=True, timeout=1800, check=True).stdout
    ms = [float(m) for m in re.findall(r"ms/batch\s+([\d.]+)", out)]
    if not ms:
        raise RuntimeError(f"no ms/batch in the anchor's output:\n{out[-2000:]}")
    ms = ms[1:] or ms  # the first interval includes warm-up
    return BATCH * BPTT / (sum(ms) / len(ms) / 1000)


def vizlm_tokens_per_s(family: str, batches: int) -> float:
    from vizlm.modeling.config import TrainConfig
    from vizlm.modeling.train import train

    with tempfile.TemporaryDirectory() as tmp:
        tc = TrainConfig(epochs=1, bptt=BPTT, streams=BATCH, max_batches=batches, eval_batches=1)
        train(family.removesuffix("-sentence"), {"emb_dim": UNITS, "hidden_dim": UNITS, "context": "document",
                                                **FAMILIES[family]}, "brown", Path(tmp) / family, tc)
        log = [json.loads(line) for line in (Path(tmp) / family / "train_log.jsonl").read_text().splitlines()]
    return float(log[-1]["tokens_per_s"])


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=60, help="training batches timed per model")
    p.add_argument("--threads", type=int, default=1, help="CPU threads for the anchor and vizlm")
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds (anchor, family, anchor, ...); medians")
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES), help="vizlm families to time")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if not (ANCHOR / "main.py").is_file():
        print(f"the anchor is not at {ANCHOR}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(args.threads)
    anchors: list[float] = []
    ratios: dict[str, list[float]] = {f: [] for f in args.families}
    speeds: dict[str, list[float]] = {f: [] for f in args.families}
    for _ in range(args.rounds):
        before = anchor_tokens_per_s(args.batches, args.threads)
        anchors.append(before)
        for family in args.families:
            tps = vizlm_tokens_per_s(family, args.batches)
            after = anchor_tokens_per_s(args.batches, args.threads)
            anchors.append(after)
            speeds[family].append(tps)
            ratios[family].append(tps / ((before + after) / 2))
            before = after
    result = {"anchor_tokens_per_s": round(_median(anchors)), "rounds": args.rounds, "batches": args.batches,
              "threads": args.threads, "anchor_runs": [round(a) for a in anchors]}
    for family in args.families:
        result[family] = {"tokens_per_s": round(_median(speeds[family])), "ratio": round(_median(ratios[family]), 3),
                          "ratios": [round(r, 3) for r in ratios[family]]}
    result["goal"] = GOAL
    result["below_goal"] = [f for f in args.families if result[f]["ratio"] < GOAL]
    result["cpu_goal"] = CPU_GOAL
    result["below_cpu_goal"] = [f for f in args.families if result[f]["ratio"] < CPU_GOAL]
    if args.json:
        print(json.dumps(result))
    else:
        print(f"anchor (pytorch/examples LSTM): median {result['anchor_tokens_per_s']:,} tokens/s over {len(anchors)} runs")
        for family in args.families:
            r = result[family]
            print(f"{family:>13}: {r['tokens_per_s']:>7,} tokens/s  median {r['ratio']:.2f}x  "
                  f"({', '.join(f'{x:.2f}' for x in r['ratios'])})" + ("" if r["ratio"] >= CPU_GOAL else "  (below 1.5x)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
