"""The CLI end to end on the committed checkpoints."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from vizlm import cli
from vizlm.inspect.analysis import MIN_TOP_K_WEIGHT
from vizlm.modeling.checkpoint import bundled_checkpoints, bundled_dir

TEXT = "The dogs in the park are barking because they are hungry ."
PARAGRAPHS = (
    "The committee said the plan was approved. It will start next year because the funds are ready.\n"
    "Mr. Smith went to Washington. He met the president, and they talked about the war.\n"
)


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("txt") / "paras.txt"
    path.write_text(PARAGRAPHS, encoding="utf-8")
    return path


def test_the_parser_is_built_without_the_models():
    """`vizlm --help`, a subcommand's --help and a mistyped option answer without importing PyTorch, pandas or the
    models: the parser's choices come from the light lists (vizlm.core.choices, vizlm.inspect.choices, ...). Run in
    a fresh interpreter: this one has torch loaded already."""
    import subprocess
    import sys

    code = ("import sys; from vizlm import cli; cli.build_parser(); "
            "print(sorted(m for m in ('torch', 'pandas', 'altair', 'vizlm.api', 'vizlm.models') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_light_family_list_is_the_registry():
    """The parser's family names (vizlm.core.choices.FAMILIES) are the registry's built-in families, in its order."""
    from vizlm.core.choices import FAMILIES
    from vizlm.models import REGISTRY

    assert FAMILIES == tuple(REGISTRY)


def test_bundled_checkpoints_present():
    assert {"lstm", "amsrn", "kvp"} <= set(bundled_checkpoints())


def test_the_checkpoint_table_matches_the_checkpoints():
    """The checkpoint table's perplexities (docs/REPRODUCING.md) are the ones stored by training (and re-checked
    by eval below)."""
    readme = (Path(__file__).resolve().parent.parent / "docs" / "REPRODUCING.md").read_text(encoding="utf-8")
    rows = {name: (context, ppl) for name, context, ppl in
            re.findall(r"^\| `([\w-]+)` \| [^|]+ \| (sentence|document) \| [^|]+ \| ([\d.]+) \|$", readme, re.M)}
    assert set(rows) == set(bundled_checkpoints())
    bound = float(re.search(r"changed by at most ([\d.]+)%", readme)[1])
    for name, (context, ppl) in rows.items():
        meta = json.loads((bundled_dir() / name / "config.json").read_text(encoding="utf-8"))
        assert float(ppl) == round(meta["metrics"]["test_perplexity"], 1), name
        assert context == meta["config"].get("context", "sentence"), name
        if "storage" in meta:
            assert abs(100 * meta["storage"]["relative_change"]) <= bound, f"{name}: the table's float16 bound"


@pytest.mark.parametrize("name", ["amsrn", "kvp", "lstm"])
def test_analyze_json(capsys, name):
    code, out, _ = run(capsys, "analyze", "--checkpoint", name, "--text", TEXT, "--json")
    assert code == 0
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-finite {c} in JSON"))
    assert doc["tokens"][:3] == ["The", "dogs", "in"]
    assert [t["word"] for t in doc["targets"]][-1] == "</s>"
    assert len(doc["targets"]) == len(doc["tokens"]) + 1
    for t in doc["targets"]:
        assert 0 < t["prob"] <= 1
        if name == "lstm":
            assert t["attention"] is None and t["highlights"] == []
        else:
            assert len(t["attention"]) == t["index"] + 1
            assert math.isclose(sum(t["attention"]), 1, rel_tol=1e-6)
            for h in t["highlights"]:
                assert h["weight"] >= 0.2
        for c in t["cases"]:
            assert {"attended", "weight", "labels", "evidence"} <= set(c)


@pytest.mark.parametrize("name", ["amsrn", "kvp", "lstm"])
def test_analyze_json_carries_the_effects(capsys, name):
    code, out, _ = run(capsys, "analyze", "--checkpoint", name, "--text", TEXT, "--json", "--threshold", "0.1")
    doc = json.loads(out)
    if name == "lstm":
        assert doc["effects"] is None
        assert all(t["read_effect_bits"] is None and t["effects_bits"] is None for t in doc["targets"])
        return
    assert doc["effects"]["unit"] == "bits" and doc["effects"]["slot_effects"]
    assert -1 <= doc["effects"]["rank_correlation"] <= 1
    reads = [t["read_effect_bits"] for t in doc["targets"]]
    assert all(isinstance(x, float) for x in reads) and any(x != 0 for x in reads)
    assert doc["effects"]["read_effect_mean_bits"] == pytest.approx(sum(reads) / len(reads))
    for t in doc["targets"]:
        assert len(t["effects_bits"]) == t["index"] + 1  # slots 0..r
        for h in t["highlights"]:
            assert h["effect_bits"] == t["effects_bits"][h["slot"]]
        for c in t["cases"]:
            assert c["effect"] == t["effects_bits"][c["slot"]]
    code, out, _ = run(capsys, "analyze", "--checkpoint", name, "--text", TEXT)
    assert code == 0 and "rank correlation" in out and re.search(r"effect [+-]\d\.\d\db", out)


def test_analyze_top_k_and_table(capsys):
    code, out, _ = run(capsys, "analyze", "--checkpoint", "amsrn", "--text", TEXT, "--top-k", "2", "--json")
    assert code == 0
    for t in json.loads(out)["targets"]:  # the two heaviest slots, those with real weight (top-k never marks ~0)
        heaviest = sorted(t["attention"], reverse=True)[:2]
        assert [h["weight"] for h in t["highlights"]] == [w for w in heaviest if w >= MIN_TOP_K_WEIGHT]
    code, out, _ = run(capsys, "analyze", "--checkpoint", "amsrn", "--text", "colorless zorbleflux ideas")
    assert code == 0 and "<unk>" in out and "perplexity" in out


@pytest.mark.parametrize("text", ["", "   \n", "!!!"[:0]])
def test_analyze_empty_text_is_a_clear_error(capsys, text):
    code, _, err = run(capsys, "analyze", "--checkpoint", "lstm", "--text", text)
    assert code == 2 and "empty" in err and "Traceback" not in err


def test_corrupt_checkpoint_is_a_clear_error(capsys, tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x80\x04garbage")
    (tmp_path / "config.json").write_text("{}")
    code, _, err = run(capsys, "analyze", "--checkpoint", str(tmp_path), "--text", TEXT)
    assert code == 2 and "not a vizlm checkpoint" in err


def test_eval_corpus_and_text_file(capsys, text_file):
    code, out, _ = run(capsys, "eval", "--checkpoint", "kvp", "--corpus", "wsj", "--split", "test", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["tokens"] == 96773
    stored = json.loads((bundled_dir() / "kvp" / "config.json").read_text(encoding="utf-8"))["metrics"]
    assert math.isclose(doc["perplexity"], stored["wsj_perplexity"], rel_tol=1e-4)  # the shipped number is real
    code, out, _ = run(capsys, "eval", "--checkpoint", "lstm", "--text-file", str(text_file), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["sentences"] == 4 and doc["perplexity"] > 1


def test_compare_text_file(capsys, text_file, tmp_path):
    csv = tmp_path / "cmp.csv"
    code, out, _ = run(capsys, "compare", "--a", "lstm", "--b", "amsrn", "--text-file", str(text_file),
                       "--top", "2", "--csv", str(csv), "--json")
    assert code == 0
    doc = json.loads(out)
    assert len(doc["most_improved"]) == 2 and "summary" in doc
    assert csv.read_bytes().count(b"\n") >= 5


def test_positions_and_png(capsys, text_file, tmp_path):
    png = tmp_path / "pos.png"
    code, out, _ = run(capsys, "positions", "--checkpoint", "amsrn", "kvp", "--text-file", str(text_file),
                       "--window", "5", "--png", str(png), "--json")
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "kvp" in out and "amsrn" in out
    doc = json.loads(out)
    assert set(doc["effects"]) == {"amsrn", "kvp"}
    for e in doc["effects"].values():
        assert 0 <= e["share_over_1_bit"] <= 1 and e["tokens"] > 20
    assert all(isinstance(row["effect"], float) for row in doc["positions"])
    code, out, _ = run(capsys, "positions", "--checkpoint", "kvp", "--text-file", str(text_file), "--window", "3")
    assert code == 0 and "effect_lo" in out and "more than 1 bit" in out
    assert "lo, hi: 95% intervals, a bootstrap over the sentences (the text is one document); only " in out
    assert "sentences, so the interval is rough." in out  # a few sentences: said
    code, out, _ = run(capsys, "positions", "--checkpoint", "kvp", "--text-file", str(text_file), "--no-effects", "--json")
    assert json.loads(out)["effects"] == {}


def test_cases_text_file(capsys, text_file):
    code, out, _ = run(capsys, "cases", "--checkpoint", "amsrn", "--text-file", str(text_file), "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc["counts"]) == {"trigger", "causal", "phrase", "grammar"}
    code, out, _ = run(capsys, "cases", "--checkpoint", "amsrn", "--text-file", str(text_file), "--json",
                       "--rank", "effect", "--threshold", "0.05")
    doc = json.loads(out)
    assert doc["rank"] == "effect"
    for examples in doc["examples"].values():
        assert [e["effect"] for e in examples] == sorted((e["effect"] for e in examples), reverse=True)


@pytest.mark.parametrize("fmt,magic", [("png", b"\x89PNG"), ("svg", b"<svg"), ("html", b"<!DOCTYPE html"),
                                       ("csv", None), ("json", b"{")])
def test_export_formats(capsys, tmp_path, fmt, magic):
    out = tmp_path / f"x.{fmt}"
    code, _, _ = run(capsys, "export", "--checkpoint", "kvp", "--text", TEXT, "--format", fmt, "--out", str(out))
    assert code == 0
    data = out.read_bytes()
    if magic:
        assert magic in data[:200]
    assert b"dogs" in data or fmt == "png"


# --------------------------------------------------------------------------- bad options, files and text
@pytest.mark.parametrize("argv", [
    ["--threshold", "nan"], ["--threshold", "inf"], ["--threshold", "-5"], ["--threshold", "1.5"],
    ["--top-k", "0"], ["--top-k", "-1"], ["--top-k", "51"], ["--top-k", "2.5"],
])
def test_out_of_range_highlight_options_are_refused(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(["analyze", "--checkpoint", "amsrn", "--text", TEXT, *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument {argv[0]}: must be" in err and repr(argv[1]) in err


@pytest.mark.parametrize("argv", [
    ["positions", "--checkpoint", "amsrn", "--corpus", "wsj", "--window", "0"],
    ["cases", "--checkpoint", "amsrn", "--corpus", "wsj", "--threshold", "nan"],
    ["cases", "--checkpoint", "amsrn", "--corpus", "wsj", "--examples", "-1"],
    ["compare", "--a", "lstm", "--b", "amsrn", "--corpus", "wsj", "--top", "-3"],
    ["compare", "--a", "lstm", "--b", "amsrn", "--corpus", "wsj", "--min-length", "-1"],
    ["eval", "--checkpoint", "lstm", "--corpus", "wsj", "--batch-size", "0"],
    ["train", "--model", "lstm", "--dry-run", "--batch-size", "0"],
])
def test_other_bad_numbers_are_refused(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2 and "must be a" in capsys.readouterr().err


def test_invalid_utf8_in_text_still_gives_valid_json(capsys):
    """argv with invalid UTF-8 arrives as lone surrogates; stdout must stay valid JSON."""
    code, out, _ = run(capsys, "analyze", "--checkpoint", "amsrn", "--text", "the \udcff market \x1b[31mfell\x00", "--json")
    assert code == 0
    doc = json.loads(out)
    assert "\ufffd" in doc["tokens"] and "market" in doc["tokens"]
    assert not re.search("[\x00-\x08\x1b\ud800-\udfff]", doc["text"] + "".join(doc["tokens"]))


BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_a_right_to_left_override_reaches_no_output(capsys, tmp_path):
    """U+202E in a word would show the rest of a terminal line, a CSV row or a JSON string reversed."""
    text = "the market \u202efell\u2066 today"
    code, out, _ = run(capsys, "analyze", "--checkpoint", "amsrn", "--text", text)
    assert code == 0 and "fell" in out and not BIDI.search(out)
    code, out, _ = run(capsys, "analyze", "--checkpoint", "amsrn", "--text", text, "--json")
    assert code == 0 and not BIDI.search(out) and "fell" in json.loads(out)["tokens"]
    code, out, _ = run(capsys, "export", "--checkpoint", "amsrn", "--text", text, "--format", "csv",
                       "--out", str(tmp_path / "x.csv"))
    assert code == 0
    written = (tmp_path / "x.csv").read_text(encoding="utf-8")
    assert "fell" in written and not BIDI.search(written)
    (tmp_path / "t.txt").write_text(text + "\n", encoding="utf-8")
    code, _, _ = run(capsys, "compare", "--a", "lstm", "--b", "amsrn", "--text-file", str(tmp_path / "t.txt"), "--csv",
                     str(tmp_path / "c.csv"))
    assert code == 0 and not BIDI.search((tmp_path / "c.csv").read_text(encoding="utf-8"))


def test_export_of_invalid_utf8_text(capsys, tmp_path):
    for fmt in ("csv", "json"):
        out = tmp_path / f"x.{fmt}"
        code, _, _ = run(capsys, "export", "--checkpoint", "kvp", "--text", "the \udcff market", "--format", fmt,
                         "--out", str(out))
        assert code == 0 and "\ufffd" in out.read_bytes().decode("utf-8-sig")


@pytest.mark.parametrize("target", ["dir", "under-a-file", "/dev/full", "/proc/vizlm-out"])
def test_unwritable_out_is_a_clear_error(capsys, tmp_path, target):
    if target.startswith("/") and not Path(target).parent.exists():
        pytest.skip(f"no {Path(target).parent} here")
    path = {"dir": tmp_path, "under-a-file": tmp_path / "file.txt" / "x.csv"}.get(target, Path(target))
    (tmp_path / "file.txt").write_text("x")
    code, _, err = run(capsys, "export", "--checkpoint", "lstm", "--text", TEXT, "--format", "csv", "--out", str(path))
    assert code == 2 and err.startswith(f"vizlm export: error: {path}: ") and err.count("\n") == 1, err


def test_text_file_that_is_not_a_file_is_a_clear_error(capsys, tmp_path):
    code, _, err = run(capsys, "eval", "--checkpoint", "lstm", "--text-file", str(tmp_path))
    assert code == 2 and "is a directory" in err
    code, _, err = run(capsys, "cases", "--checkpoint", "amsrn", "--text-file", str(tmp_path / "missing.txt"))
    assert code == 2 and "missing.txt: No such file or directory" in err


@pytest.mark.parametrize("argv", [
    ["compare", "--a", "lstm", "--b", "amsrn"], ["positions", "--checkpoint", "amsrn"],
    ["cases", "--checkpoint", "amsrn"], ["eval", "--checkpoint", "lstm"],
])
def test_a_file_without_words_is_an_error_not_nan(capsys, tmp_path, argv):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\x00\n", encoding="utf-8")
    code, out, err = run(capsys, *argv, "--text-file", str(empty), "--json")
    assert code == 2 and out == "" and "no sentences to" in err


def test_long_work_shows_progress_on_stderr_only(capsys, monkeypatch, text_file):
    from vizlm import commands

    monkeypatch.setattr(commands, "PROGRESS_MIN_TOKENS", 0)  # the file is short: show it anyway
    code, out, err = run(capsys, "eval", "--checkpoint", "lstm", "--text-file", str(text_file), "--json")
    assert code == 0 and json.loads(out)["sentences"] == 4
    assert "eval" in err and "4/4" in err
    code, out, err = run(capsys, "compare", "--a", "lstm", "--b", "amsrn", "--text-file", str(text_file), "--json")
    assert code == 0 and json.loads(out)["summary"]["sentences"] == 4 and "8/8" in err
    monkeypatch.setattr(commands, "PROGRESS_MIN_TOKENS", 10_000)
    code, out, err = run(capsys, "eval", "--checkpoint", "lstm", "--text-file", str(text_file), "--json")
    assert code == 0 and err == ""


@pytest.mark.parametrize("ckpt,method", [("amsrn", "integrated-gradients"), ("lstm", "gradient-x-input"),
                                         ("kvp-doc", "occlusion")])
def test_attribute_json(capsys, ckpt, method):
    """Per word its attributions over the words read before it (never a later one), IG's convergence
    delta, and for an attention model the agreement with its weights; the plain LSTM too."""
    if ckpt not in bundled_checkpoints():
        pytest.skip(f"{ckpt} is not bundled")
    code, out, _ = run(capsys, "attribute", "--checkpoint", ckpt, "--text", PARAGRAPHS.splitlines()[0],
                       "--method", method, "--steps", "16", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["method"] == method and doc["targets"] and doc["inputs"][0] == "<s>"
    assert all(a["offset"] >= 0 and a["position"] <= t["index"] for t in doc["targets"] for a in t["attributions"])
    assert any(a["score"] != 0 for t in doc["targets"] for a in t["attributions"])
    assert ("convergence_delta" in doc["targets"][-1]) == (method == "integrated-gradients")
    attention = ckpt != "lstm"
    assert (doc["agreement"] is not None) == attention
    assert all(("agreement" in t) == attention for t in doc["targets"])


def test_attribute_writes_its_exports_and_replaces_nothing_unasked(capsys, tmp_path):
    """The attribution's pairs (CSV: nats, bits, share), its JSON and its heat map (PNG / SVG,
    the chosen method); an existing file is refused without --force."""
    text = "The dogs in the park are barking because they saw a cat ."
    base = ["attribute", "--checkpoint", "kvp", "--text", text, "--method", "gradient-x-input"]
    code, _, err = run(capsys, *base, "--out", str(tmp_path / "a.csv"))
    assert code == 0 and "wrote" in err
    import pandas as pd

    frame = pd.read_csv(tmp_path / "a.csv")
    assert {"row", "target", "input", "offset", "score", "score_bits", "share", "attention", "method"} <= set(frame.columns)
    assert (frame.offset >= 0).all() and set(frame.method) == {"gradient-x-input"}
    assert frame.groupby("row").share.sum().between(0.999, 1.001).all()
    assert frame.score_bits.to_numpy() == pytest.approx(frame.score.to_numpy() / math.log(2))
    code, _, _ = run(capsys, *base, "--out", str(tmp_path / "a.json"), "--top-k", "2")
    assert code == 0 and json.loads((tmp_path / "a.json").read_text())["method"] == "gradient-x-input"
    code, _, _ = run(capsys, *base, "--out", str(tmp_path / "map"), "--format", "svg", "--top-k", "2")
    assert code == 0 and "attribution" in (tmp_path / "map").read_text()
    before = (tmp_path / "a.csv").read_bytes()
    code, _, err = run(capsys, *base, "--out", str(tmp_path / "a.csv"), "--method", "occlusion")
    assert code == 2 and "--force" in err and (tmp_path / "a.csv").read_bytes() == before
    code, _, _ = run(capsys, *base, "--out", str(tmp_path / "a.csv"), "--force")
    assert code == 0
    code, _, err = run(capsys, *base, "--out", str(tmp_path / "a.txt"))
    assert code == 2 and "--format" in err


def test_attribute_refuses_what_it_cannot_do(capsys):
    code, _, err = run(capsys, "attribute", "--checkpoint", "lstm", "--text", "the end .", "--method", "slot-effect")
    assert code == 2 and "no attention" in err and "Traceback" not in err
    code, _, err = run(capsys, "attribute", "--checkpoint", "lstm", "--text", "   ", "--method", "occlusion")
    assert code == 2 and "Traceback" not in err


def test_attribute_corpus_statistics(capsys, monkeypatch, tmp_path):
    """``--corpus`` gives attribution by distance for any model, the agreement and the permutation
    test for attention models, with 95% intervals (cached: a second run reads them)."""
    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path))
    docs = {}
    for ckpt in ("amsrn", "lstm"):
        code, out, _ = run(capsys, "attribute", "--checkpoint", ckpt, "--corpus", "wsj", "--limit", "6", "--json")
        assert code == 0
        docs[ckpt] = json.loads(out)
    for doc in docs.values():
        assert doc["units"] == 6 and doc["positions"]["offset"][0] == 0 and doc["method"] == "gradient-x-input"
    agreement = docs["amsrn"]["agreement"]
    assert agreement["top1_share"]["lo"] <= agreement["top1_share"]["value"] <= agreement["top1_share"]["hi"]
    assert docs["amsrn"]["permutation"]["targets"] > 0 and not docs["lstm"].get("agreement")
    assert len(list(tmp_path.glob("*.json"))) == 2
    code, out, _ = run(capsys, "attribute", "--checkpoint", "amsrn", "--corpus", "wsj", "--limit", "6", "--json")
    assert json.loads(out) == docs["amsrn"] and len(list(tmp_path.glob("*.json"))) == 2
    # the table says what was read and what its intervals resample (the first 6 sentences are of 3 documents)
    code, out, _ = run(capsys, "attribute", "--checkpoint", "amsrn", "--corpus", "wsj", "--limit", "6")
    assert code == 0 and (docs["amsrn"]["documents"], docs["amsrn"]["resampled"]) == (3, "documents")
    assert "(6 sentences of 3 documents; intervals: 95% bootstrap over the documents;" in out


def test_attribute_states_its_cost_and_shows_progress(capsys, monkeypatch):
    """``attribute --text``: the expected cost said on stderr before a long run starts, and a progress bar;
    the steps bounded by the API's one constant."""
    from tqdm import tqdm

    import vizlm.api
    from vizlm import commands
    from vizlm.inspect import attribution

    class Bar(tqdm):  # shown at once (the command's appears past 2 s)
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "delay": 0})

    monkeypatch.setattr(vizlm.api, "SAY_COST_S", 0.0)  # every run is "long" here (the command reads it when it runs)
    monkeypatch.setattr(commands, "tqdm", Bar)
    code, _, err = run(capsys, "attribute", "--checkpoint", "lstm", "--text", "the cat sat on the mat .", "--steps", "4")
    assert code == 0 and "takes about" in err and "Ctrl-C" in err and "100%" in err, err
    assert commands.ATTRIBUTION_MAX_STEPS == attribution.MAX_STEPS


def test_attribute_prints_bits_as_the_app_shows_them(capsys):
    """The table `vizlm attribute` prints is in bits (the app's and the pictures' unit); --json keeps nats."""
    args = ["attribute", "--checkpoint", "lstm", "--text", "the dogs saw a cat .", "--method", "gradient-x-input"]
    code, out, _ = run(capsys, *args)
    assert code == 0 and "in bits" in out and "nats" not in out
    code, doc, _ = run(capsys, *args, "--json")
    doc = json.loads(doc)
    last = doc["targets"][-1]
    top = max(last["attributions"], key=lambda a: abs(a["score"]))
    assert f"{top['input']}({top['score'] / math.log(2):+.2f})" in out.splitlines()[-1]


def test_export_takes_its_format_from_the_suffix(capsys, tmp_path):
    """`vizlm export --out x.png` writes a PNG without --format (as Analysis.export); a suffix that is no format
    asks for --format, before any work."""
    code, _, _ = run(capsys, "export", "--checkpoint", "lstm", "--text", "the dogs saw a cat .", "--out",
                     str(tmp_path / "x.csv"))
    assert code == 0 and (tmp_path / "x.csv").read_text(encoding="utf-8-sig").startswith("model,")
    code, _, err = run(capsys, "export", "--checkpoint", "lstm", "--text", "the end .", "--out", str(tmp_path / "x.dat"))
    assert code == 2 and "say --format" in err and not (tmp_path / "x.dat").exists()


def test_a_finished_progress_bar_ends_full(capsys, monkeypatch):
    """The bar counts the rows of forward passes; a document model's rows are chunks of several sentences, so
    the count alone stopped short (eval's bar ended at 422/491). Work that finishes ends the bar at its total."""
    import torch

    from vizlm import commands

    class Ckpt:
        model = torch.nn.Linear(1, 1)

    monkeypatch.setattr(commands, "PROGRESS_MIN_TOKENS", 0)
    with commands.scoring_progress([Ckpt()], None, "eval", total=5):
        for _ in range(2):
            Ckpt.model(torch.zeros(2, 1))  # two passes of two rows: 4 of 5
    err = capsys.readouterr().err
    assert "5/5" in err and "4/5" not in err.splitlines()[-1]
