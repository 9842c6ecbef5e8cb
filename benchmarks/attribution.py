"""Attribution benchmark: one run, medians and p95, wall and CPU time of this thread.

    python benchmarks/attribution.py [--json] [--threads 2] [--runs 20] [--checkpoint DIR ...]
                                     [--corpus-limit N] [--skip-corpus]

(a) all targets of a 40-token Brown test sentence, one model, ``integrated-gradients`` with 32 steps
    (fixed: ``tolerance=None``), and with the library's default (32 steps, the targets whose convergence
    delta is above 1% again with 64, ...): target p95 < 500 ms on 2 cores;
(b) the same sentence, ``gradient-x-input``: target p95 < 50 ms;
(c) ``corpus_agreement`` of one attention model on Brown test with the default method (gradient x input,
    10 permutations), no cache: target < 5 min (``--corpus-limit``: its first N sentences, the time
    scaled to the whole split and said so).

The runs of (a) and (b) are interleaved (A B C A B C ...), so a machine busy with other work slows
them alike; the reading (the analysis) is part of every call, as a front end makes it. It also
prints IG's convergence deltas at the default steps over the sentence's targets.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vizlm.inspect import attribution as at  # noqa: E402
from vizlm.inspect import attribution_corpus
from vizlm.modeling.checkpoint import load_checkpoint  # noqa: E402
from vizlm.data.registry import load_corpus  # noqa: E402

TARGETS_MS = {"integrated-gradients (32 steps)": 500.0, "gradient-x-input": 50.0}
CORPUS_TARGET_S = 300.0


def p95(xs: list[float]) -> float:
    return float(np.quantile(xs, 0.95))


def timed(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.thread_time()
    fn()
    return (time.perf_counter() - w) * 1000, (time.thread_time() - c) * 1000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", nargs="+", default=["checkpoints/lstm", "checkpoints/amsrn",
                                                        "checkpoints/kvp-doc"], help="checkpoint folders")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the targets are for 2 cores)")
    ap.add_argument("--runs", type=int, default=20, help="timed runs of each case (after one warm-up)")
    ap.add_argument("--corpus-limit", type=int, default=None, help="(c) on the first N sentences of Brown test")
    ap.add_argument("--corpus-model", default="checkpoints/amsrn", help="(c)'s checkpoint")
    ap.add_argument("--skip-corpus", action="store_true", help="leave out (c)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    sentence = next(s for s in load_corpus("brown", "test").sentences if len(s) == 40)
    results: dict = {"threads": args.threads, "runs": args.runs, "sentence_tokens": len(sentence), "cases": {}}
    for path in args.checkpoint:
        ckpt = load_checkpoint(ROOT / path)
        cases = {
            "integrated-gradients (32 steps)": lambda: at.attribute(ckpt, sentence, "integrated-gradients", n_steps=32,
                                                                   tolerance=None),
            "integrated-gradients (default)": lambda: at.attribute(ckpt, sentence, "integrated-gradients"),
            "gradient-x-input": lambda: at.attribute(ckpt, sentence, "gradient-x-input"),
        }
        for fn in cases.values():  # warm-up
            fn()
        wall: dict[str, list[float]] = {k: [] for k in cases}
        cpu: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.runs):  # interleaved: A B C A B C ...
            for name, fn in cases.items():
                w, c = timed(fn)
                wall[name].append(w)
                cpu[name].append(c)
        res = at.attribute(ckpt, sentence, "integrated-gradients")
        rel = res.relative_delta
        fixed = at.attribute(ckpt, sentence, "integrated-gradients", n_steps=32, tolerance=None).relative_delta
        results["cases"][ckpt.label] = {
            name: {"median_ms": statistics.median(wall[name]), "p95_ms": p95(wall[name]),
                   "cpu_median_ms": statistics.median(cpu[name]), "cpu_p95_ms": p95(cpu[name]),
                   "target_p95_ms": TARGETS_MS.get(name)}
            for name in cases
        }
        results["cases"][ckpt.label]["convergence"] = {
            "fixed_32_max_relative_delta": float(fixed.max()), "fixed_32_share_over_1pct": float((fixed > 0.01).mean()),
            "default_max_relative_delta": float(rel.max()), "default_steps_max": int(res.steps.max()),
            "targets": len(rel)}
    if not args.skip_corpus:
        ckpt = load_checkpoint(ROOT / args.corpus_model)
        n = len(load_corpus("brown", "test").sentences)
        w = time.perf_counter()
        stats = attribution_corpus.corpus_agreement(ckpt, "brown", "test", limit=args.corpus_limit, use_cache=False)
        seconds = time.perf_counter() - w
        done = args.corpus_limit or n
        results["corpus"] = {"model": ckpt.label, "sentences": done, "seconds": seconds,
                             "seconds_whole_split": seconds * n / done, "target_s": CORPUS_TARGET_S,
                             "agreement": stats.get("agreement"), "permutation": stats.get("permutation")}
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(f"threads {args.threads}, {args.runs} interleaved runs, a {len(sentence)}-token Brown test sentence")
    for label, cases in results["cases"].items():
        for name, r in cases.items():
            if name == "convergence":
                print(f"  {label:14s} IG convergence: fixed 32 steps max |delta|/gap {r['fixed_32_max_relative_delta']:.2e} "
                      f"({r['fixed_32_share_over_1pct']:.1%} of {r['targets']} targets over 1%); default: max "
                      f"{r['default_max_relative_delta']:.2e}, at most {r['default_steps_max']} steps")
                continue
            target = f" (target p95 < {r['target_p95_ms']:.0f} ms)" if r["target_p95_ms"] else ""
            print(f"  {label:14s} {name:32s} median {r['median_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms  "
                  f"cpu median {r['cpu_median_ms']:7.1f} ms{target}")
    if "corpus" in results:
        c = results["corpus"]
        print(f"corpus agreement, {c['model']}, {c['sentences']} sentences: {c['seconds']:.1f} s "
              f"(whole Brown test: {c['seconds_whole_split']:.0f} s; target < {CORPUS_TARGET_S:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
