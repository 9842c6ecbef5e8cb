"""The corpus folder (vizlm/data/folder.py): prepare, ingest and import write one layout through it."""

from __future__ import annotations

import json

from vizlm.data.folder import (
    CARD_FILE,
    CARD_FORMAT,
    COLUMNS,
    TOKEN_ID_FILES,
    VOCAB_FILE,
    document_sizes,
    read_card,
    vocab_text,
)
from vizlm.data.ingest import prepare_corpus
from vizlm.data.prepare import RawSentence, _split_files
from vizlm.data.registry import SPLITS
from vizlm.modeling.importer import source_vocabulary, vizlm_vocabulary, write_corpus

LINES = {"train": ["the cat sat .", "", "a dog ran fast .", "the dog sat ."], "valid": ["a cat ran ."],
         "test": ["the cat ran .", "a dog sat ."]}


def _layout(folder) -> set[str]:
    """The names of a corpus folder's files, its token-id files (derived, written by vizlm.data.tokens) left out."""
    return {p.name for p in folder.iterdir() if not p.name.endswith(tuple(TOKEN_ID_FILES.values()))}


def test_prepare_ingest_and_import_write_one_layout(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for split, lines in LINES.items():
        (source / f"{split}.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    prepare_corpus("ingested", source, corpora_dir=tmp_path / "corpora")
    itos, _ = vizlm_vocabulary(source_vocabulary(source))
    write_corpus(source, "imported", itos, data_dir=tmp_path / "imports")
    raw = [RawSentence(f"d0:{i}", line.split(), ["-"] * len(line.split())) for i, line in enumerate(LINES["test"])]
    prepared = {p.name for p in _split_files(tmp_path / "data", "brown", "test", raw)}

    expected = {f"{split}.{ext}" for split in SPLITS for ext in COLUMNS.values()} | {VOCAB_FILE, CARD_FILE}
    for name in ("ingested", "imported"):
        folder = (tmp_path / ("corpora" if name == "ingested" else "imports")) / name
        assert _layout(folder) == expected, name
        card = read_card(folder)
        assert card["format"] == CARD_FORMAT and card["name"] == name and card["splits"] == list(SPLITS)
        assert (folder / CARD_FILE).read_text(encoding="utf-8") == json.dumps(card, indent=1, ensure_ascii=False) + "\n"
        vocab = (folder / VOCAB_FILE).read_text(encoding="utf-8")
        assert vocab == vocab_text(vocab.split("\n")[:-1]) and vocab.split("\n")[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
        for split in SPLITS:
            cols = {ext: (folder / f"{split}.{ext}").read_text(encoding="utf-8") for ext in COLUMNS.values()}
            assert all(text.endswith("\n") for text in cols.values()), (name, split)
            rows = {ext: text.split("\n")[:-1] for ext, text in cols.items()}
            assert len({len(r) for r in rows.values()}) == 1, (name, split)  # a line per sentence in every file
            for words, tags, orig in zip(rows["txt"], rows["tags"], rows["orig"]):
                assert len(words.split()) == len(tags.split()) == len(orig.split())
            assert sum(document_sizes(rows["ids"])) == len(rows["ids"])
    assert prepared == {f"test.{ext}" for ext in COLUMNS.values()}
