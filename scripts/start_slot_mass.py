"""Mean attention weight on the zero start slot (slot 0) of sentence-level AMSRN checkpoints.

A row that puts its weight there reads nothing: the start slot is how AMSRN switches its read
off. Used for docs/RESULTS.md; every sentence of a corpus split is read alone, as the model was
trained.

    python scripts/start_slot_mass.py checkpoints/amsrn runs/amsrn-shared-ent0.01 --corpus brown
"""

from __future__ import annotations

import argparse

import torch

from vizlm.modeling.checkpoint import load_checkpoint
from vizlm.data.tokens import open_split


def start_slot_mass(path: str, corpus: str, split: str, every: int) -> tuple[float, int] | None:
    """(mean weight on slot 0, predicted words), None for a model without a start slot."""
    ckpt = load_checkpoint(path)
    model = ckpt.model.eval()
    if ckpt.model.config.context != "sentence" or not getattr(ckpt.model.config, "start_slot", False):
        return None
    data, bos = open_split(corpus, split, ckpt.vocab), ckpt.vocab.stoi["<s>"]
    total, words = 0.0, 0
    with torch.no_grad():
        for chunk in data.chunks():
            part = data.read(chunk)
            for i in range(0, len(part.offsets) - 1, every):
                attention = model(torch.tensor([[bos] + part.sentence(i)])).attention[0]
                total += float(attention[:, 0].sum())
                words += attention.shape[0]
    return total / words, words


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--corpus", default="brown")
    p.add_argument("--split", default="test")
    p.add_argument("--every", type=int, default=1, help="read every Nth sentence (default: all)")
    args = p.parse_args()
    torch.set_num_threads(1)
    for path in args.checkpoints:
        if (got := start_slot_mass(path, args.corpus, args.split, args.every)) is None:
            print(f"{path}: not a sentence-level AMSRN with a start slot")
            continue
        mass, words = got
        print(f"{path}: {mass:.3f} of the weight on the start slot ({words:,} predicted words)")


if __name__ == "__main__":
    main()
