"""Example sentences and passages of a split, as the app offers them: vizlm's corpora from the shipped
``examples.json`` (written by :func:`vizlm.data.prepare.write_examples`), a user corpus's from its processed
files; and the passage a sentence ends, in its document, as the Explorer reads it."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from vizlm.core import paths
from vizlm.data.folder import document_of, file_stamp, split_file
from vizlm.data.registry import CORPORA, corpus_folder, user_corpora
from vizlm.data.text import MAX_TOKENS


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

def user_examples(corpus: str, split: str, data_dir: Path | None = None) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(sentences, passages)`` of a corpus ``vizlm import`` wrote, from its processed split (the words as
    they are, space-separated): its lines of :data:`USER_EXAMPLE_LENGTH` tokens, spread over the split, and
    runs of consecutive non-empty lines of up to :data:`USER_PASSAGE_TOKENS` tokens (ids ``test:4-9``), at
    most :data:`USER_EXAMPLES` each; both empty when it is not such a corpus, has no such split or its
    files are missing."""
    if corpus in CORPORA or split not in user_corpora(data_dir).get(corpus, ()):
        return [], []
    try:
        path = split_file(corpus_folder(corpus, data_dir), split, "orig")
        return _user_examples(str(path), file_stamp(path))
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
        j, size, doc = i, 0, document_of(ids[i])
        while (j < len(words) and words[j] and size + len(words[j]) <= USER_PASSAGE_TOKENS
               and document_of(ids[j]) == doc):  # within one document
            size += len(words[j])
            j += 1
        if j - i > 1:  # a passage is more than one line
            passages.append((f"{ids[i]}-{ids[j - 1].rpartition(':')[2]}", "\n".join(" ".join(w) for w in words[i:j])))
        i = j
    return sentences, passages



def passage_start(ids: list[str], lengths: list[int], index: int, max_tokens: int = MAX_TOKENS) -> int:
    """The first sentence of the passage that ends with sentence ``index``: it and the sentences
    before it in its document (ids ``document:index``, :func:`vizlm.data.folder.document_of`), as many whole ones as
    fit in ``max_tokens`` tokens with it (it alone when it is longer)."""
    doc, start, size = document_of(ids[index]), index, lengths[index]
    while doc and start > 0 and document_of(ids[start - 1]) == doc and size + lengths[start - 1] <= max_tokens:
        start -= 1
        size += lengths[start]
    return start
