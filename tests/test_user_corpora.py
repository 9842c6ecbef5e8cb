"""The user's corpora and checkpoints beside the bundled ones (#27, #28): a vocabulary's overlap with a corpus,
a user corpus's examples, which checkpoint folders the app lists and where from, the app's own arguments."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vizlm.core import paths
from vizlm.data.examples import example_passages, example_sentences
from vizlm.data.registry import DataError
from vizlm.data.vocab import SPECIALS, Vocab, oov_rate, vocab_overlap
from vizlm.modeling.importer import write_corpus

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def corpus(tmp_path) -> Path:
    """A corpus ``vizlm import`` writes (``toy``), its test split: 2 lines, a blank one, 3 more."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "train.txt").write_text("the cat sat\n", encoding="utf-8")
    (source / "valid.txt").write_text("a dog ran\n", encoding="utf-8")
    (source / "test.txt").write_text("the cat sat on the mat .\nthe dog ran far away now .\n\n"
                                     "a zebra ran .\nthe cat saw a zebra and a yak .\nthe end of it all came .\n",
                                     encoding="utf-8")
    data = tmp_path / "data"
    write_corpus(source, "toy", [*SPECIALS, "the", "cat"], data_dir=data)
    return data


def test_vocab_overlap_counts_the_tokens_outside_the_vocabulary(corpus):
    vocab = Vocab([*SPECIALS, "the", "cat", "sat", "."])
    ov = vocab_overlap(vocab, "toy", "test", corpus)
    # 7 + 7 + 0 + 4 + 9 + 7 = 34 tokens, 21 distinct words; inside: the (5), cat (2), sat (1), . (5) = 13
    assert (ov.tokens, ov.oov_tokens, ov.types, ov.oov_types) == (34, 21, 21, 17)
    assert ov.oov_rate == pytest.approx(21 / 34) and ov.type_overlap == pytest.approx(4 / 21)
    assert oov_rate(vocab, "toy", "test", corpus) == pytest.approx(21 / 34)
    assert oov_rate(vocab.itos, "toy", "test", corpus) == pytest.approx(21 / 34)  # the words alone will do
    everything = vocab_overlap([*SPECIALS, *(corpus / "toy" / "test.txt").read_text().split()], "toy", "test", corpus)
    assert everything.oov_tokens == 0 and everything.oov_rate == 0.0
    # the counts are cached per version of the file: a rewritten split is counted again
    (corpus / "toy" / "test.txt").write_text("yak yak the\n", encoding="utf-8")
    assert oov_rate(vocab, "toy", "test", corpus) == pytest.approx(2 / 3)
    with pytest.raises(DataError, match="unknown corpus 'nope'"):
        vocab_overlap(vocab, "nope", "test", corpus)


def test_a_user_corpus_gives_examples_from_its_test_split(corpus):
    sentences = example_sentences("toy", "test", corpus)
    # lines of 5 to 40 tokens, with their ids; the 4-token line and the blank one are left out
    assert sentences[0] == ("test:0", "the cat sat on the mat .") and ("test:3", "a zebra ran .") not in sentences
    assert [sid for sid, _ in sentences] == ["test:0", "test:1", "test:4", "test:5"]
    passages = example_passages("toy", "test", corpus)
    # consecutive non-empty lines, a blank line ends one
    assert passages == [("test:0-1", "the cat sat on the mat .\nthe dog ran far away now ."),
                        ("test:3-5", "a zebra ran .\nthe cat saw a zebra and a yak .\nthe end of it all came .")]
    assert example_sentences("toy", "nosuch", corpus) == [] and example_passages("nope", "test", corpus) == []
    assert example_sentences("brown", "test")  # vizlm's own corpora keep the shipped examples


def test_the_api_reads_a_user_corpus_split(corpus, monkeypatch):
    import vizlm

    monkeypatch.setenv("VIZLM_DATA", str(corpus))
    paths.clear_overrides()
    with pytest.raises(vizlm.VizlmError, match="corpus 'toy' has no split 'dev'"):
        vizlm.compare("lstm", "lstm-continued", corpus="toy", split="dev", limit=2)
    with pytest.raises(vizlm.VizlmError, match="unknown corpus 'penn'.*toy"):
        vizlm.compare("lstm", "lstm-continued", corpus="penn", limit=2)


def _checkpoint(folder: Path, metrics: dict | None = None) -> Path:
    source = ROOT / "checkpoints" / "lstm"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes((source / "model.safetensors").read_bytes())
    meta = json.loads((source / "config.json").read_text(encoding="utf-8"))
    if metrics is not None:
        meta["metrics"] = metrics
    (folder / "config.json").write_text(json.dumps(meta), encoding="utf-8")
    return folder


@pytest.mark.skipif(not (ROOT / "checkpoints" / "lstm").is_dir(), reason="no bundled checkpoints in checkpoints/")
def test_the_app_lists_yours_the_bundled_ones_and_finished_runs(tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    from vizlm.app import checkpoints as ck

    mine, runs = tmp_path / "mine", tmp_path / "runs"
    _checkpoint(mine / "mylm")
    _checkpoint(mine / "wikimini-kvp-continued-running")  # its "name · yours · sentences" is cut in a select box
    _checkpoint(mine / "amsrn")  # a name the bundled ones have: yours keeps it, the bundled one is bundled:amsrn
    (mine / "broken").mkdir()
    (mine / "broken" / "config.json").write_text("{}", encoding="utf-8")
    _checkpoint(mine / "bad-config")
    (mine / "bad-config" / "config.json").write_text("{not json", encoding="utf-8")
    _checkpoint(runs / "done", {"valid_perplexity": 150.0, "test_perplexity": 151.0})
    _checkpoint(runs / "training", {"valid_perplexity": 150.0})
    (runs / "resume-only" / "resume").mkdir(parents=True)
    monkeypatch.setenv("VIZLM_CHECKPOINTS", str(mine))
    monkeypatch.setenv("VIZLM_RUNS", str(runs))
    monkeypatch.delenv("VIZLM_EXTRA_CHECKPOINTS", raising=False)
    paths.clear_overrides()
    listed = ck.listing()
    assert listed.sources["mylm"] == "yours" and listed.folders["mylm"] == mine / "mylm"
    assert listed.sources["amsrn"] == "yours" and listed.sources["bundled:amsrn"] == "bundled"
    assert listed.folders["bundled:amsrn"] == ROOT / "checkpoints" / "amsrn"
    assert listed.sources["lstm"] == "bundled" and listed.sources["done"] == "run"
    assert not {"broken", "bad-config", "training", "resume-only"} & set(listed.folders)
    notes = " ".join(listed.skipped)
    assert "broken: no model.safetensors" in notes and "bad-config: config.json cannot be read" in notes
    assert len(listed.skipped) == 2
    names = ck.model_names()
    assert names.index("lstm") < names.index("mylm") < names.index("done")  # bundled, yours, runs
    assert ck.model_label("mylm") == "mylm · yours · sentences" and ck.model_label("done") == "done · run · sentences"
    assert ck.model_label("bundled:amsrn") == "bundled:amsrn · sentences"
    # a label longer than a sidebar select box shows is the name alone; its help says the rest
    long = "wikimini-kvp-continued-running"
    assert ck.model_label(long) == long and "sentences (yours" in ck.model_help(long)
    assert all(len(ck.model_label(n)) <= ck.LABEL_CHARS or ck.model_label(n) == n for n in names)
    assert ck.model_group("amsrn") == ck.OTHER_GROUP != ck.model_group("bundled:amsrn")  # the manifest's is bundled
    assert ck.baseline_model(names, "bundled:amsrn") == "lstm-continued"  # its run's control, bundled


def test_app_arguments(tmp_path):
    pytest.importorskip("streamlit")
    from vizlm.app.shell import AppArgumentError, apply_arguments

    try:
        with pytest.raises(AppArgumentError, match="unrecognized arguments: --cache") as bad:
            apply_arguments(["--cache", str(tmp_path)])
        assert "usage: streamlit run app.py -- [--checkpoints DIR] [--corpora DIR]" in str(bad.value)
        assert "[--runs DIR]" in str(bad.value) and "[--data DIR]" in str(bad.value)
        with pytest.raises(AppArgumentError, match="--checkpoints .*missing: not a folder"):
            apply_arguments(["--checkpoints", str(tmp_path / "missing")])
        with pytest.raises(AppArgumentError, match="--corpora DIR +your corpora folder"):
            apply_arguments(["--help"])
        (tmp_path / "data").mkdir()
        apply_arguments(["--corpora", str(tmp_path), "--runs", str(tmp_path), "--data", str(tmp_path / "data")])
        assert paths.corpora_dir() == tmp_path and paths.runs_dir() == tmp_path
        assert paths.data_dir() == tmp_path / "data"
        assert paths.checkpoints_dir() == Path(os.environ["VIZLM_CHECKPOINTS"]) if "VIZLM_CHECKPOINTS" in os.environ \
            else paths.checkpoints_dir() == paths.home() / "checkpoints"
    finally:
        paths.clear_overrides()


def test_export_reads_a_corpus_sentence_with_its_document_before_it(tmp_path, monkeypatch, capsys):
    """``vizlm export --corpus NAME --sentence ID``: the sentence's words as written; a document-level
    checkpoint reads the sentences of its document before it too (as the app's passages)."""
    from vizlm.cli import main
    from vizlm.commands import corpus_text
    from vizlm.data.ingest import prepare_corpus

    source = tmp_path / "source"
    source.mkdir()
    for split in ("train", "valid", "test"):
        (source / f"{split}.txt").write_text("The cat sat .\nA dog ran .\n\nThe end came .\n", encoding="utf-8")
    monkeypatch.setenv("VIZLM_CORPORA", str(tmp_path / "corpora"))
    prepare_corpus("mine", source)
    assert corpus_text("mine", "test", "d0:1", document=False) == "A dog ran ."
    assert corpus_text("mine", "test", "d0:1", document=True) == "The cat sat .\nA dog ran ."
    assert corpus_text("mine", "test", "d1:0", document=True) == "The end came ."  # another document
    assert corpus_text("mine", "test", None, document=True) == "The cat sat ."
    with pytest.raises(ValueError, match="no sentence 'd9:9'"):
        corpus_text("mine", "test", "d9:9", document=False)
    out = tmp_path / "a.json"
    assert main(["export", "--checkpoint", "kvp-doc", "--corpus", "mine", "--sentence", "d0:1", "--format", "json",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["text"] == "The cat sat .\nA dog ran ."
    assert main(["export", "--checkpoint", "kvp-doc", "--text", "A dog .", "--sentence", "d0:1", "--format", "json",
                 "--out", str(tmp_path / "b.json")]) == 2
    assert "give --corpus NAME" in capsys.readouterr().err


def test_a_model_run_off_its_corpus_is_warned_with_its_oov_rate(corpus, monkeypatch):
    """``Model.off_corpus`` (what the CLI's corpus commands print as a warning): the share of the split read as
    <unk>, and nothing on the model's own corpus."""
    import vizlm

    monkeypatch.setenv("VIZLM_CORPORA", str(corpus))
    lm = vizlm.load("lstm")
    note = lm.off_corpus("toy", "test")
    ov = vocab_overlap(lm.checkpoint.vocab, "toy", "test")
    assert f"{ov.oov_rate:.1%} of its tokens ({ov.oov_tokens:,} of {ov.tokens:,}" in note and "trained on brown" in note
    assert lm.off_corpus("brown", "test") is None


def test_a_wikitext_file_read_as_text_gets_a_note_pointing_to_prepare(tmp_path, capsys):
    """``eval --text-file`` on a WikiText file scores its headings as sentences: a note says so and how to prepare
    it; a plain text file gets none."""
    from vizlm.cli import main

    wiki = tmp_path / "wiki.test.tokens"
    wiki.write_text(" \n = Valkyria Chronicles = \n \n The game began development in 2010 . \n \n"
                    " = = Gameplay = = \n \n As with previous games , the player moves . \n", encoding="utf-8")
    assert main(["eval", "--checkpoint", "lstm", "--text-file", str(wiki)]) == 0
    err = capsys.readouterr().err
    assert "wiki.test.tokens looks like WikiText" in err and "vizlm prepare --corpus NAME --from FOLDER" in err
    plain = tmp_path / "plain.txt"
    plain.write_text("The game began development in 2010 .\n", encoding="utf-8")
    assert main(["eval", "--checkpoint", "lstm", "--text-file", str(plain)]) == 0
    assert "WikiText" not in capsys.readouterr().err
