"""Preparing your corpus: speed and memory of ``vizlm prepare --corpus NAME --from FOLDER``.

    python benchmarks/prepare.py [--tokens 100_000_000] [--layout wikitext|paragraph|sentence] [--gzip]
                                 [--keep] [--json]

Builds a large input by repeating a small one (Brown's processed training sentences, laid out as
the chosen layout: WikiText articles with ``= Title =`` and ``= = Section = =`` lines, paragraphs of
five sentences with blank lines between documents, or a sentence a line) until train holds
``--tokens`` words (valid and test a 20th each), then prepares it in a child process with a
progress-free call of :func:`vizlm.data.ingest.prepare_corpus` and reports wall time, tokens per second
(words of all three splits over wall time) and the child's peak resident memory (``ru_maxrss``).

Targets: >= 1M tokens/s, < 2 GB peak RSS on a 100M-token corpus (the default). The input and the
prepared corpus go to a temporary folder (about 4 GB at 100M tokens), deleted at the end unless
``--keep``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_TOKENS_PER_S = 1_000_000
TARGET_RSS_GB = 2.0
PARAGRAPH = 5  # sentences per paragraph line
ARTICLE = 40  # paragraphs per WikiText article / document


def _sentences() -> list[str]:
    from vizlm.data.registry import load_corpus

    return [" ".join(s) for s in load_corpus("brown", "train").originals[:20_000]]


def build(folder: Path, tokens: int, layout: str, gz: bool) -> dict[str, int]:
    """Write train / valid / test of ``layout`` holding about ``tokens`` / 20 / 20 words."""
    sents = _sentences()
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for split, want in (("train", tokens), ("valid", tokens // 20), ("test", tokens // 20)):
        name = (f"wiki.{split}.tokens" if layout == "wikitext" else f"{split}.txt") + (".gz" if gz else "")
        opener = gzip.open if gz else open
        n = k = 0
        with opener(folder / name, "wt", encoding="utf-8") as fh:
            buf: list[str] = []
            while n < want:
                if layout == "wikitext" and k % (PARAGRAPH * ARTICLE) == 0:
                    buf.append(f" \n = Article {k} = \n \n")
                elif layout == "wikitext" and k % (PARAGRAPH * 10) == 0:
                    buf.append(" = = Section = = \n \n")
                if layout == "sentence":
                    s = sents[k % len(sents)]
                    buf.append(s + "\n")
                    k += 1
                    if k % 50 == 0:
                        buf.append("\n")
                else:
                    para = " ".join(sents[(k + i) % len(sents)] for i in range(PARAGRAPH))
                    buf.append(" " + para + " \n" + (" \n" if layout == "wikitext" else ""))
                    k += PARAGRAPH
                    if layout == "paragraph" and k % (PARAGRAPH * ARTICLE) == 0:
                        buf.append("\n")
                    s = para
                n += s.count(" ") + 1
                if len(buf) >= 10_000:
                    fh.write("".join(buf))
                    buf = []
            fh.write("".join(buf))
        written[split] = n
    return written


CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from vizlm.data.ingest import prepare_corpus
t = time.perf_counter()
card = prepare_corpus("bench", {source!r}, corpora_dir={out!r})
print(json.dumps({{"seconds": time.perf_counter() - t, "card": card}}))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=100_000_000, help="words of train (valid and test: a 20th each)")
    ap.add_argument("--layout", choices=("wikitext", "paragraph", "sentence"), default="wikitext")
    ap.add_argument("--gzip", action="store_true", help="gzipped input files")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="vizlm-bench-prepare-"))
    try:
        t = time.perf_counter()
        words = build(tmp / "source", args.tokens, args.layout, args.gzip)
        built = time.perf_counter() - t
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        proc = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), source=str(tmp / "source"),
                                                                   out=str(tmp / "corpora"))],
                              capture_output=True, text=True, check=False)
        if proc.returncode:
            print(proc.stderr, file=sys.stderr)
            return 1
        rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        stats = result["card"]["split_stats"]
        tokens = sum(s["tokens"] for s in stats.values())
        out = {"layout": args.layout, "gzip": args.gzip, "input_words": words, "tokens": tokens,
               "sentences": sum(s["sentences"] for s in stats.values()),
               "documents": sum(s["documents"] for s in stats.values()), "seconds": round(result["seconds"], 2),
               "tokens_per_s": round(tokens / result["seconds"]), "peak_rss_gb": round(rss_kb / 2**20, 3),
               "peak_rss_is_this_child": rss_kb > before, "input_built_s": round(built, 1),
               "targets": {"tokens_per_s": TARGET_TOKENS_PER_S, "peak_rss_gb": TARGET_RSS_GB}}
        out["meets"] = {"tokens_per_s": out["tokens_per_s"] >= TARGET_TOKENS_PER_S,
                        "peak_rss_gb": out["peak_rss_gb"] < TARGET_RSS_GB}
        if args.json:
            print(json.dumps(out))
        else:
            print(f"prepared {tokens:,} tokens ({args.layout}{', gzipped' if args.gzip else ''}) in {out['seconds']:.1f} s: "
                  f"{out['tokens_per_s']:,} tokens/s (target >= {TARGET_TOKENS_PER_S:,}), peak RSS "
                  f"{out['peak_rss_gb']:.2f} GB (target < {TARGET_RSS_GB})")
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
