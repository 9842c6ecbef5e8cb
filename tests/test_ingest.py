"""Your own corpus, end to end (#27): a folder of text -> ``vizlm prepare --corpus NAME --from FOLDER`` -> its card
-> training in both contexts -> every analysis command by name (:mod:`vizlm.data.ingest` has the rules).

The corpora are built here, a few lines each, so every number on a card is counted by hand in the comments:
one per layout (a sentence a line, a paragraph a line, WikiText with its headings and tokens, Chinese read a
character a token), with the file names the rules accept (``.txt``, ``.txt.gz``, ``wiki.SPLIT.tokens``). Bad input
gets one line and exit 2, and leaves what is already prepared byte for byte as it was.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from pathlib import Path

import pytest

import vizlm
from vizlm.data import ingest
from vizlm.core import paths
from vizlm.cli import main
from vizlm.data.registry import load_corpus
from vizlm.data.vocab import SPECIALS, Vocab

# --------------------------------------------------------------------------- the corpora
SENTENCE = {  # a sentence a line, a blank line between documents; valid gzipped
    "train.txt": "The cat sat on the mat .\nA dog ran far .\n\nThe bird flew away .\nThe cat saw the dog .\n",
    "valid.txt.gz": "The cat ran .\n\nA zebra sat .\n",  # zebra: not in train
    "test.txt": "The dog sat .\nThe yak flew .\n\nA cat ran .\n",  # yak: not in train
}
PARAGRAPH = {  # a paragraph a line: split after . ! ? and the closing quote after one; "Mr." ends nothing
    "train.txt": 'The cat sat . The dog ran ! Did the bird fly ?\nMr. Smith said " hello . " Then he left .\n\n'
                 "The bird flew away . It came back .\n",
    "valid.txt": "The cat sat . The dog sat .\n",
    "test.txt": "The cat flew . The yak ran .\n\nThe dog left .\n",  # yak: not in train
}
WIKITEXT = {  # WikiText-2's format: ' = Title = ' starts an article, section headings of any depth are dropped
    "wiki.train.tokens": " \n = Valkyria Chronicles = \n \n The game was released in 2011 @-@ 12 . It sold 1 @,@ 000 copies . \n"
                         " \n = = Gameplay = = \n \n Players move units on a map . The <unk> is 3 @.@ 5 km . \n \n"
                         " = Tropical Storm = \n \n = = = Track = = = \n \n The storm formed in June . It hit land . \n \n",
    "wiki.valid.tokens": " \n = Storm = \n \n The storm hit Paris . \n \n",  # Paris: not in train
    "wiki.test.tokens": " \n = Game = \n \n The game sold <unk> copies . It was a hit . \n \n = = Reception = = \n \n"
                        " Critics liked it . \n \n",  # Critics, liked, it: not in train
}
CHINESE = {  # a character a token (--chars); 。 ends a sentence
    "train.txt": "我爱北京。你好世界。\n\n北京很大。\n",
    "valid.txt": "我爱你。\n",
    "test.txt": "世界很美。\n",  # 美: not in train
}
# split -> (documents, sentences, tokens, paragraphs, headings dropped, OOV tokens), counted by hand
EXPECTED = {
    "sentence": {"train": (2, 4, 23, 0, 0, 0),  # 7 + 5 + 5 + 6 tokens
                 "valid": (2, 2, 8, 0, 0, 1), "test": (2, 3, 12, 0, 0, 1)},
    "paragraph": {"train": (2, 7, 33, 3, 0, 0),  # 4 + 4 + 5 | 7 (Mr. Smith said " hello . ") + 4 | 5 + 4
                  "valid": (1, 2, 8, 1, 0, 0), "test": (2, 3, 12, 2, 0, 1)},
    "wikitext": {"train": (2, 6, 41, 3, 2, 0),  # 9 + 7 | 7 + 8 | 6 + 4; Gameplay, Track dropped
                 "valid": (1, 1, 5, 1, 0, 1), "test": (1, 3, 15, 2, 1, 3)},
    "chars": {"train": (2, 3, 15, 2, 0, 0), "valid": (1, 1, 4, 1, 0, 0), "test": (1, 1, 5, 1, 0, 1)},
}
LAYOUT_CORPORA = {  # name -> (files, options, layout detected)
    "sent": (SENTENCE, [], "sentence"),
    "para": (PARAGRAPH, [], "paragraph"),
    "wiki": (WIKITEXT, [], "wikitext"),
    "zh": (CHINESE, ["--chars"], "paragraph"),
}
SIZES = ["--emb-dim", "8", "--hidden-dim", "8", "--streams", "2", "--bptt", "5"]


def write_folder(folder: Path, files: dict[str, str | bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        data = text.encode("utf-8") if isinstance(text, str) else text
        (folder / name).write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
    return folder


@pytest.fixture
def corpora(tmp_path, monkeypatch) -> Path:
    """An empty corpora folder of this test's own (and a cache), through the environment as a user sets it."""
    folder = tmp_path / "corpora"
    monkeypatch.setenv("VIZLM_CORPORA", str(folder))
    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path / "cache"))
    paths.clear_overrides()
    yield folder
    paths.clear_overrides()


def cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse refuses an option
        code = exc.code
    finally:
        paths.clear_overrides()
    out = capsys.readouterr()
    return code, out.out, out.err


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder``: its bytes and modification time (a rewrite with the same bytes shows too);
    not the empty lock files a prepare leaves beside a corpus (``.NAME.lock``, an operating system lock)."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and not _lock_file(p)}


def _lock_file(path: Path) -> bool:
    return path.name.startswith(".") and path.name.endswith(".lock") and path.stat().st_size == 0


def entries(folder: Path) -> list[str]:
    """The names in ``folder``, lock files left out."""
    return sorted(p.name for p in folder.iterdir() if not _lock_file(p))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- each layout, end to end
@pytest.mark.slow
@pytest.mark.parametrize("name", list(LAYOUT_CORPORA))
def test_a_corpus_of_each_layout_is_prepared_trained_and_analysed(name, corpora, tmp_path, capsys):
    files, options, layout = LAYOUT_CORPORA[name]
    source = write_folder(tmp_path / "source", files)
    code, out, err = cli(capsys, "prepare", "--corpus", name, "--from", source, *options, "--json")
    assert code == 0, err
    card = json.loads(out)
    assert card == vizlm.corpus_card(name)
    folder = corpora / name

    # the card: the layout detected and why, every count as constructed, the checksums of what was written
    assert card["layout"]["name"] == layout and card["layout"]["detected"] is True
    reason = card["layout"]["reason"]
    assert ("' = Title = '" in reason) if layout == "wikitext" else ("hold two sentences or more" in reason), reason
    stats = EXPECTED["chars" if name == "zh" else layout]
    for split, (documents, sentences, tokens, paragraphs, headings, oov) in stats.items():
        st = card["split_stats"][split]
        assert (st["documents"], st["sentences"], st["tokens"], st["paragraphs"], st["headings_dropped"],
                st["oov_tokens"]) == (documents, sentences, tokens, paragraphs, headings, oov), (split, st)
        assert st["oov_rate"] == round(oov / tokens, 6)
        txt = (folder / f"{split}.txt").read_text(encoding="utf-8")
        assert txt.count("\n") == sentences and len(txt.split()) == tokens
        assert card["checksums"][split] == sha256(folder / f"{split}.txt")
        assert len({line.partition(":")[0] for line in (folder / f"{split}.ids").read_text().split()}) == documents
        src = card["source"]["files"][split]
        assert src["sha256"] == sha256(source / src["file"]) and src["file"] in files
    assert card["vocab_size"] == len((folder / "vocab.txt").read_text(encoding="utf-8").split())
    if layout == "wikitext":
        train = (folder / "train.txt").read_text(encoding="utf-8")
        assert "Gameplay" not in train and "Track" not in train and "=" not in train  # headings are not text
        assert "The game was released in 2011 @-@ 12 .\nIt sold 1 @,@ 000 copies .\n" in train  # WikiText's tokens kept
        assert "The <unk> is 3 @.@ 5 km ." in train and "<unk>" not in (folder / "vocab.txt").read_text().split()[4:]
        assert card["split_stats"]["test"]["unk_rate"] == round(4 / 15, 6)  # its own <unk> and the 3 OOV words
    if name == "zh":
        assert (folder / "train.txt").read_text(encoding="utf-8") == "我 爱 北 京 。\n你 好 世 界 。\n北 京 很 大 。\n"
        assert card["reading"]["chars"] is True
    assert [s.split() for s in (folder / "test.txt").read_text(encoding="utf-8").splitlines()] == \
        load_corpus(name, "test").sentences

    # listed by name, beside vizlm's own
    rows = vizlm.corpora()
    mine = rows[rows.corpus == name].set_index("split")
    assert list(mine.index) == ["train", "valid", "test"] and set(mine.kind) == {"yours"}
    assert mine.loc["test", "sentences"] == stats["test"][1] and mine.loc["test", "layout"] == layout
    code, out, _ = cli(capsys, "corpora", "--json")
    listed = [r for r in json.loads(out) if r["corpus"] == name]
    assert code == 0 and [r["split"] for r in listed] == ["train", "valid", "test"]
    assert {r["corpus"] for r in json.loads(out)} >= {"brown", name}
    code, out, _ = cli(capsys, "corpora", name)
    assert code == 0 and f"corpus {name}" in out and f"layout  {layout}" in out

    # trained in both contexts (3 batches each), then every analysis command by name
    models = {}
    for context in ("sentence", "document"):
        models[context] = tmp_path / f"kvp-{context}"
        code, out, err = cli(capsys, "train", "--model", "kvp", "--corpus", name, "--context", context, "--dry-run",
                             "--out", models[context], *SIZES)
        assert code == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        assert result["context"] == context and math.isfinite(result["valid_perplexity"])
        meta = json.loads((models[context] / "config.json").read_text(encoding="utf-8"))
        assert meta["corpus"]["name"] == name and meta["corpus"]["checksums"] == card["checksums"]
        assert meta["corpus"]["reading"] == card["reading"]
    sent, doc = models["sentence"], models["document"]
    test_sentences, test_tokens = stats["test"][1], stats["test"][2]
    for model in (sent, doc):
        code, out, err = cli(capsys, "eval", "--checkpoint", model, "--corpus", name, "--json")
        assert code == 0, err
        result = json.loads(out)
        assert result["source"] == f"{name}/test" and result["sentences"] == test_sentences
        assert result["tokens"] == test_tokens + test_sentences and 1 < result["perplexity"] < 10 * card["vocab_size"]
    code, out, err = cli(capsys, "compare", "--a", sent, "--b", doc, "--corpus", name, "--json")
    assert code == 0, err
    assert json.loads(out)["summary"]["sentences"] == test_sentences
    code, out, err = cli(capsys, "positions", "--checkpoint", sent, doc, "--corpus", name, "--split", "valid",
                         "--window", "3", "--json")
    assert code == 0, err
    assert {r["model"] for r in json.loads(out)["positions"]} == {sent.name, doc.name}
    code, out, err = cli(capsys, "cases", "--checkpoint", doc, "--corpus", name, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["source"] == f"{name}/test" and result["sentences"] == test_sentences
    code, out, err = cli(capsys, "attribute", "--checkpoint", sent, "--corpus", name, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert (result["corpus"], result["split"], result["units"]) == (name, "test", test_sentences)


def test_a_model_of_a_cased_corpus_reads_typed_text_cased(corpora, tmp_path, capsys):
    """WikiText and most corpora keep case: a model trained on one reads a typed "The" as "The" (its config's
    corpus.reading), and one of a --lowercase corpus as "the"."""
    source = write_folder(tmp_path / "source", SENTENCE)
    for name, flags in (("cased", []), ("lower", ["--lowercase"])):
        assert cli(capsys, "prepare", "--corpus", name, "--from", source, *flags)[0] == 0
        out = tmp_path / name
        assert cli(capsys, "train", "--model", "kvp", "--corpus", name, "--dry-run", "--out", out, *SIZES)[0] == 0
        analysis = vizlm.load(str(out)).analyze("The cat sat .")
        assert analysis.norms[:2] == (["The", "cat"] if name == "cased" else ["the", "cat"]), analysis.norms
        assert not any(analysis.unk[:3])
        reading = json.loads((out / "config.json").read_text(encoding="utf-8"))["corpus"]["reading"]
        assert reading["lowercase"] is (name == "lower")


# --------------------------------------------------------------------------- options
def vocab_of(corpora: Path, name: str) -> list[str]:
    return (corpora / name / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]


def test_vocabulary_options(corpora, tmp_path):
    # train's counts: . 4, The 3, cat 2, dog 2, the 2, and 10 words once (23 tokens, 15 words)
    source = write_folder(tmp_path / "source", SENTENCE)
    card = vizlm.prepare_corpus("top", source, vocab_size=7)
    assert vocab_of(corpora, "top") == [*SPECIALS, ".", "The", "cat"]  # ties (cat, dog: 2) broken alphabetically
    assert card["vocab_size"] == 7 and card["options"]["vocabulary"] == {"vocab_size": 7}
    # valid: The cat ran . | A zebra sat . -> ran, A, zebra, sat outside
    assert card["split_stats"]["valid"]["oov_tokens"] == 4 and card["split_stats"]["valid"]["oov_rate"] == 0.5
    vizlm.prepare_corpus("twice", source, min_count=2)
    assert vocab_of(corpora, "twice") == [*SPECIALS, ".", "The", "cat", "dog", "the"]
    vizlm.prepare_corpus("every", source, all_words=True)
    train_words = set((source / "train.txt").read_text().split())
    assert vocab_of(corpora, "every")[:4] == list(SPECIALS) and set(vocab_of(corpora, "every")[4:]) == train_words
    vizlm.prepare_corpus("default", source)  # 10,000 at most: every word of train here
    assert set(vocab_of(corpora, "default")) == set(vocab_of(corpora, "every"))
    with pytest.raises(vizlm.VizlmError, match="give one of --vocab-size, --min-count, --all-words"):
        vizlm.prepare_corpus("both", source, vocab_size=10, min_count=2)
    with pytest.raises(vizlm.VizlmError, match="lower --min-count"):
        vizlm.prepare_corpus("none", source, min_count=99)
    specials_only = write_folder(source.parent / "specials-only", {**SENTENCE, "train.txt": "<unk> </s>\n<s>\n"})
    for kw in ({}, {"vocab_size": 50}, {"all_words": True}):  # no --min-count given: none is suggested
        with pytest.raises(vizlm.VizlmError, match=r"train.txt: train has no words \(besides vizlm's own") as info:
            vizlm.prepare_corpus("none", specials_only, **kw)
        assert "min-count" not in str(info.value)
    assert not (corpora / "both").exists() and not (corpora / "none").exists()


def test_lowercase_keeps_the_original_words(corpora, tmp_path):
    source = write_folder(tmp_path / "source", SENTENCE)
    card = vizlm.prepare_corpus("low", source, lowercase=True)
    folder = corpora / "low"
    assert (folder / "train.txt").read_text().startswith("the cat sat on the mat .\na dog ran far .\n")
    assert (folder / "train.orig").read_text().startswith("The cat sat on the mat .\nA dog ran far .\n")
    assert "The" not in vocab_of(corpora, "low") and "the" in vocab_of(corpora, "low")
    assert card["options"]["lowercase"] is True and card["reading"]["lowercase"] is True
    corpus = load_corpus("low", "test")
    assert corpus.sentences[0] == ["the", "dog", "sat", "."] and corpus.originals[0] == ["The", "dog", "sat", "."]


def test_layout_given_overrides_the_detected_one(corpora, tmp_path, capsys):
    source = write_folder(tmp_path / "source", PARAGRAPH)
    code, out, _ = cli(capsys, "prepare", "--corpus", "lines", "--from", source, "--layout", "sentence", "--json")
    card = json.loads(out)
    assert code == 0 and card["layout"] == {"name": "sentence", "detected": False, "reason": "given (--layout)",
                                            "rule": ingest.LAYOUT_HELP["sentence"]}
    assert card["split_stats"]["train"]["sentences"] == 3  # a line each: not split
    assert (corpora / "lines" / "train.txt").read_text().splitlines()[0] == "The cat sat . The dog ran ! Did the bird fly ?"
    code, _, err = cli(capsys, "prepare", "--corpus", "lines2", "--from", source, "--layout", "poem")
    assert code == 2 and "invalid choice: 'poem'" in err


def test_a_split_without_blank_lines_is_read_in_documents(corpora, tmp_path, monkeypatch):
    monkeypatch.setattr(ingest, "STREAM_DOCUMENT_SENTENCES", 2)
    stream = "".join(f"Line {i} is here .\n" for i in range(5))
    source = write_folder(tmp_path / "source", {"train.txt": stream, "valid.txt": stream, "test.txt": "Line 1 .\n"})
    card = vizlm.prepare_corpus("stream", source)
    st = card["split_stats"]["train"]
    assert (st["documents"], st["sentences"]) == (3, 5) and st["documents_from"] == "every 2 sentences (no blank line)"
    assert (corpora / "stream" / "train.ids").read_text().split() == ["d0:0", "d0:1", "d1:0", "d1:1", "d2:0"]
    assert card["split_stats"]["test"]["documents"] == 1  # one sentence: not more than 2, so not cut
    assert card["split_stats"]["test"]["documents_from"] == "blank lines"
    # the token-id files that training streams agree: 3 documents
    from vizlm.data.tokens import open_split

    split = open_split("stream", "train", Vocab(vocab_of(corpora, "stream")))
    assert (len(split), split.n_documents) == (5, 3)


def test_a_long_sentence_and_reserved_words(corpora, tmp_path, monkeypatch):
    monkeypatch.setattr(ingest, "MAX_TOKENS", 4)
    source = write_folder(tmp_path / "source", {"train.txt": "a b c d e f g h i j\n", "valid.txt": "a <s> b </s>\n",
                                                "test.txt": "a <pad> b\n"})
    card = vizlm.prepare_corpus("cut", source)
    assert (corpora / "cut" / "train.txt").read_text() == "a b c d\ne f g h\ni j\n"
    assert card["split_stats"]["train"]["long_sentences_cut"] == 1 and card["split_stats"]["train"]["sentences"] == 3
    assert (corpora / "cut" / "valid.txt").read_text() == "a <unk> b <unk>\n"
    assert (corpora / "cut" / "valid.orig").read_text() == "a <s> b </s>\n"  # as written
    assert card["split_stats"]["valid"]["reserved_words_as_unk"] == 2
    assert card["split_stats"]["test"]["reserved_words_as_unk"] == 1


# --------------------------------------------------------------------------- bad input changes nothing
def _no_test(folder: Path) -> None:
    (folder / "test.txt").unlink()


def _empty(folder: Path) -> None:
    (folder / "valid.txt").write_bytes(b"")


def _binary(folder: Path) -> None:
    (folder / "valid.txt").write_bytes(b"The cat .\nPK\x03\x04\x00\x00binary\n")


def _latin1(folder: Path) -> None:
    (folder / "test.txt").write_bytes("The cat .\nA dog .\nThe caf\u00e9 .\n".encode("latin-1"))


def _corrupt_gzip(folder: Path) -> None:
    import gzip

    data = gzip.compress((folder / "valid.txt").read_bytes() * 50)
    (folder / "valid.txt").unlink()
    (folder / "valid.txt.gz").write_bytes(data[:20] + bytes(b ^ 0xFF for b in data[20:60]) + data[60:])


BAD = [  # (id, how the folder is spoiled, the message)
    ("missing-split", _no_test, "has no test split: expected one of test.txt, wiki.test.tokens, ptb.test.txt"),
    ("empty-file", _empty, "valid.txt holds no words"),
    ("binary", _binary, "valid.txt: line 2 holds a NUL byte: this is not a text file"),
    ("invalid-utf8", _latin1, "test.txt: line 3 is not valid UTF-8"),
    ("corrupt-gzip", _corrupt_gzip, "valid.txt.gz: cannot be read"),
]


@pytest.fixture
def prepared(corpora, tmp_path) -> Path:
    """The corpus ``good`` prepared, and a copy of its source folder to spoil."""
    vizlm.prepare_corpus("good", write_folder(tmp_path / "good-source", SENTENCE))
    return write_folder(tmp_path / "bad-source", {k.removesuffix(".gz"): v for k, v in SENTENCE.items()})


def assert_refused(capsys, corpora: Path, argv: list, message: str) -> None:
    """``argv`` exits 2 with one line naming ``message``, and every file of the corpora folder is as it was."""
    before = snapshot(corpora)
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("vizlm prepare: error: ") and message in err, err
    assert snapshot(corpora) == before
    assert not [name for name in entries(corpora) if name.startswith(".")]  # no half corpus left


@pytest.mark.parametrize("spoil,message", [pytest.param(f, m, id=i) for i, f, m in BAD])
def test_bad_input_is_refused_and_changes_nothing(spoil, message, prepared, corpora, capsys):
    spoil(prepared)
    for argv in (["--corpus", "fresh"], ["--corpus", "good", "--force"]):  # a new corpus, and one to replace
        assert_refused(capsys, corpora, ["prepare", *argv, "--from", prepared], message)
    assert not (corpora / "fresh").exists()


def test_a_name_of_vizlm_s_own_is_refused(prepared, corpora, capsys):
    assert_refused(capsys, corpora, ["prepare", "--corpus", "brown", "--from", prepared],
                   "'brown' is one of vizlm's own corpora")
    assert_refused(capsys, corpora, ["prepare", "--corpus", "My Corpus", "--from", prepared], "corpus name 'My Corpus'")


def test_a_disk_too_small_is_refused(prepared, corpora, capsys, monkeypatch):
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(ingest.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 100, 100))
    assert_refused(capsys, corpora, ["prepare", "--corpus", "good", "--force", "--from", prepared],
                   "preparing needs about")


def test_a_line_over_the_limit_is_refused(prepared, corpora, capsys, monkeypatch):
    monkeypatch.setattr(ingest, "MAX_LINE_BYTES", 16)
    assert_refused(capsys, corpora, ["prepare", "--corpus", "good", "--force", "--from", prepared],
                   "train.txt: line 1 is longer than")  # "The cat sat on the mat ." is 25 bytes


def test_prepared_again(prepared, corpora, tmp_path, capsys):
    """The same files and options: "already prepared", nothing rewritten; other options: --force asked for, and
    with it the corpus is replaced."""
    source = tmp_path / "good-source"
    before = snapshot(corpora)
    code, out, _ = cli(capsys, "prepare", "--corpus", "good", "--from", source)
    assert code == 0 and "already prepared" in out and snapshot(corpora) == before
    assert_refused(capsys, corpora, ["prepare", "--corpus", "good", "--from", source, "--lowercase"],
                   "corpus 'good' was prepared with other options (vocab_size=10000, layout=detected); pass --force")
    assert_refused(capsys, corpora, ["prepare", "--corpus", "good", "--from", prepared],  # other files (valid not gzipped)
                   "corpus 'good' was prepared from other files")
    card = json.loads((corpora / "good" / "corpus.json").read_text(encoding="utf-8"))
    del card["options"]  # as a corpus `vizlm import` wrote records none
    (corpora / "good" / "corpus.json").write_text(json.dumps(card), encoding="utf-8")
    assert_refused(capsys, corpora, ["prepare", "--corpus", "good", "--from", source],
                   "corpus 'good' was prepared with other options (none recorded); pass --force")
    code, out, err = cli(capsys, "prepare", "--corpus", "good", "--from", source, "--lowercase", "--force", "--json")
    assert code == 0, err
    assert json.loads(out)["options"]["lowercase"] is True and vizlm.corpus_card("good")["options"]["lowercase"] is True
    assert (corpora / "good" / "train.txt").read_text().startswith("the cat")
    assert entries(corpora) == ["good"]  # the old one is gone, nothing beside it


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, OSError])
def test_an_interrupted_prepare_leaves_no_half_corpus(interrupt, prepared, corpora, monkeypatch, capsys):
    real = ingest._write_ids

    def write_ids(out, split, *args):
        if split == "valid":  # train's token ids are written, valid's not
            raise interrupt("stopped")
        return real(out, split, *args)

    monkeypatch.setattr(ingest, "_write_ids", write_ids)
    before = snapshot(corpora)
    for name, force in (("fresh", False), ("good", True)):
        with pytest.raises(interrupt):
            vizlm.prepare_corpus(name, prepared, force=force)
        assert snapshot(corpora) == before and entries(corpora) == ["good"]
    with pytest.raises(vizlm.VizlmError, match="unknown corpus 'fresh'"):
        vizlm.corpus_card("fresh")
    if interrupt is KeyboardInterrupt:  # Ctrl-C in `vizlm prepare`: the same cleanup, a line, exit 130
        code, _, err = cli(capsys, "prepare", "--corpus", "fresh", "--from", prepared)
        assert code == 130 and err == "vizlm prepare: interrupted\n"
        assert snapshot(corpora) == before and entries(corpora) == ["good"]


# --------------------------------------------------------------------------- one prepare of a corpus at a time
def test_a_second_prepare_of_the_same_corpus_is_refused_at_once(prepared, corpora, capsys):
    """While a prepare of a corpus runs (its lock held), another of the same corpus is refused with one line, and
    the first one's partial folder is left alone; once none runs, a stale partial folder is cleaned up."""
    from vizlm.core import files

    partial = corpora / ".fresh.partial"
    partial.mkdir()
    (partial / "train.txt").write_text("being written")
    with files.exclusive(corpora / ".fresh.lock", "held"):
        code, _, err = cli(capsys, "prepare", "--corpus", "fresh", "--from", prepared)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "being prepared by another process" in err, err
        assert (partial / "train.txt").read_text() == "being written" and not (corpora / "fresh").exists()
        with pytest.raises(files.BusyError, match="being prepared"):
            vizlm.prepare_corpus("fresh", prepared)
        assert vizlm.prepare_corpus("other", prepared)["name"] == "other"  # another corpus meanwhile: fine
    card = vizlm.prepare_corpus("fresh", prepared)  # no lock held: the stale partial folder goes
    assert card["name"] == "fresh" and not partial.exists()
    assert entries(corpora) == ["fresh", "good", "other"]


def test_sigterm_during_prepare_removes_its_partial_folder(prepared, corpora, tmp_path):
    """SIGTERM (a kill, a job scheduler's stop) while a corpus is written removes the half-written folder."""
    import os
    import signal
    import subprocess
    import sys

    script = (
        "import sys, time, vizlm\n"
        "from vizlm.data import ingest\n"
        "real = ingest._write_ids\n"
        "def slow(out, split, *args):\n"
        "    print('writing', flush=True); time.sleep(60); return real(out, split, *args)\n"
        "ingest._write_ids = slow\n"
        "vizlm.prepare_corpus('fresh', sys.argv[1])\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", script, str(prepared)], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        assert (corpora / ".fresh.partial").is_dir()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert entries(corpora) == ["good"]


# --------------------------------------------------------------------------- what a word may be
def test_tokens_no_checkpoint_can_hold_are_read_as_unk_and_said(corpora, tmp_path, capsys):
    """A token with a control character (BEL, an escape sequence) or longer than MAX_WORD_CHARS can be no
    checkpoint's word: prepare reads it as <unk>, counts it on the card and says so; every word of the
    vocabulary passes the loader's rule, so the model trained on it can be saved and loaded."""
    from vizlm.modeling.checkpoint import MAX_WORD_CHARS, _check_vocab

    long = "x" * (MAX_WORD_CHARS + 1)
    source = write_folder(tmp_path / "source", {
        "train.txt": f"the cat \x07 sat\nthe \x1b[31mred\x1b[0m dog {long}\nthe cat sat\n",
        "valid.txt": f"the dog {long}\n", "test.txt": "the cat\n"})
    code, _, err = cli(capsys, "prepare", "--corpus", "odd", "--from", source)
    assert code == 0, err
    card = vizlm.corpus_card("odd")
    vocab = Vocab.load(corpora / "odd" / "vocab.txt")
    _check_vocab(vocab.itos, len(vocab))  # the loader accepts it
    assert long not in vocab and "\x07" not in vocab and not any("\x1b" in w for w in vocab.itos)
    assert card["split_stats"]["train"]["unusable_words_as_unk"] == 3
    assert card["split_stats"]["valid"]["unusable_words_as_unk"] == 1
    assert (corpora / "odd" / "train.txt").read_text().splitlines()[1] == "the <unk> dog <unk>"
    assert "4 tokens" in err and "<unk>" in err and "control" in err, err
