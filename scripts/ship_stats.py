"""Compute the corpus statistics of the bundled checkpoints and ship them in ``data/stats/``.

What the app's corpus pages show first, so that they open at once on a cold cache: for every
bundled checkpoint and every held-out split of its language (``vizlm.data.registry.HELD_OUT``), the
per-sentence NLLs that Compare pairs and, for an attention model (a Transformer's: its last layer's heads
together), its Cases report at the page's defaults; and on the split the pages open with (the test split of the model's own
corpus) its attention by position at ``vizlm.inspect.corpus_stats.MAX_WINDOW`` (any narrower window is read
from it; the slot effects of 30 positions cost minutes a split, so the others are computed
when first asked) and, for every model, its attribution by distance over that whole split
(:data:`vizlm.inspect.attribution_corpus.BY_DISTANCE`, what the page's "Attribution by distance" shows). Each is the cache entry the library would write (``vizlm.inspect.cache``), gzipped;
the app reads it when the user's cache has none. Run it again when a bundled checkpoint or a
corpus changes (a changed file has a new checksum, so an old entry is never used for it):

    python scripts/ship_stats.py [--only NAME ...] [--corpora brown wsj sinica] [--splits test valid]
                                 [--threads N] [--prune]

An entry already shipped is read, not computed again (the library's own lookup), so a run that
was stopped goes on where it was. Entries of checkpoints that changed (a checkpoint bundled again,
or removed) are never read again: ``--prune`` deletes them, the entries whose checkpoint checksum is
no bundled checkpoint's; alone it computes nothing, with ``--only NAME ...`` it then computes those.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from vizlm.core import paths
from vizlm.inspect.highlight import DEFAULT
from vizlm.inspect.attribution_corpus import BY_DISTANCE, corpus_attribution
from vizlm.inspect.cache import SHIPPED_SUFFIX, checkpoint_digest
from vizlm.inspect.case_gallery import GALLERY_EXAMPLES, GALLERY_LIMIT, GALLERY_RANK, corpus_cases
from vizlm.modeling.checkpoint import bundled_checkpoints, bundled_dir, load_checkpoint, meta_corpus
from vizlm.inspect.corpus_stats import MAX_WINDOW, positions_corpus, split_scores
from vizlm.data.registry import CORPORA, CORPUS_LANGUAGE, HELD_OUT
from vizlm.core.files import write_bytes


def splits_of(language: str | None, corpora: list[str], wanted: list[str]) -> list[tuple[str, str]]:
    return [(c, s) for c, splits in CORPORA.items() if CORPUS_LANGUAGE[c] == language and c in corpora
            for s in wanted if s in splits]


def first_view(ckpt) -> tuple[str | None, str]:
    """The split the corpus pages open with for a model: the first held-out split of its corpus."""
    return meta_corpus(ckpt.meta), HELD_OUT[0]


def prune(out: Path) -> list[Path]:
    """Delete the shipped entries of checkpoints that are no longer bundled (their ``parts.checkpoint``, the
    checksum of the checkpoint's files, is no bundled checkpoint's); the deleted paths."""
    kept = {checkpoint_digest(load_checkpoint(bundled_dir() / name)) for name in bundled_checkpoints()}
    gone = []
    for path in sorted(out.glob(f"*{SHIPPED_SUFFIX}")):
        digest = json.loads(gzip.decompress(path.read_bytes())).get("parts", {}).get("checkpoint")
        if isinstance(digest, str) and digest not in kept:
            path.unlink()
            gone.append(path)
    return gone


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", help="these bundled checkpoints (default: all)")
    ap.add_argument("--corpora", nargs="+", default=list(CORPORA), choices=CORPORA)
    ap.add_argument("--splits", nargs="+", default=list(HELD_OUT), choices=HELD_OUT)
    ap.add_argument("--threads", type=int, default=None, help="torch threads")
    ap.add_argument("--prune", action="store_true", help="first delete the entries of checkpoints no longer bundled")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    names = args.only or bundled_checkpoints()
    unknown = sorted(set(names) - set(bundled_checkpoints()))
    if unknown:
        print(f"not bundled: {', '.join(unknown)}", file=sys.stderr)
        return 2
    out = paths.shipped_stats_dir()
    out.mkdir(parents=True, exist_ok=True)
    if args.prune:
        gone = prune(out)
        print(f"{len(gone)} entries of checkpoints no longer bundled deleted", flush=True)
        if args.only is None:
            return 0
    written = set()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["VIZLM_CACHE"] = cache  # the entries the computations write are the ones shipped
        for name in names:
            ckpt = load_checkpoint(bundled_dir() / name)
            for corpus, split in splits_of(CORPUS_LANGUAGE.get(meta_corpus(ckpt.meta)), args.corpora, args.splits):
                t = time.perf_counter()
                split_scores(ckpt, corpus, split)
                if (corpus, split) == first_view(ckpt):
                    a = time.perf_counter()
                    sentences = corpus_attribution(ckpt, corpus, split, **BY_DISTANCE)["units"]
                    print(f"{name} {corpus}/{split}: attribution by distance {time.perf_counter() - a:.0f} s "
                          f"({sentences} units)", flush=True)
                if ckpt.has_attention or getattr(ckpt.model, "self_attention", False):  # a Transformer's too
                    if (corpus, split) == first_view(ckpt):
                        positions_corpus([ckpt], corpus, split, window=MAX_WINDOW, effects=True)
                    corpus_cases(ckpt, corpus, split, DEFAULT, limit=GALLERY_LIMIT,
                                 examples_per_label=GALLERY_EXAMPLES, rank=GALLERY_RANK)
                print(f"{name} {corpus}/{split}: {time.perf_counter() - t:.0f} s", flush=True)
            for entry in sorted(Path(cache).glob("*.json")):
                target = out / (entry.name[: -len(".json")] + SHIPPED_SUFFIX)
                write_bytes(target, gzip.compress(entry.read_bytes(), mtime=0), force=True)
                written.add(target.name)
                entry.unlink()
    size = sum(p.stat().st_size for p in out.glob(f"*{SHIPPED_SUFFIX}"))
    print(f"{len(written)} entries written; {out} holds {size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
