"""Your corpus: a folder of text becomes a vizlm corpus that every command finds by name
(``vizlm prepare --corpus NAME --from FOLDER``, :func:`prepare_corpus`).

**Input.** A folder with the three splits, each one of ``train.txt`` / ``valid.txt`` / ``test.txt``,
WikiText's ``wiki.train.tokens``, pytorch/examples' PTB ``ptb.train.txt``, or any of them gzipped
(``.gz``). The text is expected tokenised (words separated by spaces, as WikiText and PTB are);
``chars=True`` reads every non-space character as a token instead (Chinese). UTF-8 only: a line that
is not is refused with its number, and so is a file with a NUL byte (binary) or without a word.

**Layouts** (detected from the first lines of ``train``, :func:`detect_layout`; ``layout=`` overrides):

* ``sentence``: one sentence a line; a blank line ends a document.
* ``paragraph``: one paragraph a line, split into sentences (the rule below); a blank line ends a
  document.
* ``wikitext``: a `` = Title = `` line starts an article, which is the document; `` = = Section = = ``
  headings (any depth) are not text and are dropped; blank lines separate paragraphs only; every other
  line is a paragraph, split into sentences; WikiText's tokens (``@-@ @,@ @.@``, ``<unk>``) are kept
  as they are, ``<unk>`` read as vizlm's.

A split of the ``sentence`` or ``paragraph`` layout without any blank line is one stream; it is read in
documents of :data:`STREAM_DOCUMENT_SENTENCES` sentences, so that document models' training batches
and shuffles it (a chunk holds whole documents) as it does a corpus of documents.

**Sentences.** A paragraph is split after a token made of ``. ! ?`` (or ``。 ！ ？``), together with the
closing quotes and brackets right after it, when another token follows (:func:`split_paragraph`;
``Mr.`` is one token and ends nothing). A sentence longer than :data:`~vizlm.data.text.MAX_TOKENS` tokens is
cut into pieces of at most that many (counted on the card), as typed text is.

**Vocabulary** from ``train``: the ``vocab_size`` most frequent words (default 10,000 with vizlm's four
specials, as the bundled models), or every word seen ``min_count`` times or more, or every word of
train (``all_words``); ties broken alphabetically. ``lowercase=True`` lowercases the words the models
read (the original words are kept beside them). Words outside the vocabulary are read as ``<unk>``; the
card reports, per split, the share of tokens that became ``<unk>`` (the OOV rate) and of all tokens
read as ``<unk>`` (the source's own ``<unk>`` included). A literal ``<s>``, ``</s>`` or ``<pad>`` in the
text is read as ``<unk>`` (vizlm keeps them for its own tokens) and counted.

**Output** (the layout :func:`vizlm.data.registry.load_corpus` reads), in the corpora folder
(:func:`vizlm.core.paths.corpora_dir`, ``$VIZLM_CORPORA``): per split ``SPLIT.txt`` (the words models
read, a sentence a line), ``.orig`` (the words as written), ``.tags`` (``-``: no gold tags; the case
rules tag with vizlm's tagger), ``.ids`` (``dN:i``: sentence ``i`` of document ``N``) and the token-id
files training streams (:class:`vizlm.data.tokens.TokenIdWriter`); ``vocab.txt``; and the **card**
``corpus.json``: source folder and files with their sha256, layout (detected or given, and why), per
split documents / sentences / tokens / paragraphs / headings dropped / long sentences cut / OOV rates,
vocabulary size and options, the checksums the caches key on, how typed text is read for models
trained on it, vizlm's version and the time.

**Streaming.** Each split is read twice: once from the source (sentences, counts, the train split's
word counts) into the text files, once from those into the token ids. Memory holds a line, the word
counts and a block of ids, whatever the corpus's size (``benchmarks/prepare.py`` measures speed and
memory on a 100M-token corpus).

**Nothing is lost.** The name, options, files and free disk space are checked before anything is
written; the corpus is then written into a temporary folder beside its place, ``.NAME.partial`` (removed if a
split turns out bad, e.g. invalid UTF-8 on line 90,000, on Ctrl-C and on SIGTERM) and swapped in whole when
complete (:func:`vizlm.core.files.new_folder`). A corpus already prepared is replaced only with
``force=True``: from the same files with the same options it is left as it is ("already prepared").
One prepare of a corpus runs at a time: it holds the lock ``.NAME.lock`` beside it (an operating system
lock, freed when its process ends, :func:`vizlm.core.files.exclusive`), and a second one is refused at once; a
``.NAME.partial`` that a killed run left is removed by the next prepare of that name.
"""

from __future__ import annotations

import datetime
import gzip
import hashlib
import itertools
import re
import shutil
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vizlm.core import files, paths
from vizlm.data.folder import (
    CARD_FORMAT,
    SplitWriter,
    document_of,
    read_card,
    rewrite_ids,
    sha256_file,
    write_card,
    write_vocab,
)
from vizlm.data.layouts import LAYOUT_HELP, LAYOUTS
from vizlm.data.registry import SPLITS, DataError, check_corpus_name
from vizlm.data.text import MAX_TOKENS, reading_of
from vizlm.data.tokens import TokenIdWriter, vocab_digest
from vizlm.data.vocab import BOS, EOS, PAD, SPECIALS, UNK, VOCAB_SIZE, WORD_RULE, Vocab, is_word, unusable_words

SOURCE_NAMES = ("{split}.txt", "wiki.{split}.tokens", "ptb.{split}.txt")  # each also gzipped (.gz)
STREAM_DOCUMENT_SENTENCES = 1000  # a split without blank lines is read in documents of this many sentences
MAX_LINE_BYTES = 4 * 2**20  # a longer line is refused (split it): memory holds one line
DETECT_LINES = 2000  # lines of train read to detect the layout
PARAGRAPH_SHARE = 0.3  # the share of lines holding two sentences or more from which lines are paragraphs
DISK_FACTOR = 3.5  # bytes written per byte of (uncompressed) text: .txt, .orig, .tags, .ids, token ids
GZIP_FACTOR = 4  # a gzipped source is estimated this many times its size uncompressed
_RESERVED = {BOS, EOS, PAD}  # words vizlm keeps for its own tokens: read as <unk>
_TAGS = [("- " * n)[:-1] for n in range(MAX_TOKENS + 1)]  # a sentence's .tags line: "-" for each of its n words
_WRITE_BLOCK = 8192  # sentences buffered between two writes
_READ_BLOCK = 8 * 2**20  # bytes of text read at a time in the second pass

_TITLE = re.compile(r"^ ?= [^=].* = ?$")  # WikiText's article title
_HEADING = re.compile(r"^ ?(?:= ){2,}.*(?: =){2,} ?$")  # a section heading, any depth
_END = re.compile(r"[.!?\u3002\uff01\uff1f]+(?: (?:''|[\"'\u201d\u2019\u00bb)\]}]))*(?= )")  # a token's start: checked


class PrepareError(DataError):
    """A folder or option that cannot become a corpus, with a message for the user (exit 2)."""


def split_paragraph(line: str) -> list[str]:
    """The sentences of a paragraph (tokens separated by single spaces), each a string of tokens: a
    sentence ends after a token of ``. ! ? 。 ！ ？`` and the closing quotes or brackets right after
    it, when another token follows (module docstring)."""
    cuts = [m.end() for m in _END.finditer(line) if not m.start() or line[m.start() - 1] == " "]
    if not cuts:
        return [line]
    starts = [0, *(c + 1 for c in cuts)]
    return [line[a:b] for a, b in zip(starts, [*cuts, len(line)])]


@dataclass
class Source:
    """One split's source file."""

    split: str
    path: Path

    @property
    def gzipped(self) -> bool:
        return self.path.name.endswith(".gz")

    def size(self) -> int:
        return self.path.stat().st_size

    def lines(self, limit: int | None = None) -> Iterator[tuple[int, str]]:
        """``(line number, text)`` of each line, checked: UTF-8, no NUL byte, at most
        :data:`MAX_LINE_BYTES`; ``limit``: the first lines only."""
        opener = gzip.open if self.gzipped else open
        try:
            with opener(self.path, "rb") as fh:
                n = 0
                while limit is None or n < limit:
                    raw = fh.readline(MAX_LINE_BYTES + 1)
                    if not raw:
                        return
                    n += 1
                    if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                        raise PrepareError(f"{self.path}: line {n:,} is longer than {MAX_LINE_BYTES // 2**20} MiB; "
                                           "split it into lines")
                    if b"\0" in raw:
                        raise PrepareError(f"{self.path}: line {n:,} holds a NUL byte: this is not a text file")
                    try:
                        text = raw.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise PrepareError(f"{self.path}: line {n:,} is not valid UTF-8 (byte {exc.start + 1} of the "
                                           "line); convert the file to UTF-8") from None
                    if n == 1 and text.startswith("\ufeff"):
                        text = text[1:]
                    yield n, text
        except (gzip.BadGzipFile, EOFError, OSError, zlib.error) as exc:
            if isinstance(exc, (FileNotFoundError, PermissionError)):
                raise
            raise PrepareError(f"{self.path}: cannot be read ({exc})") from None

    def sha256(self) -> str:
        return sha256_file(self.path)


def find_sources(folder: Path | str) -> dict[str, Source]:
    """The three splits' files in ``folder`` (:data:`SOURCE_NAMES`, each also ``.gz``):
    :class:`PrepareError` when one is missing, found twice, or not a regular file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PrepareError(f"--from {folder}: not a folder (give the folder with train.txt, valid.txt, test.txt)")
    found = {}
    for split in SPLITS:
        names = [n.format(split=split) + gz for n in SOURCE_NAMES for gz in ("", ".gz")]
        present = [folder / n for n in names if (folder / n).exists()]
        if not present:
            raise PrepareError(f"{folder} has no {split} split: expected one of {', '.join(names[::2])} (or .gz)")
        if len(present) > 1:
            raise PrepareError(f"{folder} has {split} twice ({', '.join(p.name for p in present)}); keep one")
        if not present[0].is_file():
            raise PrepareError(f"{present[0]} is not a regular file")
        found[split] = Source(split, present[0])
    return found


# --------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class Layout:
    name: str
    detected: bool
    reason: str


def detect_layout(source: Source, lines: int = DETECT_LINES, chars: bool = False) -> Layout:
    """The layout of ``source`` from its first ``lines`` lines (module docstring): WikiText when it has
    `` = Title = `` or `` = = Section = = `` lines; paragraphs when at least :data:`PARAGRAPH_SHARE` of
    its lines hold two sentences or more (``chars``: read a character a token, as the split will be, so
    that ``。`` ends a sentence); else a sentence a line."""
    titles = headings = blank = text = multi = 0
    for _, line in source.lines(lines):
        stripped = line.rstrip("\r\n")
        if not stripped.strip():
            blank += 1
        elif _TITLE.match(stripped) and not _HEADING.match(stripped):
            titles += 1
        elif _HEADING.match(stripped):
            headings += 1
        else:
            text += 1
            joined = " ".join("".join(stripped.split())) if chars else " ".join(stripped.split())
            multi += len(split_paragraph(joined)) > 1
    read = titles + headings + blank + text
    if titles:
        return Layout("wikitext", True, f"{titles} ' = Title = ' and {headings} ' = = Section = = ' line(s) in the "
                                        f"first {read:,} lines")
    share = multi / text if text else 0.0
    docs = f"{blank} blank line(s)" if blank else "no blank line (one stream)"
    if share >= PARAGRAPH_SHARE:
        return Layout("paragraph", True, f"{share:.0%} of the first {text:,} text lines hold two sentences or more; {docs}")
    return Layout("sentence", True, f"{share:.0%} of the first {text:,} text lines hold two sentences or more "
                                    f"(paragraphs from {PARAGRAPH_SHARE:.0%}); {docs}")


def wikitext_note(path: Path | str) -> str | None:
    """A note for a text read as loose text (``--text-file``) when it is laid out as WikiText (its first lines
    have `` = Title = `` headings): read so, its headings are scored as sentences and its paragraphs are its
    documents; prepared as a corpus, its articles are. None otherwise (or when it cannot be read as UTF-8)."""
    try:
        layout = detect_layout(Source("text", Path(path)))
    except (DataError, OSError):
        return None
    if layout.name != "wikitext":
        return None
    return (f"{Path(path).name} looks like WikiText ({layout.reason}); read as text, its heading lines are scored as "
            "sentences and each paragraph is a document. To read its articles as documents without the headings, "
            "prepare its folder as a corpus: vizlm prepare --corpus NAME --from FOLDER, then --corpus NAME")


# --------------------------------------------------------------------------- reading a split
@dataclass
class SplitCounts:
    documents: int = 0
    sentences: int = 0
    tokens: int = 0  # words (no </s>)
    paragraphs: int = 0
    headings: int = 0  # WikiText section headings dropped
    long_cut: int = 0  # sentences longer than MAX_TOKENS, cut into pieces
    reserved: int = 0  # literal <s> </s> <pad> read as <unk>
    unusable: int = 0  # tokens that can be no word (vizlm.data.vocab.is_word) read as <unk>
    first_unusable: str | None = None
    blank_lines: int = 0
    stream: bool = False  # no blank line: documents of STREAM_DOCUMENT_SENTENCES sentences


def _sentences(source: Source, layout: str, chars: bool, counts: SplitCounts,
               progress: Callable[[int], None] | None = None) -> Iterator[tuple[bool, str]]:
    """``(starts a document, the sentence's tokens joined by single spaces)`` of a split, in order."""
    wiki = layout == "wikitext"
    pending_doc = True  # the next sentence starts a document
    in_doc = 0  # sentences of the current document
    for n, line in source.lines():
        if progress and n % 4096 == 0:
            progress(4096)
        stripped = line.strip()
        if not stripped:
            counts.blank_lines += 1
            if not wiki and in_doc:
                pending_doc, in_doc = True, 0
            continue
        if wiki and stripped.startswith("="):
            if _HEADING.match(stripped) or _HEADING.match(" " + stripped):
                counts.headings += 1
                continue
            if _TITLE.match(" " + stripped):
                pending_doc, in_doc = True, 0
                continue
        joined = " ".join("".join(stripped.split())) if chars else " ".join(stripped.split())
        if layout == "sentence":
            pieces = [joined]
        else:
            counts.paragraphs += 1
            pieces = split_paragraph(joined)
        for sentence in pieces:
            if sentence.count(" ") >= MAX_TOKENS:
                counts.long_cut += 1
                words = sentence.split(" ")
                parts = [" ".join(words[i : i + MAX_TOKENS]) for i in range(0, len(words), MAX_TOKENS)]
            else:
                parts = (sentence,)
            for part in parts:
                yield pending_doc, part
                counts.sentences += 1
                counts.documents += pending_doc
                pending_doc = False
                in_doc += 1


_RESERVED_RE = re.compile("(?:^|(?<= ))(?:" + "|".join(map(re.escape, sorted(_RESERVED))) + ")(?= |$)")


def _read_words(line: str, lowercase: bool, counts: SplitCounts) -> str:
    """The words models read of a sentence's original words: lowercased if asked, vizlm's reserved
    words and tokens that can be no word (:func:`vizlm.data.vocab.is_word`) as ``<unk>``."""
    if lowercase:
        line = line.lower()
    if "<" in line:
        line, n = _RESERVED_RE.subn(UNK, line)
        counts.reserved += n
    if bad := unusable_words(line):
        counts.unusable += len(bad)
        counts.first_unusable = counts.first_unusable or bad[0]
        line = " ".join(w if is_word(w) else UNK for w in line.split(" "))
    return line


# --------------------------------------------------------------------------- the vocabulary
def choose_vocab(counts: Counter, vocab_size: int | None = VOCAB_SIZE, min_count: int | None = None,
                 all_words: bool = False) -> list[str]:
    """The vocabulary (module docstring): specials first, then by count, ties alphabetically."""
    ranked = sorted(((w, c) for w, c in counts.items() if w not in SPECIALS), key=lambda kv: (-kv[1], kv[0]))
    if all_words:
        words = [w for w, _ in ranked]
    elif min_count is not None:
        words = [w for w, c in ranked if c >= min_count]
    else:
        words = [w for w, _ in ranked[: max(0, (vocab_size or VOCAB_SIZE) - len(SPECIALS))]]
    return [*SPECIALS, *words]


# --------------------------------------------------------------------------- preparing
def _options(layout: str | None, vocab_size: int | None, min_count: int | None, all_words: bool, lowercase: bool,
             chars: bool) -> dict:
    if layout is not None and layout not in LAYOUTS:
        raise PrepareError(f"layout {str(layout)[:40]!r}: choose one of {', '.join(LAYOUTS)}")
    chosen = [k for k, v in (("vocab_size", vocab_size), ("min_count", min_count), ("all_words", all_words or None))
              if v is not None]
    if len(chosen) > 1:
        raise PrepareError(f"give one of --vocab-size, --min-count, --all-words (got {', '.join(chosen)})")
    if vocab_size is not None and not (isinstance(vocab_size, int) and len(SPECIALS) < vocab_size <= 2**31 - 1):
        raise PrepareError(f"--vocab-size {vocab_size}: give a whole number above {len(SPECIALS)} (vizlm's specials)")
    if min_count is not None and not (isinstance(min_count, int) and min_count >= 1):
        raise PrepareError(f"--min-count {min_count}: give a whole number of at least 1")
    vocab = ({"all_words": True} if all_words else {"min_count": min_count} if min_count is not None
             else {"vocab_size": vocab_size or VOCAB_SIZE})
    return {"layout": layout, "vocabulary": vocab, "lowercase": bool(lowercase), "chars": bool(chars)}


def _same_options(card: dict, options: dict) -> bool:
    """Whether an existing card was prepared with ``options`` (a detected layout matches no layout given)."""
    old = card.get("options") or {}
    return all(old.get(k) == options[k] for k in ("vocabulary", "lowercase", "chars")) and (
        options["layout"] is None or (card.get("layout") or {}).get("name") == options["layout"])


def _check_disk(root: Path, sources: dict[str, Source]) -> None:
    need = sum(s.size() * (GZIP_FACTOR if s.gzipped else 1) for s in sources.values()) * DISK_FACTOR
    probe = root
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        raise PrepareError(f"preparing needs about {need / 2**30:.1f} GiB and {probe} has {free / 2**30:.1f} GiB free; "
                           "free some space or set another corpora folder (--corpora, $VIZLM_CORPORA)")


def _bar(total: int, desc: str, enabled: bool, unit: str = " lines"):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=None if enabled else True,
                file=sys.stderr, leave=False, mininterval=0.5)


def _count_lines(source: Source) -> int | None:
    """Lines of an uncompressed source, counted fast (for the progress bar); None when gzipped."""
    if source.gzipped:
        return None
    n = 0
    with open(source.path, "rb") as fh:
        for block in iter(lambda: fh.read(2**24), b""):
            n += block.count(b"\n")
    return n


def _write_split(source: Source, out: Path, layout: str, options: dict, counts: SplitCounts,
                 word_counts: Counter | None, progress: bool) -> None:
    """Pass one: the source's sentences into ``SPLIT.orig`` / ``.txt`` / ``.tags`` / ``.ids``."""
    split = source.split
    lowercase, chars = options["lowercase"], options["chars"]
    bar = _bar(_count_lines(source) or 0, f"{split}: reading", progress)
    d, i = -1, 0
    bufs: dict[str, list[str]] = {ext: [] for ext in ("orig", "txt", "tags", "ids")}
    orig, txt, tags, ids = bufs["orig"], bufs["txt"], bufs["tags"], bufs["ids"]
    with SplitWriter(out, split) as writer:

        def flush() -> None:
            writer.write(bufs)
            if word_counts is not None and txt:
                word_counts.update(" ".join(txt).split(" "))
            for buf in bufs.values():
                buf.clear()

        for new_doc, sentence in _sentences(source, layout, chars, counts, progress=bar.update):
            if new_doc:
                d, i = d + 1, 0
            n = sentence.count(" ") + 1
            counts.tokens += n
            orig.append(sentence)
            txt.append(_read_words(sentence, lowercase, counts))
            tags.append(_TAGS[n])
            ids.append(f"d{d}:{i}")
            i += 1
            if len(orig) >= _WRITE_BLOCK:
                flush()
        flush()
    bar.close()
    if counts.tokens == 0:
        raise PrepareError(f"{source.path} holds no words")
    if layout != "wikitext" and counts.documents == 1 and counts.sentences > STREAM_DOCUMENT_SENTENCES:
        # no blank line: one stream, read in documents of STREAM_DOCUMENT_SENTENCES sentences
        k = STREAM_DOCUMENT_SENTENCES
        rewrite_ids(out, split, (f"d{s // k}:{s % k}" for s in range(counts.sentences)))
        counts.documents = -(-counts.sentences // k)
        counts.stream = True


def _write_ids(out: Path, split: str, vocab: Vocab, counts: SplitCounts, stats: dict, progress: bool = False) -> str:
    """Pass two: ``SPLIT.txt`` -> the token-id files, a block of lines at a time; counts the tokens read
    as ``<unk>`` and those that were ``<unk>`` in the text already."""
    digest = hashlib.sha256()
    writer = TokenIdWriter(out, split, len(vocab), vocab_digest(vocab.itos), counts.tokens + counts.sentences,
                           counts.sentences, counts.documents)
    unk, get = vocab.unk_id, vocab.stoi.get
    read_unk = source_unk = 0
    last = None
    bar = _bar(counts.sentences, f"{split}: token ids", progress, " sentences")
    with open(out / f"{split}.txt", "rb") as f_txt, open(out / f"{split}.ids", encoding="utf-8") as f_ids:
        while lines := f_txt.readlines(_READ_BLOCK):
            bar.update(len(lines))
            block = b"".join(lines)
            digest.update(block)
            sids = [f_ids.readline() for _ in lines]
            docs = [document_of(sid) for sid in sids]
            starts = [doc != prev for doc, prev in zip(docs, [last, *docs[:-1]])]
            last = docs[-1]
            text = block.decode("utf-8")
            words = text.split()
            lengths = np.fromiter(map(bytes.count, lines, itertools.repeat(b" ")), dtype=np.int64, count=len(lines)) + 1
            ids = np.fromiter(map(get, words, itertools.repeat(unk)), dtype=np.int64, count=len(words))
            n_unk = int(np.count_nonzero(ids == unk))
            read_unk += n_unk
            if n_unk:
                source_unk += words.count(UNK)
            writer.add_block(ids, lengths, np.asarray(starts, dtype=bool))
    bar.close()
    writer.close(digest.hexdigest())
    stats["unk_tokens"] = read_unk
    stats["oov_tokens"] = read_unk - source_unk
    return digest.hexdigest()


def prepare_corpus(name: str, source: Path | str, layout: str | None = None, vocab_size: int | None = None,
                   min_count: int | None = None, all_words: bool = False, lowercase: bool = False,
                   chars: bool = False, force: bool = False, progress: bool = False,
                   corpora_dir: Path | None = None) -> dict:
    """Prepare the folder ``source`` as the corpus ``name`` (module docstring); returns its card.

    :class:`PrepareError` (a :class:`~vizlm.data.registry.DataError`) on a bad folder, file or option, before
    anything is written; a corpus already prepared with other options or from other files is replaced
    only with ``force``."""
    check_corpus_name(name)
    options = _options(layout, vocab_size, min_count, all_words, lowercase, chars)
    sources = find_sources(source)
    root = Path(corpora_dir or paths.corpora_dir())
    final = root / name
    if (done := _prepared_already(final, name, options, sources, force)) is not None:
        return done
    chosen = Layout(layout, False, "given (--layout)") if layout else detect_layout(sources["train"], chars=chars)
    _check_disk(root, sources)
    root.mkdir(parents=True, exist_ok=True)
    lock = root / f".{name}.lock"
    with files.exclusive(lock, f"corpus {name!r} is being prepared by another process right now (it holds {lock}); "
                               "wait for it to finish, or prepare another name"):
        if (done := _prepared_already(final, name, options, sources, force)) is not None:
            return done  # (another process prepared it while this one checked)
        start = time.perf_counter()
        # .NAME.partial: a leftover of a killed run is removed first (the lock is ours, so no run is writing it)
        with files.new_folder(final, partial=root / f".{name}.partial") as tmp:
            card = _prepare_into(tmp, name, sources, chosen, options, progress)
            card["seconds"] = round(time.perf_counter() - start, 2)
            write_card(tmp, card)
    return card


def _prepared_already(final: Path, name: str, options: dict, sources: dict[str, Source], force: bool) -> dict | None:
    """The card of ``final`` when it was prepared from these files with these options (nothing to do); None when
    it is to be prepared; :class:`PrepareError` when it exists otherwise and ``force`` is not set."""
    if not final.exists() or force:
        return None
    card = read_card(final)
    if card is None:
        raise PrepareError(f"{final} exists and is not a prepared corpus; pass --force to replace it, or "
                           "choose another name")
    if not _same_options(card, options):
        raise PrepareError(f"corpus {name!r} was prepared with other options ({_options_text(card.get('options'))}); "
                           "pass --force to prepare it again with these")
    recorded = {s: f.get("sha256") for s, f in ((card.get("source") or {}).get("files") or {}).items()}
    if recorded == {s: src.sha256() for s, src in sources.items()}:
        return {**card, "already_prepared": True}
    raise PrepareError(f"corpus {name!r} was prepared from other files ({(card.get('source') or {}).get('folder')}); "
                       "pass --force to prepare it again from these")


def _options_text(options: dict | None) -> str:
    """``vocab_size=10000, lowercase, layout=detected``: the options a card records, in words."""
    if not options:  # e.g. a corpus written by `vizlm import`, which prepares nothing
        return "none recorded"
    vocab = [f"{k}={v}" for k, v in (options.get("vocabulary") or {}).items()]
    flags = [k for k in ("lowercase", "chars") if options.get(k)]
    return ", ".join([*vocab, *flags, f"layout={options.get('layout') or 'detected'}"])


def _prepare_into(out: Path, name: str, sources: dict[str, Source], layout: Layout, options: dict,
                  progress: bool) -> dict:
    counts = {split: SplitCounts() for split in SPLITS}
    word_counts: Counter = Counter()
    for split in SPLITS:
        _write_split(sources[split], out, layout.name, options, counts[split],
                     word_counts if split == "train" else None, progress)
    vocab_words = options["vocabulary"]
    itos = choose_vocab(word_counts, vocab_words.get("vocab_size"), vocab_words.get("min_count"),
                        vocab_words.get("all_words", False))
    if len(itos) <= len(SPECIALS):
        if vocab_words.get("min_count") is not None:
            raise PrepareError(f"no word of train is in the vocabulary ({_options_text(options)}); lower --min-count")
        raise PrepareError(f"{sources['train'].path}: train has no words (besides vizlm's own {', '.join(SPECIALS)})")
    vocab = Vocab(itos)
    write_vocab(out, itos)
    splits, checksums = {}, {}
    for split in SPLITS:
        c = counts[split]
        stats: dict = {}
        checksums[split] = _write_ids(out, split, vocab, c, stats, progress)
        words = c.tokens
        splits[split] = {"documents": c.documents, "sentences": c.sentences, "tokens": words,
                         "paragraphs": c.paragraphs, "headings_dropped": c.headings, "long_sentences_cut": c.long_cut,
                         "reserved_words_as_unk": c.reserved, "unusable_words_as_unk": c.unusable,
                         "oov_tokens": stats["oov_tokens"],
                         "oov_rate": round(stats["oov_tokens"] / words, 6) if words else 0.0,
                         "unk_rate": round(stats["unk_tokens"] / words, 6) if words else 0.0,
                         "documents_from": ("articles" if layout.name == "wikitext" else
                                            f"every {STREAM_DOCUMENT_SENTENCES:,} sentences (no blank line)" if c.stream
                                            else "blank lines")}
    from vizlm import __version__

    unusable = sum(counts[s].unusable for s in SPLITS)
    notes = []
    if unusable:
        first = next((s, counts[s].first_unusable) for s in SPLITS if counts[s].unusable)
        notes.append(f"{unusable:,} tokens can be no word of a model ({WORD_RULE}) and are read as <unk> "
                     f"(the first, in {first[0]}: {ascii(first[1])[:60]})")
    return {
        "notes": notes,
        "format": CARD_FORMAT, "name": name, "splits": list(SPLITS), "vocab_size": len(itos),
        "source": {"kind": "prepared", "folder": str(Path(sources["train"].path.parent).resolve()),
                   "files": {s: {"file": src.path.name, "bytes": src.size(), "sha256": src.sha256()}
                             for s, src in sources.items()}},
        "layout": {"name": layout.name, "detected": layout.detected, "reason": layout.reason,
                   "rule": LAYOUT_HELP[layout.name]},
        "options": options,
        "split_stats": splits,
        "checksums": checksums,
        "reading": {**reading_of(itos), "chars": options["chars"]},
        "vizlm": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


__all__ = ["LAYOUTS", "LAYOUT_HELP", "STREAM_DOCUMENT_SENTENCES", "PrepareError", "choose_vocab", "detect_layout",
           "find_sources", "prepare_corpus", "split_paragraph", "wikitext_note"]
