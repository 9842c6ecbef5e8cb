"""The experiment manifest and ``vizlm reproduce``: runs, their state, resuming, never retraining, the report."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from conftest import ROOT

from vizlm import cli
from vizlm.core import files, paths
from vizlm.reproduce import corpus_runs, evidence, experiments, report, runner, verdicts
from vizlm.models import REGISTRY, make_config

TINY = """
[defaults]
corpus = "brown"
emb_dim = 8
hidden_dim = 8
epochs = 2

[run.base]
paper = "liu-lee"
model = "lstm"

[run.amsrn-tiny]
paper = "liu-lee"
model = "amsrn"
init = "base"
control = "base"
options = { selection = "shared" }

[run.base-s2]
paper = "liu-lee"
model = "lstm"
seed = 2

[run.amsrn-tiny-s2]
paper = "liu-lee"
model = "amsrn"
init = "base"
control = "base-s2"
seed = 2
options = { selection = "shared" }

[run.later]
paper = "daniluk"
model = "rm"
blocked = "not implemented"
"""


def test_the_manifest_lists_every_run_of_the_issue():
    runs = experiments.load_manifest(ROOT / experiments.MANIFEST)
    assert {"lstm", "lstm-continued", "lstm-97", "amsrn-shared", "lstm-doc", "kvp-doc-w5", "ngram-doc-n4",
            "salton-single-doc", "amsrn-doc", "lstm-sinica"} <= set(runs)
    for window in (1, 5, 10, 15):
        for model in ("attention", "kv", "kvp"):
            assert runs[f"{model}-doc-w{window}"].options == {"window": window}
            assert runs[f"{model}-doc-w{window}"].match == "lstm" and runs[f"{model}-doc-w{window}"].context == "document"
    assert [runs[f"ngram-doc-n{n}"].options["n"] for n in (2, 3, 4, 5)] == [2, 3, 4, 5]
    for run in runs.values():
        assert run.blocked or run.model in REGISTRY
        if run.paper == "liu-lee" and run.model == "amsrn":
            assert run.init == "lstm" and run.context == "sentence"  # their protocol: from the trained LSTM
        if run.paper == "daniluk" and not run.blocked:
            assert run.context == "document" and run.init is None  # theirs: running text, from scratch
    seeds = {run.name: run.seed for run in runs.values()}
    assert len({seeds[n] for n in ("lstm-doc", "lstm-doc-s2", "lstm-doc-s3")}) == 3
    # the three runs that waited for a feature: RM, --freeze, AMSRN without the start slot
    assert not any(run.blocked for run in runs.values())
    rm = runs["rm-doc"]
    # at its natural size, as Daniluk et al. ran it (matched, it would have 17 units)
    assert (rm.model, rm.context, rm.match, rm.options, rm.init) == ("rm", "document", None, {"window": 15}, None)
    frozen = runs["amsrn-frozen"]
    assert frozen.freeze and frozen.init == "lstm" and frozen.control == "lstm"
    assert not any(run.freeze for name, run in runs.items() if name != "amsrn-frozen")
    assert runs["amsrn-nostart"].options == {"selection": "shared", "start_slot": False}
    for run in (rm, frozen, runs["amsrn-nostart"]):  # what train() would be given is a valid config
        make_config(run.model, **run.model_kwargs())


def test_bad_manifests_are_refused(tmp_path):
    bad = tmp_path / "m.toml"
    bad.write_text(TINY.replace('init = "base"', 'init = "nowhere"'))
    with pytest.raises(ValueError, match="nowhere"):
        experiments.load_manifest(bad)
    bad.write_text(TINY.replace('paper = "daniluk"', 'paper = "someone"'))
    with pytest.raises(ValueError, match="unknown paper"):
        experiments.load_manifest(bad)
    bad.write_text(TINY + '\n[run.x]\npaper = "liu-lee"\nmodel = "lstm"\nlearning_rate = 1\n')
    with pytest.raises(ValueError, match="unknown field"):
        experiments.load_manifest(bad)
    for freeze in ("true", '"yes"'):  # freeze needs an init run, and is a boolean
        bad.write_text(TINY + f'\n[run.x]\npaper = "liu-lee"\nmodel = "amsrn"\nfreeze = {freeze}\n')
        with pytest.raises(ValueError, match="freeze must be true or false, and true needs an init run"):
            experiments.load_manifest(bad)


@pytest.mark.parametrize("name", ["attribution", "faithfulness", "cases"])
def test_a_run_is_not_named_after_a_folder_of_corpus_evidence(tmp_path, name):
    """evidence/attribution/, evidence/faithfulness/ and evidence/cases/ hold corpus-wide evidence, not a run's."""
    bad = tmp_path / "m.toml"
    bad.write_text(TINY + f'\n[run.{name}]\npaper = "liu-lee"\nmodel = "lstm"\n')
    with pytest.raises(ValueError, match=f"may not be named '{name}'"):
        experiments.load_manifest(bad)


@pytest.mark.parametrize("name", ["../../escape", "/any/absolute/folder", "a/b", "..", "Upper", "x\u202e"])
def test_run_names_are_folder_names_checked_when_the_manifest_is_read(tmp_path, name, capsys):
    """A run's name is its folder in runs/ and evidence/: a path in its place would train (and write
    evidence) outside the manifest's folders."""
    bad = tmp_path / "m.toml"
    bad.write_text(TINY + f'\n[run.{json.dumps(name)}]\npaper = "liu-lee"\nmodel = "lstm"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=f"{bad}: run name"):
        experiments.load_manifest(bad)
    assert cli.main(["reproduce", "--manifest", str(bad), "--list"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "run name" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("table, load", [("attribution", corpus_runs.load_attribution),
                                         ("faithfulness", corpus_runs.load_faithfulness_plan),
                                         ("cases", corpus_runs.load_cases_plan)])
def test_the_checkpoints_tables_are_checked_alike(tmp_path, table, load):
    """[attribution], [faithfulness], [cases]: checkpoints are folder names, unknown fields are named."""
    bad = tmp_path / "m.toml"
    bad.write_text(TINY + f'\n[{table}]\ncheckpoints = ["../lstm"]\n')
    with pytest.raises(ValueError, match=rf"\[{table}\] checkpoint '../lstm'"):
        load(bad)
    bad.write_text(TINY + f'\n[{table}]\ncheckpoints = ["lstm"]\nthreshold = 2\n')
    with pytest.raises(ValueError, match=rf"\[{table}\] needs a list of checkpoints and knows only .* \(not threshold\)"):
        load(bad)
    bad.write_text(TINY)
    assert load(bad) is None


@pytest.mark.parametrize("text, message", [
    ("run = 5\n", "`run` must be a table"),
    ("[defaults]\n[run]\nx = 5\n", "run 'x' must be a table"),
    ("defaults = [1]\n", "`defaults` must be a table"),
    ('[run.x]\npaper = "liu-lee"\n', "run 'x' lacks model"),
    ("run = [", "is not TOML"),
])
def test_malformed_manifests_get_a_message_naming_the_file(tmp_path, text, message, capsys):
    bad = tmp_path / "m.toml"
    bad.write_text(text)
    with pytest.raises(ValueError, match=message):
        experiments.load_manifest(bad)
    assert cli.main(["reproduce", "--manifest", str(bad), "--list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vizlm reproduce: error: {bad}") and len(err.strip().splitlines()) == 1


def test_a_manifest_that_is_not_utf8_is_named_with_its_line(tmp_path):
    bad = tmp_path / "m.toml"
    bad.write_bytes(TINY.encode() + b'\n[run.x]\npaper = "liu-lee"\nnote = "caf\xe9"\n')
    line = TINY.count("\n") + 4
    with pytest.raises(ValueError, match=f"{bad}: line {line} is not valid UTF-8 \\(byte 12 of the line\\)"):
        experiments.load_manifest(bad)


@pytest.fixture
def manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("VIZLM_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VIZLM_EVIDENCE", str(tmp_path / "evidence"))
    path = tmp_path / "experiments.toml"
    path.write_text(TINY)
    return path


def test_reproduce_trains_what_is_missing_in_order_and_never_retrains(manifest, capsys):
    runs = experiments.load_manifest(manifest)
    assert [r.status() for r in runs.values()] == ["not run", "not run", "not run", "not run", "blocked"]
    assert [r.name for r in experiments.start_order(runs, ["amsrn-tiny"])] == ["base", "amsrn-tiny"]
    code = cli.main(["reproduce", "--manifest", str(manifest), "--only", "amsrn-tiny", "--dry-run", "--threads", "1"])
    assert code == 0
    assert [r.status() for r in runs.values()] == ["finished", "finished", "not run", "not run", "blocked"]
    assert not any(r.done() for r in runs.values()), "a dry run is a pipeline check: it leaves no evidence"
    meta = json.loads((runs["amsrn-tiny"].folder / "config.json").read_text())
    assert meta["init_from"]["checkpoint"] == str(runs["base"].folder)
    assert meta["train"]["command"] == "vizlm reproduce --only amsrn-tiny"
    assert meta["train"]["device"] == "cpu", "reproduce trains on the CPU unless --device says otherwise"
    stamp = (runs["base"].folder / "model.safetensors").stat().st_mtime_ns
    assert cli.main(["reproduce", "--manifest", str(manifest), "--all", "--dry-run"]) == 0
    assert (runs["base"].folder / "model.safetensors").stat().st_mtime_ns == stamp, "a finished run was retrained"
    capsys.readouterr()
    assert cli.main(["reproduce", "--manifest", str(manifest), "--list", "--json"]) == 0
    rows = {r["run"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["base"]["status"] == "finished" and rows["base"]["test"] > 1
    assert rows["later"]["status"] == "blocked" and rows["later"]["why"] == "not implemented"
    assert rows["base"]["device"] == "cpu" and rows["later"]["device"] is None  # blocked: no device
    config = runs["base"].folder / "config.json"  # a run trained on a GPU says so in the list
    config.write_text(json.dumps({**(meta := json.loads(config.read_text())), "train": {**meta["train"], "device": "cuda"}}))
    assert cli.main(["reproduce", "--manifest", str(manifest), "--list"]) == 0
    assert "(trained on cuda; " in next(line for line in capsys.readouterr().out.splitlines() if line.startswith("base "))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_reproduce_on_a_gpu_this_machine_lacks_says_so_and_trains_nothing(manifest, capsys):
    runs = experiments.load_manifest(manifest)
    assert cli.main(["reproduce", "--manifest", str(manifest), "--only", "base", "--dry-run", "--device", "cuda"]) == 2
    assert "sees no CUDA device" in capsys.readouterr().err
    assert runs["base"].status() == "not run" and not runs["base"].folder.exists()


def test_a_folder_holding_another_manifests_run_is_foreign_and_kept(manifest, capsys):
    """Two manifests sharing a runs folder, a run name in both: the checkpoint there is not taken
    for this run (no evidence from it, no resume into it, nothing overwritten)."""
    runs = experiments.load_manifest(manifest)
    assert cli.main(["reproduce", "--manifest", str(manifest), "--only", "base-s2", "--dry-run", "--threads", "1"]) == 0
    weights = runs["base-s2"].folder / "model.safetensors"
    before = (weights.read_bytes(), weights.stat().st_mtime_ns)
    manifest.write_text(TINY.replace('seed = 2\n\n[run.amsrn-tiny-s2]', 'seed = 3\n\n[run.amsrn-tiny-s2]'))
    runs = experiments.load_manifest(manifest)
    other = runs["base-s2"]
    assert other.seed == 3 and other.status() == "foreign"
    assert "seed 2 (the manifest's: 3)" in other.foreign()
    capsys.readouterr()
    assert cli.main(["reproduce", "--manifest", str(manifest), "--list"]) == 0
    line = next(row for row in capsys.readouterr().out.splitlines() if row.startswith("base-s2 "))
    assert "foreign" in line and "holds another run" in line
    for args, code in ((["--only", "base-s2", "--dry-run"], 1), (["--evidence", "base-s2"], 2)):
        assert cli.main(["reproduce", "--manifest", str(manifest), *args]) == code
        assert "holds another run: seed 2 (the manifest's: 3)" in capsys.readouterr().err
    assert (weights.read_bytes(), weights.stat().st_mtime_ns) == before and not other.done()


def test_jobs_train_runs_side_by_side_each_after_its_starting_point(manifest, capsys):
    """--jobs 2: each run in a process of its own with its log in RUNS/NAME.log; AMSRN waits for
    the LSTM it starts from; a run that cannot train says why and the others still train."""
    assert cli.main(["reproduce", "--manifest", str(manifest), "--only", "base-s2", "--dry-run", "--threads", "1"]) == 0
    manifest.write_text(TINY.replace('seed = 2\n\n[run.amsrn-tiny-s2]', 'seed = 3\n\n[run.amsrn-tiny-s2]'))
    runs = experiments.load_manifest(manifest)  # base-s2's folder now holds another run (seed 2): refused, kept
    capsys.readouterr()
    code = cli.main(["reproduce", "--manifest", str(manifest), "--only", "amsrn-tiny", "base-s2", "--dry-run",
                     "--jobs", "2"])
    err = capsys.readouterr().err
    assert code == 1, "a run that did not train makes the exit status 1"
    assert runs["base"].status() == runs["amsrn-tiny"].status() == "finished" and runs["base-s2"].status() == "foreign"
    assert err.index("base: finished") < err.index("amsrn-tiny: started"), "AMSRN starts after the LSTM it copies"
    assert "base-s2: error: base-s2: " in err and "holds another run: seed 2 (the manifest's: 3)" in err
    for name in ("base", "amsrn-tiny"):
        assert f"training {name} -> {runs[name].folder}" in runner.job_log(runs[name]).read_text()
    meta = json.loads((runs["amsrn-tiny"].folder / "config.json").read_text())
    assert meta["init_from"]["checkpoint"] == str(runs["base"].folder)


def test_one_at_a_time_a_run_that_cannot_train_says_why_and_the_others_still_train(manifest, capsys):
    """Without --jobs, as with it: a run refused (its folder holds another run) does not stop the
    runs after it; each says how it ended and the exit status is 1."""
    assert cli.main(["reproduce", "--manifest", str(manifest), "--only", "base-s2", "--dry-run", "--threads", "1"]) == 0
    manifest.write_text(TINY.replace('seed = 2\n\n[run.amsrn-tiny-s2]', 'seed = 3\n\n[run.amsrn-tiny-s2]'))
    runs = experiments.load_manifest(manifest)
    capsys.readouterr()
    code = cli.main(["reproduce", "--manifest", str(manifest), "--only", "base-s2", "amsrn-tiny", "--dry-run",
                     "--threads", "1"])
    err = capsys.readouterr().err
    assert code == 1, "a run that did not train makes the exit status 1"
    assert "base-s2: error: base-s2: " in err and "holds another run: seed 2 (the manifest's: 3)" in err
    assert err.index("base-s2: error") < err.index("base: finished") < err.index("amsrn-tiny: finished")
    assert runs["base"].status() == runs["amsrn-tiny"].status() == "finished" and runs["base-s2"].status() == "foreign"
    # an AMSRN that starts from the refused LSTM: skipped, saying why
    manifest.write_text(manifest.read_text().replace('init = "base"\ncontrol = "base-s2"', 'init = "base-s2"\ncontrol = "base-s2"'))
    runs = experiments.load_manifest(manifest)
    assert runs["amsrn-tiny-s2"].init == "base-s2"
    code = cli.main(["reproduce", "--manifest", str(manifest), "--only", "amsrn-tiny-s2", "--dry-run", "--threads", "1"])
    err = capsys.readouterr().err
    assert code == 1 and "amsrn-tiny-s2: skipped: base-s2 did not finish (error: base-s2: " in err
    assert runs["amsrn-tiny-s2"].status() == "not run"


def test_a_run_another_process_is_training_is_listed_so_and_not_trained_twice(manifest, capsys):
    runs = experiments.load_manifest(manifest)
    with files.training_into(runs["base"].folder):  # as `vizlm reproduce --only base` in another terminal
        assert cli.main(["reproduce", "--manifest", str(manifest), "--list"]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("base "))
        assert "not run" in line and "training now: another process holds its folder" in line
        assert cli.main(["reproduce", "--manifest", str(manifest), "--only", "base", "--dry-run", "--threads", "1"]) == 1
        assert "is being trained into by another process" in capsys.readouterr().err
        assert runs["base"].status() == "not run"
    assert cli.main(["reproduce", "--manifest", str(manifest), "--list"]) == 0
    assert "training now" not in capsys.readouterr().out


def test_a_cut_run_is_partial_and_resumed(manifest):
    runs = experiments.load_manifest(manifest)
    base = runs["base"]
    (base.folder / "resume").mkdir(parents=True)
    (base.folder / "resume" / "state.json").write_text("{}")
    assert base.status() == "partial"


def test_a_run_its_cap_stopped_goes_on_when_the_cap_is_raised(manifest, capsys):
    """The epoch cap is a bound: a run that reached it still improving is said to be capped, and
    when the manifest raises the cap it resumes (a run early stopping ended never does)."""
    assert cli.main(["reproduce", "--manifest", str(manifest), "--only", "base", "--dry-run", "--threads", "1"]) == 0
    base = experiments.load_manifest(manifest)["base"]
    meta = json.loads((base.folder / "config.json").read_text())
    assert meta["train"]["epochs"] == 1 and meta["metrics"]["best_epoch"] == meta["metrics"]["epochs_trained"] == 1
    assert base.capped() is None, "a dry run is a pipeline check, not a run its cap stopped"
    meta["train"]["max_batches"] = None  # as if the one epoch had been a whole one
    (base.folder / "config.json").write_text(json.dumps(meta))
    base.epochs = 1  # the manifest's bound is the one it was trained with
    assert base.status() == "finished" and base.capped() == 1
    capsys.readouterr()
    assert cli.main(["reproduce", "--manifest", str(manifest), "--list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("base "))
    assert "partial" in line and "cap" not in line, "TINY's bound is 2: the capped run goes on"
    runner.write_evidence(base)
    assert "base | lstm | sentence" in (text := report.report({"base": base})) and "stopped at its 1-epoch cap" in text
    base.epochs = 2  # the manifest's bound (TINY) is higher: it goes on from its resume state
    assert base.status() == "partial"
    meta["metrics"]["epochs_trained"] = 3  # ...but had early stopping ended it (2 epochs without a new best)
    (base.folder / "config.json").write_text(json.dumps(meta))
    assert base.capped() is None and base.status() == "finished"


def test_report_is_generated_between_markers(manifest, tmp_path):
    runs = experiments.load_manifest(manifest)
    for name in ("base", "amsrn-tiny"):
        runner.run_one(runs[name], runs, dry_run=True)
        runner.write_evidence(runs[name])
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nwritten by hand\n")
    report.write_report(runs, results)
    first = results.read_text()
    assert "written by hand" in first and report.REPORT_BEGIN in first and report.REPORT_END in first
    row = next(line for line in first.splitlines() if line.startswith("| amsrn-tiny "))
    assert "vs base" in row and "(" in row and "finished" in row
    assert "| later | rm | sentence |" in first and "blocked: not implemented" in first
    assert [[r.name for r in g] for g in experiments.seed_groups(runs)] == [["base", "base-s2"], ["amsrn-tiny", "amsrn-tiny-s2"]]
    alike = dict(runs, twin=dataclasses.replace(runs["base-s2"], name="twin", seed=runs["base"].seed))
    assert [[r.name for r in g] for g in experiments.seed_groups(alike)] == [["amsrn-tiny", "amsrn-tiny-s2"]], \
        "two runs with one seed are not a spread over seeds"
    seeds = next(line for line in first.splitlines() if line.startswith("| amsrn-tiny, amsrn-tiny-s2 "))
    assert "| 1 of 2 |" in seeds and "better in" in seeds, "a seed without its partner: no spread yet"
    for name in ("base-s2", "amsrn-tiny-s2"):
        runner.run_one(runs[name], runs, dry_run=True)
        runner.write_evidence(runs[name])
    report.write_report(runs, results)
    first = results.read_text()
    seeds = next(line for line in first.splitlines() if line.startswith("| amsrn-tiny, amsrn-tiny-s2 ")).split(" | ")
    assert seeds[1] == "2 of 2" and " ± " in seeds[3] and seeds[4].count("(") == 2 and " ± " in seeds[5], seeds
    assert seeds[6].endswith("of 2 |")
    report.write_report(runs, results)
    assert results.read_text() == first, "regenerating replaces the generated part, nothing else"


def test_runs_dir_follows_the_home(tmp_path, monkeypatch):
    monkeypatch.delenv("VIZLM_RUNS", raising=False)
    monkeypatch.setenv("VIZLM_HOME", str(tmp_path))
    assert paths.runs_dir() == tmp_path / "runs"


def test_reproduce_passes_freeze_to_training(manifest):
    """A run with ``freeze = true`` trains with ``--freeze``: the copied tensors stay its init run's."""
    from safetensors.torch import load_file

    manifest.write_text(TINY + '\n[run.frozen]\npaper = "liu-lee"\nmodel = "amsrn"\ninit = "base"\nfreeze = true\n'
                        'control = "base"\noptions = { selection = "shared" }\n')
    runs = experiments.load_manifest(manifest)
    assert cli.main(["reproduce", "--manifest", str(manifest), "--only", "frozen", "--dry-run", "--threads", "1"]) == 0
    meta = json.loads((runs["frozen"].folder / "config.json").read_text())
    assert meta["train"]["freeze"] is True and meta["train"]["run"] == "frozen"
    base = load_file(str(runs["base"].folder / "model.safetensors"))
    frozen = load_file(str(runs["frozen"].folder / "model.safetensors"))
    assert all(torch.equal(frozen[k], base[k]) for k in base)
    assert "| frozen | amsrn selection=shared (init frozen) |" in report.report(runs)


CLAIMS = """
[claim.beats]
paper = "liu-lee"
claim = "AMSRN beats the LSTM"
paper_says = "-6.9%"
kind = "better"
run = "amsrn-tiny"
against = "base"

[claim.same]
paper = "liu-lee"
claim = "no change"
kind = "equal"
run = ["amsrn-tiny", "base"]
against = "base"

[claim.later]
paper = "daniluk"
claim = "waits for a blocked run"
kind = "better"
run = "later"
against = "base"
"""


def test_claims_are_decided_by_the_interval(manifest, monkeypatch):
    manifest.write_text(TINY + CLAIMS)
    runs = experiments.load_manifest(manifest)
    claims = experiments.load_claims(manifest, runs)
    assert report.decide(claims["beats"], runs)["verdict"] == "not tested"  # nothing trained yet
    assert report.decide(claims["later"], runs) == {"verdict": "not tested", "ours": "blocked: later (not implemented)"}
    monkeypatch.setattr(experiments.Run, "done", lambda self: not self.blocked)
    valid = {"base": 150.0, "amsrn-tiny": 140.0, "base-s2": 151.0, "amsrn-tiny-s2": 141.0}
    monkeypatch.setattr(experiments, "run_metrics", lambda run: {"valid_perplexity": valid[run.name],
                                                                 "test_perplexity": valid[run.name] + 2})
    assert experiments.pick(["amsrn-tiny", "base"], runs).name == "amsrn-tiny"  # the lowest valid perplexity
    valid["base"] = 130.0
    assert experiments.pick(["amsrn-tiny", "base"], runs).name == "base"
    valid["base"] = 150.0
    interval, seen = {}, []
    monkeypatch.setattr(report, "seed_pair", lambda run, against: (run.name, against.name))

    def fake(pairs, arms, **kw):
        seen.append((pairs, arms))
        return verdicts.Interval(interval["r"], interval["lo"], interval["hi"], 0.01, len(pairs), "documents",
                                 math.sqrt(sum(a.var for a in arms)), [interval["r"]] * len(pairs), np.zeros(10))

    monkeypatch.setattr(report.verdicts, "claim_interval", fake)
    for (lo, r, hi), better, equal in [
        ((0.95, 0.96, 0.97), "reproduced", "not reproduced"),
        ((0.99, 1.00, 1.01), "not reproduced: no difference", "reproduced"),
        ((1.03, 1.04, 1.05), "not reproduced: the opposite", "not reproduced"),
        ((0.97, 0.99, 1.01), "not reproduced: no difference", "inconclusive: too few runs to tell"),
    ]:
        interval.update(lo=lo, r=r, hi=hi)
        assert report.decide(claims["beats"], runs)["verdict"] == better
        assert report.decide(claims["same"], runs)["verdict"] == equal
    decided = report.decide(claims["beats"], runs)
    assert decided["runs"] == "amsrn-tiny vs base" and decided["direction"] == "no clear difference"
    assert "-1.0% (95% CI -3.0% to +1.0%; documents resampled, 2 seeds" in decided["ours"]
    # the seed pairs (amsrn-tiny-s2 vs base-s2 too) and the two arms' seed spreads: each from its own two seeds
    # (one df), moderated toward the protocol's prior fitted to both
    pairs, arms = seen[-1]
    assert pairs == [("amsrn-tiny", "base"), ("amsrn-tiny-s2", "base-s2")]
    own = {name: verdicts.seed_variance([math.log(a), math.log(b)])
           for name, a, b in [("amsrn-tiny", 142, 143), ("base", 152, 153)]}
    prior = verdicts.fit_prior(list(own.values()))
    assert prior.setups == 2 and prior.total_df == 2
    assert arms == [verdicts.moderated(own["amsrn-tiny"], prior), verdicts.moderated(own["base"], prior)]
    assert all(a.how == "moderated" and a.df == 2 for a in arms)  # d0 + 1, capped at the protocol's 2 df
    # every ratio claim tested is counted for Holm's adjustment
    decided = report.decide_all(claims, runs)
    assert decided["beats"]["holm"]["tested"] == 2 and "holm" not in decided["later"]


def test_the_seed_spread_line_says_how_each_setup_s_spread_was_set(manifest, monkeypatch):
    """Under each claims table: the setups' own spreads and what moderation made of them; one setup with seeds is
    its own prior; seeds that scored alike add no seed noise."""
    manifest.write_text(TINY + CLAIMS)
    runs = experiments.load_manifest(manifest)
    monkeypatch.setattr(experiments.Run, "done", lambda self: not self.blocked)
    test = {"base": 150.0, "base-s2": 151.0, "amsrn-tiny": 140.0, "amsrn-tiny-s2": 140.05}
    monkeypatch.setattr(experiments, "run_metrics", lambda run: {"test_perplexity": test[run.name]})
    key = report.protocol(runs["base"])
    line = report.Spreads(runs).describe(key)
    assert line.startswith("base 0.47% (2 seeds), amsrn-tiny 0.03% (2 seeds); moderated toward their common spread")
    prior = report.Spreads(runs).prior[key]
    assert prior.setups == 2 and f"(the prior {prior.describe()})" in line
    test["amsrn-tiny-s2"] = 140.0  # seeds alike: no spread of their own, so base alone sets the prior
    assert report.Spreads(runs).describe(key).endswith("amsrn-tiny 0.00% (2 seeds); a setup with one seed takes base's")
    test["base-s2"] = 150.0
    assert report.Spreads(runs).describe(key).endswith("their seeds scored alike, so seed noise is not included")


def test_a_claim_says_when_its_runs_trained_on_two_kinds_of_device(manifest, monkeypatch):
    """Seeds trained on the CPU and on a GPU go into one claim only with a check: the report names the devices,
    and whether the setups with seeds on both agree within the seed spread."""
    manifest.write_text(TINY.replace("[run.later]", "[run.base-s3]\npaper = \"liu-lee\"\nmodel = \"lstm\"\nseed = 3\n\n"
                                                    "[run.amsrn-tiny-s3]\npaper = \"liu-lee\"\nmodel = \"amsrn\"\n"
                                                    "init = \"base\"\ncontrol = \"base-s3\"\nseed = 3\n"
                                                    "options = { selection = \"shared\" }\n\n[run.later]") + CLAIMS)
    runs = experiments.load_manifest(manifest)
    claims = experiments.load_claims(manifest, runs)
    monkeypatch.setattr(experiments.Run, "done", lambda self: not self.blocked)
    test = {"base": 150.0, "base-s2": 151.0, "base-s3": 150.5, "amsrn-tiny": 140.0, "amsrn-tiny-s2": 140.6,
            "amsrn-tiny-s3": 140.3}
    monkeypatch.setattr(experiments, "run_metrics", lambda run: {"valid_perplexity": test[run.name],
                                                                 "test_perplexity": test[run.name]})
    device = dict.fromkeys(test, "cpu")
    monkeypatch.setattr(experiments, "run_device", lambda run: device[run.name])
    monkeypatch.setattr(report, "seed_pair", lambda run, against: (run.name, against.name))
    monkeypatch.setattr(report.verdicts, "claim_interval", lambda pairs, arms, **kw: verdicts.Interval(
        0.93, 0.92, 0.94, 0.001, len(pairs), "documents", math.sqrt(sum(a.var for a in arms)), [0.93] * len(pairs),
        np.zeros(10)))
    assert "trained on" not in report.decide(claims["beats"], runs)["verdict"]
    text = report.report(runs, claims)
    assert "as its evidence records it: cpu 6 runs." in text and "No setup has seeds on more than one kind" in text
    device["amsrn-tiny-s3"] = device["base-s3"] = "cuda"  # the third seed of both arms on a GPU, as close as seeds
    assert report.decide(claims["beats"], runs)["verdict"].endswith(
        "(trained on cpu and cuda: their seeds agree within the seed spread)")
    text = report.report(runs, claims)
    # the check of base's seeds: the spread within the devices (cpu's two seeds) moderated with the protocol's prior
    logs = {name: math.log(test[name]) for name in test}
    prior = verdicts.fit_prior([verdicts.seed_variance([logs[f"{arm}{tag}"] for tag in ("", "-s2", "-s3")])
                                for arm in ("base", "amsrn-tiny")])
    (check,) = verdicts.device_check({"cpu": [logs["base"], logs["base-s2"]], "cuda": [logs["base-s3"]]}, prior)
    assert check.agree and check.describe().startswith("cuda against cpu: +0.00% (1 seed against 2), within the ±")
    assert "cpu 4 runs; cuda 2 runs" in text and f"| base, base-s2, base-s3 | {check.describe()} |" in text
    test["amsrn-tiny-s3"] = 150.0  # the GPU seed far from the CPU's: 7% off, where the seeds differ by 0.4%
    assert report.decide(claims["beats"], runs)["verdict"].endswith(
        "(trained on cpu and cuda: the devices disagree beyond the seed spread: keep them apart)")
    assert "beyond the" in report.report(runs, claims)
    device.update(dict.fromkeys(["base-s3", "base-s2", "base"], None))  # the control's devices not recorded
    assert "unchecked" not in report.decide(claims["beats"], runs)["verdict"]  # one group still checks


def test_a_mass_claim_reads_the_average_weight_by_position(manifest, monkeypatch):
    """A "mass" claim sums the mean weight of the most recent positions (their Fig. 3) over the
    run's window and holds it against the share the claim names."""
    import types

    manifest.write_text(TINY + '\n[run.kvp-tiny]\npaper = "daniluk"\nmodel = "kvp"\ncontext = "document"\n'
                        'options = { window = 3 }\n\n[claim.recent]\npaper = "daniluk"\nclaim = "recent"\n'
                        'paper_says = "Fig. 3"\nkind = "mass"\nrun = "kvp-tiny"\npositions = 2\nshare = 0.75\n')
    runs = experiments.load_manifest(manifest)
    claim = experiments.load_claims(manifest, runs)["recent"]
    assert report.decide(claim, runs)["verdict"] == "not tested"
    runner.run_one(runs["kvp-tiny"], runs, dry_run=True)
    runner.write_evidence(runs["kvp-tiny"])
    stored = runs["kvp-tiny"].evidence().positions
    assert experiments.run_device(runs["kvp-tiny"]) == "cpu" and experiments.run_device(runs["base"]) is None
    assert stored["window"] == 3 and stored["offset"] == [1, 2, 3] and sum(stored["mean"]) == pytest.approx(1, abs=0.02)
    total, count = np.asarray(stored["unit_total"]), np.asarray(stored["unit_count"])  # per test document
    assert total.shape == count.shape == (len(total), 3) and stored["resampled"] in ("documents", "sentences")
    assert np.allclose(total.sum(0) / count.sum(0), stored["mean"], rtol=1e-9)
    means, units = {}, {}
    monkeypatch.setattr(experiments.Run, "evidence", lambda self: types.SimpleNamespace(positions={
        "window": 3, "offset": [3, 1, 2], "mean": [means[3], means[1], means[2]], "largest_weight": 0.61, "entropy": 0.85,
        **units}))
    means.update({1: 0.5, 2: 0.3, 3: 0.2})
    decided = report.decide(claim, runs)
    assert decided["verdict"] == "reproduced" and decided["runs"] == "kvp-tiny"
    assert decided["ours"] == ("80% of the weight on the 2 most recent of 3 positions (equal weights: 67%); a row's "
                               "largest weight 0.61 on average (equal weights: 0.33), its entropy 0.85 nats (1.10); no "
                               "interval: its evidence predates the per-document sums")
    means.update({1: 0.4, 2: 0.3, 3: 0.3})
    assert report.decide(claim, runs)["verdict"] == "not reproduced"
    # with the per-document sums: the verdict holds the interval against the share (documents that differ widely)
    count = np.full((8, 3), 100.0)
    spread = np.array([0.2, 0.9, 0.3, 0.95, 0.25, 0.9, 0.3, 0.95])[:, None] * np.array([0.6, 0.4, 0.0])
    units.update({"resampled": "documents", "unit_total": (count * spread).tolist(), "unit_count": count.tolist()})
    decided = report.decide(claim, runs)
    assert decided["verdict"] == "inconclusive: the interval holds the paper's share"
    assert "documents resampled, 1 seed" in decided["ours"]
    units["unit_total"] = (count * np.array([0.5, 0.4, 0.1])).tolist()  # every document alike: 90%
    assert report.decide(claim, runs)["verdict"] == "reproduced"


def test_a_mass_claim_averages_the_seeds_that_keep_per_document_sums(manifest, monkeypatch):
    """Seeds of the run: their shares averaged, the interval over documents and seeds; a seed whose evidence
    predates the per-document sums is left out by name."""
    import types

    manifest.write_text(TINY + "".join(f'\n[run.kvp-tiny{tag}]\npaper = "daniluk"\nmodel = "kvp"\ncontext = "document"\n'
                                       f'seed = {seed}\noptions = {{ window = 3 }}\n'
                                       for tag, seed in [("", 1234), ("-s2", 2), ("-s3", 3)])
                        + '\n[claim.recent]\npaper = "daniluk"\nclaim = "recent"\npaper_says = "Fig. 3"\n'
                          'kind = "mass"\nrun = "kvp-tiny"\npositions = 2\nshare = 0.75\n')
    runs = experiments.load_manifest(manifest)
    claim = experiments.load_claims(manifest, runs)["recent"]
    monkeypatch.setattr(experiments.Run, "done", lambda self: True)
    count = np.full((6, 3), 100.0)
    share = {"kvp-tiny": None, "kvp-tiny-s2": 0.5, "kvp-tiny-s3": 0.52}  # seed 1: no per-document sums

    def positions(run):
        x = share[run.name] if share[run.name] is not None else 0.9
        pos = {"window": 3, "offset": [1, 2, 3], "mean": [x / 2, x / 2, 1 - x], "largest_weight": 0.6, "entropy": 0.9}
        if share[run.name] is not None:
            pos.update(resampled="documents", unit_total=(count * np.array(pos["mean"])).tolist(),
                       unit_count=count.tolist())
        return types.SimpleNamespace(positions=pos)

    monkeypatch.setattr(experiments.Run, "evidence", positions)
    decided = report.decide(claim, runs)
    assert decided["runs"] == "kvp-tiny-s2, kvp-tiny-s3" and decided["verdict"] == "not reproduced"
    assert decided["ours"].startswith("51% of the weight on the 2 most recent of 3 positions (95% CI ")
    assert ("documents resampled, 2 seeds: 50%, 52%; left out, their evidence predates the per-document sums: "
            "kvp-tiny)") in decided["ours"]
    share["kvp-tiny"] = 0.51  # every seed with sums: none left out
    decided = report.decide(claim, runs)
    assert decided["runs"] == "kvp-tiny, kvp-tiny-s2, kvp-tiny-s3" and "left out" not in decided["ours"]
    assert "3 seeds: 51%, 50%, 52%)" in decided["ours"]
    share["kvp-tiny-s3"] = 0.7  # two seeds as far apart: their spread on one df holds the paper's share
    share["kvp-tiny"] = None
    assert report.decide(claim, runs)["verdict"].startswith("inconclusive")


SWEEP = "".join(f"""
[run.kv-w{w}{tag}]
paper = "daniluk"
model = "kv"
context = "document"
seed = {seed}
options = {{ window = {w} }}
""" for w, tag, seed in [(1, "", 1234), (5, "", 1234), (10, "", 1234), (5, "-s2", 2)])


def test_a_sweep_is_a_table_row_with_its_best_on_valid_in_bold(manifest, monkeypatch):
    """Runs that differ only in a swept option (the window here) make one row of their paper's
    sweep table (their Fig. 2a); another seed is another setup, and a run alone is no sweep."""
    manifest.write_text(TINY + SWEEP)
    runs = experiments.load_manifest(manifest)
    assert [(key, [r.name for r in g]) for key, g in experiments.sweeps(runs)] == [("window", ["kv-w1", "kv-w5", "kv-w10"])]
    done = {"kv-w1": (131.0, 129.5), "kv-w5": (127.25, 126.0)}  # (valid, test); kv-w10 is not run yet
    monkeypatch.setattr(experiments.Run, "done", lambda self: self.name in done)
    monkeypatch.setattr(experiments, "run_metrics", lambda run, meta=None: dict(zip(("valid_perplexity", "test_perplexity"), done[run.name])))
    monkeypatch.setattr(report, "comparison", lambda run, runs, spreads=None: None)
    text = report.report({k: v for k, v in runs.items() if k.startswith("kv-")})
    assert "### Daniluk et al.: running text within documents, from scratch, equal parameter counts: sweeps" in text
    assert "| model | window = 1 | window = 5 | window = 10 |" in text
    assert "| kv | 129.50 (131.00) | 126.00 (127.25) | not run |" in text, "no best of a sweep that is not whole"
    done["kv-w10"] = (128.0, 125.0)
    assert "| kv | 129.50 (131.00) | **126.00 (127.25)** | 125.00 (128.00) |" in report.report(runs)
    done["kv-w1"] = (127.0, 127.5)  # the best on valid, not on test, is bold
    assert "| kv | **127.50 (127.00)** | 126.00 (127.25) | 125.00 (128.00) |" in report.report(runs)
    # a second seed's sweep, and one at another size: each row names its seed and size, a model's seeds together
    big = "emb_dim = 300\nhidden_dim = 300\n"
    more = "".join(f"""
[run.kv{tag}]
paper = "daniluk"
model = "kv"
context = "document"
seed = {seed}
{size}options = {{ window = {w} }}
""" for tag, seed, size, w in [("-big-w1", 1234, big, 1), ("-big-w5", 1234, big, 5), ("-w1-s2", 2, "", 1)])
    manifest.write_text(TINY + SWEEP + more)
    runs = experiments.load_manifest(manifest)
    done["kv-w1-s2"] = (130.0, 129.0)
    rows = [line for line in report.report(runs).splitlines() if line.startswith("| kv ")]
    assert rows == ["| kv · k = 8 · seed 1234 | **127.50 (127.00)** | 126.00 (127.25) | 125.00 (128.00) |",
                    "| kv · k = 8 · seed 2 | 129.00 (130.00) | not run |  |",  # not whole: no best
                    "| kv · k = 300 · seed 1234 | not run | not run |  |"], rows


def test_a_tuning_sweep_says_whether_it_brackets_its_best(manifest, monkeypatch):
    """A value we choose on valid (dropout, for `dropout_from`) is a sweep of its own, its row naming its size and
    seed; a best at the largest value swept (or at a smallest above the option's least, 0) is said to leave the
    optimum unbracketed; a best inside, or at 0, brackets it. The papers' own ranges (windows) are never flagged."""
    sweep = "".join(f"""
[run.lstm-d{tag}]
paper = "daniluk"
model = "lstm"
context = "document"
seed = 11
options = {{ dropout = {d} }}
""" for tag, d in [("0", 0.0), ("25", 0.25), ("50", 0.5)])
    manifest.write_text(TINY + SWEEP + sweep)
    runs = experiments.load_manifest(manifest)
    assert ("dropout", ["lstm-d0", "lstm-d25", "lstm-d50"]) in [(k, [r.name for r in g]) for k, g in experiments.sweeps(runs)]
    valid = {"lstm-d0": 110.0, "lstm-d25": 105.0, "kv-w1": 120.0, "kv-w5": 125.0, "kv-w10": 126.0}
    monkeypatch.setattr(experiments.Run, "done", lambda self: self.name in valid)
    monkeypatch.setattr(experiments, "run_metrics",
                        lambda run, meta=None: {"valid_perplexity": valid[run.name], "test_perplexity": valid[run.name] - 2})
    monkeypatch.setattr(report, "comparison", lambda run, runs, spreads=None: None)

    def said(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("lstm's best dropout")]

    text = report.report(runs)
    assert "| lstm · k = 8 · seed 11 | 108.00 (110.00) | 103.00 (105.00) | not run |" in text
    assert said(text) == [], "a sweep not yet whole says nothing"
    valid["lstm-d50"] = 104.0
    assert said(report.report(runs)) == [(
        "lstm's best dropout on valid (0.5) is the largest value swept: the sweep does not bracket it, the optimum may "
        "lie above.")]
    valid["lstm-d50"] = 107.0
    assert said(report.report(runs)) == ["lstm's best dropout on valid (0.25) is bracketed: values on both sides of it were tried."]
    valid["lstm-d0"] = 100.0  # 0 is dropout's least: nothing lies below it
    assert said(report.report(runs)) == ["lstm's best dropout on valid (0.0) is bracketed: it is the least dropout can take."]
    group = experiments.sweeps(runs)[-1][1]
    # a sweep of 0.25 and 0.5 only: its best at 0.25 lies at an end above the least (0 was not tried)
    assert [r.name for r in group[1:]] == ["lstm-d25", "lstm-d50"]
    assert experiments.unbracketed("dropout", group[1:]) == "smallest"
    assert experiments.unbracketed("window", [runs["kv-w1"], runs["kv-w5"], runs["kv-w10"]]) is None  # the paper's range


def test_claims_in_the_report_and_bad_claims_refused(manifest, tmp_path):
    beyond = ('\n[claim.beyond]\npaper = "extension"\nclaim = "asked beyond the papers"\nkind = "better"\n'
              'run = "amsrn-tiny"\nagainst = "base"\n')
    manifest.write_text(TINY + CLAIMS + beyond)
    runs = experiments.load_manifest(manifest)
    for name in ("base", "amsrn-tiny"):
        runner.run_one(runs[name], runs, dry_run=True)
        runner.write_evidence(runs[name])
    results = tmp_path / "RESULTS.md"
    report.write_report(runs, results, experiments.load_claims(manifest, runs))
    text = results.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| AMSRN beats the LSTM "))
    assert "| -6.9% |" in row and "amsrn-tiny vs base" in row and ("**reproduced**" in row or "**not reproduced" in row)
    assert "| waits for a blocked run |" in text and "**not tested**" in text
    summary = text[text.index("### Summary"):text.index("#### Beyond the papers (exploratory)")]
    assert "| AMSRN beats the LSTM |" in summary and "asked beyond the papers" not in summary
    beyond = text[text.index("#### Beyond the papers (exploratory)"):]
    assert next(line for line in beyond.splitlines() if "asked beyond the papers" in line).startswith("| extension |")
    assert "3 ratio claims tested, 2 of the papers' and 1 beyond them" in summary
    for old, new, message in [('against = "base"\n', "", "needs an `against`"),
                              ('kind = "better"', 'kind = "worse"', "kind one of"),
                              ('run = "amsrn-tiny"', 'run = "nowhere"', "not in the manifest"),
                              ('claim = "AMSRN beats the LSTM"', "", r"lacks \['claim'\]")]:
        manifest.write_text(TINY + CLAIMS.replace(old, new, 1))
        with pytest.raises(ValueError, match=message):
            experiments.load_claims(manifest)


def test_the_manifest_states_each_claim_of_the_issue():
    runs = experiments.load_manifest(ROOT / experiments.MANIFEST)
    claims = experiments.load_claims(ROOT / experiments.MANIFEST, runs)
    assert {"amsrn-beats-lstm", "selection-is-essential", "entropy-helps", "attention-beats-lstm", "kv-beats-attention",
            "kvp-beats-kv", "kvp-equals-4gram", "kvp-flat-in-window", "attention-on-last-5"} <= set(claims)
    for claim in claims.values():  # a claim compares runs of one protocol, its paper's own
        names = claim.candidates()
        assert runs[names[0]].paper == claim.paper and len({runs[n].context for n in names}) == 1


def test_bundle_stores_half_precision_when_it_is_harmless(manifest, tmp_path, monkeypatch, capsys):
    """A finished run is copied into checkpoints/ as float16 (half the bytes) when that moves its
    test perplexity by < 0.1%, loads back as float32, and is marked bundled in the manifest."""
    monkeypatch.setenv("VIZLM_CHECKPOINTS", str(tmp_path / "ck"))
    runs = experiments.load_manifest(manifest)
    runner.run_one(runs["base"], runs, dry_run=True)
    assert cli.main(["reproduce", "--manifest", str(manifest), "--bundle", "base", "--as", "tiny-lstm"]) == 0
    dest = tmp_path / "ck" / "tiny-lstm"
    from vizlm.modeling.checkpoint import load_checkpoint

    ckpt = load_checkpoint(dest)
    storage = ckpt.meta["storage"]
    assert storage["dtype"] == "float16" and abs(storage["relative_change"]) < runner.HALF_PRECISION_TOLERANCE
    assert ckpt.meta["metrics"]["test_perplexity"] == storage["test_perplexity_float16"]
    assert all(p.dtype == torch.float32 for p in ckpt.model.parameters())
    full = load_checkpoint(runs["base"].folder)
    assert (dest / "model.safetensors").stat().st_size < 0.6 * (runs["base"].folder / "model.safetensors").stat().st_size
    for (k, a), b in zip(full.model.state_dict().items(), ckpt.model.state_dict().values()):
        assert torch.equal(a.half().float(), b), k
    again = experiments.load_manifest(manifest)
    assert again["base"].bundled == "tiny-lstm" and again["base"].folder == dest and again["base"].status() == "finished"
    assert cli.main(["reproduce", "--manifest", str(manifest), "--bundle", "base"]) == 2  # already bundled
    assert "already bundled" in capsys.readouterr().err


def test_a_finished_run_trains_again_when_forced_and_is_bundled_in_place(manifest, tmp_path, monkeypatch, capsys):
    """`run NAME --force` (a stale run): a finished run, a bundled one too, trains again from scratch into
    runs/NAME and its evidence is replaced; `--bundle NAME --force` swaps the bundled checkpoint for it, written
    whole beside it first. A finished run in runs/NAME is never trained over."""
    import shutil

    monkeypatch.setenv("VIZLM_CHECKPOINTS", str(tmp_path / "ck"))
    runs = experiments.load_manifest(manifest)
    runner.run_one(runs["base"], runs, dry_run=True)
    m = ["reproduce", "--manifest", str(manifest)]
    assert cli.main([*m, "--bundle", "base", "--as", "tiny-lstm"]) == 0
    source = lambda: evidence.read("base").config["evidence"]["source"]  # noqa: E731
    assert source().endswith("tiny-lstm")
    capsys.readouterr()
    assert cli.main([*m, "run", "base", "--force"]) == 2  # runs/base holds the finished run it was bundled from
    assert "holds a finished run of base: move it aside" in capsys.readouterr().err
    shutil.move(tmp_path / "runs" / "base", tmp_path / "old-base")
    train = runner._train  # a few batches (a pipeline check) stand in for the training
    monkeypatch.setattr(runner, "_train", lambda run, runs, folder, resume, threads, dry_run, log, device:
                        train(run, runs, folder, resume, threads, True, log, device))
    for wrong in (["--all"], ["--jobs", "2"]):
        assert cli.main([*m, "run", "base", "--force", *wrong]) == 2
    assert cli.main([*m, "run", "base", "--force"]) == 0
    assert "reproduce: base: finished" in capsys.readouterr().err
    assert (tmp_path / "runs" / "base" / "model.safetensors").is_file() and source().endswith("base")  # runs/base
    bundled = tmp_path / "ck" / "tiny-lstm"
    (bundled / "old.txt").write_text("the checkpoint bundled before")
    assert cli.main([*m, "--bundle", "base", "--force"]) == 0
    assert not (bundled / "old.txt").exists() and sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["tiny-lstm"]
    assert source().endswith("tiny-lstm") and experiments.load_manifest(manifest)["base"].bundled == "tiny-lstm"
    assert manifest.read_text().count('bundled = "tiny-lstm"') == 1


def test_a_retraining_checks_what_it_starts_from_as_a_training_does(manifest):
    """`run NAME --force` refuses, before reading or writing anything, a run whose start is not finished."""
    runs = experiments.load_manifest(manifest)
    with pytest.raises(ValueError, match="starts from base, which is not finished"):
        runner.retrain(runs["amsrn-tiny"], runs)
    assert not (manifest.parent / "runs").exists()


def test_the_runs_marked_stale_are_those_the_plateau_rule_would_have_trained_otherwise():
    """A run trained before the plateau rule (TrainConfig.plateau) whose log has an epoch without
    improvement while its best valid perplexity was still >= 0.9 x the unigram model's would train
    otherwise now: the manifest marks exactly those `stale`, until retrained evidence replaces them."""
    from vizlm.data.vocab import Vocab
    from vizlm.modeling.evaluate import unigram_perplexity
    from vizlm.data.tokens import open_split
    from vizlm.modeling.config import TrainConfig

    runs = experiments.load_manifest(ROOT / experiments.MANIFEST)
    plateau = {}
    changed = set()
    for run in runs.values():
        if not run.done():
            continue
        ev = run.evidence()
        if "plateau_perplexity" in ev.config.get("train", {}):
            continue  # trained under the rule
        if run.corpus not in plateau:
            vocab = Vocab.for_corpus(run.corpus)
            plateau[run.corpus] = TrainConfig.plateau * unigram_perplexity(
                open_split(run.corpus, "train", vocab), open_split(run.corpus, "valid", vocab), len(vocab))
        log = [json.loads(line) for line in (paths.evidence_dir() / run.name / "train_log.jsonl").read_text().splitlines()]
        best = math.inf
        for row in log:
            if row["valid_perplexity"] < best:
                best = row["valid_perplexity"]
            elif best >= plateau[run.corpus]:
                changed.add(run.name)
    assert {name for name, run in runs.items() if run.stale} == changed


DROPOUT = """
[run.lstm-d0]
paper = "daniluk"
model = "lstm"
context = "document"
seed = 11
options = { dropout = 0.0 }

[run.lstm-d5]
paper = "daniluk"
model = "lstm"
context = "document"
seed = 11
options = { dropout = 0.5 }

[run.kvp-picked]
paper = "daniluk"
model = "kvp"
context = "document"
options = { window = 3 }
dropout_from = ["lstm-d0", "lstm-d5"]
"""


def test_a_run_takes_its_dropout_from_the_best_of_its_sweep_on_valid(manifest, monkeypatch):
    """Dropout chosen on valid for one model and used for all: the run trains after its sweep, with the
    dropout of the sweep's run of lowest valid perplexity."""
    manifest.write_text(TINY + DROPOUT)
    runs = experiments.load_manifest(manifest)
    assert [r.name for r in experiments.start_order(runs, ["kvp-picked"])] == ["lstm-d0", "lstm-d5", "kvp-picked"]
    with pytest.raises(ValueError, match="not all finished"):
        runs["kvp-picked"].model_kwargs(runs)
    assert runner._skipped(runs["kvp-picked"], runs, {}) == "skipped: lstm-d0 did not finish (not run)"
    monkeypatch.setattr(experiments.Run, "done", lambda self: not self.blocked)
    valid = {"lstm-d0": 150.0, "lstm-d5": 140.0}
    monkeypatch.setattr(experiments, "run_metrics", lambda run, meta=None: {"valid_perplexity": valid[run.name]})
    assert runs["kvp-picked"].model_kwargs(runs)["dropout"] == 0.5
    valid["lstm-d0"] = 130.0
    assert runs["kvp-picked"].model_kwargs(runs)["dropout"] == 0.0
    assert "dropout" not in runs["kvp-picked"].model_kwargs()  # without the runs: the manifest's options alone


@pytest.mark.parametrize("field,match", [("dropout_from = \"lstm-d0\"", "non-empty list"),
                                         ("dropout_from = []", "non-empty list"),
                                         ("dropout_from = [\"nowhere\"]", "'nowhere', which is not in the manifest")])
def test_a_bad_dropout_sweep_is_refused(manifest, field, match):
    manifest.write_text(TINY + DROPOUT.replace('dropout_from = ["lstm-d0", "lstm-d5"]', field))
    with pytest.raises(ValueError, match=match):
        experiments.load_manifest(manifest)
    manifest.write_text(TINY + DROPOUT.replace("options = { window = 3 }", "options = { window = 3, dropout = 0.1 }"))
    with pytest.raises(ValueError, match="may not set its own dropout"):
        experiments.load_manifest(manifest)


def test_a_claim_at_another_size_is_set_beside_its_own(manifest):
    big = ('\n[run.base-big]\npaper = "liu-lee"\nmodel = "lstm"\nemb_dim = 16\nhidden_dim = 16\n'
           '\n[run.amsrn-big]\npaper = "liu-lee"\nmodel = "amsrn"\nemb_dim = 16\nhidden_dim = 16\ninit = "base-big"\n')
    variant = ('\n[claim.beats-big]\npaper = "liu-lee"\nclaim = "(k = 16) AMSRN beats the LSTM"\nkind = "better"\n'
               'run = "amsrn-big"\nagainst = "base-big"\nvariant_of = "beats"\n')
    manifest.write_text(TINY + big + CLAIMS + variant)
    runs = experiments.load_manifest(manifest)
    claims = experiments.load_claims(manifest, runs)
    text = report.report(runs, claims)
    assert "### Does the verdict depend on the size?" in text and "| claim | k = 8 | k = 16 |" in text
    assert "| AMSRN beats the LSTM | not tested (not run: amsrn-tiny, base) | not tested (not run: amsrn-big, base-big) |" in text
    summary = text.split("### Does the verdict")[0]
    assert "(k = 16) AMSRN" not in summary  # a variant is in the table of sizes, not the summary
    manifest.write_text(TINY + big + CLAIMS + variant.replace('variant_of = "beats"', 'variant_of = "nothing"'))
    with pytest.raises(ValueError, match="variant_of must name a claim"):
        experiments.load_claims(manifest, experiments.load_manifest(manifest))


@pytest.mark.parametrize("words, flags", [
    ("list", "--list"), ("run a b", "--only a b"), ("run --all", "--all"), ("report", "--report"),
    ("evidence", "--evidence"), ("evidence a --force", "--evidence a --force"), ("bundle a --as b", "--bundle a --as b"),
    ("attribution kvp-doc", "--attribution kvp-doc"), ("faithfulness", "--faithfulness"), ("cases amsrn", "--cases amsrn"),
])
def test_reproduce_s_words_are_its_options(words, flags):
    """`vizlm reproduce WHAT [NAME ...]` is the same command as its option (the options stay, as they were)."""
    parser = cli.build_parser()

    def said(argv: str) -> dict:
        args = parser.parse_args(["reproduce", *argv.split()])
        cli.reproduce_what(args)
        return {dest: getattr(args, dest) for dest in [*cli.REPRODUCE_FLAGS.values(), "bundle_as", "force"]}

    assert said(words) == said(flags)


@pytest.mark.parametrize("argv, message", [
    ([], "say what to do"), (["run"], "run what?"), (["report", "x"], "takes no names"),
    (["bundle"], "bundle takes one run"), (["list", "--report"], "both say what to do"),
    (["train"], "invalid choice: 'train' (choose from 'list', 'run'"),
])
def test_reproduce_says_what_is_wrong_with_what_it_was_told(argv, message, capsys):
    try:
        code = cli.main(["reproduce", *argv])
    except SystemExit as done:  # what argparse refuses itself
        code = done.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_run_trained_outside_vizlm_is_imported_never_trained(tmp_path, monkeypatch):
    """A run with ``external`` (the commands that trained it elsewhere and imported it): reproduce refuses to train
    it, naming them; once imported into its folder it is finished; the manifest's Transformer is one."""
    monkeypatch.setenv("VIZLM_RUNS", str(tmp_path / "runs"))
    paths.clear_overrides()
    run = experiments.Run("ext", "extension", "lstm", context="document", external="main.py ...; vizlm import ...")
    with pytest.raises(ValueError, match=r"ext is trained outside vizlm, then imported: main.py \.\.\.; vizlm import"):
        runner.run_one(run, {"ext": run})
    assert not run.folder.exists()
    from vizlm.data.vocab import Vocab
    from vizlm.modeling.checkpoint import save_checkpoint
    from vizlm.models import build_model

    save_checkpoint(run.folder, build_model("lstm", vocab_size=8, context="document"), "lstm",
                    Vocab(["<pad>", "<s>", "</s>", "<unk>", "a", "b", "c", "d"]), corpus={"name": "brown"},
                    imported={"kind": "pytorch-examples"})
    assert run.status() == "finished"
    runs = experiments.load_manifest()
    assert runs["transformer-doc"].external and "main.py --data BROWN --model Transformer" in runs["transformer-doc"].external
    assert runs["transformer-doc"].control == "lstm-doc-anchor" and runs["lstm-doc-anchor"].external


def test_a_run_started_from_another_seed_of_its_start_is_a_seed_of_its_setup(manifest):
    """`amsrn-doc-s2` starts from `lstm-doc-s2` where `amsrn-doc` starts from `lstm-doc`: seeds of one setup (the
    start's seed varies with the run's), unlike a run started from another setup."""
    manifest.write_text(TINY + '\n[run.amsrn-from-s2]\npaper = "liu-lee"\nmodel = "amsrn"\ninit = "base-s2"\n'
                        'control = "base-s2"\nseed = 3\noptions = { selection = "shared" }\n'
                        '\n[run.amsrn-from-other]\npaper = "liu-lee"\nmodel = "amsrn"\ninit = "amsrn-tiny"\n'
                        'seed = 4\noptions = { selection = "shared" }\n')
    runs = experiments.load_manifest(manifest)
    groups = [[r.name for r in g] for g in experiments.seed_groups(runs)]
    assert ["amsrn-tiny", "amsrn-tiny-s2", "amsrn-from-s2"] in groups
    assert not any("amsrn-from-other" in g for g in groups)


def test_a_run_that_starts_from_itself_is_refused(manifest):
    """A loop through init / dropout_from could never train: the manifest is refused with the loop named,
    and a long chain of starts loads and orders without a recursion limit."""
    loop = TINY.replace('[run.base]\npaper = "liu-lee"\nmodel = "lstm"\n',
                        '[run.base]\npaper = "liu-lee"\nmodel = "lstm"\ninit = "amsrn-tiny"\n')
    manifest.write_text(loop)
    with pytest.raises(ValueError, match=r"starts from itself: (base -> amsrn-tiny -> base|amsrn-tiny -> base -> amsrn-tiny)"):
        experiments.load_manifest(manifest)
    chain = "".join(f'\n[run.c{i}]\npaper = "liu-lee"\nmodel = "lstm"\nepochs = 3\n' + (f'init = "c{i - 1}"\n' if i else "")
                    for i in range(3000))
    manifest.write_text(TINY + chain)
    runs = experiments.load_manifest(manifest)
    assert [r.name for r in experiments.start_order(runs, ["c2999"])] == [f"c{i}" for i in range(3000)]
    assert len(experiments.seed_groups(runs)) == 2  # base's and amsrn-tiny's seeds; the chain has one seed each
