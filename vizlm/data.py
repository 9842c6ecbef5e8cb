"""Processed corpora, vocabulary and batching (run time).

The processed splits under ``data/`` (see :mod:`vizlm.prepare`, which builds them) hold
one sentence a line, tokens normalised with :func:`vizlm.text.normalize`, and beside
each split its POS tags, the original (unnormalised) tokens and a sentence id
(``document:index``). Their folder is :func:`vizlm.paths.data_dir`.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from vizlm import paths
from vizlm.text import split_sentences, tokenize

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
VOCAB_SIZE = 10_000
SPLITS = ("train", "valid", "test")
CORPORA = {"brown": SPLITS, "wsj": ("test",), "sinica": SPLITS}  # corpus -> its splits
CORPUS_TITLES = {  # how the app and reports name each corpus
    "brown": "Brown",
    "wsj": "WSJ sample (out of domain)",
    "sinica": "Sinica (Chinese characters)",
}
CORPUS_LANGUAGE = {"brown": "English", "wsj": "English", "sinica": "Chinese"}  # a model reads its own language only
TRAINABLE = tuple(c for c, splits in CORPORA.items() if "train" in splits)
LICENCES = {
    "brown": "Brown Corpus (Francis & Kucera 1964/1979): \"Distributed with the permission of "
    "the copyright holder, redistribution permitted.\"",
    "wsj": "Penn Treebank sample (WSJ wsj_0001-wsj_0199): Copyright (C) 1995 University of "
    "Pennsylvania (LDC); made available for non-commercial use.",
    "sinica": "Sinica Treebank sample: Creative Commons Attribution-NonCommercial-ShareAlike 2.5 "
    "(http://creativecommons.org/licenses/by-nc-sa/2.5/).",
}


# --------------------------------------------------------------------------- processed data
@dataclass
class Corpus:
    """One processed split: normalised tokens, tags, original tokens, sentence ids."""

    name: str
    split: str
    sentences: list[list[str]]
    tags: list[list[str]]
    originals: list[list[str]]
    ids: list[str]
    checksum: str  # sha256 of the token file

    def __len__(self) -> int:
        return len(self.sentences)


_FILES = {"sentences": "txt", "tags": "tags", "originals": "orig", "ids": "ids"}


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_corpus(name: str, split: str, data_dir: Path | None = None) -> Corpus:
    """Load a processed split from ``data/`` (run ``vizlm prepare`` to regenerate)."""
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; valid: {', '.join(CORPORA)}")
    if split not in CORPORA[name]:
        raise ValueError(f"corpus {name!r} has no split {split!r}; valid: {', '.join(CORPORA[name])}")
    folder = Path(data_dir or paths.data_dir()) / name
    path = folder / f"{split}.txt"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; run `vizlm prepare --shared ../shared/data --out data/`")
    cols = {}
    for field, ext in _FILES.items():
        lines = (folder / f"{split}.{ext}").read_text(encoding="utf-8").splitlines()
        cols[field] = lines if field == "ids" else [line.split() for line in lines]
    return Corpus(name, split, checksum=sha256_file(path), **cols)


@functools.lru_cache(maxsize=1)
def _examples() -> dict[str, list[list[str]]]:
    path = paths.asset(paths.EXAMPLES_FILE)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def example_sentences(corpus: str, split: str) -> list[tuple[str, str]]:
    """Readable example sentences of a split, ``[(sentence id, text)]``, from the shipped
    ``examples.json`` (:func:`vizlm.prepare.write_examples`); empty for other splits."""
    return [(sid, text) for sid, text in _examples().get(f"{corpus}/{split}", [])]


# --------------------------------------------------------------------------- vocabulary
class Vocab:
    """Word <-> id mapping; everything outside it is ``<unk>``."""

    def __init__(self, itos: list[str]):
        if list(itos[: len(SPECIALS)]) != list(SPECIALS):
            raise ValueError(f"vocabulary must start with {SPECIALS}")
        if len(set(itos)) != len(itos):
            raise ValueError("vocabulary has duplicate entries")
        self.itos = list(itos)
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, word: str) -> bool:
        return word in self.stoi

    def encode(self, words: list[str]) -> list[int]:
        return [self.stoi.get(w, self.unk_id) for w in words]

    def decode(self, ids) -> list[str]:
        return [self.itos[int(i)] for i in ids]

    @classmethod
    def load(cls, path: Path) -> "Vocab":
        return cls(Path(path).read_text(encoding="utf-8").splitlines())

    @classmethod
    def for_corpus(cls, name: str, data_dir: Path | None = None) -> "Vocab":
        return cls.load(Path(data_dir or paths.data_dir()) / name / "vocab.txt")


# --------------------------------------------------------------------------- batching
def encode_sentences(sentences: list[list[str]], vocab: Vocab) -> list[list[int]]:
    return [vocab.encode(s) for s in sentences]


def collate(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sentences -> (inputs, targets), each (B, T), right-padded with 0.

    A sentence ``w_1..w_n`` is read as ``<s> w_1..w_n`` and predicts ``w_1..w_n </s>``.
    """
    T = max(len(s) for s in seqs) + 1
    inputs = torch.zeros(len(seqs), T, dtype=torch.long)
    targets = torch.zeros(len(seqs), T, dtype=torch.long)
    for b, s in enumerate(seqs):
        inputs[b, : len(s) + 1] = torch.tensor([Vocab.bos_id] + s)
        targets[b, : len(s) + 1] = torch.tensor(s + [Vocab.eos_id])
    return inputs, targets


def bucket_batches(lengths: list[int], batch_size: int, shuffle: bool, seed: int = 0) -> list[list[int]]:
    """Index lists of sentences of similar length (little padding).

    Sentences are sorted by length (ties shuffled when ``shuffle``), cut into
    batches, and the batch order shuffled, so each epoch sees every sentence once.
    """
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    if shuffle:
        rng.shuffle(order)
    order.sort(key=lambda i: lengths[i])
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if shuffle:
        rng.shuffle(batches)
    return batches


def iter_batches(seqs: list[list[int]], batch_size: int, shuffle: bool = False, seed: int = 0):
    """Yield ``(indices, inputs, targets)`` over length-bucketed batches."""
    for idx in bucket_batches([len(s) for s in seqs], batch_size, shuffle, seed):
        inputs, targets = collate([seqs[i] for i in idx])
        yield idx, inputs, targets


def read_text_file(path: Path) -> list[list[str]]:
    """Raw text, one paragraph or sentence a line, tokenised like user input."""
    out = []
    for line in io.open(path, encoding="utf-8"):
        for sent in split_sentences(line):
            toks = [t.norm for t in tokenize(sent)]
            if toks:
                out.append(toks)
    return out
