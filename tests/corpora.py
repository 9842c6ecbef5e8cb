"""Generated corpora in the layout of ``data/`` (for ``--data``): any size, in seconds.

Sentences are random words of a small vocabulary with a little structure (a word often
repeats the word two back), so training has something to learn. Every split gets the four
files ``vizlm.data.registry.load_corpus`` reads; ``brown`` also gets ``vocab.txt``, and ``wsj/test``
exists because training on Brown scores it at the end.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vizlm.data.vocab import SPECIALS

WORDS = [f"w{i}" for i in range(60)]


def write_split(folder: Path, split: str, sentences: int, seed: int, doc_sentences: int = 40,
                mean_length: int = 10) -> int:
    """``sentences`` sentences in documents of ``doc_sentences``; returns the number of tokens
    (words + one </s> per sentence). Written in blocks, so a large split needs little memory."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tokens = 0
    with (open(folder / f"{split}.txt", "w", encoding="utf-8") as txt, open(folder / f"{split}.ids", "w") as ids,
          open(folder / f"{split}.tags", "w") as tags, open(folder / f"{split}.orig", "w", encoding="utf-8") as orig):
        for b0 in range(0, sentences, 10_000):
            n = min(10_000, sentences - b0)
            lengths = rng.integers(max(1, mean_length // 2), mean_length * 3 // 2 + 1, size=n)
            words = rng.integers(0, len(WORDS), size=int(lengths.sum()))
            echo = rng.random(len(words)) < 0.4
            words[2:][echo[2:]] = words[:-2][echo[2:]]
            ends = np.cumsum(lengths)
            lines = [" ".join(WORDS[w] for w in words[e - k : e]) for e, k in zip(ends.tolist(), lengths.tolist())]
            txt.write("".join(line + "\n" for line in lines))
            orig.write("".join(line + "\n" for line in lines))
            tags.write("".join(" ".join(["nn"] * k) + "\n" for k in lengths.tolist()))
            ids.write("".join(f"d{(b0 + i) // doc_sentences}:{(b0 + i) % doc_sentences}\n" for i in range(n)))
            tokens += int(lengths.sum()) + n
    return tokens


def make_corpus(root: Path, train: int, valid: int = 60, test: int = 60, seed: int = 0, doc_sentences: int = 40,
                mean_length: int = 10) -> Path:
    """A data folder at ``root`` with ``brown`` (train/valid/test, vocab) and ``wsj`` (test)."""
    brown = root / "brown"
    for k, (split, n) in enumerate((("train", train), ("valid", valid), ("test", test))):
        write_split(brown, split, n, seed + k, doc_sentences, mean_length)
    (brown / "vocab.txt").write_text("\n".join([*SPECIALS, *WORDS[:50]]) + "\n", encoding="utf-8")
    write_split(root / "wsj", "test", max(test // 2, 1), seed + 9, doc_sentences, mean_length)
    return root
