"""How selective the attention rows of document-level window models are (Daniluk et al.'s
families): the mean largest weight of a row and its mean entropy, over rows whose window is
full, next to a uniform row's. A flat average by relative position (their Fig. 3, the Positions
page) can come from flat rows or from sharp rows that pick different positions: this tells which.
Used for docs/RESULTS.md; every Nth test document is read as running text, as the model was trained.

    python scripts/attention_sharpness.py runs/kvp-doc-w15 checkpoints/attention-doc --every 4
"""

from __future__ import annotations

import argparse
import math

import torch

from vizlm.checkpoint import load_checkpoint
from vizlm.tokens import open_split


def sharpness(path: str, corpus: str, split: str, every: int) -> dict | None:
    """{window, max, entropy, rows}; None for a model without a window over running text."""
    ckpt = load_checkpoint(path)
    model, window = ckpt.model.eval(), getattr(ckpt.model.config, "window", None)
    if ckpt.model.config.context != "document" or not window or not ckpt.has_attention:
        return None
    data = open_split(corpus, split, ckpt.vocab)
    top = entropy = 0.0
    rows = 0
    with torch.no_grad():
        for chunk in data.chunks():
            part = data.read(chunk)
            inputs = part.running_inputs()
            for d in range(0, len(part.documents) - 1, every):
                a, b = part.documents[d, 1], part.documents[d + 1, 1]
                attention = model(torch.from_numpy(inputs[a:b])[None]).attention[0][window:]  # (T - L, slots)
                top += float(attention.max(-1).values.sum())
                p = attention.clamp_min(1e-12)  # slots outside the window hold 0 and add nothing
                entropy += float(-(p * p.log()).sum())
                rows += attention.shape[0]
    return {"window": window, "max": top / rows, "entropy": entropy / rows, "rows": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--corpus", default="brown")
    p.add_argument("--split", default="test")
    p.add_argument("--every", type=int, default=1, help="read every Nth document (default: all)")
    args = p.parse_args()
    torch.set_num_threads(1)
    for path in args.checkpoints:
        if (s := sharpness(path, args.corpus, args.split, args.every)) is None:
            print(f"{path}: not a window model over running text")
            continue
        L = s["window"]
        print(f"{path}: window {L}: mean largest weight {s['max']:.3f} (uniform {1 / L:.3f}), mean entropy "
              f"{s['entropy']:.2f} nats (uniform {math.log(L):.2f}), {s['rows']:,} rows with a full window")


if __name__ == "__main__":
    main()
