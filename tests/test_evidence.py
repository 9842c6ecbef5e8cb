"""The runs' evidence (``evidence/``): written from a checkpoint, read back, and the only thing the
report reads; docs/RESULTS.md is what the repository's evidence gives."""

from __future__ import annotations

import json
import math
import os
import shutil
import time

import numpy as np
import pytest
from corpora import make_corpus
from conftest import ROOT
from test_reproduce import TINY

from vizlm import cli
from vizlm.reproduce import corpus_evidence, corpus_runs, evidence, experiments, report, runner
from vizlm.core import paths
from vizlm.inspect.cache import checkpoint_digest
from vizlm.modeling.checkpoint import load_checkpoint
from vizlm.inspect.corpus_stats import compare
from vizlm.data.registry import split_texts

LOCATIONS = (("VIZLM_RUNS", "runs"), ("VIZLM_CACHE", "cache"), ("VIZLM_EVIDENCE", "evidence"))


@pytest.fixture(scope="module")
def trained_once(tmp_path_factory):
    """TINY's base and amsrn-tiny, dry runs (3 batches), with their evidence: trained once a module."""
    root = tmp_path_factory.mktemp("trained")
    with pytest.MonkeyPatch.context() as mp:
        for key, sub in LOCATIONS:
            mp.setenv(key, str(root / sub))
        (root / "experiments.toml").write_text(TINY)
        runs = experiments.load_manifest(root / "experiments.toml")
        for name in ("base", "amsrn-tiny"):
            runner.run_one(runs[name], runs, dry_run=True)
            runner.write_evidence(runs[name])
    return root


@pytest.fixture
def trained(trained_once, tmp_path, monkeypatch):
    """A copy of :func:`trained_once` of the test's own (tests change it) and the locations set to it."""
    shutil.copytree(trained_once, tmp_path, dirs_exist_ok=True)
    for key, sub in LOCATIONS:
        monkeypatch.setenv(key, str(tmp_path / sub))
    manifest = tmp_path / "experiments.toml"
    return manifest, experiments.load_manifest(manifest)


def test_evidence_holds_what_the_tables_need(trained):
    _, runs = trained
    ev = runs["amsrn-tiny"].evidence()
    folder = evidence.folder("amsrn-tiny")
    assert {p.name for p in folder.iterdir()} == {*evidence.FILES, evidence.POSITIONS}
    assert set(ev.nll) == {"valid", "test", "wsj"} and all(ev.nll[s].dtype == np.float32 for s in ev.nll)
    assert ev.config["train"]["command"] == "vizlm reproduce --only amsrn-tiny" and "commit" in ev.config["train"]
    assert "vocab" not in ev.config and len(ev.config["vocab_sha256"]) == 64
    assert ev.metrics == load_checkpoint(runs["amsrn-tiny"].folder).meta["metrics"]
    lines = (folder / "train_log.jsonl").read_text().splitlines()
    assert lines and all("valid_perplexity" in json.loads(x) for x in lines)
    assert ev.positions["window"] == 10 and len(ev.positions["mean"]) == 10
    assert len(ev.tokens["test"]) == len(ev.nll["test"]) and (ev.tokens["test"] >= 2).all()  # words + </s>
    assert int(ev.documents["test"].sum()) == len(ev.nll["test"])  # every sentence is in one document
    assert sum(p.stat().st_size for p in folder.iterdir()) < 200_000, "tens of KB a run"


def test_versus_from_evidence_equals_the_comparison_of_the_models(trained):
    """The report's ratio and interval, from the stored NLLs, are those of scoring the two models."""
    _, runs = trained
    got = report.versus(runs["amsrn-tiny"], runs["base"])
    n = len(runs["base"].evidence().nll["test"])  # a dry run's evidence: the split's first batch, as its metrics
    assert n == 64
    ids, _, _ = split_texts("brown", "test")
    with open(paths.data_dir() / "brown" / "test.txt", encoding="utf-8") as fh:
        sentences = [next(fh).split() for _ in range(n)]
    want = compare(load_checkpoint(runs["base"].folder), load_checkpoint(runs["amsrn-tiny"].folder), sentences,
                   ids[:n]).summary  # scored sentence by sentence in memory: another path than the split reader
    assert got["resampled"] == want["resampled"] == "sentences"
    for k, w in [("ratio", "ratio"), ("low", "ratio_ci_low"), ("high", "ratio_ci_high"), ("ppl", "perplexity_b"),
                 ("ppl_against", "perplexity_a")]:
        assert got[k] == pytest.approx(want[w], rel=1e-6), k  # float32 storage of float64 sums


def test_the_report_reads_no_weights(trained, monkeypatch):
    _, runs = trained
    for name in ("base", "amsrn-tiny"):  # the checkpoints gone: the evidence alone
        for f in runs[name].folder.iterdir():
            if f.is_file():
                f.unlink()
    monkeypatch.setattr(runner, "load_checkpoint", lambda *a: pytest.fail("the report loaded a checkpoint"))
    text = report.report(runs)
    row = next(line for line in text.splitlines() if line.startswith("| amsrn-tiny "))
    assert "vs base over sentences" in row and "| finished |" in row
    assert "| base-s2 | lstm | sentence |" in text and "| not run |" in text
    assert runs["base"].status() == "finished", "its evidence says it is finished, weights or not"


def test_existing_evidence_is_replaced_only_with_force(trained, capsys):
    manifest, runs = trained
    before = (evidence.folder("base") / "nll.safetensors").read_bytes()
    with pytest.raises(evidence.EvidenceError, match="exists already"):
        runner.write_evidence(runs["base"])
    assert cli.main(["reproduce", "--manifest", str(manifest), "--evidence", "base"]) == 2
    assert "--force" in capsys.readouterr().err
    assert cli.main(["reproduce", "--manifest", str(manifest), "--evidence", "base", "--force"]) == 0
    assert (evidence.folder("base") / "nll.safetensors").read_bytes() == before, "the same model, the same evidence"
    assert not [p for p in evidence.folder("base").parent.iterdir() if p.name.startswith(".")], "no temporary left"


def test_a_half_written_evidence_folder_is_an_error_not_a_result(trained):
    _, runs = trained
    (evidence.folder("base") / "nll.safetensors").unlink()
    assert not runs["base"].done()
    with pytest.raises(evidence.EvidenceError, match="lacks nll.safetensors"):
        runs["base"].evidence()


def test_list_names_the_claims_a_run_not_run_serves(trained, capsys):
    """A run not run says which claims wait for it: as one of their runs, or as the seed of one
    that a claim checks seed by seed (amsrn-tiny-s2 vs base-s2 beside amsrn-tiny vs base)."""
    manifest, _ = trained
    manifest.write_text(TINY + '\n[claim.beats]\npaper = "liu-lee"\nclaim = "c"\nkind = "better"\n'
                        'run = "amsrn-tiny"\nagainst = "base"\n')
    assert cli.main(["reproduce", "--manifest", str(manifest), "--list"]) == 0
    lines = {x.split()[0]: x for x in capsys.readouterr().out.splitlines()}
    for name in ("base-s2", "amsrn-tiny-s2"):
        assert "not run" in lines[name] and "needed by beats" in lines[name], lines[name]
    assert "needed by" not in lines["base"], "a finished run waits for nothing"
    assert "missing" not in " ".join(lines.values())


def test_list_finds_the_seed_groups_once(trained, monkeypatch, capsys):
    """``--list`` asks every run which claims need it: the seed groups behind that are found once for the whole
    table, not once for every run and claim (the repository's manifest took 18 s that way)."""
    manifest, _ = trained
    manifest.write_text(TINY + '\n[claim.beats]\npaper = "liu-lee"\nclaim = "c"\nkind = "better"\n'
                        'run = "amsrn-tiny"\nagainst = "base"\n')
    calls = []
    found = experiments.seed_groups
    monkeypatch.setattr(experiments, "seed_groups", lambda runs: calls.append(1) or found(runs))
    assert cli.main(["reproduce", "--manifest", str(manifest), "--list"]) == 0
    assert "needed by beats" in capsys.readouterr().out
    assert len(calls) == 1


# --------------------------------------------------------------------------- the repository's own results
def test_results_md_is_what_the_evidence_in_the_repository_gives(monkeypatch, tmp_path):
    """A clean clone regenerates the generated part of docs/RESULTS.md unchanged, from evidence/
    alone (no runs/ folder, no weights), in well under a minute."""
    monkeypatch.setenv("VIZLM_HOME", str(ROOT))
    monkeypatch.setenv("VIZLM_RUNS", str(tmp_path / "no-runs"))  # whatever this machine trained is not evidence
    monkeypatch.setenv("VIZLM_EVIDENCE", str(ROOT / "evidence"))
    monkeypatch.setattr(runner, "load_checkpoint", lambda *a: pytest.fail("the report loaded a checkpoint"))
    runs = experiments.load_manifest(ROOT / experiments.MANIFEST)
    claims = experiments.load_claims(ROOT / experiments.MANIFEST, runs)
    monkeypatch.setattr(evidence, "load_checkpoint", lambda *a: pytest.fail("the report loaded a checkpoint"))
    monkeypatch.setattr(corpus_evidence, "load_checkpoint", lambda *a: pytest.fail("the report loaded a checkpoint"))
    start = time.perf_counter()
    text = report.report(runs, claims, corpus_runs.load_attribution(ROOT / experiments.MANIFEST),
                         cases=corpus_runs.load_cases_plan(ROOT / experiments.MANIFEST),
                         faithfulness=corpus_runs.load_faithfulness_plan(ROOT / experiments.MANIFEST))
    assert time.perf_counter() - start < 60
    stored = (ROOT / "docs" / "RESULTS.md").read_text(encoding="utf-8")
    begin, end = stored.index(report.REPORT_BEGIN), stored.index(report.REPORT_END) + len(report.REPORT_END)
    assert stored[begin:end] + "\n" == text, "docs/RESULTS.md differs from `vizlm reproduce --report`: rerun it"


def test_every_finished_run_in_the_repository_has_whole_evidence(monkeypatch):
    root = ROOT / "evidence"
    monkeypatch.setenv("VIZLM_EVIDENCE", str(root))
    runs = experiments.load_manifest(ROOT / experiments.MANIFEST)
    folders = [p for p in root.iterdir()
               if p.is_dir() and not p.name.startswith(".")
               and p.name not in (corpus_evidence.ATTRIBUTION, corpus_evidence.CASES, corpus_evidence.FAITHFULNESS)]
    assert {p.name for p in folders} <= set(runs), "evidence of a run the manifest does not name"
    plan = corpus_runs.load_attribution(ROOT / experiments.MANIFEST)
    kept = {name: (checkpoint, method) for name, checkpoint, method in plan.units()}  # a checkpoint per method
    assert set(corpus_evidence.attribution_names()) <= set(kept), "attribution evidence the manifest does not name"
    for name in corpus_evidence.attribution_names():  # whole, with its command and commit, of the bundled weights
        ev = corpus_evidence.read_attribution(name)
        checkpoint, method = kept[name]
        assert ev.config["commit"] and "+dirty" not in ev.config["commit"] and ev.config["written_by"], name
        assert not plan.differs(ev.config, method) and ev.config["checkpoint"] == checkpoint, name
        assert ev.config["checkpoint_sha256"] == checkpoint_digest(load_checkpoint(ROOT / "checkpoints" / checkpoint)), name
        assert all(len(s) == ev.config["units"] == len(c) for s, c in ev.sums.values()), name
    faith = corpus_runs.load_faithfulness_plan(ROOT / experiments.MANIFEST)
    units = {name: (checkpoint, head) for name, checkpoint, head, _ in faith.units()}  # a Transformer's: per head
    assert set(corpus_evidence.faithfulness_names()) <= set(units), "faithfulness evidence the manifest does not name"
    for name in corpus_evidence.faithfulness_names():  # whole, with its command and commit, of the bundled weights
        ev = corpus_evidence.read_faithfulness(name)
        c = ev.config
        checkpoint, head = units[name]
        assert c.get("head") == (None if head is None else list(head)), name  # no "head": written before it
        if checkpoint in faith.frozen:  # the second seed's weights as bundled
            other = load_checkpoint(ROOT / "checkpoints" / faith.frozen[checkpoint])
            assert (c["frozen"], c["frozen_sha256"]) == (faith.frozen[checkpoint], checkpoint_digest(other)), name
        assert c["commit"] and "+dirty" not in c["commit"] and c["written_by"], name
        assert [c[k] for k in ("corpus", "split", "per_document", "limit", "permutations", "n_steps", "adversary_steps")] == [
            getattr(faith, k) for k in ("corpus", "split", "per_document", "limit", "permutations", "n_steps",
                                        "adversary_steps")], name
        assert c["checkpoint_sha256"] == checkpoint_digest(load_checkpoint(ROOT / "checkpoints" / checkpoint)), name
        per_unit = [a for k, a in ev.arrays.items() if k.endswith((".sum", ".count")) or k == "unit.document"]
        assert per_unit and all(len(a) == c["units"] for a in per_unit), name
    cases = corpus_runs.load_cases_plan(ROOT / experiments.MANIFEST)
    for name in cases.checkpoints:  # the case evidence of the bundled weights, with its command and commit
        doc = corpus_evidence.read_cases(name)
        assert doc is not None and doc["commit"] and "+dirty" not in doc["commit"] and doc["written_by"], name
        assert (doc["corpus"], doc["split"], doc["limit"]) == (cases.corpus, cases.split, cases.limit), name
        assert doc["checkpoint_sha256"] == checkpoint_digest(load_checkpoint(ROOT / "checkpoints" / name)), name
    assert (root / "README.md").is_file()
    for p in folders:
        assert all((p / f).is_file() for f in evidence.FILES), p
        ev = evidence.read(p.name)
        assert ev.config["train"].get("command") and "commit" in ev.config["evidence"], p.name
        # the stored NLLs give the stored test perplexity (float32 storage of the NLLs aside)
        assert ev.perplexity("test") == pytest.approx(ev.metrics["test_perplexity"], rel=1e-4), p.name


def test_attribution_evidence_goes_on_where_a_stopped_pass_was(monkeypatch, tmp_path):
    """A pass stopped midway keeps the documents it finished (in the cache folder) and, run again, computes only
    the others; its evidence equals that of a pass never stopped. Another checkpoint starts over."""
    import torch
    from safetensors.numpy import load_file

    from vizlm.inspect import attribution_corpus
    from vizlm.modeling.checkpoint import save_checkpoint
    from vizlm.data.vocab import Vocab
    from vizlm.models import build_model

    for key, sub in (("VIZLM_CACHE", "cache"), ("VIZLM_EVIDENCE", "evidence")):
        monkeypatch.setenv(key, str(tmp_path / sub))
    data = make_corpus(tmp_path / "data", train=5, valid=5, test=24, doc_sentences=4, mean_length=6)  # 6 documents
    monkeypatch.setenv("VIZLM_DATA", str(data))
    vocab = Vocab.for_corpus("brown", data)
    torch.manual_seed(0)
    model = build_model("kvp", vocab_size=len(vocab), emb_dim=8, hidden_dim=8, window=3, context="document").eval()
    source = save_checkpoint(tmp_path / "kvp", model, "kvp", vocab, metrics={}, corpus={"name": "brown"})
    write = lambda name, force=False: corpus_evidence.write_attribution(  # noqa: E731
        name, source, "brown", "test", "occlusion", force=force, log=open(os.devnull, "w"))
    write("whole")
    collect, calls = attribution_corpus.collect, []

    def stopping(*a, **kw):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(kw["select"])
        return collect(*a, **kw)

    monkeypatch.setattr(attribution_corpus, "collect", stopping)
    with pytest.raises(KeyboardInterrupt):
        write("resumed")
    assert not corpus_evidence.attribution_folder("resumed").exists() and len(calls) == 3
    monkeypatch.setattr(attribution_corpus, "collect", lambda *a, **kw: calls.append(kw["select"]) or collect(*a, **kw))
    write("resumed")
    assert len(calls) == 6  # the other three documents only
    assert sorted(i for c in calls for i in c) == list(range(24))  # each sentence read once over the two passes
    whole, resumed = (load_file(str(corpus_evidence.attribution_folder(n) / "sums.safetensors")) for n in ("whole", "resumed"))
    assert whole.keys() == resumed.keys() and all(np.array_equal(whole[k], resumed[k]) for k in whole)
    a, b = (corpus_evidence.read_attribution(n).config for n in ("whole", "resumed"))
    assert {k: v for k, v in a.items() if k not in ("wall_s", "written_by")} == \
        {k: v for k, v in b.items() if k not in ("wall_s", "written_by")}
    assert not (tmp_path / "cache" / "partial" / "resumed").exists()  # gone once the evidence is written
    # the documents kept belong to one checkpoint, sample and code: another starts over
    monkeypatch.setattr(attribution_corpus, "collect", stopping)
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        write("whole", force=True)
    torch.manual_seed(1)
    other = build_model("kvp", vocab_size=len(vocab), emb_dim=8, hidden_dim=8, window=3, context="document").eval()
    save_checkpoint(tmp_path / "kvp", other, "kvp", vocab, metrics={}, corpus={"name": "brown"}, force=True)
    monkeypatch.setattr(attribution_corpus, "collect", lambda *a, **kw: calls.append(kw["select"]) or collect(*a, **kw))
    write("whole", force=True)
    assert len(calls) == 3 + 6


def test_attribution_evidence_gives_the_librarys_statistics(monkeypatch, tmp_path, capsys):
    """`vizlm reproduce --attribution` keeps per-unit sums and each unit's document: resampling the units gives
    exactly the library's intervals, resampling the documents what a bootstrap of the per-word values over their
    documents gives; the report's tables read them alone and name evidence the manifest no longer describes;
    existing evidence is kept unless --force."""
    import torch

    from vizlm.data.registry import load_corpus
    from vizlm.inspect import attribution_corpus
    from vizlm.modeling.checkpoint import save_checkpoint
    from vizlm.data.vocab import Vocab
    from vizlm.models import build_model

    for key, sub in (("VIZLM_CACHE", "cache"), ("VIZLM_EVIDENCE", "evidence"), ("VIZLM_CHECKPOINTS", "checkpoints")):
        monkeypatch.setenv(key, str(tmp_path / sub))
    data = make_corpus(tmp_path / "data", train=5, valid=5, test=24, doc_sentences=4, mean_length=6)  # 6 documents
    monkeypatch.setenv("VIZLM_DATA", str(data))
    vocab = Vocab.for_corpus("brown", data)
    for name, family, kw in (("tiny-kvp", "kvp", {"window": 3}), ("tiny-lstm", "lstm", {})):
        torch.manual_seed(0)
        model = build_model(family, vocab_size=len(vocab), emb_dim=8, hidden_dim=8, **kw).eval()
        save_checkpoint(tmp_path / "checkpoints" / name, model, family, vocab, metrics={}, corpus={"name": "brown"})
    manifest = tmp_path / "experiments.toml"
    manifest.write_text(TINY + '\n[attribution]\nmethod = "occlusion"\nper_document = 2\n'
                               'checkpoints = ["tiny-kvp", "tiny-lstm", "never"]\n')
    assert cli.main(["reproduce", "--manifest", str(manifest), "--attribution", "tiny-kvp", "tiny-lstm"]) == 0
    ev = corpus_evidence.read_attribution("tiny-kvp")
    c = ev.config
    assert (c["per_document"], c["limit"], c["window"], c["permutations"]) == (2, None, 3, 0) and c["commit"] is not None
    assert c["device"] == "cpu"  # reproduce's default, recorded
    ckpt = load_checkpoint(tmp_path / "checkpoints" / "tiny-kvp")
    select = corpus_evidence.first_of_each_document("brown", "test", 2)
    rows, n_units = attribution_corpus.collect(ckpt, "brown", "test", "occlusion", permutations=0, select=select)
    ids = load_corpus("brown", "test").ids
    docs = list(dict.fromkeys(ids[i].rpartition(":")[0] for i in select))  # in order of first appearance
    assert (c["units"], c["documents"]) == (n_units, len(docs)) == (2 * len(docs), len(docs))  # two sentences each
    doc_of_row = np.array([docs.index(ids[select[u]].rpartition(":")[0]) for u in rows["unit"].astype(int)])
    chosen = rows["npos"] >= 2
    tau = np.where(chosen, rows["tau"], np.nan)
    by_units = attribution_corpus.cluster_interval(tau, rows["unit"], n_units)
    by_documents = attribution_corpus.cluster_interval(tau, doc_of_row, len(docs))
    assert ev.statistic("kendall_tau", resample="units") == pytest.approx(by_units, rel=1e-12)
    assert ev.statistic("kendall_tau") == pytest.approx(by_documents, rel=1e-12)
    assert by_documents["hi"] - by_documents["lo"] != pytest.approx(by_units["hi"] - by_units["lo"], rel=1e-3)
    assert corpus_evidence.read_attribution("tiny-lstm").statistic("kendall_tau") is None  # no attention, no agreement
    chance = ev.statistic("top1_chance")  # 1 / n of the n positions a prediction could attend to (window 3)
    assert chance["n"] == int(chosen.sum()) and 1 / 3 <= chance["value"] <= 1 / 2
    plan = corpus_runs.load_attribution(manifest)
    loads = corpus_evidence.load_checkpoint
    monkeypatch.setattr(corpus_evidence, "load_checkpoint", lambda *a: pytest.fail("the report loaded a checkpoint"))
    text = "\n".join(corpus_runs.attribution_report(plan))
    t = ev.statistic("kendall_tau")
    assert f"| tiny-kvp | {t['n']:,} | {t['value']:+.3f} ({t['lo']:+.3f}–{t['hi']:+.3f}) |" in text
    assert "| never | not run |" in text and f"| tiny-lstm | sentence | — | {len(docs)} |" in text
    assert "the first 2 sentences of each of its documents" in text
    assert f"({len(docs)} documents, the unit a split samples" in text
    # another method too (`also`): its own evidence, its rows tagged; not written yet, it is listed
    manifest.write_text(manifest.read_text().replace('method = "occlusion"', 'method = "occlusion"\nalso = ["gradient-x-input"]'))
    plan = corpus_runs.load_attribution(manifest)
    assert plan.units(["tiny-kvp"]) == [("tiny-kvp", "tiny-kvp", "occlusion"),
                                        ("tiny-kvp.gradient-x-input", "tiny-kvp", "gradient-x-input")]
    text = "\n".join(corpus_runs.attribution_report(plan))
    assert "Not run yet with gradient × input: tiny-kvp, tiny-lstm, never" in text and "· G×I" not in text
    monkeypatch.setattr(corpus_evidence, "load_checkpoint", loads)  # writing evidence loads it
    assert cli.main(["reproduce", "--manifest", str(manifest), "--attribution", "tiny-kvp"]) == 0
    assert "tiny-kvp.gradient-x-input" in capsys.readouterr().err  # the missing one written, the other kept
    monkeypatch.setattr(corpus_evidence, "load_checkpoint", lambda *a: pytest.fail("the report loaded a checkpoint"))
    gxi = corpus_evidence.read_attribution("tiny-kvp.gradient-x-input")
    assert (gxi.config["checkpoint"], gxi.config["method"], gxi.config["n_steps"]) == ("tiny-kvp", "gradient-x-input", None)
    assert corpus_evidence.attribution_checkpoint(gxi.name) == "tiny-kvp" == corpus_evidence.attribution_checkpoint("tiny-kvp")
    text = "\n".join(corpus_runs.attribution_report(plan))
    assert f"| tiny-kvp · G×I | sentence | 3 | {len(docs)} |" in text and "Not run yet with gradient × input: tiny-lstm, never" in text
    assert "in the rows tagged G×I, gradient × input" in text
    with pytest.raises(ValueError, match="also lists other methods"):
        manifest.write_text(manifest.read_text().replace('also = ["gradient-x-input"]', 'also = ["occlusion"]'))
        corpus_runs.load_attribution(manifest)
    manifest.write_text(manifest.read_text().replace('\nalso = ["occlusion"]', ''))
    # the manifest changed since: the evidence is named, with the command that writes it again, and not shown
    manifest.write_text(manifest.read_text().replace('method = "occlusion"', 'method = "gradient-x-input"'))
    text = "\n".join(corpus_runs.attribution_report(corpus_runs.load_attribution(manifest)))
    assert ("tiny-kvp: method occlusion (the manifest: gradient-x-input)" in text
            and "--attribution tiny-kvp tiny-lstm --force" in text and f"| tiny-kvp | {t['n']:,} |" not in text
            and "| tiny-kvp | other settings (above) |" in text)
    capsys.readouterr()
    manifest.write_text(manifest.read_text().replace('method = "gradient-x-input"', 'method = "occlusion"'))
    assert cli.main(["reproduce", "--manifest", str(manifest), "--attribution", "tiny-kvp"]) == 0
    assert "has attribution evidence" in capsys.readouterr().err
    if not torch.cuda.is_available():  # a device this machine lacks: said before anything is read or replaced
        kept = (corpus_evidence.attribution_folder("tiny-kvp") / "sums.safetensors").read_bytes()
        assert cli.main(["reproduce", "--manifest", str(manifest), "--attribution", "tiny-kvp", "--force",
                         "--device", "cuda"]) == 2
        err = capsys.readouterr().err
        assert "--device cuda: this PyTorch sees no CUDA device" in err and "Traceback" not in err
        assert (corpus_evidence.attribution_folder("tiny-kvp") / "sums.safetensors").read_bytes() == kept
    assert cli.main(["reproduce", "--manifest", str(manifest), "--attribution", "other"]) == 2
    assert "not in the manifest's [attribution] checkpoints" in capsys.readouterr().err
    manifest.write_text(manifest.read_text().replace("per_document = 2", "per_document = 2\nlimit = 5"))
    with pytest.raises(ValueError, match="give one"):
        corpus_runs.load_attribution(manifest)


def test_a_copy_without_git_records_the_commit_it_is_given(monkeypatch, tmp_path):
    """A tree copied without ``.git`` (a GPU machine) records ``$VIZLM_COMMIT``; a checkout's own commit wins,
    and a value that is not a commit is refused with the variable's name."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.setenv("VIZLM_HOME", str(tmp_path))
    monkeypatch.delenv(paths.COMMIT_ENV, raising=False)
    assert paths.commit() is None
    monkeypatch.setenv(paths.COMMIT_ENV, "ebd65b1")
    assert paths.commit() == "ebd65b1"
    monkeypatch.setenv(paths.COMMIT_ENV, "0123456789abcdef0123456789abcdef01234567+dirty")
    assert paths.commit().endswith("+dirty")
    for bad in ("main", "ebd65b1; rm -rf /", "EBD65B1", "ebd6", "a" * 41):
        monkeypatch.setenv(paths.COMMIT_ENV, bad)
        with pytest.raises(ValueError, match="VIZLM_COMMIT"):
            paths.commit()
    monkeypatch.setenv("VIZLM_HOME", str(ROOT))
    monkeypatch.setenv(paths.COMMIT_ENV, "ebd65b1")
    if (ROOT / ".git").exists():
        assert paths.commit() != "ebd65b1" and len(paths.commit().split("+")[0]) == 40


def test_the_commit_is_dirty_for_changed_code_or_manifest_not_for_rewritten_evidence(monkeypatch, tmp_path):
    """A run that rewrites an evidence folder (``--force``) leaves the next run's inputs as committed: changed
    evidence is not ``+dirty``; a changed manifest, document or module is, and so is a change beside evidence/."""
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("git is not installed")

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})

    monkeypatch.setenv("VIZLM_HOME", str(tmp_path))
    monkeypatch.delenv(paths.COMMIT_ENV, raising=False)
    files = {"experiments.toml": "a", "evidence/run/config.json": "{}", "evidence-notes.md": "x", "vizlm/m.py": "1"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "one")
    head = paths.commit()
    assert len(head) == 40 and "+" not in head
    (tmp_path / "evidence" / "run" / "config.json").write_text('{"rewritten": true}')
    (tmp_path / "evidence" / "new").mkdir()
    assert paths.commit() == head
    for name in ("experiments.toml", "evidence-notes.md", "vizlm/m.py"):
        (tmp_path / name).write_text("changed")
        assert paths.commit() == head + "+dirty", name
        git("checkout", "-q", "--", name)
    assert paths.commit() == head


def test_case_labels_against_chance_are_evidence_and_a_table(trained, tmp_path):
    """`vizlm reproduce --cases`: a model's label rates beside their distance-matched chance rates, kept in
    evidence/cases/NAME.json, and the report's table read from that alone."""
    manifest, runs = trained
    source = runs["amsrn-tiny"].folder
    path = corpus_evidence.write_cases("amsrn-tiny", source, "brown", "test", limit=30)
    doc = corpus_evidence.read_cases("amsrn-tiny")
    assert path == corpus_evidence.cases_path("amsrn-tiny") and doc["limit"] == 30 and doc["commit"] is not None
    assert doc["device"] == "cpu"
    assert doc["pairs"] > 0 and set(doc["chance"]) <= {"trigger", "causal", "phrase", "grammar"}
    for c in doc["chance"].values():
        assert 0 <= c["observed"] <= 1 and 0 <= c["chance"] <= 1 and c["pairs"] == doc["pairs"]
    with pytest.raises(evidence.EvidenceError, match="--force"):
        corpus_evidence.write_cases("amsrn-tiny", source, "brown", "test", limit=30)
    plan = corpus_runs.CasesPlan(checkpoints=["amsrn-tiny", "other"], limit=30)
    lines = corpus_runs.cases_report(plan)
    rows = [line for line in lines if line.startswith("| amsrn-tiny |")]
    assert len(rows) == len(doc["chance"]) and "Not labelled yet: other" in lines[-2]
    manifest.write_text(manifest.read_text() + '\n[cases]\ncheckpoints = ["../x"]\n')
    with pytest.raises(ValueError, match="checkpoint"):
        corpus_runs.load_cases_plan(manifest)


def test_reproduce_cases_without_a_cases_table_says_so(trained, capsys):
    manifest, _ = trained
    assert cli.main(["reproduce", "--manifest", str(manifest), "--cases"]) == 2
    assert "the manifest has no [cases] table" in capsys.readouterr().err


def _same(got, want, where=""):
    """``got`` (from the evidence) holds ``want``'s numbers (the library's) wherever it has a key."""
    if isinstance(got, dict):
        for k, v in got.items():
            _same(v, want[k], f"{where}.{k}")
    elif isinstance(got, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{where}[{i}]")
    elif isinstance(got, float):
        # float64 per-unit sums of the same values, the same bootstrap draws: equal up to rounding
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15, nan_ok=True), where
    else:
        assert got == want, where


def test_faithfulness_evidence_gives_the_librarys_statistics(monkeypatch, tmp_path, capsys):
    """`vizlm reproduce --faithfulness` keeps what corpus_faithfulness's every number and interval are computed
    from: resampling the same units, the evidence gives them exactly; the report's tables read it alone, resampling
    documents; existing evidence is kept unless --force."""
    import torch

    from vizlm.inspect import attribution, faithfulness_corpus
    from vizlm.modeling.checkpoint import save_checkpoint
    from vizlm.data.vocab import Vocab
    from vizlm.models import build_model

    for key, sub in (("VIZLM_CACHE", "cache"), ("VIZLM_EVIDENCE", "evidence"), ("VIZLM_CHECKPOINTS", "checkpoints")):
        monkeypatch.setenv(key, str(tmp_path / sub))
    # integrated gradients doubles its steps until it converges, which a tiny untrained model's never does: the
    # doubling stops at the 2 steps asked for (both computations alike), so the test takes seconds, not a minute
    monkeypatch.setattr(attribution, "MAX_STEPS", 2)
    vocab = Vocab.for_corpus("brown")
    torch.manual_seed(0)
    model = build_model("kvp", vocab_size=len(vocab), emb_dim=8, hidden_dim=8, window=3).eval()
    save_checkpoint(tmp_path / "checkpoints" / "tiny-kvp", model, "kvp", vocab, metrics={}, corpus={"name": "brown"})
    manifest = tmp_path / "experiments.toml"
    manifest.write_text(TINY + '\n[faithfulness]\nlimit = 3\npermutations = 4\nn_steps = 2\nadversary_steps = 3\n'
                        'checkpoints = ["tiny-kvp", "never"]\n')
    assert cli.main(["reproduce", "--manifest", str(manifest), "--faithfulness", "tiny-kvp", "--threads", "1"]) == 0
    ev = corpus_evidence.read_faithfulness("tiny-kvp")
    c = ev.config
    assert (c["limit"], c["permutations"], c["n_steps"], c["units"], c["unit"]) == (3, 4, 2, 3, "sentences")
    assert c["commit"] is not None and c["written_by"] == "vizlm reproduce --faithfulness tiny-kvp" and c["wall_s"] >= 0
    assert c["device"] == "cpu"
    ckpt = load_checkpoint(tmp_path / "checkpoints" / "tiny-kvp")
    lib = faithfulness_corpus.corpus_faithfulness(ckpt, "brown", "test", limit=3, permutations_n=4, n_steps=2, adversary_steps=3)
    got = ev.statistics()  # the report's and the library's: the documents resampled
    assert set(got) == set(faithfulness_corpus.TESTS) and got["erasure"].keys() == lib["erasure"].keys()
    _same(got, lib)
    assert np.isfinite(got["adversarial"]["mean_jsd"]["value"]) and got["paths"]["read_share"][1]["value"] > 0
    # one document (the split's first 3 sentences) has no spread to resample: library and evidence resample the units
    assert c["documents"] == 1 and lib["resampled"] == "sentences" and ev.statistics("units") == got
    plan = corpus_runs.load_faithfulness_plan(manifest)
    monkeypatch.setattr(corpus_evidence, "load_checkpoint", lambda *a: pytest.fail("the report loaded a checkpoint"))
    text = "\n".join(corpus_runs.faithfulness_report(plan))
    u = got["uniform"]
    assert f"| tiny-kvp | {math.exp(u['nll']['value']):.1f} (" in text and "Not run yet: never" in text
    assert "its first 3 sentences" in text and "other settings" not in text and "the sample holds one document" in text
    # the manifest changed since: the report still describes the evidence, and says how it departs from the manifest
    manifest.write_text(manifest.read_text().replace("permutations = 4", "permutations = 5").replace("limit = 3", "per_document = 1"))
    text = "\n".join(corpus_runs.faithfulness_report(corpus_runs.load_faithfulness_plan(manifest)))
    assert "its first 3 sentences" in text and "the first sentence of each of its documents" not in text
    assert ("tiny-kvp: per_document None (the manifest: 1), limit 3 (the manifest: None), permutations 4 (the manifest: 5)"
            in text and "--faithfulness tiny-kvp --force" in text)
    manifest.write_text(manifest.read_text().replace("permutations = 5", "permutations = 4").replace("per_document = 1", "limit = 3"))
    capsys.readouterr()
    before = (corpus_evidence.faithfulness_folder("tiny-kvp") / "sums.safetensors").read_bytes()
    assert cli.main(["reproduce", "--manifest", str(manifest), "--faithfulness", "tiny-kvp"]) == 0
    assert "has faithfulness evidence" in capsys.readouterr().err
    with pytest.raises(evidence.EvidenceError, match="--force"):
        corpus_evidence.write_faithfulness("tiny-kvp", tmp_path / "checkpoints" / "tiny-kvp", "brown", "test", limit=3)
    assert (corpus_evidence.faithfulness_folder("tiny-kvp") / "sums.safetensors").read_bytes() == before
    assert cli.main(["reproduce", "--manifest", str(manifest), "--faithfulness", "other"]) == 2
    assert "not in the manifest's [faithfulness] checkpoints" in capsys.readouterr().err


def test_faithfulness_samples_every_document(monkeypatch):
    """per_document: the first sentences of every document of the split, so the documents can be resampled."""
    from vizlm.data.registry import load_corpus

    ids = load_corpus("brown", "test").ids
    docs = {sid.rpartition(":")[0] for sid in ids}
    picked = corpus_evidence.first_of_each_document("brown", "test", 2)
    assert picked == sorted(picked) and {ids[i].rpartition(":")[0] for i in picked} == docs
    assert len(picked) == 2 * len(docs) and all(ids[i].rpartition(":")[2] in ("0", "1") for i in picked)


def test_faithfulness_evidence_with_another_seed_s_attention(monkeypatch, tmp_path):
    """The manifest's ``frozen`` names a second seed's bundled checkpoint: its attention read by the model, the
    two attentions' divergence kept and reported beside the adversary's; a ``frozen`` that names no tested
    checkpoint is refused when the manifest is read."""
    import torch

    from vizlm.inspect import attribution
    from vizlm.modeling.checkpoint import save_checkpoint
    from vizlm.data.vocab import Vocab
    from vizlm.models import build_model

    for key, sub in (("VIZLM_CACHE", "cache"), ("VIZLM_EVIDENCE", "evidence"), ("VIZLM_CHECKPOINTS", "checkpoints")):
        monkeypatch.setenv(key, str(tmp_path / sub))
    monkeypatch.setattr(attribution, "MAX_STEPS", 2)
    vocab = Vocab.for_corpus("brown")
    for name, seed in (("tiny-kvp", 0), ("tiny-kvp-s2", 1)):
        torch.manual_seed(seed)
        model = build_model("kvp", vocab_size=len(vocab), emb_dim=8, hidden_dim=8, window=3).eval()
        save_checkpoint(tmp_path / "checkpoints" / name, model, "kvp", vocab, metrics={}, corpus={"name": "brown"})
    manifest = tmp_path / "experiments.toml"
    table = ('\n[faithfulness]\nlimit = 2\npermutations = 2\nn_steps = 2\nadversary_steps = 2\n'
             'checkpoints = ["tiny-kvp"]\n')
    manifest.write_text(TINY + table + 'frozen = {never = "tiny-kvp-s2"}\n')
    with pytest.raises(ValueError, match="frozen: 'never'"):
        corpus_runs.load_faithfulness_plan(manifest)
    manifest.write_text(TINY + table + 'frozen = {tiny-kvp = "tiny-kvp-s2"}\n')
    assert cli.main(["reproduce", "--manifest", str(manifest), "--faithfulness", "--threads", "1"]) == 0
    ev = corpus_evidence.read_faithfulness("tiny-kvp")
    assert ev.config["frozen"] == "tiny-kvp-s2" and len(ev.config["frozen_sha256"]) == 64
    u = ev.statistics()["uniform"]
    assert {"frozen_nll", "seed_jsd"} <= set(u) and u["seed_jsd"]["value"] > 0
    text = "\n".join(corpus_runs.faithfulness_report(corpus_runs.load_faithfulness_plan(manifest)))
    assert "(tiny-kvp-s2) |" in text and "the attention of another seed of the same model (tiny-kvp-s2)" in text


def test_faithfulness_evidence_of_a_transformer_s_heads(monkeypatch, tmp_path, capsys):
    """A Transformer's tests, one evidence per head the manifest's ``heads`` names (``NAME.head2.1``): the
    library's numbers for that head, its view recorded, a row per head in the report and no two paths; a head
    code that is a layer's mean, or a checkpoint the plan does not test, is refused when the manifest is read."""
    import torch

    from vizlm.inspect import attribution, faithfulness_corpus
    from vizlm.modeling.checkpoint import save_checkpoint
    from vizlm.data.vocab import Vocab
    from vizlm.models import build_model

    for key, sub in (("VIZLM_CACHE", "cache"), ("VIZLM_EVIDENCE", "evidence"), ("VIZLM_CHECKPOINTS", "checkpoints")):
        monkeypatch.setenv(key, str(tmp_path / sub))
    monkeypatch.setattr(attribution, "MAX_STEPS", 2)
    vocab = Vocab.for_corpus("brown")
    torch.manual_seed(0)
    model = build_model("transformer", vocab_size=len(vocab), emb_dim=8, hidden_dim=16, heads=2, layers=2, block=8,
                        context="document").eval()
    save_checkpoint(tmp_path / "checkpoints" / "tiny-tf", model, "transformer", vocab, metrics={},
                    corpus={"name": "brown"})
    manifest = tmp_path / "experiments.toml"
    table = ('\n[faithfulness]\nlimit = 2\npermutations = 2\nn_steps = 2\nadversary_steps = 2\n'
             'checkpoints = ["tiny-tf"]\n')
    for heads, message in (('{tiny-tf = ["2"]}', "heads maps a Transformer"), ('{never = ["2.1"]}', "never not among")):
        manifest.write_text(TINY + table + f"heads = {heads}\n")
        with pytest.raises(ValueError, match=message):
            corpus_runs.load_faithfulness_plan(manifest)
    manifest.write_text(TINY + table + 'heads = {tiny-tf = ["2.1", "1.2"]}\n')
    assert cli.main(["reproduce", "--manifest", str(manifest), "--faithfulness", "--threads", "1"]) == 0
    assert sorted(corpus_evidence.faithfulness_names()) == ["tiny-tf.head1.2", "tiny-tf.head2.1"]
    ev = corpus_evidence.read_faithfulness("tiny-tf.head2.1")
    assert ev.config["head"] == [1, 0] and ev.config["view"] == "layer 2, head 1"
    assert ev.config["written_by"] == "vizlm reproduce --faithfulness tiny-tf"
    assert corpus_evidence.faithfulness_checkpoint("tiny-tf.head2.1") == "tiny-tf"
    ckpt = load_checkpoint(tmp_path / "checkpoints" / "tiny-tf")
    lib = faithfulness_corpus.corpus_faithfulness(ckpt, "brown", "test", limit=2, permutations_n=2, n_steps=2,
                                                  adversary_steps=2, head=(1, 0))
    got = ev.statistics()
    assert "paths" not in got and "paths" not in lib and lib["view"] == "layer 2, head 1"
    _same(got, lib)
    other = corpus_evidence.read_faithfulness("tiny-tf.head1.2").statistics()
    assert other["uniform"]["uniform_nll"]["value"] != got["uniform"]["uniform_nll"]["value"]
    text = "\n".join(corpus_runs.faithfulness_report(corpus_runs.load_faithfulness_plan(manifest)))
    assert "| tiny-tf · layer 2, head 1 |" in text and "| tiny-tf · layer 1, head 2 |" in text
    assert "of 2 attentions" in text and "of 2 models" not in text  # a reading counts each head once
    capsys.readouterr()
    assert cli.main(["reproduce", "--manifest", str(manifest), "--faithfulness", "tiny-tf"]) == 0
    assert "has faithfulness evidence" in capsys.readouterr().err
