"""Corpora, vocabulary and batching (sentence batches, and document streams for
truncated BPTT).

Raw corpora (NLTK data packages) live in ``../shared/data``; ``vizlm prepare``
turns them into the processed splits committed under ``data/``: one sentence a
line, tokens normalised with :func:`vizlm.text.normalize`, and beside each split
its POS tags, the original (unnormalised) tokens and a sentence id
(``document:index``).

Brown is split by document, deterministically: in sorted file order, document
index mod 10 == 8 -> valid, == 9 -> test, otherwise train.
"""

from __future__ import annotations

import hashlib
import heapq
import io
import itertools
import os
import random
import re
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from vizlm.text import normalize

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
VOCAB_SIZE = 10_000
SPLITS = ("train", "valid", "test")
CORPORA = {"brown": SPLITS, "wsj": ("test",), "sinica": SPLITS}
LICENCES = {
    "brown": "Brown Corpus (Francis & Kucera 1964/1979): \"Distributed with the permission of "
    "the copyright holder, redistribution permitted.\"",
    "wsj": "Penn Treebank sample (WSJ wsj_0001-wsj_0199): Copyright (C) 1995 University of "
    "Pennsylvania (LDC); made available for non-commercial use.",
    "sinica": "Sinica Treebank sample: Creative Commons Attribution-NonCommercial-ShareAlike 2.5 "
    "(http://creativecommons.org/licenses/by-nc-sa/2.5/).",
}


def default_data_dir() -> Path:
    """``$VIZLM_DATA`` or the ``data/`` folder of the repository checkout."""
    env = os.environ.get("VIZLM_DATA")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "data"


# --------------------------------------------------------------------------- readers
@dataclass
class RawSentence:
    """A corpus sentence before normalisation."""

    sid: str  # "ca01:3"
    words: list[str]  # original surface tokens
    tags: list[str]  # POS tags (Brown tags, PTB tags, or "-" for Sinica characters)


def read_brown(zip_path: Path) -> list[tuple[str, list[RawSentence]]]:
    """Brown documents in sorted file order: ``[(doc_id, sentences)]`` with POS tags kept."""
    docs = []
    with zipfile.ZipFile(zip_path) as zf:
        names = sorted(n for n in zf.namelist() if re.fullmatch(r"brown/c[a-r]\d\d", n))
        for name in names:
            doc = name.split("/")[-1]
            sents = []
            for line in zf.read(name).decode("utf-8").splitlines():
                pairs = [tok.rsplit("/", 1) for tok in line.split()]
                if not pairs:
                    continue
                words = [p[0] for p in pairs]
                tags = [p[1] if len(p) == 2 else "nil" for p in pairs]
                sents.append(RawSentence(f"{doc}:{len(sents)}", words, tags))
            docs.append((doc, sents))
    return docs


_CLITICS = {"'s", "'re", "'ve", "'ll", "'d", "'m", "n't", "'"}
_PTB_BRACKETS = {"-LRB-": "(", "-RRB-": ")", "-LCB-": "{", "-RCB-": "}", "-LSB-": "[", "-RSB-": "]"}


def read_wsj(zip_path: Path) -> list[RawSentence]:
    """Penn Treebank WSJ sample from the tagged files.

    Clitics split off by the Treebank (``'s``, ``n't``) are re-attached, as Brown
    keeps them, so the Brown-trained models see familiar tokens; their tags are
    joined with ``+``. Trace tokens (tag ``-NONE-``) are dropped.
    """
    sents = []
    with zipfile.ZipFile(zip_path) as zf:
        names = sorted(n for n in zf.namelist() if re.fullmatch(r"treebank/tagged/wsj_\d+\.pos", n))
        for name in names:
            doc = Path(name).stem
            words: list[str] = []
            tags: list[str] = []
            count = 0

            def flush() -> None:
                nonlocal words, tags, count
                if words:
                    sents.append(RawSentence(f"{doc}:{count}", words, tags))
                    count += 1
                words, tags = [], []

            for line in zf.read(name).decode("utf-8").splitlines():
                if line.startswith("*x*") or not line.strip():
                    continue
                for tok in line.split():
                    if tok in ("[", "]") or "/" not in tok:
                        continue
                    word, tag = tok.rsplit("/", 1)
                    if tag == "-NONE-":
                        continue
                    word = _PTB_BRACKETS.get(word, word).replace("\\/", "/")
                    if word.lower() in _CLITICS and words and tag in ("POS", "VBZ", "VBP", "RB", "MD", "VBD"):
                        words[-1] += word
                        tags[-1] += "+" + tag
                    else:
                        words.append(word)
                        tags.append(tag)
                    if tag == "." and word in (".", "?", "!"):
                        flush()
            flush()
    return sents


def read_sinica(zip_path: Path) -> list[RawSentence]:
    """Sinica treebank sample, character level: one token per Chinese character."""
    sents = []
    with zipfile.ZipFile(zip_path) as zf:
        text = zf.read("sinica_treebank/raw").decode("utf-8")
    for line in text.splitlines():
        m = re.match(r"#(\d+):\S*\s+(.*)", line)
        if not m:
            continue
        chars = [c for c in m.group(2) if not c.isspace()]
        if chars:
            sents.append(RawSentence(f"sinica:{m.group(1)}", chars, ["-"] * len(chars)))
    return sents


def split_of(index: int) -> str:
    """The deterministic split rule: index mod 10 == 8 -> valid, == 9 -> test."""
    return {8: "valid", 9: "test"}.get(index % 10, "train")


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


def _write_split(out: Path, corpus: str, split: str, raw: list[RawSentence]) -> None:
    folder = out / corpus
    folder.mkdir(parents=True, exist_ok=True)
    columns = {
        "txt": [" ".join(normalize(w) for w in s.words) for s in raw],
        "tags": [" ".join(s.tags) for s in raw],
        "orig": [" ".join(w.replace(" ", "_") for w in s.words) for s in raw],
        "ids": [s.sid for s in raw],
    }
    for ext, lines in columns.items():
        (folder / f"{split}.{ext}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def build_vocab(sentences: list[list[str]], size: int = VOCAB_SIZE) -> list[str]:
    """The ``size`` most frequent training types, specials first; ties broken alphabetically."""
    counts = Counter(w for s in sentences for w in s)
    for special in SPECIALS:
        counts.pop(special, None)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return list(SPECIALS) + [w for w, _ in ranked[: size - len(SPECIALS)]]


def prepare(shared: Path, out: Path) -> dict[str, int]:
    """Regenerate every processed split under ``out`` (byte-for-byte deterministic)."""
    shared, out = Path(shared), Path(out)
    counts: dict[str, int] = {}
    brown = read_brown(shared / "brown.zip")
    by_split: dict[str, list[RawSentence]] = {s: [] for s in SPLITS}
    for index, (_doc, sents) in enumerate(brown):
        by_split[split_of(index)].extend(sents)
    sinica = read_sinica(shared / "sinica_treebank.zip")
    sinica_split: dict[str, list[RawSentence]] = {s: [] for s in SPLITS}
    for index, sent in enumerate(sinica):
        sinica_split[split_of(index)].append(sent)
    for corpus, splits in (("brown", by_split), ("sinica", sinica_split), ("wsj", {"test": read_wsj(shared / "treebank.zip")})):
        for split, raw in splits.items():
            _write_split(out, corpus, split, raw)
            counts[f"{corpus}/{split}"] = len(raw)
        train = [[normalize(w) for w in s.words] for s in splits.get("train", [])]
        if train:
            (out / corpus / "vocab.txt").write_text("\n".join(build_vocab(train)) + "\n", encoding="utf-8")
    # Extra derived resources (tagger, collocations) register themselves here.
    from vizlm import resources

    resources.build_all(out)
    (out / "LICENSES.md").write_text(
        "# Licences of the processed corpora\n\n"
        + "".join(f"- `{c}/`: {LICENCES[c]}\n" for c in CORPORA),
        encoding="utf-8",
    )
    return counts


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_corpus(name: str, split: str, data_dir: Path | None = None) -> Corpus:
    """Load a processed split from ``data/`` (run ``vizlm prepare`` to regenerate)."""
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; valid: {', '.join(CORPORA)}")
    if split not in CORPORA[name]:
        raise ValueError(f"corpus {name!r} has no split {split!r}; valid: {', '.join(CORPORA[name])}")
    folder = Path(data_dir or default_data_dir()) / name
    path = folder / f"{split}.txt"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; run `vizlm prepare --shared ../shared/data --out data/`")
    cols = {}
    for field, ext in _FILES.items():
        lines = (folder / f"{split}.{ext}").read_text(encoding="utf-8").splitlines()
        cols[field] = lines if field == "ids" else [line.split() for line in lines]
    return Corpus(name, split, checksum=sha256_file(path), **cols)


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
        return cls.load(Path(data_dir or default_data_dir()) / name / "vocab.txt")


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


def document_batches(
    docs: list[list[list[int]]], streams: int = 64, bptt: int = 20, shuffle: bool = False, seed: int = 0
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
    and per-sentence scores.
    """
    if bptt < 1 or streams < 1:
        raise ValueError("bptt and streams must be >= 1")
    toks = [torch.tensor(document_tokens(d), dtype=torch.long) for d in docs]
    sizes = [len(t) - 1 for t in toks]  # targets per document
    first = [0]  # index of each document's first target in the concatenated targets
    for n in sizes:
        first.append(first[-1] + n)
    flat_inputs = torch.cat([t[:-1] for t in toks] + [torch.zeros(1, dtype=torch.long)])
    flat_targets = torch.cat([t[1:] for t in toks] + [torch.zeros(1, dtype=torch.long)])
    order = [i for i in range(len(docs)) if docs[i]]
    if shuffle:
        random.Random(seed).shuffle(order)
    heap = [(0, b) for b in range(max(1, min(streams, len(order))))]  # (segments so far, stream)
    lanes: list[list[int]] = [[] for _ in heap]  # stream -> its documents in reading order
    for d in order:
        load, b = heapq.heappop(heap)
        lanes[b].append(d)
        heapq.heappush(heap, (load + -(-sizes[d] // bptt), b))
    segs = []  # per stream: (first target, length, starts) of its segments, (segments, 3)
    for lane in lanes:
        parts = [torch.zeros(0, 3, dtype=torch.long)]
        for d in lane:
            off = torch.arange(0, sizes[d], bptt)  # (segments,)
            parts.append(torch.stack([first[d] + off, (sizes[d] - off).clamp_max(bptt), off == 0], 1))
        segs.append(torch.cat(parts))
    segs.sort(key=len, reverse=True)  # streams still reading are always a prefix
    K, B = len(segs[0]), len(segs)
    grid = torch.zeros(K, B, 3, dtype=torch.long)  # (steps, streams, (first target, length, starts))
    for b, seg in enumerate(segs):
        grid[: len(seg), b] = seg
    start, length, starts = grid.unbind(2)  # (K, B) each
    steps = torch.arange(bptt)
    real = steps < length[..., None]  # (K, B, T)
    positions = torch.where(real, start[..., None] + steps, -1)  # (K, B, T)
    inputs = torch.where(real, flat_inputs[positions.clamp_min(0)], 0)  # (K, B, T)
    targets = torch.where(real, flat_targets[positions.clamp_min(0)], 0)  # (K, B, T)
    starts = starts.bool()
    active = (length > 0).sum(1).tolist()  # streams reading at each step
    return [Segment(inputs[k, :a], targets[k, :a], starts[k, :a], positions[k, :a]) for k, a in enumerate(active)]


def read_text_file(path: Path) -> list[list[str]]:
    """Raw text, one paragraph or sentence a line, tokenised like user input."""
    from vizlm.text import split_sentences, tokenize

    out = []
    for line in io.open(path, encoding="utf-8"):
        for sent in split_sentences(line):
            toks = [t.norm for t in tokenize(sent)]
            if toks:
                out.append(toks)
    return out
