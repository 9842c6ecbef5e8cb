"""Token ids of a corpus split at any size: in memory (encoded from the text files) or in files
beside them (``vizlm prepare --token-ids``), read one chunk at a time.

Files of a split, beside ``SPLIT.txt``::

    SPLIT.tokens.npy     (N,) uint16 | int32   token ids, every sentence followed by </s>: a
                                               document's targets in running text are one run
    SPLIT.sentences.npy  (S + 1,) int64        sentence i is tokens[off[i] : off[i + 1]], </s> last
    SPLIT.documents.npy  (D + 1, 2) int64      document d: sentences [doc[d, 0], doc[d + 1, 0]),
                                               tokens [doc[d, 1], doc[d + 1, 1])
    SPLIT.tokens.json    counts, dtype, sha256 of the vocabulary and of SPLIT.txt

They are plain ``.npy`` files (``np.load(path, mmap_mode="r")`` maps them), but vizlm only ever
reads windows of them (``np.fromfile`` at an offset; the whole file is never mapped, so neither
resident nor virtual memory grows with it): a chunk of at most :func:`chunk_tokens` tokens, cut
at document boundaries. Training, ``vizlm eval`` and the corpus statistics hold one chunk at a
time, so their memory does not depend on the corpus size (``tests/test_tokens.py``).

How an epoch's steps read them: :mod:`vizlm.data.batches`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vizlm.data.folder import TOKEN_ID_FILES, document_of, document_sizes, sha256_file, split_file
from vizlm.data.registry import corpus_folder, load_corpus
from vizlm.data.vocab import Vocab, encode_sentences

DEFAULT_CHUNK_TOKENS = 2**21  # 2M tokens: 4-8 MB of ids, tens of MB of batches; Brown train (1M) is one chunk
_INDEX_BLOCK = 2**16  # rows of the documents index read at a time when cutting chunks


def chunk_tokens() -> int:
    """Tokens per chunk: ``$VIZLM_CHUNK_TOKENS``, else :data:`DEFAULT_CHUNK_TOKENS`. Memory grows
    with it; shuffling mixes only within a chunk, so larger is more random."""
    value = int(os.environ.get("VIZLM_CHUNK_TOKENS", DEFAULT_CHUNK_TOKENS))
    if value < 1:
        raise ValueError(f"VIZLM_CHUNK_TOKENS must be >= 1, not {value}")
    return value


def vocab_digest(itos: Sequence[str]) -> str:
    """sha256 of a vocabulary (one word a line): the token-id files record the one they used."""
    return hashlib.sha256("\n".join(itos).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- windows of .npy files
class NpyFile:
    """A ``.npy`` file read by windows of rows, never mapped or loaded whole."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with open(self.path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            self.shape, fortran, self.dtype = read_header(fh)
            self.offset = fh.tell()
        if fortran:
            raise ValueError(f"{self.path}: Fortran-ordered arrays are not supported")

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        lo, hi, _ = rows.indices(len(self))
        hi = max(lo, hi)
        per_row = math.prod(self.shape[1:])
        with open(self.path, "rb") as fh:
            fh.seek(self.offset + lo * per_row * self.dtype.itemsize)
            out = np.fromfile(fh, dtype=self.dtype, count=(hi - lo) * per_row)
        return out.reshape((hi - lo, *self.shape[1:]))


# --------------------------------------------------------------------------- a split's token ids
@dataclass(frozen=True)
class Chunk:
    """Documents ``[d0, d1)`` = sentences ``[s0, s1)`` = tokens ``[t0, t1)`` of a split."""

    d0: int
    d1: int
    s0: int
    s1: int
    t0: int
    t1: int


@dataclass
class ChunkData:
    """The ids of one chunk, in memory; offsets are relative to the chunk."""

    tokens: np.ndarray  # (t1 - t0,) token ids, </s> after every sentence
    offsets: np.ndarray  # (s1 - s0 + 1,) int64 sentence i = tokens[offsets[i] : offsets[i + 1]]
    documents: np.ndarray  # (d1 - d0 + 1, 2) int64 (first sentence, first token) of each document

    def lengths(self) -> list[int]:
        """Words per sentence (</s> not counted)."""
        return (np.diff(self.offsets) - 1).tolist()

    def sentence(self, i: int) -> list[int]:
        return self.tokens[self.offsets[i] : self.offsets[i + 1] - 1].tolist()

    def collate(self, idx: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Sentences ``idx`` -> (inputs, targets), each (B, T), right-padded with 0: a sentence ``w_1..w_n`` is
        read as ``<s> w_1..w_n`` and predicts ``w_1..w_n </s>`` (every batcher's, :mod:`vizlm.data.batches`)."""
        idx = np.asarray(idx, dtype=np.int64)
        first = self.offsets[idx]  # (B,)
        n = self.offsets[idx + 1] - first  # (B,) targets: words + </s>
        steps = np.arange(int(n.max()))  # (T,)
        real = steps < n[:, None]  # (B, T)
        pos = first[:, None] + steps  # (B, T)
        targets = np.where(real, self.tokens[np.where(real, pos, 0)], 0)  # (B, T)
        shifted = real & (steps >= 1)  # input j >= 1 is target j - 1
        inputs = np.where(shifted, self.tokens[np.where(shifted, pos - 1, 0)], 0)  # (B, T)
        inputs[:, 0] = Vocab.bos_id
        return torch.from_numpy(inputs.astype(np.int64)), torch.from_numpy(targets.astype(np.int64))

    def document_targets(self) -> list[int]:
        """Targets per document (its words and one </s> per sentence)."""
        return np.diff(self.documents[:, 1]).tolist()

    def document_sentences(self) -> list[int]:
        return np.diff(self.documents[:, 0]).tolist()

    def running_inputs(self) -> np.ndarray:
        """Inputs of the documents read as running text: each target's previous token, ``<s>``
        at a document start (:func:`vizlm.data.batches.document_tokens`)."""
        inputs = np.empty(len(self.tokens), dtype=np.int64)
        inputs[1:] = self.tokens[:-1]
        inputs[self.documents[:-1, 1]] = Vocab.bos_id
        return inputs

    def select_documents(self, docs: Sequence[int]) -> ChunkData:
        """Documents ``docs`` of this chunk (in that order) as a chunk of their own."""
        parts, offs, rows = [], [np.zeros(1, dtype=np.int64)], [(0, 0)]
        s_base = t_base = 0
        for d in docs:
            (sa, ta), (sb, tb) = self.documents[d], self.documents[d + 1]
            parts.append(self.tokens[ta:tb])
            offs.append(self.offsets[sa + 1 : sb + 1] - ta + t_base)
            s_base, t_base = s_base + (sb - sa), t_base + (tb - ta)
            rows.append((s_base, t_base))
        tokens = np.concatenate(parts) if parts else self.tokens[:0]
        return ChunkData(tokens, np.concatenate(offs), np.asarray(rows, dtype=np.int64))


class TokenSplit:
    """The token ids of one split: three arrays (module docstring) in memory or in files.

    ``checksum``: sha256 of the split's text file (what checkpoints and the cache record)."""

    def __init__(self, tokens, sentences, documents, checksum: str, vocab_sha256: str | None = None,
                 source: str = "memory"):
        self._tokens, self._sentences, self._documents = tokens, sentences, documents
        self.checksum = checksum
        self.vocab_sha256 = vocab_sha256
        self.source = source  # "memory" or the folder of the files

    # -- construction
    @classmethod
    def from_sequences(cls, seqs: list[list[int]], sizes: list[int] | None = None, checksum: str = "",
                       vocab_sha256: str | None = None) -> TokenSplit:
        """Encoded sentences (``sizes``: sentences per document; None: one each) held in memory."""
        sizes = [1] * len(seqs) if sizes is None else list(sizes)
        if sum(sizes) != len(seqs):
            raise ValueError(f"documents hold {sum(sizes)} sentences but there are {len(seqs)}")
        lengths = np.fromiter((len(s) + 1 for s in seqs), dtype=np.int64, count=len(seqs))
        sentences = np.zeros(len(seqs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=sentences[1:])
        tokens = np.empty(int(sentences[-1]), dtype=np.int32)
        for s, start in zip(seqs, sentences[:-1].tolist()):
            tokens[start : start + len(s)] = s
            tokens[start + len(s)] = Vocab.eos_id
        first = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=first[1:])
        documents = np.stack([first, sentences[first]], 1)
        return cls(tokens, sentences, documents, checksum, vocab_sha256)

    @classmethod
    def open(cls, folder: Path, split: str) -> TokenSplit | None:
        """The token-id files of ``folder/split`` (None when there are none). Refuses files that
        are older than the text they were made from (its sha256 differs)."""
        folder = Path(folder)
        meta_path = split_file(folder, split, TOKEN_ID_FILES["meta"])
        if not meta_path.is_file():
            return None
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        text = split_file(folder, split)
        if text.is_file() and sha256_file(text) != meta["text_sha256"]:
            raise ValueError(f"{split_file(folder, split, TOKEN_ID_FILES['tokens'])} was made from another {text.name}; "
                             f"run `vizlm prepare --token-ids` again")
        arrays = {k: NpyFile(split_file(folder, split, TOKEN_ID_FILES[k])) for k in ("tokens", "sentences", "documents")}
        if (len(arrays["tokens"]), len(arrays["sentences"]) - 1, len(arrays["documents"]) - 1) != (
                meta["tokens"], meta["sentences"], meta["documents"]):
            raise ValueError(f"{folder}/{split}.*.npy do not match {meta_path.name}; run `vizlm prepare --token-ids` again")
        return cls(arrays["tokens"], arrays["sentences"], arrays["documents"], meta["text_sha256"],
                   meta["vocab_sha256"], str(folder))

    def whole(self) -> ChunkData:
        """All of the split as one chunk, in memory (sentences held in memory: :func:`vizlm.data.batches.in_memory`)."""
        return self.read(Chunk(0, self.n_documents, 0, len(self), 0, self.n_tokens))

    # -- sizes
    def __len__(self) -> int:
        return len(self._sentences) - 1

    @property
    def n_tokens(self) -> int:
        return len(self._tokens)

    @property
    def n_documents(self) -> int:
        return len(self._documents) - 1

    def sentence_tokens(self) -> np.ndarray:
        """Predicted tokens per sentence (words + </s>), (S,) int64, read a block at a time."""
        out = np.empty(len(self), dtype=np.int64)
        for b0 in range(0, len(self), _INDEX_BLOCK):
            out[b0 : b0 + _INDEX_BLOCK] = np.diff(np.asarray(self._sentences[b0 : min(len(self), b0 + _INDEX_BLOCK) + 1]))
        return out

    def counts(self, size: int) -> np.ndarray:
        """How often each id ``< size`` is predicted (words and ``</s>``), (size,) int64, read a block at a time."""
        out = np.zeros(size, dtype=np.int64)
        for t0 in range(0, self.n_tokens, _INDEX_BLOCK):
            out += np.bincount(np.asarray(self._tokens[t0 : t0 + _INDEX_BLOCK], dtype=np.int64), minlength=size)[:size]
        return out

    def head(self, sentences: int) -> TokenSplit:
        """The first ``sentences`` sentences, in memory (a dry run's few batches); the document
        they end in is cut there."""
        n = min(sentences, len(self))
        offs = np.asarray(self._sentences[0 : n + 1], dtype=np.int64)
        docs = np.asarray(self._documents[0 : min(n, self.n_documents) + 1], dtype=np.int64)
        docs = np.concatenate([docs[docs[:, 0] < n], [[n, offs[-1]]]]) if n else np.zeros((1, 2), dtype=np.int64)
        return TokenSplit(np.asarray(self._tokens[0 : int(offs[-1])]), offs, docs, self.checksum, self.vocab_sha256)

    # -- chunks
    def chunks(self, max_tokens: int | None = None) -> list[Chunk]:
        """Consecutive runs of whole documents of at most ``max_tokens`` tokens each (a longer
        document is a chunk of its own), reading the documents index a block at a time."""
        max_tokens = max_tokens or chunk_tokens()
        D = self.n_documents
        cuts = [(0, 0, 0)]  # (document, sentence, token) where each chunk starts
        prev = (0, 0, 0)
        for b0 in range(1, D + 1, _INDEX_BLOCK):
            block = np.asarray(self._documents[b0 : min(D + 1, b0 + _INDEX_BLOCK)])
            for d, (s, t) in enumerate(block.tolist(), start=b0):
                if t - cuts[-1][2] > max_tokens and prev[0] > cuts[-1][0]:
                    cuts.append(prev)  # the chunk ends at the last document boundary within the budget
                if t - cuts[-1][2] > max_tokens:
                    cuts.append((d, s, t))  # one document longer than the budget
                prev = (d, s, t)
        end = (D, len(self), self.n_tokens)
        if cuts[-1] != end:
            cuts.append(end)
        return [Chunk(a[0], b[0], a[1], b[1], a[2], b[2]) for a, b in itertools.pairwise(cuts) if b[0] > a[0]]

    def read(self, chunk: Chunk) -> ChunkData:
        """The ids of ``chunk``, in memory."""
        tokens = np.asarray(self._tokens[chunk.t0 : chunk.t1])
        offsets = np.asarray(self._sentences[chunk.s0 : chunk.s1 + 1], dtype=np.int64) - chunk.t0
        documents = np.asarray(self._documents[chunk.d0 : chunk.d1 + 1], dtype=np.int64) - (chunk.s0, chunk.t0)
        return ChunkData(tokens, offsets, documents)


def open_split(corpus: str, split: str, vocab: Vocab, data_dir: Path | None = None) -> TokenSplit:
    """A processed split's token ids for ``vocab``: its token-id files when ``vizlm prepare
    --token-ids`` wrote them with this vocabulary, else the text files, read and encoded in memory."""
    folder = corpus_folder(corpus, data_dir)
    digest = vocab_digest(vocab.itos)
    stored = TokenSplit.open(folder, split)
    if stored is not None and stored.vocab_sha256 == digest:
        return stored
    c = load_corpus(corpus, split, data_dir)
    return TokenSplit.from_sequences(encode_sentences(c.sentences, vocab), document_sizes(c.ids), c.checksum, digest)


class TokenIdWriter:
    """Writes a split's token-id files (module docstring) a sentence at a time, its counts known
    beforehand (tokens with every sentence's ``</s>``, sentences, documents): ids are buffered and
    written a block at a time, so memory does not grow with the corpus. The meta file, whose presence
    marks complete files, is written by :meth:`close`, last."""

    BLOCK = 2**20  # ids (and sentence offsets) buffered between two writes

    def __init__(self, folder: Path, split: str, vocab_size: int, vocab_sha256: str, tokens: int, sentences: int,
                 documents: int):
        self.folder, self.split = Path(folder), split
        self.meta_path = split_file(self.folder, split, TOKEN_ID_FILES["meta"])
        self.meta_path.unlink(missing_ok=True)
        self.counts = (tokens, sentences, documents)
        self.vocab_size, self.vocab_sha256 = vocab_size, vocab_sha256
        self.dtype = np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<i4")
        self.arrays = {key: np.lib.format.open_memmap(split_file(self.folder, split, TOKEN_ID_FILES[key]), mode="w+", dtype=dt,
                                                      shape=shape)
                       for key, shape, dt in (("tokens", (tokens,), self.dtype), ("sentences", (sentences + 1,), np.int64),
                                              ("documents", (documents + 1, 2), np.int64))}
        self.ids: list[int] = []
        self.offsets: list[int] = []
        self.t = self.s = self.d = 0  # tokens and sentences written, documents started

    def add(self, ids: list[int], new_document: bool) -> None:
        """One sentence's ids (without its ``</s>``, added here); ``new_document``: it starts a document."""
        if new_document:
            self._check_document()
            self.arrays["documents"][self.d] = (self.s + len(self.offsets), self.t + len(self.ids))
            self.d += 1
        self.ids.extend(ids)
        self.ids.append(Vocab.eos_id)
        self.offsets.append(self.t + len(self.ids))
        if len(self.ids) >= self.BLOCK or len(self.offsets) >= self.BLOCK:
            self._flush()

    def add_block(self, ids: np.ndarray, lengths: np.ndarray, starts: np.ndarray) -> None:
        """Sentences at once: their words' ids back to back (no ``</s>``), each one's length, and whether
        each starts a document; the same as :meth:`add` for each in turn."""
        self._flush()
        k = len(lengths)
        ends = np.cumsum(lengths + 1)  # after each sentence's </s>, from the block's start
        block = np.full(int(ends[-1]) if k else 0, Vocab.eos_id, dtype=np.int64)
        keep = np.ones(len(block), dtype=bool)
        keep[ends - 1] = False
        block[keep] = ids
        for j in np.flatnonzero(starts).tolist():
            self._check_document()
            self.arrays["documents"][self.d] = (self.s + j, self.t + (int(ends[j - 1]) if j else 0))
            self.d += 1
        self.ids, self.offsets = block, (self.t + ends)
        self._flush()

    def _check_document(self) -> None:
        if self.d >= self.counts[2]:
            raise ValueError(f"{self.folder / self.split}: more documents than counted; the input changed")

    def _flush(self) -> None:
        n, k = len(self.ids), len(self.offsets)
        if self.t + n > self.counts[0] or self.s + k > self.counts[1]:
            raise ValueError(f"{self.folder / self.split}: more tokens or sentences than counted; the input changed")
        self.arrays["tokens"][self.t : self.t + n] = self.ids
        self.arrays["sentences"][self.s + 1 : self.s + 1 + k] = self.offsets
        self.t, self.s, self.ids, self.offsets = self.t + n, self.s + k, [], []

    def close(self, text_sha256: str) -> dict:
        """Check the counts, write the last block and the meta file; returns the meta."""
        self._flush()
        N, S, D = self.counts
        if (self.t, self.s, self.d) != (N, S, D):
            raise ValueError(f"{self.folder / self.split}: wrote {self.t} tokens, {self.s} sentences, {self.d} documents "
                             f"but counted {N}, {S}, {D}; the input changed")
        self.arrays["documents"][D] = (S, N)
        for a in self.arrays.values():
            a.flush()
        self.arrays.clear()
        meta = {"tokens": N, "sentences": S, "documents": D, "dtype": self.dtype.str, "vocab_size": self.vocab_size,
                "vocab_sha256": self.vocab_sha256, "text_sha256": text_sha256}
        self.meta_path.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        return meta


def write_token_ids(folder: Path, split: str, vocab: Vocab) -> dict:
    """Encode ``folder/split.txt`` (documents from ``split.ids``) with ``vocab`` into the token-id
    files, in two streamed passes (count, then fill): memory does not grow with the corpus."""
    folder = Path(folder)
    split_file(folder, split, TOKEN_ID_FILES["meta"]).unlink(missing_ok=True)  # its presence marks complete files
    text, ids = split_file(folder, split), split_file(folder, split, "ids")

    def lines():
        with open(text, "rb") as ft, open(ids, encoding="utf-8") as fi:
            for i, (raw, sid) in enumerate(zip(ft, fi)):
                doc = document_of(sid.rstrip("\n")) or f"\0{i}"  # vizlm.data.folder.document_sizes's rule
                yield raw, doc

    sha = hashlib.sha256()
    S = N = D = 0
    last = None
    for raw, doc in lines():
        sha.update(raw)
        S, N = S + 1, N + len(raw.split()) + 1
        D, last = D + (doc != last), doc
    writer = TokenIdWriter(folder, split, len(vocab), vocab_digest(vocab.itos), N, S, D)
    last = None
    for raw, doc in lines():
        writer.add(vocab.encode(raw.decode("utf-8").split()), doc != last)
        last = doc
    return writer.close(sha.hexdigest())


__all__ = ["Chunk", "ChunkData", "NpyFile", "TokenIdWriter", "TokenSplit", "chunk_tokens", "open_split", "vocab_digest",
           "write_token_ids"]
