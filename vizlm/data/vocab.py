"""Vocabulary: what a word may be (one rule: prepare, import and the checkpoint loader check it), the
specials, :class:`Vocab` (word <-> id), and a vocabulary's overlap with a processed split (what a model
reads as ``<unk>`` there; the split's word counts cached per version of its file)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from vizlm.data.folder import VOCAB_FILE, file_stamp, split_file
from vizlm.data.registry import corpus_folder, split_folder

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
VOCAB_SIZE = 10_000

# What a word may be, everywhere a vocabulary is made or read (prepare, import, the checkpoint loader): a
# non-empty string of at most MAX_WORD_CHARS printable characters without spaces. Printable excludes control
# characters (BEL, the ESC of a terminal escape sequence), format characters and line or paragraph separators.
MAX_WORD_CHARS = 100  # the longest bundled word has 19 characters
WORD_RULE = f"a word is at most {MAX_WORD_CHARS} printable characters without spaces (no control characters)"
_SPACE = re.compile(r"\s")
_LONG_WORD = re.compile(rf"[^ ]{{{MAX_WORD_CHARS + 1},}}")


def is_word(w) -> bool:
    """Whether ``w`` may be a word of a vocabulary (:data:`WORD_RULE`)."""
    return isinstance(w, str) and 0 < len(w) <= MAX_WORD_CHARS and w.isprintable() and not _SPACE.search(w)


def first_bad_word(words: list) -> int | None:
    """The index of the first entry of ``words`` that is no word (:func:`is_word`), None when all are:
    the common case in a few C-level passes over the whole list, the per-word loop only to find the culprit."""
    fine = bool(words) and set(map(type, words)) == {str} and 1 <= min(map(len, words)) and \
        max(map(len, words)) <= MAX_WORD_CHARS
    flat = "".join(words) if fine else ""
    if not words or (fine and flat.isprintable() and not _SPACE.search(flat)):
        return None
    return next(i for i, w in enumerate(words) if not is_word(w))


def unusable_words(sentence: str) -> list[str]:
    """The tokens of ``sentence`` (words joined by single spaces) that may not be words (:func:`is_word`);
    fast for the common sentence, which has none."""
    if sentence.isprintable() and not _LONG_WORD.search(sentence):
        return []
    return [w for w in sentence.split(" ") if w and not is_word(w)]


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
    def load(cls, path: Path) -> Vocab:
        return cls(Path(path).read_text(encoding="utf-8").splitlines())

    @classmethod
    def for_corpus(cls, name: str, data_dir: Path | None = None) -> Vocab:
        return cls.load(corpus_folder(name, data_dir) / VOCAB_FILE)



def encode_sentences(sentences: list[list[str]], vocab: Vocab) -> list[list[int]]:
    return [vocab.encode(s) for s in sentences]


# --------------------------------------------------------------------------- overlap with a split
@dataclass(frozen=True)
class Overlap:
    """How much of a split a vocabulary covers: its tokens (running words, ``</s>`` not counted) and
    distinct words, and those of them outside the vocabulary (a model reads them as ``<unk>``)."""

    corpus: str
    split: str
    tokens: int
    oov_tokens: int
    types: int
    oov_types: int

    @property
    def oov_rate(self) -> float:
        """The share of the split's tokens outside the vocabulary (0 for an empty split)."""
        return self.oov_tokens / self.tokens if self.tokens else 0.0

    @property
    def type_overlap(self) -> float:
        """The share of the split's distinct words inside the vocabulary."""
        return 1 - self.oov_types / self.types if self.types else 1.0


@functools.lru_cache(maxsize=16)
def _word_counts(path: str, stamp: tuple[int, int]) -> dict[str, int]:
    """Running words of a processed split, counted once per version of its file."""
    counts: dict[str, int] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            for w in line.split():
                counts[w] = counts.get(w, 0) + 1
    return counts


def vocab_overlap(vocab: Vocab | Iterable[str], corpus: str, split: str, data_dir: Path | None = None) -> Overlap:
    """The overlap of a model's vocabulary (a :class:`Vocab` or its words) with a processed split: what a model
    run on a corpus it was not trained on will read as ``<unk>``. A word counts as inside when the vocabulary
    holds it exactly, as the model encodes it (a literal ``<unk>`` in the text is inside: it is read as itself).
    The split's word counts are read once per version of its file (cached)."""
    path = split_file(split_folder(corpus, split, data_dir), split)
    counts = _word_counts(str(path), file_stamp(path))
    known = vocab.stoi if isinstance(vocab, Vocab) else set(vocab)
    missing = [n for w, n in counts.items() if w not in known]
    return Overlap(corpus, split, sum(counts.values()), sum(missing), len(counts), len(missing))


def oov_rate(vocab: Vocab | Iterable[str], corpus: str, split: str, data_dir: Path | None = None) -> float:
    """The share of a split's tokens outside ``vocab`` (:func:`vocab_overlap`)."""
    return vocab_overlap(vocab, corpus, split, data_dir).oov_rate
