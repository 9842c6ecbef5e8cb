"""Write a vizlm corpus as pytorch/examples' word_language_model reads it, to train its ``main.py`` on.

    python scripts/anchor_corpus.py brown OUT_FOLDER

writes ``OUT_FOLDER/{train,valid,test}.txt``: one sentence a line (``main.py`` adds its ``<eos>``),
the corpus's processed tokens, every word outside the corpus's vocabulary as ``<unk>``. The
anchor's output layer then has the same words as vizlm's models of that corpus (its
vocabulary plus ``<eos>``), so a model it trains imports with the same vocabulary
(``vizlm import pytorch-examples``) and its test sentences are vizlm's, one for one: its
per-sentence log-likelihoods pair with a vizlm model's over the same documents.
An existing file is never replaced (``--force`` replaces it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vizlm.core.errors import VizlmError
from vizlm.core.files import check_replace, write_text
from vizlm.data.registry import load_corpus
from vizlm.data.vocab import UNK, Vocab


def anchor_lines(corpus: str, split: str, vocab: Vocab) -> list[str]:
    return [" ".join(w if w in vocab else UNK for w in sent) for sent in load_corpus(corpus, split).sentences]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", help="a processed corpus (brown, wsj, sinica, or yours)")
    parser.add_argument("out", type=Path, help="the folder to write train.txt, valid.txt and test.txt into")
    parser.add_argument("--force", action="store_true", help="replace files that exist")
    args = parser.parse_args(argv)
    try:
        vocab = Vocab.for_corpus(args.corpus)
        texts = {split: "\n".join(anchor_lines(args.corpus, split, vocab)) + "\n" for split in ("train", "valid", "test")}
        for split, text in texts.items():  # every file checked before the first is written
            check_replace(args.out / f"{split}.txt", text.encode("utf-8"), args.force)
        args.out.mkdir(parents=True, exist_ok=True)
        for split, text in texts.items():
            path = write_text(args.out / f"{split}.txt", text, args.force)
            print(f"{path}: {text.count(chr(10)):,} sentences")
    except (VizlmError, OSError) as exc:
        print(f"anchor_corpus: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
