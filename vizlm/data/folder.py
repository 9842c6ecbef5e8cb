"""The corpus folder: the one writer and reader of its files' names and formats.

vizlm's own corpora (:mod:`vizlm.data.prepare`), a folder of yours (:mod:`vizlm.data.ingest`) and the data of
an imported model (:func:`vizlm.modeling.importer.write_corpus`) all become this layout, written through
the functions here; :mod:`vizlm.data.registry` reads it. Per split, four text files of one line a
sentence (:data:`COLUMNS`), each line ended by ``\\n``::

    SPLIT.txt    the words models read (normalised), separated by single spaces
    SPLIT.tags   one POS tag per word (``-``: no gold tag)
    SPLIT.orig   the words as written (a space inside a word as ``_``)
    SPLIT.ids    the sentence id ``document:index`` (:func:`document_of`)

and the token-id files (:data:`TOKEN_ID_FILES`, written by :mod:`vizlm.data.tokens`); per corpus
``vocab.txt`` (one word a line, :func:`vocab_text`) and, for a user corpus, its card ``corpus.json``
(:func:`card_text`, :func:`read_card`). Every file is written to a temporary name and renamed
(:mod:`vizlm.core.files`): one at a time, all checked first (:func:`write_files`), or a whole folder
swapped in (:func:`write_folder`, :func:`SplitWriter` inside :func:`vizlm.core.files.new_folder`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from vizlm.core import files

COLUMNS = {"sentences": "txt", "tags": "tags", "originals": "orig", "ids": "ids"}  # a split's file of each column
TOKEN_ID_FILES = {"tokens": "tokens.npy", "sentences": "sentences.npy", "documents": "documents.npy",
                  "meta": "tokens.json"}  # a split's token-id files (vizlm.data.tokens), by their suffix
VOCAB_FILE = "vocab.txt"
CARD_FILE = "corpus.json"  # a user corpus's card: written by `vizlm prepare --corpus` or `vizlm import`
CARD_FORMAT = "vizlm-user-corpus"
MAX_CARD_BYTES = 2**20  # a corpus card larger than this is not read


def split_file(folder: Path, split: str, suffix: str = "txt") -> Path:
    """The file of ``split`` with ``suffix`` (one of :data:`COLUMNS`' or :data:`TOKEN_ID_FILES`' values)."""
    return Path(folder) / f"{split}.{suffix}"


def document_of(sid: str) -> str:
    """The document of sentence id ``sid`` (``document:index``): the part before its last ``:`` (Brown ``ca01``,
    WSJ ``wsj_0001``, a user corpus ``d12``); empty for an id without ``:`` (a document of its own)."""
    return sid.rpartition(":")[0]


def document_keys(ids: Iterable[str]) -> list[str]:
    """Each sentence id's document (:func:`document_of`), an id without ``:`` a document of its own (a key no
    other id has): how vizlm groups sentences into documents, for reading and for resampling."""
    return [document_of(sid) or f"\0{i}" for i, sid in enumerate(ids)]


def document_sizes(ids: Iterable[str]) -> list[int]:
    """Sentences per document for sentence ids ``document:index`` in corpus order.

    A document is a run of consecutive sentences whose ids share :func:`document_of` (Brown ``ca01``,
    WSJ ``wsj_0001``); an id without ``:`` is a document of its own.
    """
    sizes: list[int] = []
    last = None
    for doc in document_keys(ids):
        if doc == last:
            sizes[-1] += 1
        else:
            sizes.append(1)
        last = doc
    return sizes


def sha256_file(path: Path, block: int = 2**20) -> str:
    """The file's sha256, read a block (a MiB) at a time: what a card and the token-id files record."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while piece := fh.read(block):
            digest.update(piece)
    return digest.hexdigest()


def file_stamp(path: Path) -> tuple[int, int]:
    """Changes when the file is rewritten: its size and modification time (what caches of a split's contents key on)."""
    st = Path(path).stat()
    return st.st_size, st.st_mtime_ns


# --------------------------------------------------------------------------- file contents
def lines_text(lines: Iterable[str]) -> str:
    """Lines as one file's text: each ended by ``\\n``."""
    return "".join(line + "\n" for line in lines)


def split_files(folder: Path, split: str, columns: Mapping[str, Iterable[str]]) -> dict[Path, str]:
    """The four files of one split, path -> text, from each column's lines (keys: :data:`COLUMNS`' suffixes)."""
    if set(columns) != set(COLUMNS.values()):
        raise ValueError(f"a split has the columns {', '.join(COLUMNS.values())}, not {', '.join(columns)}")
    return {split_file(folder, split, ext): lines_text(columns[ext]) for ext in COLUMNS.values()}


def vocab_text(itos: Iterable[str]) -> str:
    """``vocab.txt``: one word a line, in id order."""
    return "\n".join(itos) + "\n"


def card_text(card: dict) -> str:
    """``corpus.json``: the card as indented JSON, non-ASCII words as they are."""
    return json.dumps(card, indent=1, ensure_ascii=False) + "\n"


def read_card(folder: Path) -> dict | None:
    """The card (``corpus.json``) of a user corpus folder, checked: None when it is missing, too large,
    not JSON or not a vizlm corpus card."""
    marker = Path(folder) / CARD_FILE
    try:
        if not marker.is_file() or marker.stat().st_size > MAX_CARD_BYTES:
            return None
        doc = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (isinstance(doc, dict) and doc.get("format") == CARD_FORMAT and isinstance(doc.get("splits"), list)):
        return None
    return doc


# --------------------------------------------------------------------------- writing
def write_files(texts: Mapping[Path, str], force: bool = False, how: str = "pass --force") -> None:
    """Write ``texts`` (path -> text), each file atomically (:func:`vizlm.core.files.write_text`): every one
    is checked first, so a file whose content would change stops the whole write unless ``force``
    (:class:`vizlm.core.files.OverwriteError` before anything is written)."""
    for path, text in texts.items():
        files.check_replace(path, text.encode("utf-8"), force, how)
    for path, text in texts.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        files.write_text(path, text, force=True)


def write_folder(out: Path, texts: Mapping[str, str], force: bool = False, how: str = "pass --force") -> Path:
    """Make ``out`` a folder of exactly ``texts`` (file name -> text), replaced whole
    (:func:`vizlm.core.files.new_folder`: nothing of an older content stays). Every file is checked first
    (:func:`vizlm.core.files.check_replace`: other content is replaced only with ``force``); a folder that
    already holds these files is left as it is (other files in it, such as token ids, stay valid)."""
    out = Path(out)
    data = {name: text.encode("utf-8") for name, text in texts.items()}
    for name, raw in data.items():
        files.check_replace(out / name, raw, force, how)
    if out.is_dir() and all((out / name).is_file() and files.same_content(out / name, raw) for name, raw in data.items()):
        return out  # the same corpus again: nothing to change
    with files.new_folder(out) as tmp:
        for name, raw in data.items():
            files.write_bytes(tmp / name, raw, force=True)
    return out


def write_vocab(folder: Path, itos: Iterable[str]) -> Path:
    """Write ``folder/vocab.txt`` (:func:`vocab_text`), replacing it (a folder being made)."""
    return files.write_text(Path(folder) / VOCAB_FILE, vocab_text(itos), force=True)


def write_card(folder: Path, card: dict) -> Path:
    """Write ``folder/corpus.json`` (:func:`card_text`), replacing it (a folder being made)."""
    return files.write_text(Path(folder) / CARD_FILE, card_text(card), force=True)


class SplitWriter(contextlib.AbstractContextManager):
    """Writes one split's four files (:data:`COLUMNS`) a block of sentences at a time, into a folder being made
    (:func:`vizlm.core.files.new_folder` makes it whole): memory holds a block, whatever the split's size."""

    def __init__(self, folder: Path, split: str):
        self.folder, self.split = Path(folder), split
        self._stack = contextlib.ExitStack()
        self._handles = {ext: self._stack.enter_context(open(split_file(folder, split, ext), "w", encoding="utf-8",  # noqa: SIM115
                                                            newline="\n"))
                         for ext in ("orig", "txt", "tags", "ids")}

    def write(self, columns: Mapping[str, list[str]]) -> None:
        """A block of sentences: each column's lines (keys: :data:`COLUMNS`' suffixes; an empty block is skipped)."""
        for ext, lines in columns.items():
            if lines:
                self._handles[ext].write("\n".join(lines) + "\n")

    def close(self) -> None:
        self._stack.close()

    def __exit__(self, *exc) -> None:
        self.close()


def rewrite_ids(folder: Path, split: str, ids: Iterable[str]) -> None:
    """Write a split's ``.ids`` again, in a folder being made: its documents decided after the split was read."""
    with open(split_file(folder, split, "ids"), "w", encoding="utf-8", newline="\n") as fh:
        fh.writelines(sid + "\n" for sid in ids)



__all__ = ["CARD_FILE", "CARD_FORMAT", "COLUMNS", "MAX_CARD_BYTES", "TOKEN_ID_FILES", "VOCAB_FILE", "SplitWriter",
           "card_text", "document_keys", "document_of", "document_sizes", "file_stamp", "lines_text", "read_card",
           "rewrite_ids", "sha256_file", "split_file", "split_files", "vocab_text", "write_card", "write_files",
           "write_folder", "write_vocab"]
