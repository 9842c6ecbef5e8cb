"""The Streamlit app, one page at a time, with ``streamlit.testing.v1.AppTest``.

Every page renders without an exception; changing the text, the model or the threshold
changes what is shown; bad input (empty, 5,000 characters, Chinese, emoji, an HTML/script
payload, a corrupt or foreign upload, a malformed link) gives a message, never a traceback.
Corpus pages run on the first 200 sentences of a split to stay fast.
"""

from __future__ import annotations

import json
import math
import os
import pickle
from pathlib import Path

import pytest
import torch

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from vizlm.inspect.attribution_corpus import BY_DISTANCE
from vizlm.inspect.case_rules import LABELS
from vizlm.modeling.checkpoint import bundled_checkpoints, bundled_dir, save_checkpoint
from vizlm.reproduce.corpus_runs import load_faithfulness_plan
from vizlm.data.vocab import Vocab
from vizlm.models import build_model

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
TINY = "tiny_amsrn"  # an untrained AMSRN with the bundled vocabulary: gates and attention always exist
SMALL = "first 200 sentences"
TIMEOUT = 180  # corpus pages on a busy 2-core machine

pytestmark = pytest.mark.skipif(not bundled_checkpoints(), reason="no bundled checkpoints in checkpoints/")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """A small AMSRN checkpoint folder sharing the bundled vocabulary (for gates and uploads)."""
    meta = json.loads((bundled_dir() / bundled_checkpoints()[0] / "config.json").read_text(encoding="utf-8"))
    vocab = Vocab(meta["vocab"])
    torch.manual_seed(0)
    model = build_model("amsrn", vocab_size=len(vocab), emb_dim=8, hidden_dim=8).eval()
    torch.nn.init.uniform_(model.read_proj.weight, -0.3, 0.3)
    folder = tmp_path_factory.mktemp("ckpt") / TINY
    save_checkpoint(folder, model, "amsrn", vocab, metrics={"valid_perplexity": 9999.0},
                    corpus={"name": meta.get("corpus", {}).get("name", "brown")}, parameters=sum(p.numel() for p in model.parameters()))
    return folder


DOC_KVP, DOC_LSTM = "tiny_kvp_doc", "tiny_lstm_doc"  # document checkpoints: they read running text


@pytest.fixture(scope="session")
def doc_dirs(tmp_path_factory) -> list[Path]:
    """Small document-context checkpoints (KVP, window 3; LSTM) sharing the bundled vocabulary."""
    meta = json.loads((bundled_dir() / bundled_checkpoints()[0] / "config.json").read_text(encoding="utf-8"))
    vocab = Vocab(meta["vocab"])
    folders = []
    for name, family, kw in ((DOC_KVP, "kvp", {"window": 3}), (DOC_LSTM, "lstm", {})):
        torch.manual_seed(0)
        model = build_model(family, vocab_size=len(vocab), emb_dim=8, hidden_dim=6, context="document", **kw).eval()
        folder = tmp_path_factory.mktemp("doc") / name
        save_checkpoint(folder, model, family, vocab, metrics={"valid_perplexity": 9999.0}, corpus={"name": "brown"},
                        parameters=sum(p.numel() for p in model.parameters()))
        folders.append(folder)
    return folders


@pytest.fixture(autouse=True)
def extra_checkpoints(tiny_dir, doc_dirs, monkeypatch):
    monkeypatch.setenv("VIZLM_EXTRA_CHECKPOINTS", os.pathsep.join(map(str, [tiny_dir, *doc_dirs])))


def explorer(**params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def page(path: str, **state) -> AppTest:
    """Open ``pages/<path>`` through the app's navigation, with widget state preset."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["text"] = "a b"  # a short Explorer run first: switch_page needs one
    at.run()
    at.switch_page(f"pages/{path}")
    for k, v in state.items():
        at.session_state[k] = v
    return at.run()


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def html_of(at: AppTest) -> str:
    return "\n".join(h.proto.body for h in at.get("html"))


def charts(at: AppTest) -> list:
    return list(at.get("arrow_vega_lite_chart")) + list(at.get("vega_lite_chart"))


def messages(at: AppTest) -> str:
    return " ".join(m.value for kind in ("error", "warning", "info") for m in getattr(at, kind))


def pills(at: AppTest):
    return at.pills[0]


# --------------------------------------------------------------------------- Explorer
def test_explorer_renders_default_view():
    at = explorer()
    no_exception(at)
    assert at.title[0].value == "Explorer"
    assert pills(at).options, "every predicted word is selectable"
    assert "vizlm-highlight" in html_of(at) or "vizlm-strip" in html_of(at)
    q = at.query_params
    assert q["model"] and q["text"] and "target" in q


def test_state_comes_from_and_goes_to_the_url():
    at = explorer(model="lstm", text="the jury said it was fine .", threshold="0.5", target="2")
    no_exception(at)
    assert at.selectbox(key="model").value == "lstm"
    assert at.text_area(key="text").value == "the jury said it was fine ."
    assert at.slider(key="threshold").value == pytest.approx(0.5)
    assert pills(at).value == 2
    assert at.query_params["target"] == ["2"] or at.query_params["target"] == "2"


def test_changing_text_changes_the_words_and_the_url():
    at = explorer(model=TINY, text="the dogs are barking .")
    before = pills(at).options
    at.text_area(key="text").input("stocks fell sharply on monday because investors worried .").run()
    no_exception(at)
    assert pills(at).options != before
    assert "stocks" in " ".join(pills(at).options)
    assert "stocks" in str(at.query_params["text"])


def test_changing_model_changes_the_panel():
    at = explorer(model=TINY, text="the dogs in the park are barking .")
    first = [s.value for s in at.subheader]
    at.selectbox(key="model").set_value("lstm").run()
    no_exception(at)
    assert [s.value for s in at.subheader] != first
    assert "lstm" in str(at.query_params["model"])


def test_threshold_and_top_k_change_the_highlights():
    at = explorer(model=TINY, text="the dogs in the park are barking loudly today .", target="8", threshold="0")
    low = html_of(at)
    assert "vz-attended" in low
    at.slider(key="threshold").set_value(1.0).run()
    no_exception(at)
    high = html_of(at)
    assert low.count("vz-attended") > high.count("vz-attended")
    at.segmented_control(key="mode").set_value("Top-k").run()
    at.slider(key="topk").set_value(2).run()
    no_exception(at)
    assert "top 2" in html_of(at)
    assert "topk" in at.query_params


def test_selecting_a_word_changes_the_view():
    at = explorer(model=TINY, text="the dogs in the park are barking .")
    at.pills[0].set_value(1).run()
    a = html_of(at)
    at.pills[0].set_value(5).run()
    no_exception(at)
    assert html_of(at) != a
    assert str(at.query_params["target"]).strip("[]'") == "5"


def test_second_model_shows_side_by_side_and_gates():
    at = explorer(model=TINY, compare="lstm", text="the dogs in the park are barking .")
    no_exception(at)
    assert {s.value for s in at.subheader} >= {TINY, "lstm"}
    assert "vizlm-strip" in html_of(at)  # the LSTM panel: probabilities per word
    assert charts(at), "the attention heat map"
    for view in ("Surprisal per word", "AMSRN gates", "Data & downloads"):  # tabs run only when open
        at.session_state["explorer_view"] = view
        at.run()
        no_exception(at)
        assert charts(at) or "vizlm-strip" in html_of(at), view
    assert len(at.get("download_button")) >= 5


def test_the_gates_tab_only_for_gated_models_and_example_names_are_distinct():
    """No "AMSRN gates" tab when no model shown has gates (it only said so); every example reads differently in
    the picker (two Brown passages of one document began alike)."""
    at = explorer(model="kvp", compare="lstm", text="the dogs in the park are barking .")
    no_exception(at)
    assert [t.label for t in at.tabs] == ["Heat map", "Surprisal per word", "Data & downloads"]
    options = at.selectbox(key="example").options
    assert len(options) == len(set(options)) > 10
    at = explorer(model=TINY, text="the dogs in the park are barking .")
    assert "AMSRN gates" in [t.label for t in at.tabs]


def test_example_picker_fills_the_text():
    at = explorer(model=TINY)
    box = at.selectbox(key="example")
    choice = box.options[0]
    box.select_index(0).run()
    no_exception(at)
    assert at.text_area(key="text").value and at.text_area(key="text").value[:20] in choice


@pytest.mark.parametrize(
    "text, expect",
    [
        ("", "type a sentence"),
        ("   \n ", "type a sentence"),
        ("这是一个测试句子。", "vocabulary"),
        ("🙂🙂 🚀", "vocabulary"),
        (" \n\n \n", "type a sentence"),  # blank lines only: no passage
        ("这是一个测试句子。\n他们在家。\n\n我们去学校。", "vocabulary"),  # a Chinese passage, two documents
    ],
)
def test_bad_text_gives_a_message(text, expect):
    at = explorer(model=TINY, text=text)
    no_exception(at)
    assert expect in messages(at).lower()


def test_long_text_is_cut_with_a_note():
    text = ("the market rose because investors were hopeful . " * 120)[:5000]
    at = explorer(model=TINY, text=text)
    no_exception(at)
    assert "only the first" in messages(at)


@pytest.mark.parametrize("model", [TINY, DOC_KVP])
@pytest.mark.parametrize("payload", [
    '<script>alert("x")</script> <img src=x onerror=alert(1)> the end',
    'The end. <script>alert("x")</script> Next one!\n<img src=x onerror=alert(1)>\n\n</s> <s> "quoted" end',
])
def test_script_payload_is_escaped(model, payload):
    at = explorer(model=model, compare="lstm", text=payload)
    no_exception(at)
    body = html_of(at)
    assert "<script" not in body.lower() and "<img" not in body.lower()
    assert "&lt;" in body


def test_a_model_opens_beside_the_control_of_its_run():
    """Without a link, the Explorer and Compare open the preferred model beside the control its run
    was measured against in experiments.toml (AMSRN: the LSTM continued for as many epochs), not
    beside an LSTM trained differently; a model without a bundled control falls back to the LSTM."""
    from vizlm.app import checkpoints as ck

    at = explorer(text="the end .")
    no_exception(at)
    assert (at.selectbox(key="model").value, at.selectbox(key="compare").value) == ("amsrn", "lstm-continued")
    at = page("compare.py", cmp_sample=SMALL)
    no_exception(at)
    assert (at.selectbox(key="cmp_a").value, at.selectbox(key="cmp_b").value) == ("lstm-continued", "amsrn")
    names = ck.model_names()
    assert ck.baseline_model(names, "kvp-doc") == "lstm-doc" and ck.baseline_model(names, TINY) == "lstm"
    assert ck.baseline_model(names, "lstm") is None and ck.baseline_model(["amsrn"], "amsrn") is None


def test_corpus_pages_open_with_models_of_one_language_as_many_as_colours():
    """Attention by position starts with the models that read running text (Daniluk et al.'s Fig. 3
    setting), Cases with every attention model of one language; both with at most one model per
    chart colour. Models of two languages together get a message, not a corpus one of them cannot read."""
    from vizlm.app import checkpoints as ck
    from vizlm.present.style import CATEGORICAL

    attn = ck.attention_model_names(self_attention=True)  # the pages offer Transformers too
    assert "amsrn-sinica" in attn and ck.language("amsrn-sinica") == "Chinese" and ck.language("amsrn") == "English"
    assert "amsrn-sinica" not in ck.one_language(attn) and ck.one_language(["amsrn-sinica", "amsrn"]) == ["amsrn-sinica"]
    at = page("positions.py", pos_sample=SMALL)
    no_exception(at)
    first = at.multiselect(key="pos_models").value
    assert first and len(first) <= len(CATEGORICAL) and all(ck.context(m) == "document" for m in first)
    assert {"kvp-doc", "attention-doc", "kv-doc"} <= set(first) and at.metric
    assert not {"kv-doc-s2", "salton-doc-s2"} & set(first)  # another seed of a bundled model: on request
    reading = next(c.value for c in at.caption if "reads the text as running text" in c.value)
    assert r"own window (attention\-doc 1, " in reading and r"kvp\-doc 5" in reading, reading  # one bracket
    # a chip holds about 20 characters, so the chips are bare names (no "· kind" to cut)
    options = at.multiselect(key="pos_models").options
    assert set(options) == set(attn) and all(len(o) <= 20 for o in options if o in bundled_checkpoints()), options
    sentence_only = [m for m in attn if ck.context(m) == "sentence"]
    assert ck.running_text_first(sentence_only) == sentence_only  # none reads running text: all of them
    at = page("compare.py", cmp_a="lstm", cmp_b="amsrn-sinica", cmp_sample=SMALL)
    no_exception(at)
    assert "different languages" in messages(at) and not at.metric


def test_malformed_link_falls_back_with_notes():
    at = explorer(model="nonexistent", compare="nope", threshold="abc", target="x", text="the end .")
    no_exception(at)
    text = messages(at)
    assert "not available" in text and "threshold" in text


def _upload(at: AppTest, weights: tuple[str, bytes], meta: tuple[str, bytes]) -> AppTest:
    at.file_uploader(key="up_weights").set_value((weights[0], weights[1], "application/octet-stream"))
    at.file_uploader(key="up_meta").set_value((meta[0], meta[1], "application/json"))
    return at.run()


def test_upload_valid_checkpoint_becomes_selectable(tiny_dir):
    at = explorer(model="lstm", text="the end .")
    at = _upload(at, ("model.safetensors", (tiny_dir / "model.safetensors").read_bytes()),
                 ("config.json", (tiny_dir / "config.json").read_bytes()))
    no_exception(at)
    assert at.success and "upload" in at.success[0].value and "amsrn" in at.success[0].value
    assert any(o.startswith("upload:") and o.endswith(" · sentences") for o in at.selectbox(key="model").options)


@pytest.mark.parametrize(
    "weights, meta, expect",
    [
        (("model.safetensors", b"\x00" * 64), None, "not valid safetensors"),
        (("model.safetensors", pickle.dumps({"a": 1})), None, "pickle"),
        (("model.pt", b"PK\x03\x04rest"), None, "not a .safetensors"),
        (None, ("config.json", b"{not json"), "not valid json"),
        (None, ("config.json", b'{"format": "something-else"}'), "not a vizlm checkpoint"),
    ],
)
def test_upload_bad_files_give_a_message(tiny_dir, weights, meta, expect):
    weights = weights or ("model.safetensors", (tiny_dir / "model.safetensors").read_bytes())
    meta = meta or ("config.json", (tiny_dir / "config.json").read_bytes())
    at = _upload(explorer(model="lstm", text="the end ."), weights, meta)
    no_exception(at)
    assert expect in " ".join(e.value for e in at.error).lower()
    assert pills(at).options, "the rest of the page keeps working"


def test_upload_too_large_is_refused(monkeypatch):
    from vizlm.app import checkpoints

    monkeypatch.setattr(checkpoints, "MAX_UPLOAD_MB", 0)
    with pytest.raises(checkpoints.UserError, match="limited"):
        checkpoints.register_upload("model.safetensors", b"x" * 2048, "config.json", b"{}")


# --------------------------------------------------------------------------- other pages
def test_models_page_has_a_card_per_checkpoint():
    at = page("models.py")
    no_exception(at)
    names = {s.value for s in at.subheader}
    assert set(bundled_checkpoints()) <= names and TINY in names
    assert len(at.dataframe) >= 2  # our models and the papers'
    seeds = [streamlit_shows(c.value) for c in at.caption if "trained again with seed" in c.value]
    assert "**kv-doc** trained again with seed 2, for the spread of attention across seeds: the Faithfulness page shows " \
           "kv-doc reading this model's attention." in seeds, seeds
    # a card for each bundled second seed: those the faithfulness plan reads the attention of (kv-doc-s2, ...)
    assert len(seeds) == len(set(load_faithfulness_plan().frozen.values())), seeds


def test_models_cards_say_the_epoch_cap_and_write_values_for_people():
    """"6 epochs (best 4)" beside ``--epochs 20`` read as a contradiction, and cards showed raw Python
    values ("memory None · start_slot True") and different fields for one family."""
    import re

    from vizlm.app import checkpoints as ck
    from vizlm.present.tables import epochs_text

    at = page("models.py")
    no_exception(at)
    cards = [streamlit_shows(c.value) for c in at.caption if c.value.startswith("Trained on")]
    assert len(cards) == len(ck.model_names())
    for card in cards:
        assert not re.search(r"\b(None|True|False|null|true|false)\b", card), card
        assert "_" not in card.split(" epoch")[-1], card  # "emb_dim", "start_slot": field names for people too
    for name in bundled_checkpoints():
        meta = ck.model_meta(name)
        assert any(epochs_text(meta) in card for card in cards), name
        done, cap = meta.get("metrics", {}).get("epochs_trained"), (meta.get("train") or {}).get("epochs")
        if isinstance(done, int) and isinstance(cap, int) and done < cap:
            assert f"{done} epochs of at most {cap}" in epochs_text(meta)
    amsrn = [c for c in cards if " · selection " in c]  # the bundled amsrn's config.json predates memory and start_slot
    assert len(amsrn) >= 2 and all(" · memory " in c and " · start slot in memory " in c for c in amsrn), amsrn


def test_training_curve_fits_its_axis_and_marks_a_continued_run():
    from vizlm.present.charts import training_curve_chart

    log = [{"epoch": e, "train_perplexity": 150 - e, "valid_perplexity": 160 - e} for e in (1, 2, 3)]
    log += [dict(epoch=4, train_perplexity=140, valid_perplexity=150, stage="continued")]
    spec = training_curve_chart("lstm", log).to_dict()
    lines, rule = spec["layer"]
    lo, hi = lines["encoding"]["y"]["scale"]["domain"]
    assert 130 < lo < 140 and 160 < hi < 170  # not 100..1000: a fine-tune's few points stay visible
    assert spec["datasets"][rule["data"]["name"]] == [{"epoch": 3.5, "stage": "continued"}]
    plain = training_curve_chart("lstm", log[:3]).to_dict()
    assert "layer" not in plain


def test_compare_page_scatter_summary_and_tables():
    at = page("compare.py", cmp_a="lstm", cmp_b=TINY, cmp_sample=SMALL, cmp_corpus="WSJ sample (out of domain)")
    no_exception(at)
    assert at.metric and len(at.dataframe) >= 3
    before = [m.value for m in at.metric]
    at.selectbox(key="cmp_corpus").set_value("Brown test").run()
    no_exception(at)
    assert [m.value for m in at.metric] != before


def test_positions_page_window_changes_the_plot():
    at = page("positions.py", pos_models=[TINY], pos_sample=SMALL)
    no_exception(at)
    spec = lambda: [c.proto.spec for c in charts(at)]
    first = spec()
    assert first
    at.slider(key="pos_window").set_value(4).run()
    no_exception(at)
    assert spec() != first
    at.session_state["pos_view"] = "One text"  # the per-text view
    at.run()
    no_exception(at)
    assert len(spec()) >= 2 and at.text_area(key="pos_text").value


def test_cases_page_counts_gallery_and_filter():
    at = page("cases.py", cases_models=[TINY], cases_sample=SMALL, cases_threshold=0.05)
    no_exception(at)
    assert at.metric
    # each label's rate beside its distance-matched chance rate, with what chance means
    chance = next(d.value for d in at.dataframe if "chance" in d.value.columns)
    assert sorted(chance["label"]) == sorted(LABELS) and set(chance["model"]) == {TINY}
    assert chance["chance"].between(0, 1).all() and chance["rate"].between(0, 1).all()
    assert any("Chance" in c.value and "same distances" in c.value for c in at.caption)
    n_cards = len(at.get("page_link"))
    at.text_input(key="cases_query").input("zzzz-no-such-word").run()
    no_exception(at)
    assert len(at.get("page_link")) < n_cards or "no example" in messages(at).lower()


def test_a_plugin_that_fails_on_longer_input_fails_alone_on_the_cases_page(tiny_dir, monkeypatch, tmp_path):
    """A plugin that passes the contract check (2 sentences of 7 tokens) but raises or gives NaN on a corpus's
    longer sentences: each is named in an error, and the healthy model's counts are still shown."""
    from test_plugins import EntryPoint, Toy, toy

    from vizlm.models import plugins

    class LongFails(Toy):
        def output_layer(self, h, read):
            if h.shape[1] > 7:
                raise RuntimeError("index out of range in self")
            return super().output_layer(h, read)

    class LongNaN(Toy):
        def output_layer(self, h, read):
            out = super().output_layer(h, read)
            if h.shape[1] > 7:
                out.features = out.features * math.nan
            return out

    monkeypatch.setattr(plugins, "entry_points", lambda: [EntryPoint("longfails", toy(LongFails)),
                                                          EntryPoint("longnan", toy(LongNaN))])
    plugins.reset()
    meta = json.loads((tiny_dir / "config.json").read_text(encoding="utf-8"))
    vocab = Vocab(meta["vocab"])
    for name in ("longfails", "longnan"):
        save_checkpoint(tmp_path / name, build_model(name, vocab_size=len(vocab), emb_dim=6, hidden_dim=5), name, vocab,
                        corpus={"name": "brown"})
    monkeypatch.setenv("VIZLM_EXTRA_CHECKPOINTS", os.pathsep.join(map(str, [tiny_dir, tmp_path / "longfails",
                                                                          tmp_path / "longnan"])))
    try:
        at = page("cases.py", cases_models=[TINY, "longfails", "longnan"], cases_sample=SMALL,
                  cases_threshold=0.05)
        no_exception(at)
        errors = " ".join(e.value for e in at.error)
        assert "longfails: the plugin 'longfails'" in errors and "RuntimeError (index out of range in self)" in errors
        assert "longnan: the plugin 'longnan'" in errors and "not finite" in errors
        from vizlm.app.widgets import md_escape

        assert [m.label for m in at.metric] == [md_escape(TINY)]  # the healthy model's report is shown
    finally:
        plugins.reset()


def test_most_improved_sentences_join_the_examples(monkeypatch):
    """The button ranks Brown test by improvement (vizlm.inspect.corpus_stats.compare_corpus; here on 60 sentences)."""
    from vizlm.inspect import corpus_stats as vc
    from vizlm.data.registry import load_corpus

    def small_compare_corpus(a, b, corpus, split, progress=None, use_cache=True, ctx=None):
        c = load_corpus(corpus, split)
        if progress:
            progress(0.5)
        return vc.compare(a, b, c.sentences[:60], c.ids[:60], originals=c.originals[:60])

    from vizlm.app import jobs

    monkeypatch.setattr(vc, "compare_corpus", small_compare_corpus)
    jobs.registry.clear()  # the background comparisons are shared by every session: none from an earlier test
    at = explorer(model=TINY, compare="lstm", text="the end .")
    at.button[0].click().run()
    no_exception(at)
    # the tiny model improves on the trained LSTM nowhere: no sentence is listed as improved, and the page says so
    assert not any(o.startswith("improved by") for o in at.selectbox(key="example").options)
    assert f"{TINY} lowers the perplexity of none" in messages(at)

    def reversed_compare_corpus(a, b, corpus, split, progress=None, use_cache=True, ctx=None):
        return small_compare_corpus(b, a, corpus, split, progress)  # the LSTM's gains, credited to the tiny model

    monkeypatch.setattr(vc, "compare_corpus", reversed_compare_corpus)
    jobs.registry.clear()  # the background comparison is shared by every session: computed again
    at = explorer(model=TINY, compare="lstm", text="the end .")
    at.button[0].click().run()
    no_exception(at)
    options = at.selectbox(key="example").options
    assert any(o.startswith(f"improved by {TINY}") for o in options)
    # something visible changes: the most improved sentence is opened, picked in the list, and a note says so
    picked = at.selectbox(key="example").value
    assert picked.startswith(f"improved by {TINY}") and at.text_area(key="text").value == at.session_state["_examples"][picked]
    assert any("to the examples (first in the list)" in m.value for m in at.success)


# --------------------------------------------------------------------------- reliability (issue: defects a user hits)
def test_a_long_paste_is_read_not_dropped():
    """The text box has no character limit that would make the browser drop a paste; the analysis
    reads its first part and says so."""
    at = explorer(model=TINY, text="a b")
    long = "the market rose because investors were hopeful . " * 600  # 30,000 characters
    assert not at.text_area(key="text").max_chars  # 0: no limit in the browser
    at.text_area(key="text").input(long).run()
    no_exception(at)
    assert "only" in messages(at) and pills(at).options


def test_link_values_out_of_range_are_noted():
    at = explorer(model="lstm", text="the end .", threshold="7", target="99")
    no_exception(at)
    text = messages(at)
    assert "outside 0 to 1" in text and "selects word 99" in text
    assert at.slider(key="threshold").value == 1.0


def test_corpora_are_offered_in_the_models_language():
    at = page("compare.py", cmp_a="lstm", cmp_b=TINY, cmp_sample=SMALL)
    no_exception(at)
    options = at.selectbox(key="cmp_corpus").options
    assert "Brown test" in options and not any("Sinica" in o for o in options), options


def test_an_english_model_says_so_on_chinese_text():
    at = explorer(model="lstm", text="我們去學校。他們在家。")
    no_exception(at)
    assert "English-only" in messages(at)


CHINESE = "今天天氣很好，我們去公園散步。他說這個問題很重要。"


def test_chinese_text_names_the_chinese_model_to_choose():
    """An English model on Chinese text names the Chinese model to choose instead, which reads the
    text as its two sentences without the warning."""
    if "amsrn-sinica" not in bundled_checkpoints():
        pytest.skip("no bundled Chinese checkpoint amsrn-sinica")
    at = explorer(model="amsrn", text=CHINESE)
    no_exception(at)
    (warning,) = [w.value for w in at.warning if "vocabulary" in w.value]
    assert "English-only" in warning and "Choose a Chinese model instead: amsrn-sinica" in warning
    at = explorer(model="amsrn-sinica", text=CHINESE)
    no_exception(at)
    assert "vocabulary" not in messages(at)
    assert "A passage of 2 sentences" in " ".join(c.value for c in at.caption)


def test_a_model_of_another_language_brings_its_text_and_comparison_model():
    """Switching the model to amsrn-sinica replaces the English text by the Chinese one and the English model
    compared with by a Chinese one, so no warning about unknown words shows; switching back brings English.
    Two models reading a text as <unk> get one warning, not two."""
    if "amsrn-sinica" not in bundled_checkpoints():
        pytest.skip("no bundled Chinese checkpoint amsrn-sinica")
    from vizlm.app.checkpoints import language
    from vizlm.present.links import DEFAULT_TEXT, DEFAULT_TEXTS

    at = explorer(model="amsrn", compare="lstm", text=DEFAULT_TEXT)
    at.selectbox(key="model").set_value("amsrn-sinica").run()
    no_exception(at)
    assert at.text_area(key="text").value == DEFAULT_TEXTS["Chinese"]
    assert language(at.selectbox(key="compare").value) == "Chinese"
    assert "vocabulary" not in messages(at)
    at.selectbox(key="model").set_value("amsrn").run()
    no_exception(at)
    assert at.text_area(key="text").value == DEFAULT_TEXT and language(at.selectbox(key="compare").value) == "English"
    at = explorer(model="amsrn", compare="lstm", text=CHINESE)
    no_exception(at)
    (warning,) = [w.value for w in at.warning if "vocabulary" in w.value]
    assert "Each reads them as <unk>" in warning and "Choose a Chinese model" in warning


def test_attention_off_note_and_highlight_key():
    import numpy as np

    at = explorer(model="amsrn", text="The dogs in the park are barking because they saw a cat .", threshold="0.2")
    no_exception(at)
    assert "vizlm-key" in html_of(at)
    from vizlm.inspect.analysis import ATTENTION_OFF, analyze
    from vizlm.modeling.checkpoint import load_checkpoint

    sa = analyze(load_checkpoint("amsrn"), "The dogs in the park are barking because they saw a cat .")
    off = [r for r in range(len(sa.targets)) if sa.attention[r, 0] >= ATTENTION_OFF]
    assert off, "the bundled amsrn rests on the start slot for some word of this sentence"
    at.pills[0].set_value(int(off[-1])).run()
    captions = " ".join(c.value for c in at.caption)
    assert "Attention mostly off" in captions and f"{sa.attention[off[-1], 0]:.0%}" in captions
    assert np.isfinite(sa.attention).all()


def test_unbundled_init_folders_are_explained():
    from vizlm.app.checkpoints import missing_run_folders

    assert missing_run_folders("vizlm train --model kvp --init-from runs/lstm20 --out checkpoints/kvp") == ["runs/lstm20"]
    assert missing_run_folders("vizlm train --model amsrn --init-from checkpoints/lstm") == []
    at = page("models.py")
    no_exception(at)
    assert "runs/lstm20" in " ".join(c.value for c in at.caption)


# --------------------------------------------------------------------------- attention effects
EFFECT_TEXT = "The dogs in the park are barking because they saw a cat , so the owners are running ."


def heatmap_specs(at: AppTest) -> list[dict]:
    specs = [json.loads(c.proto.spec) for c in charts(at)]
    return [s for s in specs if s.get("layer") and s["layer"][0].get("mark", {}).get("type") == "rect"]


def test_effect_toggle_switches_the_heatmap():
    at = explorer(model="amsrn", compare="kvp", text=EFFECT_TEXT)
    no_exception(at)
    (before, *_) = heatmap_specs(at)
    assert before["layer"][0]["encoding"]["color"]["field"] == "weight"
    assert at.selectbox(key="measure").value == "weight"
    at.selectbox(key="measure").set_value("effect").run()
    no_exception(at)
    after = heatmap_specs(at)
    assert len(after) == 2  # both attention models
    for spec in after:
        colour = spec["layer"][0]["encoding"]["color"]
        assert colour["field"] == "effect" and "bits" in " ".join(colour["title"])
        assert colour["scale"]["domainMid"] == 0
        assert "effect of each memory slot" in spec["title"]["text"]
    assert "Blue: the slot helped" in " ".join(c.value for c in at.caption)
    at.selectbox(key="measure").set_value("weight").run()
    assert heatmap_specs(at)[0]["layer"][0]["encoding"]["color"]["field"] == "weight"


def test_panel_shows_the_read_effect_beside_the_weights():
    from vizlm.inspect.analysis import analyze
    from vizlm.modeling.checkpoint import load_checkpoint

    sa = analyze(load_checkpoint("amsrn"), EFFECT_TEXT)
    at = explorer(model="amsrn", compare="lstm", text=EFFECT_TEXT, target="5")
    no_exception(at)
    metrics = {m.label: m.value for m in at.metric}
    bits = sa.read_effect_bits[5]
    assert metrics["Attention effect"] == ("+0.00 bits" if f"{bits:+.2f}" == "-0.00" else f"{bits:+.2f} bits")
    assert len([m for m in at.metric if m.label == "Attention effect"]) == 1  # the LSTM panel has none
    captions = " ".join(c.value for c in at.caption)
    assert "Attention changed log₂ P(word) by" in captions
    table = next(d.value for d in at.dataframe if "effect (bits)" in d.value.columns)
    assert list(table.columns) == ["memory slot", "weight", "effect (bits)"]
    for row in table.itertuples(index=False):
        j = int(row[0].split()[0])
        # the page computes this word's slot effects alone: the same up to float32 rounding
        assert row[1] == pytest.approx(sa.attention[5, j]) and row[2] == pytest.approx(sa.slot_effect_bits[5, j], abs=1e-5)
    at.pills[0].set_value(8).run()
    assert {m.label: m.value for m in at.metric}["Attention effect"] != metrics["Attention effect"]


def test_small_probabilities_show_their_significant_digits():
    """The panel's P(word) and "P(word) would be .. instead of .." keep two significant digits
    (not "0.0004 instead of 0.0004"), and the slot table says how it is sorted."""
    import numpy as np

    from vizlm.inspect.analysis import analyze
    from vizlm.modeling.checkpoint import load_checkpoint
    from vizlm.present.style import format_prob

    sa = analyze(load_checkpoint("amsrn"), EFFECT_TEXT)
    r = int(np.argmin(sa.probs))  # the least likely word
    at = explorer(model="amsrn", text=EFFECT_TEXT, target=str(r))
    no_exception(at)
    shown = {m.label: m.value for m in at.metric}["P(word)"]
    assert shown == format_prob(sa.probs[r]) and "e-" in shown
    without = format_prob(float(np.exp(sa.logprobs[r] - sa.read_effect[r])))
    captions = " ".join(c.value for c in at.caption)
    assert f"P(word) would be {without} instead of {shown}." in captions
    assert "largest |effect| first" in captions


def test_slot_effects_are_computed_on_demand():
    text = " ".join(["the market rose because investors were hopeful and prices fell ."] * 8)  # 88 words
    at = explorer(model="amsrn", text=text, target="80")
    no_exception(at)
    table = next(d.value for d in at.dataframe if "effect (bits)" in d.value.columns)
    from vizlm.inspect.analysis import analyze
    from vizlm.modeling.checkpoint import load_checkpoint

    full = analyze(load_checkpoint("amsrn"), text, max_effect_pairs=None)  # every slot effect at once
    for row in table.itertuples(index=False):  # this word's slot effects, computed for it alone
        assert row[2] == pytest.approx(full.slot_effect_bits[80, int(row[0].split()[0])], abs=1e-5)
    at.selectbox(key="measure").set_value("effect").run()
    no_exception(at)
    (spec,) = heatmap_specs(at)
    assert spec["layer"][0]["encoding"]["color"]["field"] == "effect"


def test_positions_page_shows_effects_beside_weights():
    at = page("positions.py", pos_models=[TINY], pos_sample=SMALL)
    no_exception(at)
    fields = [json.loads(c.proto.spec)["layer"][-1]["encoding"]["y"]["field"] for c in charts(at)]
    assert fields == ["mean", "effect"]
    headings = " ".join(m.value for m in at.markdown)
    assert "**Attention entropy**" in headings and "**Words the attention moves by > 1 bit**" in headings
    assert any("largest" in m.delta for m in at.metric) and any("mean |effect|" in m.delta for m in at.metric)
    assert any(c.value.startswith("Bands: 95% intervals, a bootstrap over the ") for c in at.caption)


def test_positions_metric_labels_fit_a_quarter_of_the_page():
    """At 1440 px a metric of the four per row shows ~30 characters; "attention-doc-w10: words the
    attention moves by > 1 bit" and "mean |effect| … over 121,444 words" were cut off. Details go in the help."""
    long_name = "attention-doc-w10"  # among the longest bundled names
    if long_name not in bundled_checkpoints():
        pytest.skip(f"{long_name} is not bundled")
    at = page("positions.py", pos_models=[TINY, long_name], pos_sample=SMALL)
    no_exception(at)
    assert len(at.metric) == 4
    for m in at.metric:
        label = streamlit_shows(m.label)
        assert label in (TINY, long_name) and len(label) <= 24, label
        assert len(m.delta) <= 26 and m.help, m.delta
    assert any("predicted words" in m.help for m in at.metric)  # the count moved to the help


def test_cases_gallery_ranks_by_effect():
    at = page("cases.py", cases_models=[TINY], cases_sample=SMALL, cases_threshold=0.05)
    no_exception(at)
    at.segmented_control(key="cases_rank").set_value("effect").run()
    no_exception(at)
    cards = [m.value for m in at.markdown if "· effect" in m.value]
    assert cards and "most helpful slot first" in " ".join(c.value for c in at.caption)
    effects = [float(c.split("· effect ")[1].split(" bits")[0]) for c in cards]
    assert effects == sorted(effects, reverse=True)


# --------------------------------------------------------------------------- passages and document checkpoints
PASSAGE = ("The senator said the city had spent too much money on the new schools. "
           "He wants the council to raise taxes next year!\nThe mayor agreed with him")


def test_a_passage_is_read_in_each_model_s_context():
    at = explorer(model=DOC_KVP, compare="lstm", text=PASSAGE)
    no_exception(at)
    captions = " ".join(c.value for c in at.caption)
    assert "A passage of 3 sentences" in captions
    assert "**document-level checkpoint**: reads the text as running text" in captions
    assert "**sentence-level checkpoint**: reads each sentence alone" in captions
    body = html_of(at)
    assert body.count('class="vz-boundary') == 2  # the running text of the document model: two </s> between sentences
    options = pills(at).options
    assert len(set(options)) == len(options) and sum("/s" in o for o in options) == 3  # distinct labels


def test_a_repeated_word_stays_selected(monkeypatch):
    """Streamlit sends a pill's label back: with "the" twice, the first "the" came back as the last one,
    and a link's ?target= was replaced on the next interaction (unique labels fix both)."""
    text = "the dogs saw the cat and the dogs ran ."
    at = explorer(model=TINY, text=text, target="0")
    assert pills(at).value == 0
    at.slider(key="threshold").set_value(0.3).run()
    no_exception(at)
    assert pills(at).value == 0 and str(at.query_params["target"]).strip("[]'") == "0"
    at.pills[0].set_value(3).run()
    assert pills(at).value == 3 and str(at.query_params["target"]).strip("[]'") == "3"


def test_a_long_passage_gets_a_heat_map_window():
    text = " ".join(["The dogs in the park are barking because they saw a cat ."] * 8)  # 8 sentences, 96 words
    at = explorer(model=DOC_KVP, text=text, target="50")
    no_exception(at)
    (spec,) = heatmap_specs(at)
    rows = spec["layer"][0]["encoding"]["y"]["scale"]["domain"]
    assert len(rows) == 40 and rows[0].startswith("32 ")  # rows 30..69 around word 50
    assert any(layer.get("mark", {}).get("type") == "rule" for layer in spec["layer"])  # sentence boundaries
    at.segmented_control(key="heat_rows").set_value("all").run()
    no_exception(at)
    (spec,) = heatmap_specs(at)
    assert len(spec["layer"][0]["encoding"]["y"]["scale"]["domain"]) == len(pills(at).options)


def test_an_attribution_measure_explains_every_model_the_lstm_too():
    """Integrated gradients picked in the sidebar: each panel highlights the words its prediction depended on
    (the LSTM's too), lists them with their attribution (and, for the attention model, their weight and the
    agreement), and the heat map tab draws one attribution map per model; the measure lives in the URL."""
    text = "the dogs in the park are barking because they saw a cat ."
    at = explorer(model="amsrn", compare="lstm", text=text, measure="integrated-gradients", target="9")
    no_exception(at)
    page = html_of(at)
    assert page.count("integrated gradients, highlighted") == 2 and "vz-attributed" in page
    tables = [d.value for d in at.dataframe if "bits" in d.value.columns]
    assert len(tables) == 2 and "weight" in tables[0].columns and "weight" not in tables[1].columns
    weights = list(tables[0]["weight"])  # a number, or a dash for the word just read (no slot), never "None"
    assert "–" in weights and all(w == "–" or 0 <= float(w) <= 1 for w in weights)
    from vizlm import load

    expected = load("lstm").attribute(text, "integrated-gradients").row_frame(9)
    assert list(tables[1]["bits"]) == pytest.approx(list(expected.attribution_bits[:len(tables[1])]), abs=1e-6)
    assert {m.label for m in at.metric} >= {"Kendall τ", "Top-1 agrees", "Top-3 overlap"}
    assert any("convergence delta" in c.value for c in at.caption)
    specs = heatmap_specs(at)
    assert len(specs) == 2  # one per model, the LSTM's included
    for spec in specs:
        colour = spec["layer"][0]["encoding"]["color"]
        assert colour["field"] == "attribution" and colour["scale"]["domainMid"] == 0
    assert str(at.query_params["measure"]).strip("[]'") == "integrated-gradients"
    at.selectbox(key="measure").set_value("occlusion").run()
    no_exception(at)
    assert html_of(at).count("occlusion, highlighted") == 2
    at.selectbox(key="measure").set_value("weight").run()
    no_exception(at)
    assert "vz-attributed" not in html_of(at) and len(heatmap_specs(at)) == 1  # the attention model's alone


def test_the_heat_map_measure_lives_in_the_url():
    at = explorer(model=TINY, text="the dogs in the park are barking .", measure="effect")
    no_exception(at)
    assert at.selectbox(key="measure").value == "effect"
    assert str(at.query_params["measure"]).strip("[]'") == "effect"
    at.session_state["explorer_view"] = "Surprisal per word"  # another tab: the measure is kept
    at.run()
    at.slider(key="threshold").set_value(0.3).run()
    assert str(at.query_params["measure"]).strip("[]'") == "effect"
    at.session_state["explorer_view"] = "Heat map"
    at.run()
    assert at.selectbox(key="measure").value == "effect"
    at.selectbox(key="measure").set_value("weight").run()
    no_exception(at)
    assert "measure" not in at.query_params


def test_example_passages_fill_the_text():
    at = explorer(model=DOC_KVP)
    box = at.selectbox(key="example")
    choice = next(o for o in box.options if o.startswith("Brown passage"))
    box.set_value(choice).run()
    no_exception(at)
    text = at.text_area(key="text").value
    assert text.count("\n") >= 2 and "A passage of" in " ".join(c.value for c in at.caption)


def test_corpus_pages_read_document_checkpoints_in_context():
    at = page("compare.py", cmp_a=DOC_LSTM, cmp_b=DOC_KVP, cmp_sample=SMALL, cmp_corpus="Brown test")
    no_exception(at)
    assert at.metric and "scores each sentence in context" in " ".join(c.value for c in at.caption)
    at = page("positions.py", pos_models=[DOC_KVP], pos_sample=SMALL)
    no_exception(at)
    assert at.slider(key="pos_window").value == 3  # the model's own window, as Daniluk et al. draw it
    assert "positions reach across sentence boundaries" in " ".join(c.value for c in at.caption)
    at = page("cases.py", cases_models=[DOC_KVP], cases_sample=SMALL, cases_threshold=0.05)
    no_exception(at)
    links = [p.proto.query_string for p in at.get("page_link")] if at.get("page_link") else []
    assert at.metric and links and any("%0A" in q or "\n" in q for q in links), links[:2]


# --------------------------------------------------------------------------- cases, compare, first impressions
def query(at: AppTest) -> dict[str, str]:
    """The URL's query as plain strings (AppTest may hold a value as a one-element list)."""
    return {k: v[0] if isinstance(v, list) else v for k, v in at.query_params.items()}


def linked(path: str, **params) -> AppTest:
    """Open ``pages/<path>`` from a link with the query ``params`` (a fresh session)."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["text"] = "a b"  # a short Explorer run first: switch_page needs one
    at.run()
    at.query_params.clear()
    at.query_params.update(params)
    at.switch_page(f"pages/{path}")
    return at.run()


def test_cases_gallery_ranks_a_choice_and_lets_the_models_take_turns():
    """The default gallery was 30 examples of attention-doc, each at weight 1.00: its window holds one
    slot, so its weight is always 1 and chooses nothing. It ranks by the weight above an even spread over the
    word's slots (0 for attention-doc), the models take turns, the page says why, and the model filter (a
    multiselect: pills showed 2 of 8 models' buttons) reaches every model."""
    from vizlm.app.widgets import md_escape

    models = ["attention-doc", TINY, DOC_KVP]
    at = page("cases.py", cases_models=models, cases_sample=SMALL, cases_threshold=0.05)
    no_exception(at)
    assert at.segmented_control(key="cases_rank").value == "above_uniform"
    assert "its weight chooses nothing" in " ".join(c.value for c in at.caption)
    cards = [m.value for m in at.markdown if " · weight " in m.value]
    owner = [next(n for n in models if f" · {md_escape(n)} · " in c) for c in cards]
    assert set(owner[:3]) == set(models)  # one of each model first, not 30 of one
    assert all("weight 1.00 (uniform 1.00)" in c for c, n in zip(cards, owner) if n == "attention-doc")
    assert owner[0] != "attention-doc"  # ranked last in its turn: 0 above uniform
    box = at.multiselect(key="cases_gallery_models")
    assert box.options == models and box.value == models
    box.set_value(["attention-doc"]).run()
    no_exception(at)
    assert {n for n in models if any(f" · {md_escape(n)} · " in m.value for m in at.markdown)} == {"attention-doc"}


def test_compare_view_lives_in_the_url():
    """Compare's model pair, corpus and split go to the URL, and a link opens the same view."""
    at = page("compare.py", cmp_a="lstm", cmp_b=TINY, cmp_sample=SMALL, cmp_corpus="WSJ sample (out of domain)")
    no_exception(at)
    q = query(at)
    assert {k: q[k] for k in ("a", "b", "corpus", "split", "n")} == {"a": "lstm", "b": TINY, "corpus": "wsj",
                                                                     "split": "test", "n": "200"}
    at = linked("compare.py", a=TINY, b="lstm", corpus="brown", split="test", n="200")
    no_exception(at)
    assert (at.selectbox(key="cmp_a").value, at.selectbox(key="cmp_b").value) == (TINY, "lstm")
    assert at.selectbox(key="cmp_corpus").value == "Brown test" and not at.warning
    at.selectbox(key="cmp_corpus").set_value("WSJ sample (out of domain)").run()
    assert (query(at)["corpus"], query(at)["a"]) == ("wsj", TINY)
    for path in ("explorer.py", "compare.py"):  # the menu clears the URL: back on Compare, this session's view
        at.query_params.clear()
        at.switch_page(f"pages/{path}")
        at.run()
    no_exception(at)
    assert query(at) == {"a": TINY, "b": "lstm", "corpus": "wsj", "split": "test", "n": "200"}


@pytest.mark.parametrize("params, expect", [
    ({"a": "gpt9", "b": "lstm", "n": "200"}, "baseline model 'gpt9' in the link is not available"),
    ({"a": "lstm", "b": "lstm", "n": "200"}, "compares lstm with itself"),
    ({"a": "lstm", "b": TINY, "corpus": "klingon", "n": "200"}, "corpus 'klingon' in the link is not one of"),
    ({"a": "lstm", "b": TINY, "corpus": "brown", "split": "x", "n": "200"}, "brown has no split 'x'"),
    ({"a": "lstm", "b": TINY, "corpus": "sinica", "split": "test", "n": "200"}, "not a held-out split that lstm"),
])
def test_a_malformed_compare_link_gets_a_note(params, expect):
    at = linked("compare.py", **params)
    no_exception(at)
    assert expect in messages(at).lower() and at.metric  # the page shows the fallback view


def test_compare_scatter_shows_both_groups_across_the_page(monkeypatch):
    """The points of the group drawn last covered the others (a 53% improvement looked mostly like the
    baseline's colour); both are translucent, the larger group drawn first, and the chart is as wide as the page."""
    import pandas as pd

    from vizlm.app import widgets
    from vizlm.present.export import chart_spec
    from vizlm.present.charts import comparison_scatter
    from vizlm.present.style import SCATTER_OPACITY

    ppl_b = [50.0, 150.0] * 3 + [150.0] * 4  # B lower in 3 sentences, A in 7, in sentence order
    table = pd.DataFrame({"sentence_id": list("abcdefghij"), "text": list("abcdefghij"), "length": 5,
                          "ppl_a": 100.0, "ppl_b": ppl_b, "difference": 0.0, "log_ratio": 0.0})
    spec = chart_spec(comparison_scatter(table, "lstm", "amsrn"))
    points = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "circle")
    assert points["mark"]["opacity"] == SCATTER_OPACITY <= 0.4
    drawn = [row["better"] for row in spec["datasets"][points["data"]["name"]]]
    assert drawn == ["lstm lower"] * 7 + ["amsrn lower"] * 3
    widths = {}

    def show_chart(chart, width="content"):
        widths[chart.to_dict()["title"]["text"]] = width
        widgets.st.altair_chart(chart, width=width, theme=None)

    monkeypatch.setattr(widgets, "show_chart", show_chart)
    at = page("compare.py", cmp_a="lstm", cmp_b=TINY, cmp_sample=SMALL)
    no_exception(at)
    assert widths == {f"Per-sentence perplexity: lstm vs {TINY}": "stretch"}


def test_the_default_text_has_no_unknown_word_for_the_default_models():
    """A newcomer's first sight was an <unk> notice ("barking ?"): the default text's words are in the
    vocabulary of the models the Explorer opens with."""
    from vizlm.inspect.analysis import analyze
    from vizlm.modeling.checkpoint import load_checkpoint
    from vizlm.present.links import DEFAULT_TEXT

    at = explorer()
    no_exception(at)
    shown = [at.selectbox(key="model").value, at.selectbox(key="compare").value]
    assert shown == ["amsrn", "lstm-continued"] and at.text_area(key="text").value == DEFAULT_TEXT
    for name in shown:
        sa = analyze(load_checkpoint(name), DEFAULT_TEXT)
        assert not any(sa.unk), [t for t, u in zip(sa.tokens, sa.unk) if u]
    assert not any(o.endswith(" ?]") for o in pills(at).options)


def test_the_model_list_is_grouped_by_kind():
    """One select box, its models grouped (sentence-level, running text, Chinese, extensions, other seeds of
    bundled models), each label saying its group."""
    from vizlm.app import checkpoints as ck

    at = explorer(text="the end .")
    no_exception(at)
    options = at.selectbox(key="model").options
    kinds = [o.split(" · ")[-1] for o in options]
    assert kinds == sorted(kinds, key=ck.KINDS.index) and set(ck.KINDS) <= set(kinds)
    by_name = {o.split(" · ")[0]: o for o in options}
    assert by_name["amsrn"] == "amsrn · sentences" and by_name["kvp-doc"] == "kvp-doc · running text"
    assert by_name["amsrn-sinica"] == "amsrn-sinica · Chinese" and by_name["amsrn-doc"] == "amsrn-doc · extension"
    assert by_name["kv-doc-s2"] == "kv-doc-s2 · another seed" and ck.first_seed("kv-doc-s2") == "kv-doc"
    assert ck.first_seed("kv-doc") is None and "another seed of kv-doc" in ck.model_help("kv-doc-s2")
    # a bundled model's label fits the sidebar's select box whole (ck.LABEL_CHARS at shell.SIDEBAR_PX); the
    # perplexity is in the help
    assert all(len(o) <= ck.LABEL_CHARS for o in options if o.split(" · ")[0] in bundled_checkpoints()), options
    help_text = at.selectbox(key="model").help
    assert "perplexity" in help_text and at.selectbox(key="model").value in help_text
    # ... and the size: the papers' k with the parameter count, from the checkpoint's config.json
    assert "lstm-doc: running text (bundled), k = 50, 1.03 M parameters, test perplexity" in ck.model_help("lstm-doc")
    # KVP matched to the LSTM's parameter count: its hidden size is smaller
    assert "kvp-doc: running text (bundled), embedding 50, hidden 42, 1.03 M parameters" in ck.model_help("kvp-doc")


def test_a_size_is_read_from_what_a_config_records_and_nothing_else():
    from vizlm.modeling.checkpoint import meta_size

    assert meta_size({"parameters": 6_732_400, "config": {"emb_dim": 300, "hidden_dim": 300}}) == (
        "k = 300, 6.73 M parameters")
    assert meta_size({"parameters": 24_000_000, "config": {"emb_dim": 100, "hidden_dim": 300}}) == (
        "embedding 100, hidden 300, 24.0 M parameters")
    # a config that records only part of it, or junk, says that part or nothing (no error, no made-up size)
    assert meta_size({"config": {"emb_dim": 50, "hidden_dim": 50}}) == "k = 50"
    assert meta_size({"parameters": 1_030_400, "config": {"emb_dim": True, "hidden_dim": 50}}) == "1.03 M parameters"
    assert meta_size({}) is None and meta_size({"parameters": "many", "config": None}) is None


def streamlit_shows(markdown: str) -> str:
    """The text Streamlit's Markdown shows for ``markdown`` (its frontend, StreamlitMarkdown: escapes removed, then
    a free-standing "--", "->", ... replaced by typographic characters), invisible word joiners left out."""
    import re

    text = re.sub(r"\\(.)", r"\1", markdown)
    replaced = {"<->": "↔", "->": "→", "<-": "←", "--": "—", ">=": "≥", "<=": "≤", "~=": "≈"}  # in this order
    for pattern, char in replaced.items():
        text = re.sub(rf"(^|\s){pattern}(\s|$)", rf"\g<1>{char}\g<2>", text)
    return text.replace("\u2060", "")


def test_a_dash_token_reads_the_same_everywhere():
    """The Brown token "--" read "—" in the word picker (Streamlit's Markdown replaces a free-standing
    "--", escaped or not) and "--" in the running text and the heat map; md_escape keeps it for every Markdown."""
    from vizlm.app.widgets import md_escape

    at = explorer(model=TINY, text="It is a killer sub -- that is , a hunter of enemy subs .", target="6")
    no_exception(at)
    assert streamlit_shows(pills(at).options[5]) == "--"
    assert ">--</span>" in html_of(at)  # the running text
    (spec,) = heatmap_specs(at)
    assert "7 --" in spec["layer"][0]["encoding"]["x"]["scale"]["domain"]
    for text in ("--", "->", "<-", "<->", ">=", "<=", "~=", "a -- b", "x->y"):
        assert streamlit_shows(md_escape(text)) == text


def test_cases_gallery_ranks_by_attribution():
    """The rank selector offers attribution (its help says what it means and what it costs); the
    examples show their attribution in bits and come highest first."""
    at = page("cases.py", cases_models=[TINY], cases_sample=SMALL, cases_threshold=0.05)
    no_exception(at)
    control = at.segmented_control(key="cases_rank")
    assert control.options[-1] == "Attribution"  # the page shows RANK_LABELS
    assert "gradient × input" in control.help and "backward" in control.help and "raised P(word)" in control.help
    assert not [m for m in at.markdown if "· attribution" in m.value]  # computed for its ranking only
    control.set_value("attribution").run()
    no_exception(at)
    cards = [m.value for m in at.markdown if "· attribution " in m.value]
    assert cards and "by attribution" in " ".join(c.value for c in at.caption)
    values = [float(c.split("· attribution ")[1].split(" bits")[0]) for c in cards]
    assert values == sorted(values, reverse=True)


def test_positions_page_shows_attribution_by_distance_on_request(monkeypatch, tmp_path, doc_dirs):
    """Beside the attention by position, on request (off at first: it costs minutes), each model's
    share of |attribution| at 0..window words back, a model without attention too, and per model the share
    beyond its attention window with its interval, as vizlm computes it."""
    import pandas as pd
    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

    import vizlm

    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path))  # computed by the page, not read from an earlier run
    at = page("positions.py", pos_models=[TINY, DOC_KVP], pos_sample=SMALL)
    no_exception(at)
    toggle = at.toggle(key="pos_attribution")
    assert toggle.value is False and "shipped" in toggle.help and "Sentences" in toggle.help
    assert len(charts(at)) == 2 and not list(tmp_path.iterdir())  # nothing attributed unasked
    toggle.set_value(True)
    at.session_state["pos_attribution_others"] = [DOC_LSTM]
    at.run()
    no_exception(at)
    assert at.multiselect(key="pos_attribution_others").value == [DOC_LSTM]
    # the cost is said before the work starts: 2 attention models and an LSTM over the 200 sentences
    assert "Attributing 3 models over 200 sentences takes about 16 seconds the first time" in " ".join(
        c.value for c in at.caption)
    assert len(list(tmp_path.iterdir())) == 3  # each model attributed once, into the disk cache
    specs = [json.loads(c.proto.spec) for c in charts(at)]
    (spec,) = [s for s in specs if s["title"]["text"] == "Attribution by distance"]
    line = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")
    assert line["encoding"]["y"]["field"] == "mean" and line["encoding"]["y"]["title"] == "share of |attribution|"
    assert line["encoding"]["x"]["field"] == "distance"
    assert line["encoding"]["color"]["scale"]["domain"] == [TINY, DOC_KVP, DOC_LSTM]  # the attention plot's order first
    # Streamlit sends the chart's data beside its spec, as Arrow tables
    (chart,) = [c for c in charts(at) if json.loads(c.proto.spec)["title"]["text"] == "Attribution by distance"]
    tables = [convert_arrow_bytes_to_pandas_df(d.data.data) for d in chart.proto.datasets]
    rows = pd.concat([t for t in tables if "model" in t.columns])  # not the mark at 0 ("word just read")
    assert set(rows["model"]) == {TINY, DOC_KVP, DOC_LSTM}
    window = at.slider(key="pos_window").value
    assert set(rows["distance"]) == set(range(1, window + 2))  # 1: the word just read
    metrics = {streamlit_shows(m.label): m for m in at.metric}
    assert metrics[TINY].value == "no window" and metrics[DOC_LSTM].value == "no window"
    expected = vizlm.load(str(doc_dirs[0])).corpus_attribution("brown", "test", limit=200, **BY_DISTANCE)
    expected = expected["positions"]["beyond_window"]
    kvp = metrics[DOC_KVP]
    assert kvp.value == f"{expected['value']:.1%}" and kvp.delta == f"95% {expected['lo']:.1%}–{expected['hi']:.1%}"
    assert "at a distance of more than 4" in kvp.help
    assert len(list(tmp_path.iterdir())) == 3  # the library's call read the page's entry
    at.run()  # now cached: no estimate is said, and two models with one more to compute count only that one
    assert not [c for c in at.caption if "Attributing" in c.value]
    at.session_state["pos_attribution_others"] = [DOC_LSTM, "lstm"]
    at.run()
    no_exception(at)
    assert ("Attributing 1 model over 200 sentences takes about 4 seconds the first time on one core (then it comes "
            "from the disk cache); 3 more are read from the cache" in " ".join(c.value for c in at.caption))


# --------------------------------------------------------------------------- plugins (docs/PLUGINS.md)
def _plugin_checkpoint(tmp_path: Path, monkeypatch, name: str, family: str, **kw) -> Path:
    """A checkpoint of plugin model ``family`` with the bundled vocabulary, selectable as ``name``."""
    meta = json.loads((bundled_dir() / bundled_checkpoints()[0] / "config.json").read_text(encoding="utf-8"))
    vocab = Vocab(meta["vocab"])
    torch.manual_seed(0)
    model = build_model(family, vocab_size=len(vocab), emb_dim=8, hidden_dim=8, **kw).eval()
    folder = tmp_path / name
    save_checkpoint(folder, model, family, vocab, metrics={"valid_perplexity": 9999.0}, corpus={"name": "brown"},
                    parameters=sum(p.numel() for p in model.parameters()))
    monkeypatch.setenv("VIZLM_EXTRA_CHECKPOINTS", os.pathsep.join([os.environ["VIZLM_EXTRA_CHECKPOINTS"], str(folder)]))
    return folder


def test_the_explorer_shows_a_plugin_model_s_attention(tmp_path, monkeypatch):
    """The example plugin (examples/plugin, model ``selfattn``) chosen in the Explorer: its heat map, highlights
    and read effect, as for a built-in family."""
    pytest.importorskip("vizlm_selfattn", reason="pip install -e examples/plugin (bash scripts/setup.sh test does)")
    _plugin_checkpoint(tmp_path, monkeypatch, "tiny_selfattn", "selfattn", window=3, init_range=0.5)
    at = explorer(model="tiny_selfattn", text="the jury said it was fine .", target="4")
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert at.selectbox(key="model").value == "tiny_selfattn"
    (spec,) = heatmap_specs(at)
    assert spec["layer"][0]["encoding"]["color"]["field"] == "weight"
    assert "vizlm-highlight" in html_of(at) or "vizlm-strip" in html_of(at)
    assert "Attention effect" in {m.label for m in at.metric}


def test_a_transformer_opens_in_the_explorer(tmp_path, monkeypatch):
    """A checkpoint of the transformer family (what `vizlm import` makes of pytorch/examples' TransformerModel),
    2 layers and 2 heads, blocks of 6 tokens, chosen in the Explorer: each word's probability, surprisal and top
    predictions, and its self-attention (the last layer's mean over its heads at first) in the heat map."""
    _plugin_checkpoint(tmp_path, monkeypatch, "tiny_transformer", "transformer", layers=2, heads=2, block=6)
    at = explorer(model="tiny_transformer", text="the jury said it was fine .", target="4")
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert at.selectbox(key="model").value == "tiny_transformer"
    labels = {m.label for m in at.metric}
    assert {"P(word)", "Surprisal", "Attention effect"} <= labels
    (spec,) = heatmap_specs(at)
    assert "self-attention, layer 2, mean of 2 heads" in spec["title"]["text"]


def test_a_plugin_that_breaks_the_contract_gets_a_message_not_a_traceback(tmp_path, monkeypatch):
    """A checkpoint of a plugin whose attention rows do not sum to 1: the Explorer names the plugin and says so."""
    from test_plugins import EntryPoint, HalfRows, toy

    from vizlm.models import plugins

    monkeypatch.setattr(plugins, "entry_points", lambda: [EntryPoint("halfrows", toy(HalfRows))])
    plugins.reset()
    try:
        _plugin_checkpoint(tmp_path, monkeypatch, "tiny_halfrows", "halfrows", contract=False)
        at = explorer(model="tiny_halfrows", text="the jury said it was fine .")
        no_exception(at)
        shown = " ".join(e.value for e in at.error)
        assert "the plugin 'halfrows' (package broken-pkg 0.0.1) breaks vizlm's model contract" in shown
        assert "attention rows must sum to 1" in shown
    finally:
        plugins.reset()


# --------------------------------------------------------------------------- your own models and corpora (#27, #28)
IMPORTED = ("wlm-lstm", "wlm-gru")  # two pytorch/examples models of one data folder: one vocabulary, one corpus
USER_CORPUS = "wlm test · yours"  # the corpus pickers' label of the imported corpus's test split


@pytest.fixture(scope="session")
def imported(tmp_path_factory) -> dict[str, Path]:
    """pytorch/examples word_language_model models built as tests/test_import.py builds them, imported with
    ``vizlm import pytorch-examples`` into a checkpoints folder of their own and a data folder of their own (the
    corpus ``wlm``); beside them a folder with weights and no config (skipped with a note), and a runs folder
    with a finished run and one still training."""
    from test_import import RNNModel, _anchor_corpus

    from vizlm.core import paths
    from vizlm.cli import main
    from vizlm.modeling.importer import source_vocabulary

    root = tmp_path_factory.mktemp("yours")
    source = _anchor_corpus(root / "wlm-source")  # train / valid / test in pytorch/examples' format
    words = source_vocabulary(source)
    checkpoints, data, runs = root / "checkpoints", root / "data", root / "runs"
    for name, cell in zip(IMPORTED, ("LSTM", "GRU")):
        torch.manual_seed(len(cell))
        f = root / f"{name}.pt"
        torch.save(RNNModel(cell, len(words), 8, 8, 1).state_dict(), f)
        try:
            assert main(["--corpora", str(data), "import", "pytorch-examples", str(f), "--data", str(source), "--corpus",
                         "wlm", "--out", str(checkpoints / name)]) == 0
        finally:
            paths.clear_overrides()
    (checkpoints / "half").mkdir()
    (checkpoints / "half" / "model.safetensors").write_bytes(b"weights without their config")
    meta = json.loads((checkpoints / IMPORTED[0] / "config.json").read_text(encoding="utf-8"))
    for run, metrics in (("wlm-run", {"valid_perplexity": 30.0, "test_perplexity": 31.0}),
                         ("wlm-training", {"valid_perplexity": 30.0})):
        (runs / run).mkdir(parents=True)
        (runs / run / "model.safetensors").write_bytes((checkpoints / IMPORTED[0] / "model.safetensors").read_bytes())
        (runs / run / "config.json").write_text(json.dumps({**meta, "label": run, "metrics": metrics}), encoding="utf-8")
    return {"checkpoints": checkpoints, "data": data, "runs": runs}


@pytest.fixture
def yours(imported, monkeypatch, tmp_path) -> dict[str, Path]:
    """The app pointed at the imported folders through the environment (the bundled checkpoints listed too)."""
    monkeypatch.setenv("VIZLM_CHECKPOINTS", str(imported["checkpoints"]))
    monkeypatch.setenv("VIZLM_CORPORA", str(imported["data"]))
    monkeypatch.setenv("VIZLM_RUNS", str(imported["runs"]))
    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path / "cache"))
    return imported


def test_the_explorer_lists_and_opens_an_imported_model(yours):
    """#28: the imported model is listed beside the bundled ones, labelled by where it comes from, and opens with
    its surprisal, its top predictions and the views of a model without attention; its examples come from its
    corpus; a finished run is listed as a run, a run still training and a broken folder are not (a note says so)."""
    at = explorer(model=IMPORTED[0], text="the big cat sees the dog .")
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    options = at.selectbox(key="model").options
    assert f"{IMPORTED[0]} · yours · running text" in options and f"{IMPORTED[1]} · yours · running text" in options
    assert "amsrn · sentences" in options  # the bundled ones are listed too
    assert "wlm-run · run · running text" in options
    assert not any(o.startswith(("wlm-training", "half")) for o in options)
    assert any("1 checkpoint folder skipped" in e.label for e in at.expander)
    assert at.selectbox(key="model").value == IMPORTED[0]
    metrics = {m.label: m.value for m in at.metric}
    assert "Surprisal" in metrics and metrics["Surprisal"].endswith("bits") and "Attention effect" not in metrics
    top = [d.value for d in at.dataframe if "next word" in d.value.columns]
    assert top and len(top[0]) > 0 and set(top[0]["next word"]) <= set(json.loads(
        (yours["checkpoints"] / IMPORTED[0] / "config.json").read_text(encoding="utf-8"))["vocab"])
    assert "vizlm-strip" in html_of(at)  # the running text coloured by surprisal
    assert "unknown" not in messages(at) and "not in" not in messages(at)  # every word is in its vocabulary
    examples = at.selectbox(key="example").options
    assert examples and all(o.startswith("wlm") for o in examples), examples  # from its corpus's test split
    assert any(o.startswith("wlm passage · the ") for o in examples)  # its passages: consecutive lines
    for view in ("Surprisal per word", "Data & downloads"):  # every view of a model without attention
        at.session_state["explorer_view"] = view
        at.run()
        no_exception(at)


def test_compare_runs_on_an_imported_corpus(yours):
    """#28: Compare opens on the imported models' own corpus (the one their config.json names) and shows the
    result, without a warning: both were trained on it."""
    at = page("compare.py", cmp_a=IMPORTED[0], cmp_b=IMPORTED[1], cmp_sample=SMALL)
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert at.selectbox(key="cmp_corpus").value == USER_CORPUS
    assert USER_CORPUS in at.selectbox(key="cmp_corpus").options and "Brown test" in at.selectbox(key="cmp_corpus").options
    metrics = {m.label: m.value for m in at.metric}
    assert metrics[f"Perplexity {IMPORTED[0]}"] not in ("—", "") and metrics[f"Perplexity {IMPORTED[1]}"] not in ("—", "")
    assert charts(at) and "not trained on" not in messages(at)
    assert query(at)["corpus"] == "wlm"


def test_a_bundled_model_on_an_imported_corpus_shows_its_overlap(yours):
    """#27: a model scored on a corpus it was not trained on shows the share of the corpus's tokens outside its
    vocabulary and a warning above the result (Compare, Attention by position, Cases)."""
    from vizlm.modeling.checkpoint import load_checkpoint
    from vizlm.data.vocab import vocab_overlap

    expected = vocab_overlap(load_checkpoint(ROOT / "checkpoints" / "amsrn").vocab, "wlm", "test", yours["data"])
    assert 0 < expected.oov_rate < 1
    shown = (f"**{expected.oov_rate:.1%}** of the tokens of wlm test are outside its vocabulary "
             f"({expected.oov_tokens:,} of {expected.tokens:,}; {expected.oov_types:,} of {expected.types:,} distinct words)")
    at = page("compare.py", cmp_a="lstm", cmp_b="amsrn", cmp_sample=SMALL, cmp_corpus=USER_CORPUS)
    no_exception(at)
    warned = " ".join(w.value for w in at.warning)
    assert "Scored on a corpus a model was not trained on" in warned and shown in warned, warned
    assert "amsrn" in warned and "lstm" in warned and at.metric  # the result follows the warning
    at = page("positions.py", pos_models=["amsrn"], pos_sample=SMALL, pos_corpus=USER_CORPUS)
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert shown in " ".join(w.value for w in at.warning) and charts(at)
    at = page("cases.py", cases_models=["amsrn"], cases_sample=SMALL, cases_corpus=USER_CORPUS)
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert shown in " ".join(w.value for w in at.warning) and at.metric


@pytest.fixture
def app_argv(monkeypatch):
    """Set the app's command line (``streamlit run app.py -- ARGS``); the paths overrides it sets are cleared after."""
    import sys

    from vizlm.core import paths

    yield lambda *args: monkeypatch.setattr(sys, "argv", [APP, *map(str, args)])
    paths.clear_overrides()


@pytest.mark.parametrize("args,expect", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--checkpoints"], "expected one argument"),
    (["--corpora", "/nonexistent/vizlm-corpora"], "--corpora /nonexistent/vizlm-corpora: not a folder"),
])
def test_bad_app_arguments_give_a_message(app_argv, args, expect):
    app_argv(*args)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    no_exception(at)
    assert at.error and "arguments" in at.error[0].value
    shown = " ".join(c.value for c in at.code)
    assert expect in shown and "usage: streamlit run app.py --" in shown, shown


def test_the_readme_s_app_commands_list_an_imported_model_and_its_corpus(imported, monkeypatch, tmp_path):
    """Every `streamlit run app.py -- ...` the README and the users' docs show, run in the folder of the "Your own model" recipe (the
    model imported into runs/, its corpus where `vizlm import` writes it by default: the corpora folder), lists
    the corpus, and the model when it names --checkpoints (`--corpora data` hid the corpus)."""
    import re
    import shlex
    import shutil

    from vizlm.core import paths
    from vizlm.app.checkpoints import checkpoint_folders
    from vizlm.app.shell import apply_arguments
    from vizlm.data.registry import user_corpora

    pages = [ROOT / "README.md", *(ROOT / "docs" / f for f in ("APP.md", "CLI.md", "YOUR_MODEL.md", "YOUR_CORPUS.md"))]
    readme = "\n".join(p.read_text(encoding="utf-8") for p in pages)  # the users' pages
    commands = [shlex.split(c) for c in re.findall(r"streamlit run app\.py -- ([^`\n#…]+)", readme)]
    assert any("--checkpoints" in c for c in commands), commands
    clone = tmp_path / "clone"
    for folder in ("runs", "data", "checkpoints"):
        (clone / folder).mkdir(parents=True)
    shutil.copytree(imported["checkpoints"] / IMPORTED[0], clone / "runs" / "wt2-lstm")
    monkeypatch.chdir(clone)
    monkeypatch.setenv("VIZLM_CORPORA", str(imported["data"]))  # the corpora folder the import wrote to
    for argv in commands:
        try:
            apply_arguments(argv)
            assert "wlm" in user_corpora(), argv
            if "--checkpoints" in argv:
                assert "wt2-lstm" in checkpoint_folders(), argv
        finally:
            paths.clear_overrides()


def test_app_arguments_set_the_folders(app_argv, imported, tmp_path, monkeypatch):
    """``streamlit run app.py -- --checkpoints DIR --corpora DIR --runs DIR``: the app lists those folders' models."""
    from vizlm.core import paths

    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path / "cache"))
    app_argv("--checkpoints", imported["checkpoints"], "--corpora", imported["data"], "--runs", imported["runs"])
    at = explorer(model=IMPORTED[1], text="the dog .")
    no_exception(at)
    assert at.selectbox(key="model").value == IMPORTED[1]
    assert "wlm-run · run · running text" in at.selectbox(key="model").options
    assert (paths.checkpoints_dir(), paths.corpora_dir(), paths.runs_dir()) == (
        imported["checkpoints"], imported["data"], imported["runs"])


# --------------------------------------------------------------------------- a corpus you prepared (#27)
PREPARED = "mine"  # prepared with `vizlm prepare --corpus mine --from FOLDER`: a sentence a line, blank lines between documents
MINE = ("mine-lstm", "mine-kvp")  # two models of its vocabulary (a sentence one, a document one)
MINE_TEST = f"{PREPARED} test · yours"  # the corpus pickers' label of its test split
_SUBJECTS = ["the man", "the old woman", "a small dog", "the children", "his brother", "the zorblax"]
_VERBS = ["saw", "found", "wanted", "gave away", "looked at", "quibbeted"]
_OBJECTS = ["the house", "a letter", "the money", "her car", "the new book", "some water"]


def _prepared_text(seed: int, documents: int, sentences: int) -> str:
    """Documents of sentences of 6 to 9 words (two of them outside the bundled vocabulary), a blank line between."""
    docs = []
    for d in range(documents):
        lines = []
        for s in range(sentences):
            k = seed + 7 * d + 3 * s
            lines.append(f"{_SUBJECTS[k % 6]} {_VERBS[(k // 2) % 6]} {_OBJECTS[(k // 3) % 6]} .")
        docs.append("\n".join(lines))
    return "\n\n".join(docs) + "\n"


@pytest.fixture(scope="session")
def prepared_root(tmp_path_factory) -> dict[str, Path]:
    """The corpus ``mine`` prepared from a folder of text into a corpora folder of its own, and two untrained
    checkpoints of its vocabulary in a checkpoints folder of their own, their config.json naming it."""
    from vizlm.data.ingest import prepare_corpus

    root = tmp_path_factory.mktemp("prepared")
    source = root / "source"
    source.mkdir()
    for split, (seed, docs) in {"train": (0, 6), "valid": (1, 2), "test": (2, 3)}.items():
        (source / f"{split}.txt").write_text(_prepared_text(seed, docs, 4), encoding="utf-8")
    card = prepare_corpus(PREPARED, source, corpora_dir=root / "corpora")
    vocab = Vocab((root / "corpora" / PREPARED / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1])
    for name, family, kw in ((MINE[0], "lstm", {}), (MINE[1], "kvp", {"window": 3, "context": "document"})):
        torch.manual_seed(0)
        model = build_model(family, vocab_size=len(vocab), emb_dim=8, hidden_dim=6, **kw).eval()
        save_checkpoint(root / "checkpoints" / name, model, family, vocab, metrics={"valid_perplexity": 50.0},
                        corpus={"name": PREPARED, "checksums": card["checksums"], "reading": card["reading"]},
                        parameters=sum(p.numel() for p in model.parameters()))
    return {"corpora": root / "corpora", "checkpoints": root / "checkpoints", "source": source}


@pytest.fixture
def mine(prepared_root, monkeypatch, tmp_path) -> dict[str, Path]:
    """The app pointed at the prepared corpus and its models through the environment (the bundled ones listed too)."""
    monkeypatch.setenv("VIZLM_CHECKPOINTS", str(prepared_root["checkpoints"]))
    monkeypatch.setenv("VIZLM_CORPORA", str(prepared_root["corpora"]))
    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path / "cache"))
    return prepared_root


def test_compare_runs_on_a_prepared_corpus(mine):
    """#27: Compare lists the prepared corpus, opens on it for models trained on it (no warning) and shows the result."""
    at = page("compare.py", cmp_a=MINE[0], cmp_b=MINE[1])
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    picker = at.selectbox(key="cmp_corpus")
    assert picker.value == MINE_TEST and picker.options[:2] == [MINE_TEST, f"{PREPARED} valid · yours"]
    assert "Brown test" in picker.options
    metrics = {m.label: m.value for m in at.metric}
    assert all(metrics[f"Perplexity {m}"] not in ("—", "") for m in MINE)
    assert charts(at) and "not trained on" not in messages(at)
    assert query(at)["corpus"] == PREPARED and query(at)["split"] == "test"
    table = [d.value for d in at.dataframe if "sentence_id" in d.value.columns][-1]
    assert len(table) == 12 and set(table["sentence_id"]) == {f"d{d}:{i}" for d in range(3) for i in range(4)}
    # the corpus card in a line under the picker (escaped Markdown: its dots are backslashed)
    card = [c.value.replace("\\", "") for c in at.sidebar.caption if "documents" in c.value]
    assert card and "3 documents · 12 sentences" in card[0] and "vocabulary" in card[0], card


def test_a_bundled_model_on_a_prepared_corpus_shows_its_overlap(mine):
    """#27: every corpus page offers the prepared corpus to the bundled models, runs on it and warns of the share
    of its tokens outside their vocabulary, above the result."""
    from vizlm.modeling.checkpoint import load_checkpoint
    from vizlm.data.vocab import vocab_overlap

    expected = vocab_overlap(load_checkpoint(ROOT / "checkpoints" / "amsrn").vocab, PREPARED, "test")
    assert 0 < expected.oov_rate < 1  # zorblax, quibbeted
    shown = f"**{expected.oov_rate:.1%}** of the tokens of {PREPARED} test are outside its vocabulary"
    at = page("compare.py", cmp_a="lstm", cmp_b="amsrn", cmp_corpus=MINE_TEST)
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert MINE_TEST in at.selectbox(key="cmp_corpus").options and at.selectbox(key="cmp_corpus").options[0] != MINE_TEST
    warned = " ".join(w.value for w in at.warning)
    assert "Scored on a corpus a model was not trained on" in warned and shown in warned, warned
    assert at.metric and charts(at)
    at = page("positions.py", pos_models=["amsrn", MINE[1]], pos_corpus=MINE_TEST)
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    warned = " ".join(w.value for w in at.warning)
    assert shown in warned and f"**{MINE[1]}**" not in warned and charts(at)  # kvp was trained on it: no warning
    at = page("cases.py", cases_models=["amsrn"], cases_corpus=MINE_TEST)
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert shown in " ".join(w.value for w in at.warning) and at.metric


def test_the_corpus_pages_open_on_the_prepared_corpus_of_its_models(mine):
    """#27: Attention by position and Cases open on the corpus the chosen model was trained on, and show results."""
    at = page("positions.py", pos_models=[MINE[1]])
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert at.selectbox(key="pos_corpus").value == MINE_TEST and charts(at) and not at.warning
    at = page("cases.py", cases_models=[MINE[1]])
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert at.selectbox(key="cases_corpus").value == MINE_TEST and at.metric and not at.warning


def test_attention_by_position_opens_with_the_models_of_your_corpus(mine):
    """With a model of yours trained on a corpus of yours, Attention by position opens with it on that corpus, not
    with the bundled Brown models (minutes, and a warning per model off its corpus)."""
    at = page("positions.py")
    no_exception(at)
    assert at.multiselect(key="pos_models").value == [MINE[1]]  # the attention model of the prepared corpus
    assert at.selectbox(key="pos_corpus").value == MINE_TEST and not at.warning


def test_the_explorer_s_examples_come_from_the_prepared_corpus(mine):
    """#27: a model trained on the prepared corpus opens with examples of its test split (sentences and passages,
    by their ids dN:i), read as that corpus reads them."""
    at = explorer(model=MINE[0], text="the man saw the house .")
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    examples = at.selectbox(key="example").options
    assert examples and all(o.startswith(PREPARED) for o in examples), examples
    assert any(o.startswith(f"{PREPARED} passage · ") for o in examples)
    test = (mine["corpora"] / PREPARED / "test.orig").read_text(encoding="utf-8").splitlines()
    assert any(test[0][:20] in o for o in examples), examples
    assert "outside" not in messages(at) and "unknown" not in messages(at)  # every word is in its vocabulary


def test_a_corpus_prepared_again_is_read_again(mine, tmp_path, monkeypatch):
    """A corpus prepared again under its name (--force) while the app runs: the pages read the new files, not the
    results kept for the old ones."""
    import shutil

    from vizlm.data.ingest import prepare_corpus

    corpora = tmp_path / "corpora"
    monkeypatch.setenv("VIZLM_CORPORA", str(corpora))
    shutil.copytree(mine["corpora"], corpora)
    at = page("compare.py", cmp_a=MINE[0], cmp_b=MINE[1])
    no_exception(at)
    assert {m.label: m.value for m in at.metric}
    before = [d.value for d in at.dataframe if "sentence_id" in d.value.columns][-1]
    assert len(before) == 12
    source = tmp_path / "again"
    shutil.copytree(mine["source"], source)
    (source / "test.txt").write_text(_prepared_text(5, 2, 3), encoding="utf-8")  # 2 documents of 3 sentences
    prepare_corpus(PREPARED, source, corpora_dir=corpora, force=True)
    at = page("compare.py", cmp_a=MINE[0], cmp_b=MINE[1])
    no_exception(at)
    after = [d.value for d in at.dataframe if "sentence_id" in d.value.columns][-1]
    assert len(after) == 6 and set(after["sentence_id"]) == {f"d{d}:{i}" for d in range(2) for i in range(3)}


def test_a_link_to_compare_on_a_prepared_corpus(mine):
    """#27: a shared link names a corpus of yours as it names Brown: the page opens on it, with no note; a split it
    lacks gets one."""
    at = linked("compare.py", a="lstm", b="amsrn", corpus=PREPARED, split="valid")
    no_exception(at)
    assert at.selectbox(key="cmp_corpus").value == f"{PREPARED} valid · yours"
    assert "in the link" not in messages(at), messages(at)
    assert (query(at)["corpus"], query(at)["split"]) == (PREPARED, "valid")
    at = linked("compare.py", a="lstm", b="amsrn", corpus=PREPARED, split="dev")
    no_exception(at)
    assert f"The corpus {PREPARED} has no split 'dev' (it has train, valid, test); using its first" in messages(at)


def test_a_long_text_attributes_only_the_window_shown(monkeypatch):
    """An attribution measure on a long text computes the heat map's window of rows around the selected word,
    not every row: the cost follows what is shown."""
    from vizlm import api
    from vizlm.present.style import WINDOW_ROWS

    asked = []
    real = api.Model.attribute

    def attribute(self, text, method="integrated-gradients", n_steps=32, rows=None, **kwargs):
        asked.append(rows)
        return real(self, text, method, n_steps, rows=rows, **kwargs)

    monkeypatch.setattr(api.Model, "attribute", attribute)
    text = " ".join(["the dog saw a cat in the park and it ran ."] * 6)  # 66 words
    at = explorer(model="lstm", text=text, measure="gradient-x-input", target="50")
    no_exception(at)
    assert asked and all(rows is not None and len(rows) == WINDOW_ROWS and 50 in rows for rows in asked), asked
    assert "vz-attributed" in html_of(at)


def test_each_models_attribution_download_exports_its_own_rows(monkeypatch):
    """A download callback runs after the loop over models: it must export the rows of its own model's
    window, not the last model's (the loop variable read late, ruff B023)."""
    from types import SimpleNamespace

    from vizlm.app import views
    from vizlm.inspect.highlight import Share

    analyses = {"a": SimpleNamespace(targets=list(range(60)), text="x", head=None),
                "b": SimpleNamespace(targets=list(range(60)), text="x", head=None)}
    windows = {"a": [1, 2], "b": [7, 8, 9]}
    callbacks, exported = {}, []
    monkeypatch.setattr(views, "_rows_view", lambda n: "window")
    monkeypatch.setattr(views, "heatmap_rows", lambda sa, target: windows["a" if sa is analyses["a"] else "b"])
    monkeypatch.setattr(views, "attribution_spec", lambda *a, **k: {})
    monkeypatch.setattr(views, "attribution", lambda name, text, method, rows: name)
    monkeypatch.setattr(views.st, "caption", lambda *a, **k: None)
    monkeypatch.setattr(views.st, "vega_lite_chart", lambda *a, **k: None)
    monkeypatch.setattr(views, "download_row", lambda items, key: callbacks.setdefault(key, items))
    monkeypatch.setattr(views, "export_attribution", lambda a, f, setting, rows, target: exported.append((a, rows)))
    views.render_attribution_maps(analyses, "x", "occlusion", Share(0.2), 3)
    for key in ("attr_a", "attr_b"):
        callbacks[key][0][1]()
    assert exported == [("a", [1, 2]), ("b", [7, 8, 9])]


def test_a_compare_link_selects_the_sentence_s_first_word(doc_dirs):
    """Compare -> "Open ... in the Explorer" of a document model: the link's row is the first word of the chosen
    sentence as the Explorer reads the passage, even where a sentence before it reads as more tokens than the
    corpus gave it ("Reps." is read as "Reps" "."); counting the corpus's words selected an earlier </s>."""
    from vizlm import load
    from vizlm.app import results
    from vizlm.data.text import tokenize

    lm = load(str(doc_dirs[1]))
    for index in range(45, 80):
        text, row = results.passage_text("brown", "test", index)
        last = [t.text for t in tokenize(text.rsplit("\n", 1)[-1])]
        a = lm.analyze(text, effects=False)
        read = [t for t in a.tokens[row:] if t != "</s>"]  # the Explorer may end a sentence at "Reps. Edith"
        assert a.tokens[row] == last[0] and read[:len(last)] == last, index
        assert row == 0 or a.tokens[row - 1] == "</s>"


# --------------------------------------------------------------------------- Faithfulness
def test_faithfulness_page_says_the_cost_then_runs_the_tests_on_request(mine):
    """The page opens on the models of your corpus with a small sample, says what the tests cost and computes
    nothing until asked; then each test is drawn with its interval and downloads, the numbers those of
    Model.corpus_faithfulness (the page's computation is the API's cache entry); cached, it shows at once."""
    import vizlm
    from vizlm.present.faithfulness_plots import agreement_frame

    cache = Path(os.environ["VIZLM_CACHE"])  # the fixture's, empty
    at = page("faithfulness.py")
    no_exception(at)
    assert at.title[0].value == "Is attention an explanation?"
    assert at.multiselect(key="faith_models").value == [MINE[1]] and at.selectbox(key="faith_corpus").value == MINE_TEST
    assert at.select_slider(key="faith_sample").value == 10
    lm = vizlm.load(str(mine["checkpoints"] / MINE[1]))
    seconds = lm.faithfulness_seconds(PREPARED, "test", limit=5)
    assert seconds is not None  # not computed yet
    captions = " ".join(c.value for c in at.caption)
    assert "Testing 1 model over 10 sentences takes about" in captions and "the first time" in captions
    assert at.toggle(key="faith_run").value is False and not charts(at) and not cache.exists()
    at.select_slider(key="faith_sample").set_value(5)
    at.toggle(key="faith_run").set_value(True)
    at.run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    titles = {json.loads(c.proto.spec)["title"]["text"] for c in charts(at)}
    assert titles == {"Erasure curves", "Comprehensiveness and sufficiency (AOPC)", "Shuffled attention",
                      "The two paths by distance"}
    (table,) = [d.value for d in at.dataframe if "rankings compared" in d.value.columns]  # agreement: a table, its chart a download
    assert list(table["rankings compared"]) == list(agreement_frame(lm.corpus_faithfulness(PREPARED, "test", limit=5))["pair"])
    expected = lm.corpus_faithfulness(PREPARED, "test", limit=5)  # read from the page's cache entry
    assert lm.faithfulness_seconds(PREPARED, "test", limit=5) is None
    metrics = {m.label: m for m in at.metric}
    own = math.exp(expected["uniform"]["nll"]["value"])
    assert metrics["perplexity, own attention"].value == f"{own:.1f}"
    assert metrics["mean JSD found"].value == f"{expected['adversarial']['mean_jsd']['value']:.3f} nats"
    (erasure,) = [c for c in charts(at) if json.loads(c.proto.spec)["title"]["text"] == "Erasure curves"]
    spec = json.loads(erasure.proto.spec)
    assert any(layer["mark"]["type"] == "area" for layer in spec["layer"])  # the 95% band
    assert len([b for b in at.get("download_button") if "dl_faith_" in b.proto.id]) == 5 * 5 + 2  # + the uniform table
    at = page("faithfulness.py", faith_sample=5)  # cached: no cost said, shown without asking
    no_exception(at)
    assert not [c for c in at.caption if "Testing" in c.value] and len(charts(at)) == 4


def test_faithfulness_page_opens_on_the_repository_s_evidence():
    """The bundled models whose tests the repository holds open at once on that evidence (nothing computed,
    intervals over documents), its numbers the report's; a model without evidence says so and how to test it."""
    import vizlm.app.faithfulness as fv
    from vizlm.reproduce.corpus_evidence import faithfulness_names, read_faithfulness

    at = page("faithfulness.py")
    no_exception(at)
    models = at.multiselect(key="faith_models").value
    assert models and set(models) <= set(faithfulness_names()) and at.radio(key="faith_source").value == fv.EVIDENCE
    assert not [c for c in at.caption if "Testing" in c.value] and len(charts(at)) == 4 * len(models)
    stats = read_faithfulness(models[0]).statistics()
    own = next(m for m in at.metric if m.label == "perplexity, own attention")
    assert own.value == f"{math.exp(stats['uniform']['nll']['value']):.1f}"
    assert any("The repository's evidence" in c.value and "bootstrap over the documents" in c.value for c in at.caption)
    at = page("faithfulness.py", faith_models=[models[0], "kvp"])  # a bundled model without evidence
    no_exception(at)
    assert "holds no evidence of kvp" in messages(at) and len(charts(at)) == 4
    at.radio(key="faith_source").set_value(fv.RUN)
    at.run()
    assert at.select_slider(key="faith_sample").value == 10 and at.toggle(key="faith_run").value is False


def test_faithfulness_page_tests_one_head_of_a_transformer():
    """A Transformer is offered with a picker of its single heads (the tests replace one head's weights; a layer's
    mean is no attention the model computes), the last layer's first at first; the cost is said for that head."""
    import vizlm.app.faithfulness as fv

    at = page("faithfulness.py", faith_models=["transformer-doc"], faith_source=fv.RUN)
    no_exception(at)
    picker = at.selectbox(key="faith_head_transformer-doc")
    assert picker.value == "2.1" and picker.options == ["layer 1, head 1", "layer 1, head 2", "layer 2, head 1",
                                                        "layer 2, head 2"]
    assert not at.subheader and "Testing 1 model over 10 sentences" in " ".join(
        c.value for c in at.caption)
    at.toggle(key="faith_run").set_value(False)
    picker.set_value("1.2")
    at.run()
    no_exception(at)
    assert at.selectbox(key="faith_head_transformer-doc").value == "1.2"
    at = page("faithfulness.py", faith_models=["transformer-doc"])  # the repository's evidence of its head 2.1
    no_exception(at)
    assert at.radio(key="faith_source").value == fv.EVIDENCE
    assert [h.value for h in at.subheader] == ["transformer-doc · layer 2, head 1"] and len(charts(at)) == 3
    assert any("a Transformer has no recurrent state" in c.value for c in at.caption)


def test_the_explorer_tests_one_word_s_attention_on_request(monkeypatch):
    """An attention model's panel offers the faithfulness of the selected word, off at first (nothing computed);
    on, the adversarial weights beside the model's own and the two paths of that word."""
    import vizlm.app.faithfulness as fv

    calls = []
    real = fv.adversarial_row
    monkeypatch.setattr(fv, "adversarial_row", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    at = explorer(model=TINY, compare="lstm", text="the jury said the city had spent too much money .", target="5")
    no_exception(at)
    toggle = at.toggle(key=f"faith_word_{TINY}")
    assert toggle.value is False and not calls
    assert not [t for t in at.toggle if t.key == "faith_word_lstm"]  # no attention: nothing to test
    toggle.set_value(True)
    at.run()
    no_exception(at)
    assert calls == [5]  # this word only
    titles = [json.loads(c.proto.spec)["title"]["text"] for c in charts(at)]
    assert "Own and adversarial attention" in titles and "The two paths of this word" in titles
    assert any("Jensen-Shannon divergence" in c.value for c in at.caption)


def test_the_explorer_shows_a_transformer_head_chosen_in_the_sidebar_and_the_link(tmp_path, monkeypatch):
    """A Transformer in the Explorer: the sidebar picks a layer and head (or a layer's mean), the link keeps it, the
    heat map, the highlights, the effects and the table show that head."""
    _plugin_checkpoint(tmp_path, monkeypatch, "tiny_transformer", "transformer", heads=2, layers=2, context="document")
    at = explorer(model="tiny_transformer", text="the jury said it was fine .", target="3", head="1.2")
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    picker = at.selectbox(key="head_tiny_transformer")
    assert picker.value == "1.2" and picker.options == ["layer 1, mean of 2 heads", "layer 1, head 1",
                                                        "layer 1, head 2", "layer 2, mean of 2 heads",
                                                        "layer 2, head 1", "layer 2, head 2"]
    (spec,) = heatmap_specs(at)
    assert "self-attention, layer 1, head 2" in json.dumps(spec)
    assert at.query_params["head"] in ("1.2", ["1.2"])
    assert "Attention effect" in {m.label for m in at.metric}  # the head's output zeroed
    assert any("Self-attention, layer 1, head 2" in c.value and "Without it" in c.value for c in at.caption)
    assert "effect (bits)" in str(at.dataframe[0].value.columns.tolist())
    toggle = at.toggle(key="faith_word_tiny_transformer")  # one head: its adversary on request
    toggle.set_value(True).run()
    no_exception(at)
    assert "Own and adversarial attention" in [json.loads(c.proto.spec)["title"]["text"] for c in charts(at)]
    picker.set_value("2").run()
    no_exception(at)
    (spec,) = heatmap_specs(at)
    assert "self-attention, layer 2, mean of 2 heads" in json.dumps(spec) and at.query_params["head"] in ("2", ["2"])
    assert not [t for t in at.toggle if t.key == "faith_word_tiny_transformer"]  # a layer's mean: no test
    at = explorer(model="tiny_transformer", text="the jury said it was fine .", head="7.1")
    no_exception(at)
    assert "not one of tiny_transformer's 2 layers" in messages(at)


def test_positions_page_draws_a_line_per_transformer_layer(tmp_path, monkeypatch):
    _plugin_checkpoint(tmp_path, monkeypatch, "tiny_transformer", "transformer", heads=2, layers=2, context="document")
    at = page("positions.py", pos_models=["tiny_transformer", TINY], pos_sample=SMALL, pos_window=4)
    no_exception(at)
    specs = json.dumps([json.loads(c.proto.spec) for c in charts(at)], ensure_ascii=False)
    assert "tiny_transformer · layer 1" in specs and "tiny_transformer · layer 2" in specs
    assert "1 = the word just before it, the word just read" in specs  # the x axis starts at the word just read
    assert any("line per layer" in c.value for c in at.caption)
    at.session_state["pos_view"] = "One text"
    at.run()
    no_exception(at)


def test_cases_page_labels_a_transformer_head_picked_in_the_sidebar(tmp_path, monkeypatch):
    _plugin_checkpoint(tmp_path, monkeypatch, "tiny_transformer", "transformer", heads=2, layers=2, context="document")
    at = page("cases.py", cases_models=["tiny_transformer"], cases_sample=SMALL, cases_threshold=0.5)
    no_exception(at)
    picker = at.selectbox(key="cases_head_tiny_transformer")
    assert picker.value == "2"  # the last layer's heads together, as the Explorer opens
    assert at.metric and any("layer 2, mean of 2 heads" in c.value for c in at.caption)
