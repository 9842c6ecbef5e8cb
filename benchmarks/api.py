"""API benchmark: the front door against the paths beneath it, interleaved A B A B, one run.

    python benchmarks/api.py [--json] [--threads N] [--runs 40] [--checkpoint amsrn]

(a) ``vizlm.load`` of a bundled model, warm (the library imported and the files read once, as in a
    notebook's second cell): median seconds. Target: at most 0.2 s.
(b) ``lm.analyze(text)`` of a 40-token sentence (A) against what the CLI's ``analyze`` computed
    before it went through the API (B: :func:`vizlm.inspect.analysis.analyze` with the same bound on slot
    effects, the checkpoint from :func:`vizlm.modeling.checkpoint.load_checkpoint`): the median of the
    per-pair ratios A / B, runs interleaved so that a busy machine slows both alike.
    Target: at most 1.1.
(c) the same with the JSON document each makes (``Analysis.to_dict`` against the one serialiser
    called directly), for the record.

Both wall time and the CPU time of this thread are reported: on a machine busy with other work the
wall time measures the others too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import vizlm  # noqa: E402
from vizlm.inspect.analysis import analyze  # noqa: E402
from vizlm.api import EFFECT_PAIRS  # noqa: E402
from vizlm.modeling.checkpoint import load_checkpoint  # noqa: E402
from vizlm.present.serialize import analysis_dict  # noqa: E402
from vizlm.data.text import tokenize  # noqa: E402

LOAD_TARGET_S = 0.2
ANALYZE_TARGET_RATIO = 1.1
SENTENCE = ("The committee said on Monday that the new school in the northern part of the city would open in "
            "September , although the board had not yet agreed on how many teachers it could afford to hire more staff .")


def timed(fn) -> tuple[float, float]:
    t, c = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - t, time.thread_time() - c


def interleaved(a, b, runs: int) -> dict:
    """Median times of ``a`` and ``b`` and the median of the per-pair ratios, run A B A B ..."""
    wall_a, wall_b, cpu_a, cpu_b = [], [], [], []
    for _ in range(runs):
        for fn, wall, cpu in ((a, wall_a, cpu_a), (b, wall_b, cpu_b)):
            w, c = timed(fn)
            wall.append(w)
            cpu.append(c)
    return {
        "a_ms": statistics.median(wall_a) * 1e3, "b_ms": statistics.median(wall_b) * 1e3,
        "ratio": statistics.median(x / y for x, y in zip(wall_a, wall_b)),
        "a_cpu_ms": statistics.median(cpu_a) * 1e3, "b_cpu_ms": statistics.median(cpu_b) * 1e3,
        "cpu_ratio": statistics.median(x / y for x, y in zip(cpu_a, cpu_b) if y > 0),
        "runs": runs,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--runs", type=int, default=40, help="interleaved pairs per comparison")
    p.add_argument("--checkpoint", default="amsrn", help="the bundled model (default amsrn)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    tokens = len(tokenize(SENTENCE))
    lm = vizlm.load(args.checkpoint)  # warm: imports done, files in the OS cache
    ckpt = load_checkpoint(args.checkpoint)
    lm.analyze(SENTENCE).to_dict()  # warm-up: the tagger, the collocation table
    loads = [timed(lambda: vizlm.load(args.checkpoint)) for _ in range(max(5, args.runs // 4))]
    out: dict = {
        "threads": torch.get_num_threads(), "model": lm.name, "tokens": tokens,
        "load": {"median_s": statistics.median(w for w, _ in loads), "cpu_median_s": statistics.median(c for _, c in loads),
                 "runs": len(loads)},
        "analyze": interleaved(lambda: lm.analyze(SENTENCE),
                               lambda: analyze(ckpt, SENTENCE, max_effect_pairs=EFFECT_PAIRS), args.runs),
        "analyze_json": interleaved(lambda: lm.analyze(SENTENCE).to_dict(),
                                    lambda: analysis_dict(analyze(ckpt, SENTENCE, max_effect_pairs=EFFECT_PAIRS)),
                                    args.runs),
    }
    out["pass"] = {"load": out["load"]["median_s"] <= LOAD_TARGET_S,
                   "analyze": out["analyze"]["ratio"] <= ANALYZE_TARGET_RATIO}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0 if all(out["pass"].values()) else 1
    print(f"threads: {out['threads']} · model: {out['model']} · sentence: {tokens} tokens")
    r = out["load"]
    print(f"vizlm.load (warm)        median {r['median_s'] * 1e3:7.1f} ms (CPU {r['cpu_median_s'] * 1e3:.1f} ms), "
          f"{r['runs']} runs · target <= {LOAD_TARGET_S * 1e3:.0f} ms: {'PASS' if out['pass']['load'] else 'FAIL'}")
    for key, what in (("analyze", "lm.analyze vs CLI path"), ("analyze_json", "  ... with the JSON")):
        r = out[key]
        print(f"{what:24s} median {r['a_ms']:7.1f} ms vs {r['b_ms']:7.1f} ms, ratio {r['ratio']:.3f} "
              f"(CPU {r['a_cpu_ms']:.1f} vs {r['b_cpu_ms']:.1f} ms, ratio {r['cpu_ratio']:.3f}), {r['runs']} pairs")
    print(f"lm.analyze within {ANALYZE_TARGET_RATIO}x the CLI path: {'PASS' if out['pass']['analyze'] else 'FAIL'}")
    return 0 if all(out["pass"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
