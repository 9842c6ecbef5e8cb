"""vizlm performance benchmark: prints measured figures and pass/fail ratios from one run.

    python benchmarks/bench.py [--json] [--threads N]

(a) masked fast attention vs the step-by-step reference (tests/reference.py) at T = 50,
    B = 8: checked with a 16-word vocabulary, so that the output layer (identical work in
    both) does not hide the attention; also printed with the 10k-word output layer;
(b) interactive ``analyze`` of a 40-token sentence with lstm + amsrn + kvp (p50/p95,
    model loading excluded), without and with the attention effects (read effect of every
    word and the effect of every memory slot), and what the Explorer computes for a page
    view (read effects and the slot effects of the selected word; the whole matrix only when
    the heat map is coloured by effect); (c) per-sentence comparison of two models over
    the whole Brown test split; (d) attention by position for all attention models over Brown
    test (weights only); (e) the corpus effect statistics of one model (amsrn) over Brown
    test: mean slot effect by position and the share of words moved by > 1 bit; (f) peak
    memory. Caches are disabled so every figure is a real computation.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from reference import reference  # noqa: E402

from vizlm.inspect.analysis import analyze  # noqa: E402
from vizlm.inspect.effects import slot_effect_rows
from vizlm.modeling.checkpoint import bundled_checkpoints, load_checkpoint, meta_corpus  # noqa: E402
from vizlm.inspect.corpus_stats import compare_corpus, positions_corpus  # noqa: E402
from vizlm.models import build_model  # noqa: E402

SENTENCE = (
    "The jury said that the city , which had spent too much money on the new schools last year , "
    "would have to raise taxes because the state refused to pay for the roads and the bridges ."
)
ATTENTION_VOCAB = 16  # output layer negligible: the speed-up of the attention computation itself
TARGETS = {"speedup": 5.0, "analyze_p95_ms": 100.0, "analyze_effects_p95_ms": 50.0, "explorer_effects_p95_ms": 50.0,
           "compare_s": 30.0,
           "positions_s": 60.0, "effects_s": 60.0, "peak_mb": 2048.0}


def timeit(fn, repeat: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def bench_masked_vs_reference(T: int = 50, vocab: int = 10_000) -> dict:
    """Fast masked head vs the step-by-step reference for every attention model.

    Both start from the same LSTM outputs (the recurrence is shared, not what is compared).
    With ``vocab`` small the output layer (the same work per token in both) is negligible and
    the figure measures the attention itself; with 10k words it includes the output layer.
    """
    torch.manual_seed(0)
    x = torch.randint(4, vocab, (8, T))
    x[:, 0] = 1
    res = {}
    for name, kw in (("amsrn", {}), ("kvp", {"window": 5}), ("attention", {"window": 5}), ("salton", {})):
        model = build_model(name, vocab_size=vocab, **kw).eval()
        with torch.no_grad():
            h = model.encode(x)
            fast = statistics.median(timeit(lambda: model.head(h), 7))
            slow = statistics.median(timeit(lambda: reference(model, h=h), 5))
        res[name] = {"fast_ms": fast * 1e3, "reference_ms": slow * 1e3, "speedup": slow / fast}
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--runs", type=int, default=50, help="analyze() repetitions for the latency percentiles")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out: dict = {"threads": torch.get_num_threads(), "checkpoints": bundled_checkpoints()}
    out["masked_vs_reference_T50"] = bench_masked_vs_reference(vocab=ATTENTION_VOCAB)
    out["whole_model_vs_reference_T50"] = bench_masked_vs_reference(vocab=10_000)
    ckpts = {n: load_checkpoint(n) for n in ("lstm", "amsrn", "kvp")}
    ntok = len(analyze(ckpts["lstm"], SENTENCE).tokens)
    row = ntok - 1  # the Explorer's default word: the last before </s>, the row with the most slots

    def explorer_view(c):  # what a page view computes: read effects, and the slot effects of the selected word
        sa = analyze(c, SENTENCE, max_effect_pairs=0)
        return slot_effect_rows(c, sa, [row]) if c.has_attention else None

    runs = {
        "analyze_3_models": lambda: [analyze(c, SENTENCE, effects=False) for c in ckpts.values()],
        "analyze_3_models_effects": lambda: [analyze(c, SENTENCE) for c in ckpts.values()],
        "explorer_3_models_effects": lambda: [explorer_view(c) for c in ckpts.values()],
    }
    for key, run in runs.items():
        times = sorted(timeit(run, args.runs))
        out[key] = {"tokens": ntok, "p50_ms": times[len(times) // 2] * 1e3,
                    "p95_ms": times[int(0.95 * (len(times) - 1))] * 1e3}
    sa = analyze(ckpts["amsrn"], SENTENCE)
    out["analyze_3_models_effects"]["slot_effects_per_model"] = {
        n: int((analyze(c, SENTENCE).attention > 0).sum()) for n, c in ckpts.items() if c.has_attention}
    assert sa.slot_effects is not None, "a 40-token sentence gets every slot effect"
    t = time.perf_counter()
    cmp = compare_corpus(ckpts["lstm"], ckpts["amsrn"], "brown", "test", use_cache=False)
    out["compare_brown_test"] = {"seconds": time.perf_counter() - t, "sentences": cmp.summary["sentences"]}
    t = time.perf_counter()
    attn = [c for c in (load_checkpoint(n) for n in bundled_checkpoints())  # the Brown models (not Sinica's)
            if c.has_attention and meta_corpus(c.meta) == "brown"]
    positions_corpus(attn, "brown", "test", window=10, use_cache=False, effects=False)
    out["positions_brown_test"] = {"seconds": time.perf_counter() - t, "models": [c.label for c in attn]}
    t = time.perf_counter()
    stats = positions_corpus([ckpts["amsrn"]], "brown", "test", window=10, use_cache=False, effects=True)
    out["effects_brown_test"] = {"seconds": time.perf_counter() - t, "model": "amsrn", **stats.effects["amsrn"]}
    out["peak_memory_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    checks = {
        "speedup": min(v["speedup"] for v in out["masked_vs_reference_T50"].values()) / TARGETS["speedup"],
        "analyze_p95_ms": TARGETS["analyze_p95_ms"] / out["analyze_3_models"]["p95_ms"],
        "analyze_effects_p95_ms": TARGETS["analyze_effects_p95_ms"] / out["analyze_3_models_effects"]["p95_ms"],
        "explorer_effects_p95_ms": TARGETS["analyze_effects_p95_ms"] / out["explorer_3_models_effects"]["p95_ms"],
        "compare_s": TARGETS["compare_s"] / out["compare_brown_test"]["seconds"],
        "positions_s": TARGETS["positions_s"] / out["positions_brown_test"]["seconds"],
        "effects_s": TARGETS["effects_s"] / out["effects_brown_test"]["seconds"],
        "peak_mb": TARGETS["peak_mb"] / out["peak_memory_mb"],
    }
    out["margin_vs_target"] = checks  # > 1 means the target is met with that factor to spare
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"threads: {out['threads']}")
    for key, what in (("masked_vs_reference_T50", f"attention, vocab {ATTENTION_VOCAB}"),
                      ("whole_model_vs_reference_T50", "with output layer, 10k")):
        for name, v in out[key].items():
            print(f"masked vs reference, {what:22s} {name:9s} T=50 B=8: {v['fast_ms']:7.2f} ms vs "
                  f"{v['reference_ms']:8.2f} ms  -> {v['speedup']:.1f}x")
    a = out["analyze_3_models"]
    print(f"analyze, {a['tokens']} tokens, lstm+amsrn+kvp: p50 {a['p50_ms']:.1f} ms, p95 {a['p95_ms']:.1f} ms")
    a = out["analyze_3_models_effects"]
    pairs = ", ".join(f"{n} {k}" for n, k in a["slot_effects_per_model"].items())
    print(f"analyze with effects (read + every slot: {pairs}), same: p50 {a['p50_ms']:.1f} ms, p95 {a['p95_ms']:.1f} ms")
    a = out["explorer_3_models_effects"]
    print(f"the Explorer's view with effects (read + the selected word's slots), same: p50 {a['p50_ms']:.1f} ms, "
          f"p95 {a['p95_ms']:.1f} ms")
    print(f"compare lstm vs amsrn, Brown test ({cmp.summary['sentences']} sentences): "
          f"{out['compare_brown_test']['seconds']:.1f} s")
    print(f"positions {'+'.join(out['positions_brown_test']['models'])}, Brown test: "
          f"{out['positions_brown_test']['seconds']:.1f} s")
    e = out["effects_brown_test"]
    print(f"effects by position + read share, amsrn, Brown test ({e['tokens']:,} words): {e['seconds']:.1f} s "
          f"({e['share_over_1_bit']:.2%} of words moved by > 1 bit)")
    print(f"peak memory: {out['peak_memory_mb']:.0f} MB")
    for k, ratio in checks.items():
        print(f"{'PASS' if ratio >= 1 else 'FAIL'} {k}: {ratio:.2f}x the target ({TARGETS[k]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
