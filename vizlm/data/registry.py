"""Processed corpora, vocabulary and batching (run time): sentence batches, and document
streams for truncated BPTT.

The processed splits under ``data/`` (see :mod:`vizlm.data.prepare`, which builds them) hold
one sentence a line, tokens normalised with :func:`vizlm.data.text.normalize`, and beside
each split its POS tags, the original (unnormalised) tokens and a sentence id
(``document:index``). Their folder is :func:`vizlm.core.paths.data_dir`.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import itertools
import json
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from vizlm.core import paths
from vizlm.core.errors import VizlmError
from vizlm.data.text import MAX_TOKENS, clean_text, cut_point, split_sentences, tokenize

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
VOCAB_SIZE = 10_000
SPLITS = ("train", "valid", "test")
CORPORA = {"brown": SPLITS, "wsj": ("test",), "sinica": SPLITS}  # corpus -> its splits
HELD_OUT = ("test", "valid")  # the held-out splits the corpus pages offer, the default first
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


class DataError(VizlmError, ValueError):
    """A corpus, split or text file that cannot be read, with a message meant for the user."""


class DataMissingError(VizlmError, FileNotFoundError):
    """A processed split whose files are not there (``vizlm prepare`` makes them)."""


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
    """The file's sha256, read a MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


USER_CORPUS_FILE = "corpus.json"  # a user corpus's card: written by `vizlm prepare --corpus` or `vizlm import`
USER_CORPUS_FORMAT = "vizlm-user-corpus"
_CORPUS_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
MAX_CARD_BYTES = 2**20  # a corpus card larger than this is not read


def check_folder_name(name: str, what: str = "corpus name") -> str:
    """A name that becomes one folder (a corpus, a manifest's run): 1-64 lowercase letters, digits,
    ``_ . -``, starting with a letter or digit; so no separator, no ``..``, nothing absolute."""
    if not isinstance(name, str) or not _CORPUS_NAME.fullmatch(name):
        raise DataError(f"{what} {str(name)[:40]!r}: use 1-64 lowercase letters, digits, '_', '.' or '-', "
                        "starting with a letter or digit")
    return name


def check_corpus_name(name: str) -> str:
    """A new corpus name: lowercase letters, digits, ``_ . -`` (a folder name), not a built-in corpus."""
    check_folder_name(name)
    if name in CORPORA:
        raise DataError(f"{name!r} is one of vizlm's own corpora ({', '.join(CORPORA)}); choose another name")
    if name == paths.SHIPPED_STATS:
        raise DataError(f"{name!r} is the data folder's statistics shipped with the bundled checkpoints; choose another name")
    return name


def read_card(folder: Path) -> dict | None:
    """The card (``corpus.json``) of a user corpus folder, checked: None when it is missing, too large,
    not JSON or not a vizlm corpus card."""
    marker = Path(folder) / USER_CORPUS_FILE
    try:
        if not marker.is_file() or marker.stat().st_size > MAX_CARD_BYTES:
            return None
        doc = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (isinstance(doc, dict) and doc.get("format") == USER_CORPUS_FORMAT and isinstance(doc.get("splits"), list)):
        return None
    return doc


def _user_roots(data_dir: Path | None = None) -> list[Path]:
    """Where user corpora are looked for, the first winning a name: the corpora folder
    (:func:`vizlm.core.paths.corpora_dir`), then the data folder (corpora ``vizlm import`` wrote there
    before it wrote to the corpora folder)."""
    return [paths.corpora_dir(), Path(data_dir or paths.data_dir())]


def user_corpus_cards(data_dir: Path | None = None) -> dict[str, tuple[Path, dict]]:
    """The user corpora, name -> (folder, card), each card read once: those ``vizlm prepare --corpus`` and
    ``vizlm import`` wrote, the first root of :func:`_user_roots` winning a name."""
    found: dict[str, tuple[Path, dict]] = {}
    for root in _user_roots(data_dir):
        for marker in sorted(root.glob(f"*/{USER_CORPUS_FILE}")) if root.is_dir() else []:
            name = marker.parent.name
            if name in found or name in CORPORA or name == paths.SHIPPED_STATS or not _CORPUS_NAME.fullmatch(name):
                continue
            if (card := read_card(marker.parent)) is not None:
                found[name] = (marker.parent, card)
    return found


def user_corpus_folders(data_dir: Path | None = None) -> dict[str, Path]:
    """The user corpora, name -> folder: those ``vizlm prepare --corpus`` and ``vizlm import`` wrote."""
    return {name: folder for name, (folder, _) in user_corpus_cards(data_dir).items()}


def user_corpora(data_dir: Path | None = None) -> dict[str, tuple[str, ...]]:
    """The user corpora (:func:`user_corpus_folders`): name -> splits."""
    return {name: tuple(s for s in card.get("splits", ()) if s in SPLITS)
            for name, (_, card) in user_corpus_cards(data_dir).items()}


def corpus_card(name: str, data_dir: Path | None = None) -> dict | None:
    """A user corpus's card (source, layout, sizes per split, vocabulary, OOV rates, checksums,
    options; :mod:`vizlm.data.ingest`), None for vizlm's own corpora."""
    return None if name in CORPORA else read_card(corpus_folder(name, data_dir))


def corpus_splits(name: str, data_dir: Path | None = None) -> tuple[str, ...]:
    """The splits of corpus ``name``: one of :data:`CORPORA`, or a user corpus."""
    if name in CORPORA:
        return CORPORA[name]
    users = user_corpora(data_dir)
    if name not in users:
        raise DataError(f"unknown corpus {str(name)[:64]!r}; valid: {', '.join([*CORPORA, *users])}")
    return users[name]


def corpus_folder(name: str, data_dir: Path | None = None) -> Path:
    """The folder of corpus ``name``'s processed files: vizlm's own in the data folder, a user corpus
    where :func:`user_corpus_folders` finds it (:class:`DataError` for an unknown name)."""
    if name in CORPORA:
        return Path(data_dir or paths.data_dir()) / name
    folders = user_corpus_folders(data_dir)
    if name not in folders:
        raise DataError(f"unknown corpus {str(name)[:64]!r}; valid: {', '.join([*CORPORA, *folders])}")
    return folders[name]


def _split_folder(name: str, split: str, data_dir: Path | None = None) -> Path:
    """The folder of a processed split, checked: a known corpus (or a user corpus) and split, its files there."""
    splits = corpus_splits(name, data_dir)
    if split not in splits:
        raise DataError(f"corpus {name!r} has no split {split!r}; valid: {', '.join(splits)}")
    folder = corpus_folder(name, data_dir)
    path = folder / f"{split}.txt"
    if not path.exists():
        how = ("run `vizlm prepare --shared ../shared/data --out data/`" if name in CORPORA
               else f"prepare it again: `vizlm prepare --corpus {name} --from FOLDER --force`")
        raise DataMissingError(f"{path} is missing; {how}")
    return folder


def split_checksum(name: str, split: str, data_dir: Path | None = None) -> str:
    """The checksum of a processed split (:attr:`Corpus.checksum`, what cache keys hold) without reading its
    sentences."""
    return sha256_file(_split_folder(name, split, data_dir) / f"{split}.txt")


def load_corpus(name: str, split: str, data_dir: Path | None = None) -> Corpus:
    """Load a processed split from ``data/`` (run ``vizlm prepare`` to regenerate)."""
    folder = _split_folder(name, split, data_dir)
    cols = {}
    for field, ext in _FILES.items():
        lines = (folder / f"{split}.{ext}").read_text(encoding="utf-8").splitlines()
        cols[field] = lines if field == "ids" else [line.split() for line in lines]
    return Corpus(name, split, checksum=split_checksum(name, split, data_dir), **cols)


def split_texts(name: str, split: str, data_dir: Path | None = None) -> tuple[list[str], list[str], str]:
    """``(ids, texts, checksum)`` of a processed split, read a line at a time: each sentence's
    original tokens joined by spaces, as per-sentence tables show it. Unlike
    :func:`load_corpus` no token lists are built, so a large corpus costs its text and no more."""
    folder = _split_folder(name, split, data_dir)
    with open(folder / f"{split}.ids", encoding="utf-8") as fh:
        ids = [line.rstrip("\n") for line in fh]
    with open(folder / f"{split}.orig", encoding="utf-8") as fh:
        texts = [" ".join(line.split()) for line in fh]
    return ids, texts, sha256_file(folder / f"{split}.txt")


@functools.lru_cache(maxsize=1)
def _examples() -> dict[str, list[list[str]]]:
    path = paths.asset(paths.EXAMPLES_FILE)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def example_sentences(corpus: str, split: str, data_dir: Path | None = None) -> list[tuple[str, str]]:
    """Readable example sentences of a split, ``[(sentence id, text)]``: vizlm's corpora from the shipped
    ``examples.json`` (:func:`vizlm.data.prepare.write_examples`), a corpus ``vizlm import`` wrote from its
    processed files (:func:`user_examples`); empty for other splits."""
    if corpus not in CORPORA:
        return user_examples(corpus, split, data_dir)[0]
    return [(sid, text) for sid, text in _examples().get(f"{corpus}/{split}", [])]


def example_passages(corpus: str, split: str, data_dir: Path | None = None) -> list[tuple[str, str]]:
    """Example passages of a split, consecutive sentences of a document, ``[("ca10:0-7", text a sentence
    a line)]``: from the shipped ``examples.json``, or a user corpus's files (:func:`user_examples`);
    empty for other splits."""
    if corpus not in CORPORA:
        return user_examples(corpus, split, data_dir)[1]
    return [(sid, text) for sid, text in _examples().get(f"{corpus}/{split}/passages", [])]


USER_EXAMPLES = 8  # sentences, and passages, a user corpus's split offers as examples
USER_EXAMPLE_LENGTH = (5, 40)  # tokens of an example sentence (a WikiText line is a paragraph: most are longer)
USER_PASSAGE_TOKENS = 120  # a passage: consecutive non-empty lines up to this many tokens


def _file_stamp(path: Path) -> tuple[int, int]:
    """Changes when the file is rewritten: its size and modification time."""
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def user_examples(corpus: str, split: str, data_dir: Path | None = None) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(sentences, passages)`` of a corpus ``vizlm import`` wrote, from its processed split (the words as
    they are, space-separated): its lines of :data:`USER_EXAMPLE_LENGTH` tokens, spread over the split, and
    runs of consecutive non-empty lines of up to :data:`USER_PASSAGE_TOKENS` tokens (ids ``test:4-9``), at
    most :data:`USER_EXAMPLES` each; both empty when it is not such a corpus, has no such split or its
    files are missing."""
    if corpus in CORPORA or split not in user_corpora(data_dir).get(corpus, ()):
        return [], []
    try:
        path = corpus_folder(corpus, data_dir) / f"{split}.orig"
        return _user_examples(str(path), _file_stamp(path))
    except OSError:
        return [], []


def _is_heading(words: list[str]) -> bool:
    """A WikiText title or section heading kept in a corpus's lines (``= = Section 1 = =``): not text."""
    return len(words) >= 3 and words[0] == words[-1] == "="


@functools.lru_cache(maxsize=16)
def _user_examples(path: str, stamp: tuple[int, int]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    lines = Path(path).with_suffix(".orig").read_text(encoding="utf-8").splitlines()
    ids = Path(path).with_suffix(".ids").read_text(encoding="utf-8").splitlines()
    words = [[] if _is_heading(w) else w for w in (line.split() for line in lines)]  # a heading is no example
    lo, hi = USER_EXAMPLE_LENGTH
    fitting = [i for i, w in enumerate(words) if lo <= len(w) <= hi]
    step = max(1, len(fitting) // USER_EXAMPLES)  # spread over the split, not its first paragraph alone
    sentences = [(ids[i], " ".join(words[i])) for i in fitting[::step][:USER_EXAMPLES]]
    passages, i = [], 0
    while i < len(words) and len(passages) < USER_EXAMPLES:
        if not words[i] or len(words[i]) > USER_PASSAGE_TOKENS:
            i += 1
            continue
        j, size, doc = i, 0, ids[i].rpartition(":")[0]
        while (j < len(words) and words[j] and size + len(words[j]) <= USER_PASSAGE_TOKENS
               and ids[j].rpartition(":")[0] == doc):  # within one document
            size += len(words[j])
            j += 1
        if j - i > 1:  # a passage is more than one line
            passages.append((f"{ids[i]}-{ids[j - 1].rpartition(':')[2]}", "\n".join(" ".join(w) for w in words[i:j])))
        i = j
    return sentences, passages


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
    folder = _split_folder(corpus, split, data_dir)
    path = folder / f"{split}.txt"
    counts = _word_counts(str(path), _file_stamp(path))
    known = vocab.stoi if isinstance(vocab, Vocab) else set(vocab)
    missing = [n for w, n in counts.items() if w not in known]
    return Overlap(corpus, split, sum(counts.values()), sum(missing), len(counts), len(missing))


def oov_rate(vocab: Vocab | Iterable[str], corpus: str, split: str, data_dir: Path | None = None) -> float:
    """The share of a split's tokens outside ``vocab`` (:func:`vocab_overlap`)."""
    return vocab_overlap(vocab, corpus, split, data_dir).oov_rate


# --------------------------------------------------------------------------- vocabulary
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
    def load(cls, path: Path) -> "Vocab":
        return cls(Path(path).read_text(encoding="utf-8").splitlines())

    @classmethod
    def for_corpus(cls, name: str, data_dir: Path | None = None) -> "Vocab":
        return cls.load(corpus_folder(name, data_dir) / "vocab.txt")


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


def plan_batches(lengths: list[int], batch_size: int, shuffle: bool = False, seed: int = 0,
                 max_tokens: int | None = None) -> list[list[int]]:
    """The index lists of :func:`iter_batches`, from sentence lengths alone.

    ``max_tokens`` bounds a batch's padded size (sentences x longest + 1): a bucket of long
    sentences is cut into smaller batches, so the (B, T, V) logits of scoring stay bounded
    whatever the text. Buckets within the budget are unchanged.
    """
    out = []
    for idx in bucket_batches(lengths, batch_size, shuffle, seed):
        step = len(idx)
        if max_tokens is not None:
            step = max(1, min(step, max_tokens // (max(lengths[i] for i in idx) + 1)))
        out.extend(idx[k : k + step] for k in range(0, len(idx), step))
    return out


def iter_batches(seqs: list[list[int]], batch_size: int, shuffle: bool = False, seed: int = 0,
                 max_tokens: int | None = None):
    """Yield ``(indices, inputs, targets)`` over length-bucketed batches (:func:`plan_batches`)."""
    for part in plan_batches([len(s) for s in seqs], batch_size, shuffle, seed, max_tokens):
        inputs, targets = collate([seqs[i] for i in part])
        yield part, inputs, targets


# --------------------------------------------------------------------------- documents
def document_sizes(ids: list[str]) -> list[int]:
    """Sentences per document for sentence ids ``document:index`` in corpus order.

    A document is a run of consecutive sentences whose ids share the part before the
    last ``:`` (Brown ``ca01``, WSJ ``wsj_0001``); an id without ``:`` is a document of
    its own.
    """
    sizes: list[int] = []
    last = None
    for i, sid in enumerate(ids):
        doc = sid.rpartition(":")[0] or f"\0{i}"
        if doc == last:
            sizes[-1] += 1
        else:
            sizes.append(1)
        last = doc
    return sizes


def split_documents(seqs: list, sizes: list[int] | None) -> list[list]:
    """Group ``seqs`` into documents of ``sizes`` sentences (None: one sentence each)."""
    if sizes is None:
        return [[s] for s in seqs]
    if sum(sizes) != len(seqs):
        raise ValueError(f"documents hold {sum(sizes)} sentences but there are {len(seqs)}")
    ends = list(itertools.accumulate(sizes))
    return [seqs[end - n : end] for n, end in zip(sizes, ends)]


def passage_start(ids: list[str], lengths: list[int], index: int, max_tokens: int = MAX_TOKENS) -> int:
    """The first sentence of the passage that ends with sentence ``index``: it and the sentences
    before it in its document (ids ``document:index``, :func:`document_sizes`), as many whole ones as
    fit in ``max_tokens`` tokens with it (it alone when it is longer)."""
    doc, start, size = ids[index].rpartition(":")[0], index, lengths[index]
    while doc and start > 0 and ids[start - 1].rpartition(":")[0] == doc and size + lengths[start - 1] <= max_tokens:
        start -= 1
        size += lengths[start]
    return start


def document_tokens(doc: list[list[int]]) -> list[int]:
    """A document as running text: ``<s> s_1 </s> s_2 </s> ... s_n </s>``.

    Inputs are all but the last token, targets all but the first, so every sentence
    predicts its words and its ``</s>``, as in sentence context, and the first word of
    a sentence is predicted from the previous sentence's ``</s>``.
    """
    out = [Vocab.bos_id]
    for s in doc:
        out.extend(s)
        out.append(Vocab.eos_id)
    return out


@dataclass
class Segment:
    """One step of truncated BPTT over parallel document streams.

    Streams that have no document left drop out of the batch, always from the end, so
    ``B`` only shrinks over an epoch: the state of the first ``B`` streams carries on.
    """

    inputs: torch.Tensor  # (B, T) token ids, 0-padded after a stream's document ends
    targets: torch.Tensor  # (B, T) next tokens, 0 = padding
    starts: torch.Tensor  # (B,) bool: the stream begins a new document here (reset its state)
    positions: torch.Tensor  # (B, T) long: index of each target in the documents' targets in order, -1 = padding


@dataclass
class DocumentPlan:
    """Which targets each stream reads at each step: the layout of :func:`document_batches`,
    from document sizes alone, so that a corpus on disk can be read one step (and one rank's
    streams) at a time. Targets are numbered in the concatenated targets of the documents."""

    start: torch.Tensor  # (K, B) long: the segment's first target
    length: torch.Tensor  # (K, B) long: real targets in the segment, 0 = the stream is done
    starts: torch.Tensor  # (K, B) bool: the stream begins a document here
    active: list[int]  # (K,) streams still reading at each step (a prefix of the B streams)
    bptt: int

    def __len__(self) -> int:
        return len(self.active)

    def tokens(self, k: int) -> int:
        """Real targets of step ``k`` over all streams."""
        return int(self.length[k].sum())


def document_plan(sizes: list[int], streams: int = 64, bptt: int = 20, shuffle: bool = False,
                  seed: int = 0, balance: bool = False) -> DocumentPlan:
    """The stream layout of documents with ``sizes`` targets each (see :func:`document_batches`).

    ``balance`` (training): the documents' segments, in reading order, are cut into ``streams``
    equal runs instead, so every stream reads to the end of the epoch and no step has fewer
    streams than the others (but the last). Whole documents per stream leave a tail in which
    a few streams read on alone (on Brown, 131 of 856 steps, the last 65 with 16 streams or
    fewer): with Adam, those steps fit the model to the last few documents and the
    checkpoint taken after the epoch is worse (valid perplexity 171.8 -> 178.7 in an epoch in
    which the training perplexity fell from 169 to 155). A cut document (at most
    ``streams - 1`` an epoch, different ones each shuffled epoch) goes on in the next
    stream from a fresh state, as at a document start.
    """
    if bptt < 1 or streams < 1:
        raise ValueError("bptt and streams must be >= 1")
    first = [0]  # index of each document's first target in the concatenated targets
    for n in sizes:
        first.append(first[-1] + n)
    order = [i for i in range(len(sizes)) if sizes[i]]
    if shuffle:
        random.Random(seed).shuffle(order)
    if balance:
        return _balanced_plan(sizes, first, order, streams, bptt)
    heap = [(0, b) for b in range(max(1, min(streams, len(order))))]  # (segments so far, stream)
    lanes: list[list[int]] = [[] for _ in heap]  # stream -> its documents in reading order
    for d in order:
        load, b = heapq.heappop(heap)
        lanes[b].append(d)
        heapq.heappush(heap, (load + -(-sizes[d] // bptt), b))
    return _grid_plan([_segments(sizes, first, lane, bptt) for lane in lanes], bptt)


def _segments(sizes: list[int], first: list[int], docs: list[int], bptt: int) -> torch.Tensor:
    """``(first target, length, starts a document)`` of the segments of ``docs`` read in order, (S, 3)."""
    parts = [torch.zeros(0, 3, dtype=torch.long)]
    for d in docs:
        off = torch.arange(0, sizes[d], bptt)  # (segments,)
        parts.append(torch.stack([first[d] + off, (sizes[d] - off).clamp_max(bptt), off == 0], 1))
    return torch.cat(parts)


def _grid_plan(segs: list[torch.Tensor], bptt: int) -> DocumentPlan:
    """The plan of streams reading ``segs`` (each (steps, 3)), longest first."""
    segs = sorted(segs, key=len, reverse=True)  # streams still reading are always a prefix
    K, B = len(segs[0]), len(segs)
    grid = torch.zeros(K, B, 3, dtype=torch.long)  # (steps, streams, (first target, length, starts))
    for b, seg in enumerate(segs):
        grid[: len(seg), b] = seg
    start, length, starts = grid.unbind(2)  # (K, B) each
    active = (length > 0).sum(1).tolist()  # streams reading at each step
    return DocumentPlan(start, length, starts.bool(), active, bptt)


def _balanced_plan(sizes: list[int], first: list[int], order: list[int], streams: int, bptt: int) -> DocumentPlan:
    """``document_plan(balance=True)``: the segments in reading order, cut into equal runs."""
    every = _segments(sizes, first, order, bptt)  # (S, 3)
    # at most one stream per document: fewer documents than streams are cut no more than that
    steps = max(1, -(-len(every) // max(1, min(streams, len(order)))))
    if not len(every):
        return _grid_plan([every], bptt)
    runs = list(every.split(steps))
    for run in runs:
        run[0, 2] = 1  # a stream starts from a fresh state, also inside a cut document
    return _grid_plan(runs, bptt)


def plan_segment(plan: DocumentPlan, k: int, flat_inputs, flat_targets, lanes: range | None = None) -> Segment:
    """Step ``k`` of ``plan`` for the streams ``lanes`` (default: every active one; they must
    be active). ``flat_inputs`` / ``flat_targets``: the documents' inputs and targets, concatenated,
    as 1-D tensors or arrays (a window of a corpus on disk); only the targets of this step are read."""
    lanes = range(plan.active[k]) if lanes is None else lanes
    sel = torch.as_tensor(list(lanes), dtype=torch.long)
    start, length = plan.start[k, sel], plan.length[k, sel]  # (b,) each
    steps = torch.arange(plan.bptt)
    real = steps < length[:, None]  # (b, T)
    positions = torch.where(real, start[:, None] + steps, -1)  # (b, T)
    at = positions.clamp_min(0)
    if not isinstance(flat_targets, torch.Tensor):  # a numpy window: fancy-index it, then convert
        inputs, targets = (torch.from_numpy(flat[at.numpy()].astype("int64")) for flat in (flat_inputs, flat_targets))
    else:
        inputs, targets = flat_inputs[at], flat_targets[at]
    zero = torch.zeros((), dtype=torch.long)
    return Segment(torch.where(real, inputs, zero), torch.where(real, targets, zero), plan.starts[k, sel], positions)


def document_batches(
    docs: list[list[list[int]]], streams: int = 64, bptt: int = 20, shuffle: bool = False, seed: int = 0,
    balance: bool = False,
) -> list[Segment]:
    """Documents read as running text by ``streams`` parallel streams, ``bptt`` tokens a segment.

    Each document goes whole to one stream (the least loaded so far, in document order;
    shuffled first when ``shuffle``). A document always starts a segment: its last
    segment is padded, so a stream's state is reset only between segments
    (``Segment.starts``), never inside one, and one LSTM call reads a whole segment.
    That padding is under one segment per document (Brown documents are ~2,300
    tokens, so about 0.4% at ``bptt`` 20). Streams run out of documents at different
    times; they are ordered longest first and the batch shrinks to those still
    reading, so the tail of an epoch computes no padding rows either. ``positions``
    index the concatenated targets of ``docs`` in the given order, to gather per-token
    and per-sentence scores. The layout is :func:`document_plan`'s (``balance``: training's,
    where documents may be cut between streams).
    """
    toks = [torch.tensor(document_tokens(d), dtype=torch.long) for d in docs]
    plan = document_plan([len(t) - 1 if d else 0 for t, d in zip(toks, docs)], streams, bptt, shuffle, seed, balance)
    flat_inputs = torch.cat([t[:-1] for t in toks] + [torch.zeros(1, dtype=torch.long)])
    flat_targets = torch.cat([t[1:] for t in toks] + [torch.zeros(1, dtype=torch.long)])
    return [plan_segment(plan, k, flat_inputs, flat_targets) for k in range(len(plan))]


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
        raise DataError(f"{path} is {kind}; give a text file")
    if size > MAX_TEXT_FILE_BYTES:
        raise DataError(f"{path} is {size / 2**20:,.1f} MiB; text files are limited to "
                         f"{MAX_TEXT_FILE_BYTES // 2**20} MiB (vizlm.data.registry.MAX_TEXT_FILE_BYTES)")
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


_ESCAPED = re.compile("[\udc80-\udcff]")  # a byte that is not UTF-8, as errors="surrogateescape" reads it


def read_text_file(path: Path, progress: Callable[[float], None] | None = None,
                   documents: list[int] | None = None, notes: list[str] | None = None) -> list[list[str]]:
    """Raw text, one paragraph or sentence a line, tokenised like user input: a list of
    sentences, each a list of normalised tokens. ``documents``, when given a list, receives
    the sentences of each document in order: a blank line ends one (document-context models
    read each as running text).

    Bounded and streamed: ``path`` must be a regular file of at most
    :data:`MAX_TEXT_FILE_BYTES` (else :class:`ValueError`); it is read line by line, a line
    longer than :data:`MAX_LINE_CHARS` in pieces cut at a space, and a sentence longer than
    :data:`~vizlm.data.text.MAX_TOKENS` tokens is split into consecutive sentences of at most that
    many, so no batch of them grows huge. Invalid UTF-8 becomes U+FFFD and every piece goes
    through :func:`~vizlm.data.text.clean_text`; ``notes``, when given a list, receives a line saying
    how many bytes were not UTF-8 and on which line the first was. ``progress(fraction)`` is
    called as bytes are read.
    """
    size = _check_text_file(path)
    words: dict[str, str] = {}  # one string object per distinct word: a large file's tokens share them
    out: list[list[str]] = []
    chars = reported = 0
    done = 0  # sentences of the documents before the current one
    line, bad, first_bad = 1, 0, None  # invalid bytes arrive as lone surrogates (surrogateescape)
    with open(path, encoding="utf-8-sig", errors="surrogateescape") as fh:
        for piece in _line_pieces(fh):
            if (n := len(_ESCAPED.findall(piece))) and not bad:
                first_bad = line
            bad += n
            line += piece.count("\n")
            if documents is not None and piece.endswith("\n") and not piece.strip() and len(out) > done:
                documents.append(len(out) - done)  # a blank line: the document so far ends
                done = len(out)
            chars += len(piece)
            if chars > MAX_TEXT_FILE_BYTES:  # the file grew, or stat did not tell its size (e.g. /proc)
                raise DataError(f"{path} holds more than {MAX_TEXT_FILE_BYTES // 2**20} MiB of text; "
                                 "that is the limit (vizlm.data.registry.MAX_TEXT_FILE_BYTES)")
            for sent in split_sentences(clean_text(piece)):
                toks = [words.setdefault(t.norm, t.norm) for t in tokenize(sent)]
                out.extend(toks[i : i + MAX_TOKENS] for i in range(0, len(toks), MAX_TOKENS))
            if progress and chars - reported >= _PROGRESS_STEP:
                reported = chars
                progress(min(1.0, chars / max(size, 1)))
    if documents is not None and len(out) > done:
        documents.append(len(out) - done)
    if bad and notes is not None:
        notes.append(f"{path}: {bad:,} byte(s) are not UTF-8 (the first on line {first_bad:,}); "
                     "each was read as U+FFFD")
    if progress:
        progress(1.0)
    return out
