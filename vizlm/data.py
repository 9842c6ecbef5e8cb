"""Processed corpora, vocabulary and batching (run time).

The processed splits under ``data/`` (see :mod:`vizlm.prepare`, which builds them) hold
one sentence a line, tokens normalised with :func:`vizlm.text.normalize`, and beside
each split its POS tags, the original (unnormalised) tokens and a sentence id
(``document:index``). Their folder is :func:`vizlm.paths.data_dir`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from vizlm import paths
from vizlm.text import MAX_TOKENS, clean_text, cut_point, split_sentences, tokenize

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


# --------------------------------------------------------------------------- text files
MAX_TEXT_FILE_BYTES = 100 * 2**20  # a --text-file larger than this is refused (100 MiB: hours of scoring)
MAX_LINE_CHARS = 20_000  # longer lines are read in pieces of at most this, cut at a space
_PROGRESS_STEP = 2**20  # bytes between two progress calls


def _check_text_file(path: Path) -> int:
    """The size of ``path`` if it is a regular file within :data:`MAX_TEXT_FILE_BYTES`, from
    ``stat`` alone: a directory, device (``/dev/zero``) or FIFO is refused before it is opened."""
    path = Path(path)
    size = path.stat().st_size  # FileNotFoundError / PermissionError name the path
    if not path.is_file():  # stat's S_ISREG
        kind = "a directory" if path.is_dir() else "not a regular file (a device, FIFO or socket)"
        raise ValueError(f"{path} is {kind}; give a text file")
    if size > MAX_TEXT_FILE_BYTES:
        raise ValueError(f"{path} is {size / 2**20:,.1f} MiB; text files are limited to "
                         f"{MAX_TEXT_FILE_BYTES // 2**20} MiB (vizlm.data.MAX_TEXT_FILE_BYTES)")
    return size


def _line_pieces(fh, limit: int = MAX_LINE_CHARS):
    """The lines of a text file, each in pieces of at most ``limit`` characters cut at a space,
    so that memory stays bounded whatever the file holds (a line is never read whole)."""
    buf = ""
    while True:
        piece = fh.readline(limit)
        buf += piece
        line_end = not piece or piece.endswith("\n")
        while len(buf) > limit or (line_end and buf):
            cut = cut_point(buf, limit)
            yield buf[:cut]
            buf = buf[cut:]
        if not piece:
            return


def read_text_file(path: Path, progress: Callable[[float], None] | None = None) -> list[list[str]]:
    """Raw text, one paragraph or sentence a line, tokenised like user input: a list of
    sentences, each a list of normalised tokens.

    Bounded and streamed: ``path`` must be a regular file of at most
    :data:`MAX_TEXT_FILE_BYTES` (else :class:`ValueError`); it is read line by line, a line
    longer than :data:`MAX_LINE_CHARS` in pieces cut at a space, and a sentence longer than
    :data:`~vizlm.text.MAX_TOKENS` tokens is split into consecutive sentences of at most that
    many, so no batch of them grows huge. Invalid UTF-8 becomes U+FFFD and every piece goes
    through :func:`~vizlm.text.clean_text`. ``progress(fraction)`` is called as bytes are read.
    """
    size = _check_text_file(path)
    words: dict[str, str] = {}  # one string object per distinct word: a large file's tokens share them
    out: list[list[str]] = []
    chars = reported = 0
    with open(path, encoding="utf-8-sig", errors="replace") as fh:
        for piece in _line_pieces(fh):
            chars += len(piece)
            if chars > MAX_TEXT_FILE_BYTES:  # the file grew, or stat did not tell its size (e.g. /proc)
                raise ValueError(f"{path} holds more than {MAX_TEXT_FILE_BYTES // 2**20} MiB of text; "
                                 "that is the limit (vizlm.data.MAX_TEXT_FILE_BYTES)")
            for sent in split_sentences(clean_text(piece)):
                toks = [words.setdefault(t.norm, t.norm) for t in tokenize(sent)]
                out.extend(toks[i : i + MAX_TOKENS] for i in range(0, len(toks), MAX_TOKENS))
            if progress and chars - reported >= _PROGRESS_STEP:
                reported = chars
                progress(min(1.0, chars / max(size, 1)))
    if progress:
        progress(1.0)
    return out
