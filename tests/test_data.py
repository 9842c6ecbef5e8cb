"""Corpora, normalisation, tokenizer and batching."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest
from conftest import ROOT, SHARED

from vizlm.data import registry as data
from vizlm.core import paths
from vizlm.data import text as text_module
from vizlm.data.batches import bucket_batches, collate
from vizlm.data.registry import load_corpus
from vizlm.data.vocab import SPECIALS, Vocab
from vizlm.core.files import OverwriteError
from vizlm.data.prepare import prepare, split_of
from vizlm.data.text import normalize, split_sentences, tokenize


def test_normalize():
    assert normalize("The") == "the"
    assert normalize("ＡＢＣ") == "abc"  # NFKC folds full-width letters
    for num in ("1", "1,000", "3.14", "1960s", "29th", "1/2", "-5"):
        assert normalize(num) == "N", num
    assert normalize("B-52s") == "b-52s"
    assert normalize("中") == "中"


def test_tokenizer_keeps_offsets_and_brown_conventions():
    text = 'He said, "I didn\'t pay $5 to Mr. Smith."  The U.S. (mostly) agreed!'
    toks = tokenize(text)
    assert [t.norm for t in toks] == [
        "he", "said", ",", "``", "i", "didn't", "pay", "$5", "to", "mr.", "smith", ".", "''",
        "the", "u.s.", "(", "mostly", ")", "agreed", "!",
    ]
    for t in toks:
        src = text[t.start : t.end]
        assert src == t.text or (t.text in ("``", "''") and src == '"'), (t, src)


def test_tokenizer_unicode_and_chinese():
    toks = tokenize("我們去學校。 Café 😀 naïve")
    assert [t.text for t in toks][:6] == ["我", "們", "去", "學", "校", "。"]
    assert "café" in [t.norm for t in toks] and "😀" in [t.text for t in toks]
    assert tokenize("   \n\t ") == []


def test_split_sentences():
    assert split_sentences("Mr. Smith left. He was tired! Was he? Yes.") == [
        "Mr. Smith left.", "He was tired!", "Was he?", "Yes.",
    ]


def test_split_rule():
    assert [split_of(i) for i in range(10)] == ["train"] * 8 + ["valid", "test"]
    assert split_of(18) == "valid" and split_of(499) == "test"


def test_processed_corpora_sizes_and_vocab():
    train = load_corpus("brown", "train")
    test = load_corpus("brown", "test")
    assert len(train) == 46175 and len(test) == 5642
    assert train.ids[0] == "ca01:0" and test.ids[0].startswith("ca10:")  # document index 9
    assert all(len(s) == len(t) == len(o) for s, t, o in zip(train.sentences[:500], train.tags, train.originals))
    assert train.tags[0][:3] == ["at", "np-tl", "nn-tl"]
    vocab = Vocab.for_corpus("brown")
    assert len(vocab) == 10_000 and vocab.itos[:4] == list(SPECIALS)
    assert vocab.encode(["the", "qwertyuiop"]) == [vocab.stoi["the"], vocab.unk_id]
    wsj = load_corpus("wsj", "test")
    assert wsj.sentences[1][:4] == ["mr.", "vinken", "is", "chairman"]
    sinica = load_corpus("sinica", "train")
    assert all(len(tok) == 1 for tok in sinica.sentences[2])


def test_load_corpus_errors():
    with pytest.raises(ValueError, match="valid: brown"):
        load_corpus("ptb", "test")
    with pytest.raises(ValueError, match="no split"):
        load_corpus("wsj", "train")


TOKEN_ID_FILES = (".tokens.npy", ".sentences.npy", ".documents.npy", ".tokens.json")  # derived, not committed


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_prepare_is_byte_for_byte_and_replaces_nothing_unasked(tmp_path):
    prepare(SHARED, tmp_path / "data", assets=tmp_path / "assets")
    for committed_root, produced_root in ((ROOT / "data", tmp_path / "data"), (paths.ASSETS, tmp_path / "assets")):
        committed = sorted(p.relative_to(committed_root) for p in committed_root.rglob("*")
                           if p.is_file() and not p.name.endswith(TOKEN_ID_FILES)  # vizlm prepare --token-ids
                           and p.relative_to(committed_root).parts[0] != paths.SHIPPED_STATS)  # scripts/ship_stats.py
        produced = sorted(p.relative_to(produced_root) for p in produced_root.rglob("*") if p.is_file())
        assert produced == [p for p in committed if p.name != "README.md"]
        for rel in produced:
            a = hashlib.sha256((produced_root / rel).read_bytes()).hexdigest()
            b = hashlib.sha256((committed_root / rel).read_bytes()).hexdigest()
            assert a == b, rel
    # a corpus file edited since: refused before anything is written, then replaced only when asked
    data = tmp_path / "data"
    edited = data / "brown" / "test.ids"
    edited.write_text("my own ids\n")
    stamps = {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file()}
    with pytest.raises(OverwriteError, match="test.ids exists"):
        prepare(SHARED, data, assets=tmp_path / "assets")
    assert {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file()} == stamps
    assert edited.read_text() == "my own ids\n"
    prepare(SHARED, data, assets=tmp_path / "assets", force=True)
    assert edited.read_bytes() == (ROOT / "data" / "brown" / "test.ids").read_bytes()


def test_batches_cover_every_sentence_once():
    lengths = [5, 1, 9, 3, 3, 7, 2, 8, 4, 6]
    batches = bucket_batches(lengths, 3, shuffle=True, seed=3)
    assert sorted(i for b in batches for i in b) == list(range(10))
    assert bucket_batches(lengths, 3, True, 3) == batches  # deterministic
    inputs, targets = collate([[5, 6], [7]])
    assert inputs.tolist() == [[1, 5, 6], [1, 7, 0]]
    assert targets.tolist() == [[5, 6, 2], [7, 2, 0]]


# --------------------------------------------------------------------------- untrusted text
UNSAFE = ("\x00\x01\x02\x08\x0b\x0c\x1b\x7f\x85\x9f\ufdd0\ufdef\ufffe\uffff\U0001fffe\U0010ffff"
          "\u202e\u202a\u2066\u2069\u200f\u061c")  # the last: bidirectional controls (a right-to-left override...)
NOT_IN_OUTPUT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufdd0-\ufdef\ufffe\uffff\ud800-\udfff"
                           "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_clean_text_replaces_what_no_output_can_hold_one_for_one():
    clean = text_module.clean_text
    dirty = f"The{UNSAFE}market \udcff fell\t.\r\n"
    out = clean(dirty)
    assert len(out) == len(dirty)  # offsets into the cleaned text are offsets into the original
    assert out == "The" + " " * len(UNSAFE) + "market \ufffd fell\t.\r\n"
    assert not NOT_IN_OUTPUT.search(out)
    out.encode("utf-8")  # no lone surrogate left
    safe = "Café 中文 😀 \t\n\r \u2028 \ufffd plain"
    assert clean(safe) == safe
    for tok in text_module.tokenize(out):
        assert out[tok.start : tok.end] == tok.text


def test_read_text_file_refuses_a_directory(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        data.read_text_file(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_read_text_file_refuses_a_fifo_without_opening_it(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it would block until a writer came
    with pytest.raises(ValueError, match="not a regular file"):
        data.read_text_file(fifo)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_read_text_file_refuses_dev_zero_from_stat():
    with pytest.raises(ValueError, match="not a regular file"):
        data.read_text_file(Path("/dev/zero"))  # reading it would never end


def test_read_text_file_refuses_a_file_over_the_limit(tmp_path, monkeypatch):
    path = tmp_path / "big.txt"
    path.write_text("The market fell .\n" * 200, encoding="utf-8")
    monkeypatch.setattr(data, "MAX_TEXT_FILE_BYTES", 1000)
    with pytest.raises(ValueError, match="MAX_TEXT_FILE_BYTES"):
        data.read_text_file(path)


def test_read_text_file_streams_long_lines_in_pieces_and_splits_long_sentences(tmp_path, monkeypatch):
    words = [f"w{i % 997}" for i in range(30_000)]  # one line, 180 kB, no sentence end: one huge "sentence"
    path = tmp_path / "long.txt"
    path.write_text(" ".join(words) + "\nThe market fell. It rose again.\n", encoding="utf-8")
    seen = []
    split = text_module.split_sentences
    monkeypatch.setattr(data, "split_sentences", lambda t: seen.append(len(t)) or split(t))
    sents = data.read_text_file(path)
    assert max(seen) <= data.MAX_LINE_CHARS  # never the whole line at once
    assert max(len(s) for s in sents) <= text_module.MAX_TOKENS
    assert [w for s in sents[:-2] for w in s] == words  # pieces cut at spaces: no word lost or split
    assert sents[-2:] == [["the", "market", "fell", "."], ["it", "rose", "again", "."]]  # one paragraph a line


def test_read_text_file_survives_invalid_utf8_and_control_characters(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"\xef\xbb\xbfThe \xff\xfe market\x00fell \x1b[31m today .\n\x00\x01\n")
    sents = data.read_text_file(path)
    assert len(sents) == 1 and sents[0][0] == "the"  # the BOM is not a word; the control-only line is no sentence
    assert "\ufffd\ufffd" in sents[0] and "market" in sents[0] and "fell" in sents[0]
    assert not any(NOT_IN_OUTPUT.search(w) for w in sents[0])


@pytest.mark.parametrize("corpus,split", [("brown", "test"), ("wsj", "test"), ("sinica", "valid")])
def test_split_texts_are_the_corpus_texts_without_token_lists(corpus, split):
    """The per-sentence tables' ids and texts, read line by line, equal load_corpus's."""
    from vizlm.data.registry import load_corpus, split_texts

    ids, texts, checksum = split_texts(corpus, split)
    c = load_corpus(corpus, split)
    assert ids == c.ids and texts == [" ".join(o) for o in c.originals] and checksum == c.checksum
    with pytest.raises(ValueError, match="has no split"):
        split_texts("wsj", "train")


def test_examples_of_an_imported_corpus_leave_out_wikitext_headings(tmp_path):
    """An imported corpus keeps WikiText's "= Title =" and "= = Section = =" lines; the Explorer's examples are text,
    so no example sentence or passage holds a heading."""
    from vizlm.data import examples as data

    lines = ["= Valkyria Chronicles =", "", "= = Section 1 = =", "the game is a tactical role playing game for one",
             "it was made by a team of people who had worked on earlier games", "= = = Reception = = =",
             "the game sold well in japan and the critics praised it a lot", ""]
    (tmp_path / "test.orig").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "test.ids").write_text("\n".join(f"d0:{i}" for i in range(len(lines))) + "\n", encoding="utf-8")
    sentences, passages = data._user_examples(str(tmp_path / "test.orig"), (0, 0))
    shown = [t for _, t in sentences] + [t for _, t in passages]
    assert sentences and passages and not any("=" in t for t in shown), shown
