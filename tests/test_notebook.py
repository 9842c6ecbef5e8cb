"""The tour notebook (examples/tour.ipynb) is stored without outputs and runs: every cell, in a fresh
Jupyter kernel (nbclient), in a scratch folder; its outputs show what each step promises."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

nbformat = pytest.importorskip("nbformat", reason="pip install nbformat (in the [test] extra)")
nbclient = pytest.importorskip("nbclient", reason="pip install nbclient ipykernel (in the [test] extra)")

TOUR = ROOT / "examples" / "tour.ipynb"


def _text(output) -> str:
    """What a cell output shows: its HTML if it has some, else its plain text or stream."""
    if output.get("output_type") == "stream":
        return output.get("text", "")
    data = output.get("data", {})
    return data.get("text/html") or data.get("text/plain") or ""


def _cell(nb, needle: str):
    cells = [c for c in nb.cells if c.cell_type == "code" and needle in c.source]
    assert len(cells) == 1, needle
    return cells[0]


def _shown(cell) -> str:
    return "\n".join(_text(o) for o in cell.outputs)


def test_the_tour_is_stored_without_outputs():
    nb = nbformat.read(TOUR, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    # the folders its text names exist (the shipped statistics are in data/stats/, not checkpoints/stats/)
    named = [p for c in nb.cells if c.cell_type == "markdown" for p in re.findall(r"`([\w.-]+/[\w./-]*)`", c.source)]
    assert named and all((ROOT / p).exists() for p in named), named


def test_the_tour_runs_and_shows_each_step(tmp_path):
    nb = nbformat.read(TOUR, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, errors
    every = "\n".join(_shown(c) for c in nb.cells if c.cell_type == "code")
    assert "<script" not in every.lower(), "a view needs JavaScript: it would not show on GitHub"

    table = _shown(_cell(nb, "vizlm.checkpoints()"))
    assert "amsrn" in table and "kvp-doc" in table and "test_perplexity" in table
    first = _shown(_cell(nb, "a = lm.analyze("))
    assert "Model('amsrn'" in first and "attention over memory" in first and "vz-target" in first
    assert "<table" in first and "memory slots of this word" in first
    effect = _shown(_cell(nb, 'a.show(target="cat", measure="effect")'))
    assert "predicting <b>cat</b>" in effect and "slot effect (bits" in effect
    frame = _shown(_cell(nb, "a.frame()"))
    assert "attention (14, 14)" in frame and "surprisal_bits" in frame and "barking" in frame
    assert "attended" in _shown(_cell(nb, "long = a.attention_frame("))
    assert "label" in _shown(_cell(nb, "a.cases("))
    passage = _shown(_cell(nb, 'vizlm.load("kvp-doc")'))
    assert "document-level checkpoint" in passage and "vz-boundary" in passage
    comparison = _shown(_cell(nb, 'c = vizlm.compare("lstm", "amsrn"'))
    assert "bootstrap interval" in comparison and "<svg" in comparison and "most improved by amsrn" in comparison
    summary = _shown(_cell(nb, "c.summary.items()"))
    assert re.search(r"'ratio': 0\.\d+", summary) and "sentence_id" in summary
    fig3 = _shown(_cell(nb, "vizlm.positions("))
    assert "Fig. 3" in fig3 and "kvp-doc" in fig3 and "attention-doc-w10" in fig3 and fig3.count("<svg") == 2  # weight and slot effect
    assert "distance" in _shown(_cell(nb, "p.frame()")) and "2 = the newest memory slot" in fig3
    saved = _shown(_cell(nb, 'a.save(out / "dogs.json"'))
    assert "dogs.json True True" in saved and "dogs.csv dogs.html" in saved
    assert not list(tmp_path.iterdir())  # the tour leaves nothing in the folder it runs in
    assert "there is no model called 'amsrm'" in _shown(_cell(nb, 'vizlm.load("amsrm")'))
