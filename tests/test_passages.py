"""Passages: several sentences read in a checkpoint's context. A document checkpoint reads them as
running text, so its per-token probabilities equal :func:`vizlm.modeling.evaluate.score_documents` (and
the CLI's ``analyze`` / ``eval``); a sentence checkpoint reads each sentence alone, so a passage
is the sentences analysed one by one, laid side by side. Highlights, cases, heat maps, running
text, exports, links and the corpus statistics on top of them."""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ATTENTION_MODELS, all_variants, tiny_model
from test_cases import COLLOCATIONS, make_sa

from vizlm import cli
from vizlm.inspect import corpus_stats as corpus
from vizlm.present import export, fragments, heatmap, style
from vizlm.inspect.analysis import MAX_TOKENS, analyze, analyze_sentences, analyze_tokens
from vizlm.inspect.effects import slot_effect_rows, with_slot_effects
from vizlm.inspect.reading import BOUNDARY, READINGS, split_at_boundaries
from vizlm.inspect.case_gallery import corpus_cases
from vizlm.inspect.cases import label_cases
from vizlm.modeling.checkpoint import Checkpoint, bundled_checkpoints, bundled_dir, load_checkpoint, save_checkpoint
from vizlm.data.batches import document_tokens
from vizlm.data.examples import example_passages, passage_start
from vizlm.data.registry import read_text_file
from vizlm.data.vocab import SPECIALS, Vocab
from vizlm.modeling.evaluate import score_documents
from vizlm.present.links import ExplorerState, parse_query
from vizlm.present.serialize import analysis_dict
from vizlm.data.text import passage_sentences, sentence_spans, split_sentences
from vizlm.inspect.highlight import Share

VOCAB = Vocab(list(SPECIALS) + [f"w{i}" for i in range(36)])  # 40 words: conftest's TINY vocabulary
# three sentences of the tiny vocabulary: the second repeats words of the first (a trigger across a boundary)
SENTENCES = [["w3", "w17", "w8", "w30"], ["w17", "w2", "w3", "w11", "w5"], ["w9", "w3", "w17"]]
PASSAGE = "The jury said the city spent too much money. It will raise taxes next year!\nThe mayor agreed"


def ckpt(name: str, context: str = "document", **kw) -> Checkpoint:
    model = tiny_model(name, context=context, **kw)
    if name == "amsrn":
        torch.nn.init.uniform_(model.read_proj.weight, -2.0, 2.0)  # a read that moves predictions
    return Checkpoint(model, VOCAB, name)


def sentence_nll(sa) -> list[float]:
    """Per-sentence NLL of an analysis: each sentence's words and its </s>."""
    ends = [*sa.boundaries, len(sa.targets) - 1]
    starts = [0] + [b + 1 for b in sa.boundaries]
    return [float(-sa.logprobs[a : b + 1].sum()) for a, b in zip(starts, ends)]


# --------------------------------------------------------------------------- text
def test_sentences_end_at_line_breaks_and_sentence_punctuation():
    text = "  Mr. Smith left. He was tired!\nno end here\r\n\nU.S. troops left.  "
    assert split_sentences(text) == ["Mr. Smith left.", "He was tired!", "no end here", "U.S. troops left."]
    assert [text[s:e] for s, e in sentence_spans(text)] == split_sentences(text)
    sents = passage_sentences(text)
    assert [[t.norm for t in s] for s in sents][1] == ["he", "was", "tired", "!"]
    assert all(text[t.start : t.end] == t.text for s in sents for t in s)  # offsets into the whole text
    assert [[(t.norm, t.start) for t in s] for s in passage_sentences(" \n . \n")] == [[(".", 3)]]


def test_chinese_sentences_end_at_chinese_sentence_punctuation():
    """。！？ end a sentence of Chinese text, where no space and no capital follow (a closing
    quote stays with its sentence)."""
    text = "今天天氣很好，我們去公園散步。他說這個問題很重要。真的嗎？太好了！他問：「你來嗎？」我們走吧。 The end."
    assert split_sentences(text) == ["今天天氣很好，我們去公園散步。", "他說這個問題很重要。", "真的嗎？", "太好了！",
                                     "他問：「你來嗎？」", "我們走吧。", "The end."]
    assert [[t.text for t in s][-1] for s in passage_sentences(text)[:2]] == ["。", "。"]
    assert split_sentences("今天天氣很好，我們去公園散步") == ["今天天氣很好，我們去公園散步"]


def test_a_text_file_and_a_passage_split_alike(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text(PASSAGE, encoding="utf-8")
    assert read_text_file(path) == [[t.norm for t in s] for s in passage_sentences(PASSAGE)]


# --------------------------------------------------------------------------- reading
@pytest.mark.parametrize("name,kw", all_variants())
def test_a_document_checkpoint_reads_running_text_as_score_documents(name, kw):
    """Every row of the passage: log P(word) == the NLL score_documents charges (segments, carried state)."""
    c = ckpt(name, **kw)
    sa = analyze_sentences(c, SENTENCES)
    assert sa.context == "document" and sa.boundaries == [4, 10]
    assert sa.targets == SENTENCES[0] + [BOUNDARY] + SENTENCES[1] + [BOUNDARY] + SENTENCES[2] + [BOUNDARY]
    scores = score_documents(c.model, [[VOCAB.encode(s) for s in SENTENCES]], streams=1, segment=3)
    np.testing.assert_allclose(sentence_nll(sa), scores.nll, rtol=1e-9, atol=1e-9)
    with torch.no_grad():  # and row by row: one pass over <s> s1 </s> s2 </s> s3
        stream = torch.tensor([document_tokens([VOCAB.encode(s) for s in SENTENCES])])
        out = c.model(stream[:, :-1])
        logp = out.logits[0].log_softmax(-1)  # (T, V)
    np.testing.assert_allclose(sa.logprobs, logp.gather(1, stream[0, 1:, None])[:, 0].numpy(), atol=1e-12)
    if sa.self_attention:  # every head of the one pass, in blocks from the text's start; slot j = input j
        with torch.no_grad():
            heads = c.model.encode_with_attention(stream[:, :-1])[1][0]  # (L, H, T, T)
        np.testing.assert_allclose(sa.heads, heads.double().numpy(), atol=1e-12)
        assert sa.slot_labels[5] == BOUNDARY and sa.input_labels[5] == BOUNDARY
    elif sa.attention is not None:  # attention crosses the boundaries, the window of the model still holds
        np.testing.assert_allclose(sa.attention, out.attention[0].numpy(), atol=1e-12)  # one start slot: 0
        sums = sa.attention.sum(1)  # 0: a row with no slot at all (AMSRN without the start slot, first row)
        assert sa.allowed()[5:, 2:7].any() and np.allclose(sums[sums > 0], 1) and (sums[1:] > 0).all()
        assert sa.slot_labels[6] == BOUNDARY and sa.input_labels[5] == BOUNDARY


@pytest.mark.parametrize("name,kw", all_variants())
def test_a_sentence_checkpoint_reads_each_sentence_alone(name, kw):
    c = ckpt(name, "sentence", **kw)
    sa = analyze_sentences(c, SENTENCES)
    alone = [analyze_tokens(c, s) for s in SENTENCES]
    first = [0, 5, 11]
    for a, f in zip(alone, first):
        rows = slice(f, f + len(a.targets))
        np.testing.assert_allclose(sa.logprobs[rows], a.logprobs, atol=1e-12)
        if a.attention is None:
            continue
        cols = range(f, f + len(a.targets))  # its start slot, then its <s> (the boundary) and words
        np.testing.assert_allclose(sa.attention[rows][:, cols], a.attention, atol=1e-12)
        if a.self_attention:
            continue
        np.testing.assert_allclose(sa.read_effect[rows], a.read_effect, atol=1e-12)
        np.testing.assert_allclose(sa.slot_effects[rows][:, cols], a.slot_effects, atol=1e-12)
    if sa.self_attention:
        assert not sa.allowed()[5:, :5].any() and not sa.allowed()[11:, :11].any()  # never another sentence
        assert (sa.heads[..., ~sa.readable()] == 0).all()
        assert sa.slot_labels[5] == "<s>" and sa.slot_token(5) == 4  # the next sentence's <s>, read at the boundary
        assert list(sa.slot_offsets()[5:8, 5]) == [0, 1, 2]  # counted from the word just read
    elif sa.attention is not None:
        allowed = sa.allowed()
        assert not allowed[5:, :5].any() and not allowed[11:, :11].any()  # never another sentence
        assert (sa.attention[~sa.readable()] == 0).all()
        assert sa.slot_labels[6] == "<s>" and sa.input_labels[5] == "<s>"  # the boundary slot: the next <s>
        assert sa.slot_labels[5] == "<s>" and sa.slot_token(5) == -1  # its start slot, numbered as its first row
        assert list(sa.slot_offsets()[5:8, 5]) == [1, 2, 3]  # the start slot counts from the sentence's start


def sentence_blocks(sa) -> np.ndarray:
    """[T, S] True where a row and a slot belong to the same sentence: sentence k's rows and slots are
    ``first_k .. first_{k+1} - 1``, its start slot numbered as its first row."""
    first = [0] + [b + 1 for b in sa.boundaries]
    slot_sentence = np.searchsorted(first, np.arange(len(sa.targets)), side="right") - 1  # (S,)
    return sa.sentence_of()[:, None] == slot_sentence[None, :]


@pytest.mark.parametrize("sentences", [2, 5])
@pytest.mark.parametrize("name,kw", all_variants(ATTENTION_MODELS))
def test_a_sentence_read_alone_rests_on_its_own_start_slot(name, kw, sentences):
    """Each sentence of a passage read alone puts its start weight on its own start slot (an
    ``<s>`` at the restart), never on the first sentence's: no row of the analysis, its dict, highlights,
    heat map or running text has weight outside its own sentence."""
    c = ckpt(name, "sentence", **kw)
    passage = [SENTENCES[k % 3] for k in range(sentences)]
    sa = analyze_sentences(c, passage, max_effect_pairs=None)
    first = [0] + [b + 1 for b in sa.boundaries]
    outside = ~sentence_blocks(sa)
    assert (sa.attention[outside] == 0).all() and (sa.slot_effects[outside] == 0).all()
    assert not (sa.readable() & outside).any() and not (sa.allowed() & outside).any()
    doc = analysis_dict(sa, Share(0.0), cases=False)
    xlab = style.slot_axis_labels(sa)
    spec = export.chart_spec(heatmap.attention_heatmap(sa, Share(0.0)))
    cells = spec["datasets"][spec["layer"][0]["data"]["name"]]
    for k, (f, words) in enumerate(zip(first, passage)):
        alone = analyze_tokens(c, words, max_effect_pairs=None)
        rows = range(f, f + len(alone.targets))
        assert sa.slot_labels[f] == "<s>" and sa.slot_token(f) == -1
        np.testing.assert_allclose(sa.attention[rows, f], alone.attention[:, 0], atol=1e-12)
        assert [doc["targets"][r]["start_weight"] for r in rows] == pytest.approx(alone.attention[:, 0].tolist())
        assert list(sa.slot_offsets()[rows, f]) == list(range(1, len(rows) + 1))
        for r in rows:
            assert all(f <= h["slot"] < f + len(rows) for h in doc["targets"][r]["highlights"])
            assert all(h["token"] == -1 for h in doc["targets"][r]["highlights"] if h["slot"] == f)
        ylab = set(style.target_axis_labels(sa)[f : f + len(rows)])
        columns = {cell["slot"] for cell in cells if cell["target"] in ylab}  # the heat map's cells of these rows
        assert columns <= set(xlab[f : f + len(rows)])
        if k:  # the first sentence's start slot is not this sentence's
            assert (sa.attention[rows, 0] == 0).all() and xlab[0] not in columns
            html_doc = fragments.highlighted_html(sa, f + 1, Share(0.0))  # the sentence's second word
            assert "slot 0 (start state)" not in html_doc
            assert (f"slot {f} (start state)" in html_doc) == bool(sa.allowed()[f + 1, f])


@pytest.mark.parametrize("name", ["amsrn", "kvp", "kvp-doc"])
def test_bundled_passage_start_slots(name):
    """With the bundled checkpoints: the sentence-level ones start the second sentence on its
    own <s>; the document-level one reads through the boundary, its only start slot 0."""
    if name not in bundled_checkpoints():
        pytest.skip(f"no bundled checkpoint {name}")
    text = "The committee approved the budget. It said the money was spent."
    sa = analyze(load_checkpoint(bundled_dir() / name), text)
    (b,) = sa.boundaries
    second = slice(b + 1, len(sa.targets))
    if sa.context == "sentence":
        assert (sa.attention[~sentence_blocks(sa)] == 0).all() and sa.slot_labels[b + 1] == "<s>"
        assert sa.attention[second, b + 1].sum() > 0 and (sa.attention[second, 0] == 0).all()
    else:
        assert sa.slot_labels[b + 1] == "." and sa.slot_labels.count("<s>") == 2
        assert (sa.attention[second, : b + 1] > 0).any()


@pytest.mark.parametrize("context", ["sentence", "document"])
@pytest.mark.parametrize("name,kw", all_variants(ATTENTION_MODELS))
def test_slot_effects_of_one_word_of_a_passage(name, kw, context):
    c = ckpt(name, context, **kw)
    full = analyze_sentences(c, SENTENCES, max_effect_pairs=None)
    lazy = analyze_sentences(c, SENTENCES, max_effect_pairs=0)
    assert lazy.slot_effects is None
    np.testing.assert_allclose(slot_effect_rows(c, lazy, [6, 12]), full.slot_effects[[6, 12]], atol=1e-12)
    np.testing.assert_allclose(with_slot_effects(c, lazy).slot_effects, full.slot_effects, atol=1e-12)


def test_readings_are_described_for_every_context():
    from vizlm.models.base import CONTEXTS

    assert set(READINGS) == set(CONTEXTS)


def test_a_long_passage_is_cut_with_a_note():
    c = ckpt("kvp", window=3)
    sents = [SENTENCES[i % 3] for i in range(120)]  # 480 words
    sa = analyze_sentences(c, sents)
    words = [w for w in sa.norms if w != BOUNDARY]
    assert len(words) == MAX_TOKENS and sa.truncated == 480 - MAX_TOKENS
    assert f"the text has 480 tokens; only the first {MAX_TOKENS} were analysed" in sa.notes
    whole = analyze_sentences(c, sents, max_tokens=None, effects=False, top_k=0)
    assert len(whole.targets) == 480 + 120 and not whole.truncated


# --------------------------------------------------------------------------- cases
def test_cases_cross_sentence_boundaries_in_running_text():
    # "the senator spoke . </s> he said no .": "he" predicted from a name of the sentence before; "no"
    # attends to the boundary, which is never a case
    sa = make_sa("the senator spoke . </s> he said no .", "at np vbd . . pps vbd rb .", {5: 1, 7: 4})
    doc = dataclasses.replace(sa, context="document")
    (case,) = label_cases(doc, collocations=COLLOCATIONS)
    assert case.attended == "senator" and case.word == "he" and "trigger" in case.labels
    # read a sentence at a time, the row of "he" cannot attend to the sentence before: no case at all
    assert not sa.allowed()[5, 3] and label_cases(sa, collocations=COLLOCATIONS) == []


def test_grammar_and_phrase_stay_inside_a_sentence():
    inside = make_sa("the dogs in the yard are loud", "at nns in at nn ber jj", {5: 1})
    assert "grammar" in only_labels(inside)
    across = dataclasses.replace(
        make_sa("the dogs . </s> yard are loud", "at nns . . nn ber jj", {5: 1}), context="document")
    assert "grammar" not in only_labels(across)
    assert "phrase" in only_labels(make_sa("more or than", "ap cc cs", {2: 0}))
    assert "phrase" not in only_labels(dataclasses.replace(make_sa("more </s> than", "ap . cs", {2: 0}), context="document"))


def only_labels(sa) -> list[str]:
    return [lab for c in label_cases(sa, collocations=COLLOCATIONS) for lab in c.labels]


# --------------------------------------------------------------------------- pictures and files
@pytest.fixture(scope="module")
def passage_sa():
    c = ckpt("amsrn", memory=6, selection="shared")
    return analyze_sentences(c, [SENTENCES[i % 3] for i in range(12)], max_effect_pairs=None)  # 48 words, 59 rows


def test_heatmap_window_boundaries_and_selected_row(passage_sa):
    sa = passage_sa
    rows = heatmap.heatmap_rows(sa, 30)
    assert rows[1] - rows[0] == style.WINDOW_ROWS and rows[0] <= 30 < rows[1]
    assert heatmap.heatmap_rows(sa, 58) == (len(sa.targets) - style.WINDOW_ROWS, len(sa.targets))
    spec = export.chart_spec(heatmap.attention_heatmap(sa, Share(0.2), rows=rows, selected=30))
    cells = spec["datasets"][spec["layer"][0]["data"]["name"]]
    targets = style.target_axis_labels(sa)
    assert {c["target"] for c in cells} <= set(targets[rows[0] : rows[1]])
    rules = [layer for layer in spec["layer"] if layer.get("mark", {}).get("type") == "rule"]
    assert len(rules) == 2  # the slot lines and the row lines between sentences
    assert any(layer.get("mark", {}).get("stroke") == style.SELECTED_COLOUR for layer in spec["layer"])
    assert "a window" in spec["title"]["subtitle"]
    effect = export.chart_spec(heatmap.attention_heatmap(sa, measure="effect", rows=rows))
    assert effect["layer"][0]["encoding"]["color"]["field"] == "effect"


def test_a_heat_map_window_shows_the_selected_row_s_recent_slots():
    """In a 417-word passage the window of salton-doc (a memory of 100) opened on columns 278-378 for
    row 408, the slots just before it out of view. The window is square and ends at the newest slot its rows may
    use: the selected row's most recent slots are in it."""
    sa = analyze_sentences(ckpt("amsrn", memory=100), [SENTENCES[i % 3] for i in range(12)])  # 59 rows
    selected = 45
    rows = heatmap.heatmap_rows(sa, selected)
    spec = export.chart_spec(heatmap.attention_heatmap(sa, rows=rows, selected=selected))
    columns = spec["layer"][0]["encoding"]["x"]["scale"]["domain"]
    xlab = style.slot_axis_labels(sa)
    assert columns[0] == xlab[0] and len(columns) == 1 + style.WINDOW_ROWS  # the start slot and 40 slots
    assert columns[-1] == xlab[rows[1] - 1]  # the newest slot of the window's last row
    recent = [xlab[j] for j in np.flatnonzero(sa.allowed()[selected])][-20:]
    assert set(recent) <= set(columns) and xlab[selected] in columns  # up to the selected row's own newest slot
    cells = spec["datasets"][spec["layer"][0]["data"]["name"]]
    assert {c["slot"] for c in cells} <= set(columns)


def test_running_text_marks_sentence_boundaries(passage_sa):
    sa = passage_sa
    html_doc = fragments.highlighted_html(sa, 30, Share(0.0))
    assert html_doc.count('class="vz-boundary') == len(sa.boundaries)
    assert "vz-outside" in html_doc  # memory of 6: the older words are not in this word's memory
    alone = dataclasses.replace(sa, context="sentence")  # the same numbers, drawn as a sentence reading
    assert fragments.highlighted_html(alone, 30).count("border-left:3px") == len(sa.boundaries)
    first, end = fragments.text_span(sa, 30)
    assert 0 < first <= 30 - 6 and end < len(sa.tokens)
    part = fragments.highlighted_html(sa, 30, span=(first, end))
    assert "earlier tokens left out" in part and "later text left out" in part
    strip = fragments.sentence_strip_html(sa, 30, span=(first, end))
    assert strip.count("vz-chip") < len(sa.targets)


def test_exports_of_a_passage(passage_sa):
    sa = passage_sa
    rows = pd.read_csv(io.BytesIO(export.export_analysis(sa, "csv")), keep_default_na=False)
    assert set(rows["sentence"]) == set(range(12)) and (rows["current"] == BOUNDARY).any()
    doc = json.loads(export.export_analysis(sa, "json"))
    assert doc["context"] == "document" and doc["sentences"] == 12 and len(doc["targets"]) == len(sa.targets)
    page = export.export_analysis(sa, "html", rows=heatmap.heatmap_rows(sa, 20), selected=20).decode()
    assert "vizlm-strip" in page and "&lt;/s&gt;" in page
    svg = export.export_analysis(sa, "svg", rows=heatmap.heatmap_rows(sa, 20), selected=20)
    assert svg.lstrip().startswith(b"<svg")
    png = export.export_analysis(sa, "png")  # every row
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


# --------------------------------------------------------------------------- links
def test_the_heat_map_measure_goes_to_and_comes_from_the_url():
    q = ExplorerState("amsrn", None, "a b", Share(0.2), 3, "effect").query()
    assert q["measure"] == "effect" and "measure" not in ExplorerState("amsrn", None, "a b", Share(0.2), 3).query()
    state, notes = parse_query(q, ["amsrn"], "amsrn", None, "x")
    assert state.measure == "effect" and state.target == 3 and not notes
    state, notes = parse_query({**q, "measure": "<script>"}, ["amsrn"], "amsrn", None, "x")
    assert state.measure == "weight" and "measure" in notes[0]


# --------------------------------------------------------------------------- corpus
def test_example_passages_are_consecutive_sentences():
    for corpus_name in ("brown", "wsj"):
        passages = example_passages(corpus_name, "test")
        assert len(passages) >= 4
        for sid, text in passages:
            lines = text.split("\n")
            assert len(lines) >= 2 and sid.endswith(f"-{int(sid.split(':')[1].split('-')[0]) + len(lines) - 1}")
            assert sum(len(s) for s in passage_sentences(text)) <= MAX_TOKENS + 20


def test_passage_start_keeps_whole_sentences_of_one_document():
    ids = ["a:0", "a:1", "a:2", "b:0", "b:1"]
    lengths = [300, 50, 60, 10, 10]
    assert passage_start(ids, lengths, 2) == 1  # 300 more would pass 400
    assert passage_start(ids, lengths, 4) == 3  # never into the document before
    assert passage_start(ids, [500, 1, 1, 1, 1], 0) == 0


def test_positions_over_running_text_equal_the_documents_read_whole(monkeypatch):
    """Fig. 3 of a document model: segments with a carried memory (4 tokens each) == each document
    analysed in one pass, weights at offsets 1..L across sentence boundaries."""
    monkeypatch.setattr(corpus, "DOC_SEGMENT", 4)
    c = ckpt("kvp", window=3)
    sents = [s for _ in range(3) for s in SENTENCES]
    ids = [f"d{k // 5}:{k % 5}" for k in range(len(sents))]  # documents of 5, 4 sentences
    stats = corpus.attention_by_position([c], sents, window=3, ids=ids, effects=True)
    weights = {d: [] for d in (1, 2, 3)}
    effects = {d: [] for d in (1, 2, 3)}
    for doc in (sents[:5], sents[5:]):
        sa = analyze_sentences(c, doc, max_effect_pairs=None, max_tokens=None)
        frame = corpus.sentence_positions(sa, window=3)
        for d in (1, 2, 3):
            weights[d] += list(frame[frame.offset == d].weight)
            effects[d] += list(frame[frame.offset == d].effect)
    got = stats.frame.set_index("offset")
    for d in (1, 2, 3):
        assert got.loc[d, "count"] == len(weights[d])
        assert got.loc[d, "mean"] == pytest.approx(np.mean(weights[d]), abs=1e-9)
        assert got.loc[d, "effect"] == pytest.approx(np.mean(effects[d]), abs=1e-9)  # bits, both


def test_cases_of_a_document_checkpoint_come_with_their_passage():
    c = ckpt("amsrn", memory=8, selection="shared")
    sents = [SENTENCES[k % 3] for k in range(9)]
    ids = [f"d{k // 6}:{k % 6}" for k in range(9)]
    report = corpus_cases(c, sentences=sents, ids=ids, setting=Share(0.05), examples_per_label=5)
    assert report.sentences == 9
    shown = [e for exs in report.examples.values() for e in exs]
    assert shown and all(e["reading"]["context"] == "document" for e in shown)
    for e in shown:  # target, slot and token are the passage's: the Explorer opens it so
        sa = analyze_sentences(c, [ln.split() for ln in e["sentence"].split("\n")], effects=False)
        assert sa.targets[e["target"]] == e["word"] and sa.norms[e["token"]] == e["attended"]
        assert e["slot"] == e["token"] + 2


# --------------------------------------------------------------------------- the CLI
@pytest.fixture(scope="module")
def doc_folder(tmp_path_factory):
    """A small KVP document checkpoint with the bundled vocabulary."""
    if not bundled_checkpoints():
        pytest.skip("no bundled checkpoints in checkpoints/")
    meta = json.loads((bundled_dir() / bundled_checkpoints()[0] / "config.json").read_text(encoding="utf-8"))
    vocab = Vocab(meta["vocab"])
    torch.manual_seed(0)
    from vizlm.models import build_model

    model = build_model("kvp", vocab_size=len(vocab), emb_dim=8, hidden_dim=6, window=4, context="document").eval()
    folder = tmp_path_factory.mktemp("doc") / "kvp-doc"
    save_checkpoint(folder, model, "kvp", vocab, corpus={"name": "brown"})
    return folder


def test_a_passage_gives_the_cli_s_probabilities(doc_folder, tmp_path, capsys):
    """The Explorer's analysis == ``vizlm analyze --json`` word by word == ``vizlm eval --text-file``'s perplexity
    == score_documents sentence by sentence."""
    c = load_checkpoint(doc_folder)
    sa = analyze(c, PASSAGE)
    assert len(sa.boundaries) == 2
    assert cli.main(["analyze", "--checkpoint", str(doc_folder), "--text", PASSAGE, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose([t["prob"] for t in doc["targets"]], sa.probs, rtol=1e-6)
    assert doc["context"] == "document" and doc["tokens"] == sa.tokens
    assert cli.main(["analyze", "--checkpoint", str(doc_folder), "--text", PASSAGE]) == 0
    assert "3 sentences; kvp-doc (document level) reads the text as running text" in capsys.readouterr().out
    path = tmp_path / "passage.txt"
    path.write_text(PASSAGE, encoding="utf-8")
    assert cli.main(["eval", "--checkpoint", str(doc_folder), "--text-file", str(path), "--json"]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["tokens"] == len(sa.targets) and ev["sentences"] == 3
    assert ev["perplexity"] == pytest.approx(sa.perplexity, rel=1e-5)
    scores = score_documents(c.model, [[c.vocab.encode(s) for s in split_at_boundaries(sa.norms)]])
    np.testing.assert_allclose(sentence_nll(sa), scores.nll, rtol=1e-5)


@pytest.mark.parametrize("context", ["sentence", "document"])
def test_a_blank_line_starts_a_new_document(context, tmp_path):
    """As ``vizlm eval --text-file``: every model reads each document from a zero state."""
    c = ckpt("kvp", context, window=3)
    two = analyze_sentences(c, SENTENCES, documents=[2, 1], max_effect_pairs=None)
    assert two.breaks == [10] and two.text == "w3 w17 w8 w30\nw17 w2 w3 w11 w5\n\nw9 w3 w17"
    first, second = analyze_sentences(c, SENTENCES[:2]), analyze_sentences(c, SENTENCES[2:])
    np.testing.assert_allclose(two.logprobs, np.concatenate([first.logprobs, second.logprobs]), atol=1e-12)
    assert not two.allowed()[11:, :11].any() and two.input_labels[11] == "<s>" and two.slot_labels[11] == "<s>"
    np.testing.assert_allclose(two.attention[11:, 11:15], second.attention, atol=1e-12)
    path = tmp_path / "two.txt"
    path.write_text(two.text, encoding="utf-8")
    sizes: list[int] = []
    assert read_text_file(path, documents=sizes) == SENTENCES and sizes == [2, 1]
    again = analyze(c, two.text)
    assert again.breaks == [10] and np.allclose(again.logprobs, two.logprobs)


def test_the_app_s_unchecked_heat_map_spec_is_the_valid_one(passage_sa):
    """The app skips Altair's schema check (half the time of a heat map, redrawn on every click):
    the spec it draws is the one that passes the check."""
    chart = heatmap.attention_heatmap(passage_sa, Share(0.2), rows=heatmap.heatmap_rows(passage_sa, 30), selected=30)
    assert export.chart_spec(chart, validate=False) == export.chart_spec(chart)
