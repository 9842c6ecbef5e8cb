"""Corpora (run time): vizlm's own and yours, their names, folders, splits and cards; a processed split
read back; and the text files users give (``--text-file``).

The processed splits of vizlm's corpora are under ``data/`` (:func:`vizlm.core.paths.data_dir`;
:mod:`vizlm.data.prepare` builds them), a user corpus's in the corpora folder; both in the layout of
:mod:`vizlm.data.folder`: one sentence a line, tokens normalised with :func:`vizlm.data.text.normalize`,
and beside each split its POS tags, the original (unnormalised) tokens and a sentence id
(``document:index``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vizlm.core import paths
from vizlm.core.errors import VizlmError
from vizlm.data.folder import CARD_FILE, COLUMNS, read_card, sha256_file, split_file
from vizlm.data.text import MAX_TOKENS, clean_text, cut_point, split_sentences, tokenize

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


_CORPUS_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


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
        for marker in sorted(root.glob(f"*/{CARD_FILE}")) if root.is_dir() else []:
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


def split_folder(name: str, split: str, data_dir: Path | None = None) -> Path:
    """The folder of a processed split, checked: a known corpus (or a user corpus) and split, its files there."""
    splits = corpus_splits(name, data_dir)
    if split not in splits:
        raise DataError(f"corpus {name!r} has no split {split!r}; valid: {', '.join(splits)}")
    folder = corpus_folder(name, data_dir)
    path = split_file(folder, split)
    if not path.exists():
        how = ("run `vizlm prepare --shared ../shared/data --out data/`" if name in CORPORA
               else f"prepare it again: `vizlm prepare --corpus {name} --from FOLDER --force`")
        raise DataMissingError(f"{path} is missing; {how}")
    return folder


def split_checksum(name: str, split: str, data_dir: Path | None = None) -> str:
    """The checksum of a processed split (:attr:`Corpus.checksum`, what cache keys hold) without reading its
    sentences."""
    return sha256_file(split_file(split_folder(name, split, data_dir), split))


def load_corpus(name: str, split: str, data_dir: Path | None = None) -> Corpus:
    """Load a processed split from ``data/`` (run ``vizlm prepare`` to regenerate)."""
    folder = split_folder(name, split, data_dir)
    cols = {}
    for field, ext in COLUMNS.items():
        lines = split_file(folder, split, ext).read_text(encoding="utf-8").splitlines()
        cols[field] = lines if field == "ids" else [line.split() for line in lines]
    return Corpus(name, split, checksum=split_checksum(name, split, data_dir), **cols)


def split_texts(name: str, split: str, data_dir: Path | None = None) -> tuple[list[str], list[str], str]:
    """``(ids, texts, checksum)`` of a processed split, read a line at a time: each sentence's
    original tokens joined by spaces, as per-sentence tables show it. Unlike
    :func:`load_corpus` no token lists are built, so a large corpus costs its text and no more."""
    folder = split_folder(name, split, data_dir)
    with open(split_file(folder, split, "ids"), encoding="utf-8") as fh:
        ids = [line.rstrip("\n") for line in fh]
    with open(split_file(folder, split, "orig"), encoding="utf-8") as fh:
        texts = [" ".join(line.split()) for line in fh]
    return ids, texts, sha256_file(split_file(folder, split))


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
