"""Build time: turn the raw corpora into the processed splits under ``data/`` and the
analysis assets shipped in ``vizlm/assets/``.

Raw corpora (NLTK data packages) live in ``../shared/data``; :func:`prepare` writes one
sentence a line, tokens normalised with :func:`vizlm.data.text.normalize`, and beside each split
its POS tags, the original (unnormalised) tokens and a sentence id (``document:index``).
Everything is deterministic, so ``tests/test_data.py`` regenerates both folders and compares
them byte for byte.

Brown is split by document, deterministically: in sorted file order, document
index mod 10 == 8 -> valid, == 9 -> test, otherwise train.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from vizlm.core import paths
from vizlm.data.folder import VOCAB_FILE, document_of, split_file, split_files, vocab_text, write_files
from vizlm.data.registry import CORPORA, CORPUS_LANGUAGE, LICENCES, SPLITS, TRAINABLE, load_corpus
from vizlm.data.resources import write_collocations
from vizlm.data.tagger import write_tagger
from vizlm.data.text import MAX_TOKENS, detokenize, normalize
from vizlm.data.tokens import write_token_ids
from vizlm.data.vocab import SPECIALS, VOCAB_SIZE, Vocab


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


def _split_files(out: Path, corpus: str, split: str, raw: list[RawSentence]) -> dict[Path, str]:
    """The files of one processed split: path -> text (:func:`vizlm.data.folder.split_files`)."""
    return split_files(out / corpus, split, {
        "txt": [" ".join(normalize(w) for w in s.words) for s in raw],
        "tags": [" ".join(s.tags) for s in raw],
        "orig": [" ".join(w.replace(" ", "_") for w in s.words) for s in raw],
        "ids": [s.sid for s in raw],
    })


def build_vocab(sentences: list[list[str]], size: int = VOCAB_SIZE) -> list[str]:
    """The ``size`` most frequent training types, specials first; ties broken alphabetically."""
    counts = Counter(w for s in sentences for w in s)
    for special in SPECIALS:
        counts.pop(special, None)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return list(SPECIALS) + [w for w, _ in ranked[: size - len(SPECIALS)]]


EXAMPLE_SPLITS = (("wsj", "test"), ("brown", "test"))  # where the app's example texts come from
EXAMPLE_SENTENCES = 12  # per split: the first sentences of ...
EXAMPLE_LENGTH = (8, 25)  # ... this many tokens
EXAMPLE_PASSAGES = 6  # per split: passages from the first documents of ...
PASSAGE_TOKENS = 120  # ... at least this many tokens (whole sentences from the document's start), and one
# passage of the first such document as long as the Explorer reads (MAX_TOKENS)


def _passage(ids: list[str], words: list[list[str]], start: int, least: int) -> list[int]:
    """Sentences ``start, start + 1, ...`` of one document (ids ``document:index``) until they hold
    ``least`` tokens, never more than :data:`~vizlm.data.text.MAX_TOKENS`; [] if the document ends first."""
    doc, picked, size = document_of(ids[start]), [], 0
    for i in range(start, len(ids)):
        if document_of(ids[i]) != doc or size + len(words[i]) > MAX_TOKENS:
            break
        picked.append(i)
        size += len(words[i])
        if size >= least:
            return picked
    return picked if least >= MAX_TOKENS and picked else []


def write_examples(data: Path, assets: Path) -> Path:
    """``examples.json``: the first readable test sentences of each split in :data:`EXAMPLE_SPLITS`,
    as ``{"wsj/test": [[sentence id, text], ...]}`` (text detokenised from the original tokens), and
    passages of consecutive sentences of its first documents, ``{"wsj/test/passages": [[first id-last
    index, text a sentence a line], ...]}``."""
    lo, hi = EXAMPLE_LENGTH
    doc = {}
    for corpus, split in EXAMPLE_SPLITS:
        c = load_corpus(corpus, split, data)
        picked = [[sid, detokenize(words)] for sid, words in zip(c.ids, c.originals) if lo <= len(words) <= hi]
        doc[f"{corpus}/{split}"] = picked[:EXAMPLE_SENTENCES]
        docs = [document_of(sid) for sid in c.ids]
        starts = [i for i, d in enumerate(docs) if i == 0 or d != docs[i - 1]]
        passages = [p for p in (_passage(c.ids, c.originals, i, PASSAGE_TOKENS) for i in starts) if p]
        passages = passages[:EXAMPLE_PASSAGES]
        if passages:
            passages.insert(1, _passage(c.ids, c.originals, passages[0][0], MAX_TOKENS))
        doc[f"{corpus}/{split}/passages"] = [
            [f"{c.ids[p[0]]}-{c.ids[p[-1]].rpartition(':')[2]}", "\n".join(detokenize(c.originals[i]) for i in p)]
            for p in passages]
    path = Path(assets) / paths.EXAMPLES_FILE
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def prepare(shared: Path, out: Path, assets: Path | None = None, force: bool = False) -> dict[str, int]:
    """Regenerate every processed split under ``out`` and the analysis assets under ``assets``
    (default: the package's own ``vizlm/assets``), byte-for-byte deterministic.

    Every file is built first and checked: a file of ``out`` whose content would change is
    replaced only with ``force`` (:class:`vizlm.core.files.OverwriteError` before anything is
    written); each is then written whole (:func:`vizlm.core.files.write_text`)."""
    shared, out = Path(shared), Path(out)
    assets = Path(assets) if assets is not None else paths.ASSETS
    counts: dict[str, int] = {}
    brown = read_brown(shared / "brown.zip")
    by_split: dict[str, list[RawSentence]] = {s: [] for s in SPLITS}
    for index, (_doc, sents) in enumerate(brown):
        by_split[split_of(index)].extend(sents)
    sinica = read_sinica(shared / "sinica_treebank.zip")
    sinica_split: dict[str, list[RawSentence]] = {s: [] for s in SPLITS}
    for index, sent in enumerate(sinica):
        sinica_split[split_of(index)].append(sent)
    texts: dict[Path, str] = {}
    for corpus, splits in (("brown", by_split), ("sinica", sinica_split), ("wsj", {"test": read_wsj(shared / "treebank.zip")})):
        for split, raw in splits.items():
            texts.update(_split_files(out, corpus, split, raw))
            counts[f"{corpus}/{split}"] = len(raw)
        train = [[normalize(w) for w in s.words] for s in splits.get("train", [])]
        if train:
            texts[out / corpus / VOCAB_FILE] = vocab_text(build_vocab(train))
    texts[out / "LICENSES.md"] = ("# Licences of the processed corpora\n\n"
                                  + "".join(f"- `{c}/`: {LICENCES[c]}\n" for c in CORPORA))
    write_files(texts, force, "pass --force")  # all checked before any is written
    # What analysis needs at run time, built from Brown train and shipped in the package.
    assets.mkdir(parents=True, exist_ok=True)
    write_tagger(out / "brown", assets / paths.TAGGER_FILE)
    write_collocations(out / "brown", assets / paths.COLLOCATIONS_FILE)
    write_examples(out, assets)
    return counts


def prepare_token_ids(data: Path) -> dict[str, int]:
    """Write the token-id files (:mod:`vizlm.data.tokens`) of every processed split in ``data``, encoded
    with the corpus's own vocabulary, or for a test-only corpus (WSJ) with that of the trainable
    corpus in its language (Brown), which is what its checkpoints read. Returns tokens per split."""
    data = Path(data)
    counts: dict[str, int] = {}
    for corpus, splits in CORPORA.items():
        own = data / corpus / VOCAB_FILE
        kin = [c for c in TRAINABLE if CORPUS_LANGUAGE[c] == CORPUS_LANGUAGE[corpus]]
        vocab_path = own if own.is_file() else data / kin[0] / VOCAB_FILE if kin else own
        for split in splits:
            if split_file(data / corpus, split).is_file() and vocab_path.is_file():
                meta = write_token_ids(data / corpus, split, Vocab.load(vocab_path))
                counts[f"{corpus}/{split}"] = meta["tokens"]
    if not counts:
        raise FileNotFoundError(f"no processed splits with a vocabulary under {data}; run `vizlm prepare` first")
    return counts

