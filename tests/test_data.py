"""Corpora, normalisation, tokenizer and batching."""

from __future__ import annotations

import hashlib

import pytest
from conftest import ROOT, SHARED

from vizlm import paths
from vizlm.data import SPECIALS, Vocab, bucket_batches, collate, load_corpus
from vizlm.prepare import prepare, split_of
from vizlm.text import normalize, split_sentences, tokenize


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


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_prepare_is_byte_for_byte(tmp_path):
    prepare(SHARED, tmp_path / "data", assets=tmp_path / "assets")
    for committed_root, produced_root in ((ROOT / "data", tmp_path / "data"), (paths.ASSETS, tmp_path / "assets")):
        committed = sorted(p.relative_to(committed_root) for p in committed_root.rglob("*") if p.is_file())
        produced = sorted(p.relative_to(produced_root) for p in produced_root.rglob("*") if p.is_file())
        assert produced == [p for p in committed if p.name != "README.md"]
        for rel in produced:
            a = hashlib.sha256((produced_root / rel).read_bytes()).hexdigest()
            b = hashlib.sha256((committed_root / rel).read_bytes()).hexdigest()
            assert a == b, rel


def test_batches_cover_every_sentence_once():
    lengths = [5, 1, 9, 3, 3, 7, 2, 8, 4, 6]
    batches = bucket_batches(lengths, 3, shuffle=True, seed=3)
    assert sorted(i for b in batches for i in b) == list(range(10))
    assert bucket_batches(lengths, 3, True, 3) == batches  # deterministic
    inputs, targets = collate([[5, 6], [7]])
    assert inputs.tolist() == [[1, 5, 6], [1, 7, 0]]
    assert targets.tolist() == [[5, 6, 2], [7, 2, 0]]
