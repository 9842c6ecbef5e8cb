"""``vizlm reproduce --manifest my.toml`` on a corpus of yours (#27): the papers' protocols rerun on a prepared
corpus, everything the manifest makes kept beside it (never in the repository's runs/, evidence/ or
docs/RESULTS.md), its report's tables and intervals computed from that evidence."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest
from conftest import ROOT

import vizlm
from vizlm import cli
from vizlm.reproduce import evidence, experiments, report
from vizlm.core import paths
from vizlm.modeling.checkpoint import meta_corpus
from vizlm.data.registry import corpus_card

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "to", "house", "big", "small", "red", "blue", "green",
         "saw", "it", "and", "then", "we", "they", "he", "she", "was", "is", "will", "go", "come", "home", "tree"]
# emb 8, hidden 32: kvp and the ngram RNN come within 2% of the LSTM's parameter count on the 36-word vocabulary
MINE = """
[defaults]
corpus = "tiny"
context = "document"
emb_dim = 8
hidden_dim = 32
epochs = 1

[run.lstm-doc]
paper = "daniluk"
model = "lstm"

[run.kvp-doc-w5]
paper = "daniluk"
model = "kvp"
match = "lstm"
control = "lstm-doc"
options = { window = 5 }

[run.lstm-sent]
paper = "extension"
model = "lstm"
context = "sentence"

[claim.kvp-beats-lstm]
paper = "daniluk"
claim = "Key-Value-Predict beats the LSTM of equal size"
paper_says = "Wikipedia test 75.8 vs 85.2 (-11.0%)"
kind = "better"
run = "kvp-doc-w5"
against = "lstm-doc"
"""


def write_tiny_source(folder: Path, seed: int = 0) -> Path:
    """train / valid / test of random words: one sentence a line, a blank line after every 6th (a document)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 300), ("valid", 60), ("test", 60)):
        lines = []
        for i in range(n):
            lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + " .")
            if i % 6 == 5:
                lines.append("")
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture
def yours(tmp_path, monkeypatch):
    """The manifest ``MINE`` in ``tmp/work/mine.toml``, its corpus ``tiny`` prepared; the user has set no
    runs or evidence folder."""
    for key in ("VIZLM_RUNS", "VIZLM_EVIDENCE", "VIZLM_HOME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VIZLM_CORPORA", str(tmp_path / "corpora"))
    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path / "cache"))
    vizlm.prepare_corpus("tiny", write_tiny_source(tmp_path / "source"))
    manifest = tmp_path / "work" / "mine.toml"
    manifest.parent.mkdir()
    manifest.write_text(MINE, encoding="utf-8")
    return manifest


def _repository_state() -> dict[str, bytes | int]:
    """Every file of the repository's evidence/ (its bytes), docs/RESULTS.md, and runs/ (its times: weights are large)."""
    state: dict[str, bytes | int] = {"docs/RESULTS.md": (ROOT / "docs" / "RESULTS.md").read_bytes()}
    for top in ("evidence", "runs"):
        for path in sorted((ROOT / top).rglob("*")) if (ROOT / top).is_dir() else []:
            if path.is_file():
                key = str(path.relative_to(ROOT))
                state[key] = path.read_bytes() if top == "evidence" else path.stat().st_mtime_ns
    return state


def test_the_repository_manifest_keeps_its_places(monkeypatch):
    for key in ("VIZLM_RUNS", "VIZLM_EVIDENCE", "VIZLM_HOME"):
        monkeypatch.delenv(key, raising=False)
    for given in (None, ROOT / experiments.MANIFEST):
        where = experiments.locations(given)
        assert where.own and (where.runs, where.evidence) == (paths.runs_dir(), paths.evidence_dir())
        assert (where.runs, where.evidence, where.report) == (ROOT / "runs", ROOT / "evidence", ROOT / "docs" / "RESULTS.md")
    monkeypatch.setenv("VIZLM_RUNS", "/elsewhere/runs")
    assert experiments.locations().runs == Path("/elsewhere/runs"), "the variable, as before"
    runs = experiments.load_manifest(ROOT / experiments.MANIFEST)
    assert runs["kvp-doc-w5"].command() == "vizlm reproduce --only kvp-doc-w5", "its evidence records this command"


def test_a_manifest_of_yours_keeps_its_results_in_a_folder_beside_it(tmp_path, monkeypatch):
    for key in ("VIZLM_RUNS", "VIZLM_EVIDENCE", "VIZLM_HOME"):
        monkeypatch.delenv(key, raising=False)
    where = experiments.locations(tmp_path / "mine.toml")
    assert not where.own
    assert (where.runs, where.evidence, where.report) == (tmp_path / "mine" / "runs", tmp_path / "mine" / "evidence",
                                                          tmp_path / "mine" / "RESULTS.md")
    beside = experiments.locations(ROOT / "mine.toml")  # even beside experiments.toml: not the repository's folders
    assert {beside.runs, beside.evidence, beside.report}.isdisjoint({ROOT / "runs", ROOT / "evidence",
                                                                     ROOT / "docs" / "RESULTS.md"})
    monkeypatch.setenv("VIZLM_EVIDENCE", str(ROOT / "evidence"))  # set for the repository's work, still set
    with pytest.raises(ValueError, match=r"VIZLM_EVIDENCE is the repository's evidence folder .* pass --evidence-dir"):
        experiments.locations(tmp_path / "mine.toml")
    assert experiments.locations(tmp_path / "mine.toml", evidence_dir=ROOT / "evidence").evidence == ROOT / "evidence"
    monkeypatch.setenv("VIZLM_RUNS", str(tmp_path / "r"))
    monkeypatch.setenv("VIZLM_EVIDENCE", str(tmp_path / "e"))
    where = experiments.locations(tmp_path / "mine.toml")
    assert (where.runs, where.evidence) == (tmp_path / "r", tmp_path / "e"), "the user's variables win"
    where = experiments.locations(tmp_path / "mine.toml", tmp_path / "r2", tmp_path / "e2", tmp_path / "out.md")
    assert (where.runs, where.evidence, where.report) == (tmp_path / "r2", tmp_path / "e2", tmp_path / "out.md"), \
        "the options win over the variables"
    with where.applied():
        assert (paths.runs_dir(), paths.evidence_dir()) == (tmp_path / "r2", tmp_path / "e2")
    assert (paths.runs_dir(), paths.evidence_dir()) == (tmp_path / "r", tmp_path / "e"), "as they were afterwards"
    args = cli.build_parser().parse_args(["reproduce", "--manifest", "m.toml", "--report", "--runs", "r",
                                          "--evidence-dir", "e", "--report-out", "f.md"])
    assert (args.runs, args.evidence_dir, args.report_out) == (Path("r"), Path("e"), Path("f.md"))


def test_a_corpus_not_prepared_is_named_with_the_command_that_prepares_it(tmp_path, monkeypatch, capsys):
    for key in ("VIZLM_RUNS", "VIZLM_EVIDENCE"):
        monkeypatch.delenv(key, raising=False)
    manifest = tmp_path / "mine.toml"
    manifest.write_text(MINE.replace('corpus = "tiny"', 'corpus = "nowhere"'), encoding="utf-8")
    assert cli.main(["reproduce", "--manifest", str(manifest), "--only", "lstm-doc"]) == 1
    assert "vizlm prepare --corpus nowhere --from FOLDER" in capsys.readouterr().err
    assert not (tmp_path / "mine").exists(), "nothing was made for a run that cannot start"


def test_the_example_manifest_is_daniluks_protocol_on_your_corpus(monkeypatch):
    for key in ("VIZLM_RUNS", "VIZLM_EVIDENCE"):
        monkeypatch.delenv(key, raising=False)
    path = ROOT / "examples" / "my-corpus.toml"
    runs = experiments.load_manifest(path)
    claims = experiments.load_claims(path, runs)
    assert {r.corpus for r in runs.values()} == {"mycorpus"} and {r.context for r in runs.values()} == {"document"}
    assert {(r.model, tuple(r.options.items())) for r in runs.values()} == {
        ("lstm", ()), ("attention", (("window", 5),)), ("kv", (("window", 5),)), ("kvp", (("window", 5),)),
        ("ngram", (("n", 4),))}
    assert all(r.match == "lstm" and r.control == "lstm-doc" for r in runs.values() if r.name != "lstm-doc")
    assert not any(r.bundled or r.blocked for r in runs.values())
    assert claims and all(c.paper == "daniluk" and c.kind in ("better", "equal") for c in claims.values())
    assert runs["kvp-doc-w5"].command() == f"vizlm reproduce --manifest {path} --only kvp-doc-w5"
    text = path.read_text(encoding="utf-8")
    for said in ("vizlm prepare --corpus mycorpus --from FOLDER", "--all", "--report", "do not apply", "bootstrap"):
        assert said in text, said
    assert experiments.locations(path).runs == path.parent / "my-corpus" / "runs"


@pytest.mark.slow
def test_your_manifest_trains_on_your_corpus_and_reports_beside_it(yours, capsys):
    before = _repository_state()
    folder = yours.parent / "mine"
    args = ["reproduce", "--manifest", str(yours)]

    assert cli.main([*args, "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("lstm-doc", "kvp-doc-w5", "lstm-sent"):
        assert re.search(rf"^{name} .* not run", out, re.MULTILINE), out
    assert not folder.exists(), "listing writes nothing"

    assert cli.main([*args, "--only", "lstm-doc", "kvp-doc-w5", "lstm-sent", "--threads", "1"]) == 0
    assert sorted(p.name for p in (folder / "runs").iterdir()) == ["kvp-doc-w5", "lstm-doc", "lstm-sent"]
    assert sorted(p.name for p in (folder / "evidence").iterdir()) == ["kvp-doc-w5", "lstm-doc", "lstm-sent"]
    capsys.readouterr()
    assert cli.main([*args, "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("lstm-doc", "kvp-doc-w5", "lstm-sent"):
        assert re.search(rf"^{name} .* finished +test \d", out, re.MULTILINE), out
    assert cli.main([*args, "--evidence"]) == 0
    assert "every finished run here has its evidence" in capsys.readouterr().err

    # the evidence: your corpus's valid and test (no WSJ), every sentence's NLL, the sentences of each document
    os.environ["VIZLM_EVIDENCE"] = str(folder / "evidence")  # read it back as the report does (undone below)
    try:
        ev = {name: evidence.read(name) for name in ("lstm-doc", "kvp-doc-w5", "lstm-sent")}
        compared = evidence.versus(ev["kvp-doc-w5"], ev["lstm-doc"], "test")
    finally:
        del os.environ["VIZLM_EVIDENCE"]
    card = corpus_card("tiny")["split_stats"]
    for e in ev.values():
        assert meta_corpus(e.config) == "tiny" and set(e.nll) == {"valid", "test"}
        for split in ("valid", "test"):
            assert len(e.nll[split]) == len(e.tokens[split]) == card[split]["sentences"]
            assert len(e.documents[split]) == card[split]["documents"] and e.documents[split].sum() == card[split]["sentences"]
        assert e.config["train"]["command"].startswith(f"vizlm reproduce --manifest {yours} --only ")
    assert (ev["lstm-doc"].context, ev["lstm-sent"].context) == ("document", "sentence")
    assert ev["kvp-doc-w5"].positions is not None and ev["kvp-doc-w5"].positions["window"] == 5
    assert compared["resampled"] == "documents", "running text: resampled over your documents"

    assert cli.main([*args, "--report"]) == 0
    results = folder / "RESULTS.md"
    text = results.read_text(encoding="utf-8")
    assert text.startswith("# Results of mine.toml") and report.REPORT_BEGIN in text
    assert f"--manifest {yours.name} --report" in text and "(`evidence/`)" in text and "Corpus: `tiny`" in text
    assert "not expected here" in text and "on `tiny`" in text and "WSJ" not in text
    interval = f"{compared['ratio']:.3f} ({compared['low']:.3f}–{compared['high']:.3f}) vs lstm-doc over documents"
    row = next(line for line in text.splitlines() if line.startswith("| kvp-doc-w5 |"))
    assert interval in row and "finished" in row, row
    claim = next(line for line in text.splitlines() if line.startswith("| Key-Value-Predict beats"))
    assert "95% CI" in claim and "kvp-doc-w5 vs lstm-doc" in claim and "not tested" not in claim, claim
    assert "| lstm-sent | lstm | sentence |" in text
    assert cli.main([*args, "--report"]) == 0
    assert results.read_text(encoding="utf-8") == text, "regenerating the report changes nothing"

    assert _repository_state() == before, "the repository's evidence/, runs/ or docs/RESULTS.md changed"
