"""Cases: how often each model's attention highlights fit the trigger / causal / phrase / grammar
patterns of the AMSRN paper, and a gallery of the strongest examples, drawn like the Explorer.

Thin page: inputs -> one library call per model (:func:`vizlm.inspect.case_gallery.corpus_cases`) -> render.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from vizlm.inspect.analysis import head_words
from vizlm.inspect.highlight import DEFAULT, Share
from vizlm.app import checkpoints as ck
from vizlm.app import jobs, results
from vizlm.app import widgets as ui
from vizlm.app.shell import EXPLORER, page_setup
from vizlm.inspect.case_gallery import GALLERY_EXAMPLES, GALLERY_LIMIT, GALLERY_RANK, corpus_cases, gallery_order
from vizlm.inspect.case_rules import LABEL_DESCRIPTIONS
from vizlm.present.links import explorer_query
from vizlm.present.charts import case_counts_chart
from vizlm.present.fragments import attention_key_html, highlighted_html

page_setup()


# how the gallery picks its strongest examples (vizlm.inspect.case_gallery.RANKINGS; the default: vizlm.inspect.case_gallery.GALLERY_RANK)
RANK_LABELS = {"above_uniform": "Above uniform", "weight": "Weight", "effect": "Effect", "attribution": "Attribution"}
RANK_ORDER = {"above_uniform": "the most weight above an even spread first", "weight": "heaviest first",
              "effect": "the most helpful slot first (by effect)",
              "attribution": "the attended word that raised the prediction most first (by attribution)"}


def case_report(name: str, key: str, corpus: str, split: str, highlight: Share, limit: int | None, examples: int,
                rank: str, head: tuple[int, int | None] | None = None) -> dict:
    """vizlm.inspect.case_gallery.corpus_cases (disk-cached) in the background for every session (vizlm.app.jobs);
    ``head``: a Transformer's layer and head."""
    version = results.corpus_version(corpus, split)  # a corpus prepared again is read again
    return jobs.result(("cases", key, corpus, split, version, highlight, limit, examples, rank, head), corpus_cases,
                       ck.get_checkpoint(name), corpus, split, highlight, limit=limit,
                       examples_per_label=examples, rank=rank, head=head,
                       text=f"Labelling the attention of {name} on {corpus}/{split}"
                            + (" and attributing its predictions" if rank == "attribution" else "")).to_dict()


with st.sidebar:
    models = ui.attention_models_picker("Cases", "cases_models",
                                         "No attention model among the checkpoints: cases label attention highlights.",
                                         self_attention=True)
    label_name, corpus, split = ui.corpus_picker("cases_corpus", models)
    limit = ui.sample_picker("cases_sample", default=ui.sample_label(ui.sample_slug(GALLERY_LIMIT)))
    st.session_state.setdefault("cases_threshold", DEFAULT.share)
    highlight = Share(st.slider("Attention threshold", 0.05, 1.0, step=0.05, key="cases_threshold",
                                help="A (predicted word, earlier word) pair counts when its attention weight reaches this."))
    st.session_state.setdefault("cases_examples", GALLERY_EXAMPLES)
    per_label = st.slider("Examples per label", 3, 30, key="cases_examples")
    st.session_state.setdefault("cases_rank", GALLERY_RANK)
    rank = st.segmented_control("Strongest examples by", list(RANK_LABELS), key="cases_rank", required=True,
                                format_func=RANK_LABELS.get,
                                help="Above uniform: the weight minus 1 / the slots the word could attend to, how much "
                                     "the attention chose this slot over an even spread. Weight: the pairs with the most "
                                     "attention. Effect: the pairs whose slot helped the prediction most — log₂ P(word) "
                                     "minus the same with that slot dropped, in bits. Attribution: the pairs whose "
                                     "attended word the prediction actually depended on most — gradient × input of "
                                     "log₂ P(word) to that word, in bits; positive: it raised P(word), negative: it "
                                     "lowered it (ranked by the signed value, lowest last). Computed for this ranking "
                                     "only: one more batched gradient (backward) pass per sentence, or per 64 words of "
                                     "a document for a document-level model, so a first report takes longer.")

heads = {}  # a Transformer's layer and head, picked in the sidebar
for name in models:
    if ck.self_attending(name):
        config = ck.get_checkpoint(name).model.config
        layers, per_layer = config.layers, config.heads
        heads[name] = ui.head_select(name, layers, per_layer, f"cases_head_{name}", (layers - 1, None))

st.title("Cases", anchor=False)
st.caption("When a model attends strongly to an earlier word, why? Transparent rules (see `vizlm/inspect/case_rules.py`) label "
           "each highlighted pair as **trigger**, **causal**, **phrase** or **grammar** — or leave it unlabelled. A "
           "document-level model reads each document as running text, so its pairs can cross sentence boundaries (an "
           "entity mentioned in an earlier sentence); a sentence-level model reads every sentence alone.")
if not models:
    st.info("Pick at least one model in the sidebar.", icon=":material/info:")
    st.stop()
if heads:
    shown = "; ".join(f"**{ui.md_escape(n)}**: {head_words(head, ck.get_checkpoint(n).model.config.heads)}"
                      for n, head in heads.items())
    st.caption(f"A Transformer's pairs are those of the self-attention picked in the sidebar ({shown}); it reads the "
               "word just read too, and the first word of each block attends to itself alone.")

ui.off_corpus_warning(models, corpus, split)  # a model not trained on this corpus: its overlap, above the counts
reports = {}
for name in models:
    try:
        reports[name] = case_report(name, ck.model_key(name), corpus, split, highlight, limit, per_label, rank,
                                    heads.get(name))
    except (ValueError, ck.UserError) as exc:  # this model fails alone, by name: the others are shown
        ui.show_error(f"{name}: {exc}")
if not reports:
    st.stop()

rows = []
for name, rep in reports.items():
    for lab, n in rep["counts"].items():
        rows.append({"model": name, "label": lab, "count": n, "share": rep["shares"].get(lab, 0.0)})
    unlabelled = rep["pairs"] - rep["labelled"]
    rows.append({"model": name, "label": "unlabelled", "count": unlabelled, "share": unlabelled / rep["pairs"] if rep["pairs"] else 0.0})
counts = pd.DataFrame(rows)

# a heading and the model's name as each metric's label: a label of a quarter page holds about 30 characters
st.markdown("**Highlighted pairs with a label**")
cols = st.columns(min(4, len(reports)))  # four to a row: a name and its count stay readable
for i, (name, rep) in enumerate(reports.items()):
    cols[i % len(cols)].metric(ui.md_escape(name), f"{rep['labelled']:,} / {rep['pairs']:,}",
               help=f"highlighted (word, earlier word) pairs of {name} over {rep['sentences']:,} sentences with at "
                    "least one label")
left, right = st.columns([2, 3], gap="large")
with left:
    chart = case_counts_chart(counts)
    ui.show_chart(chart)
    ui.chart_downloads(chart, f"cases-{corpus}-{split}", "cases_counts", counts)
with right:
    # a row per model, a column per label: the labels are few and short, the models many (a column per model
    # scrolled sideways with eight); the unlabelled pairs are the metrics' pairs less the labelled ones
    label_columns = {lab: st.column_config.NumberColumn(lab, width="small") for lab in LABEL_DESCRIPTIONS}
    st.dataframe(counts.pivot(index="model", columns="label", values="count").reindex(index=list(reports),
                 columns=list(label_columns)).reset_index(), hide_index=True, width="stretch", column_config=label_columns)
    effects = pd.DataFrame([{"model": name} | {lab: rep.get("mean_effect", {}).get(lab) for lab in LABEL_DESCRIPTIONS}
                            for name, rep in reports.items()])
    st.dataframe(effects, hide_index=True, width="stretch",
                 column_config={lab: st.column_config.NumberColumn(lab, format="%+.3f", width="small")
                                for lab in LABEL_DESCRIPTIONS})
    st.caption("Above: pairs per label. Below: their mean slot effect in bits (log₂ P(word) minus the same with the "
               "attended word's slot dropped): does the attention on these pairs matter?")
    for lab, text in LABEL_DESCRIPTIONS.items():
        st.markdown(f"{ui.label_badge(lab)} :small[{text}]")

# each label's rate beside its distance-matched chance rate (vizlm.inspect.case_chance.label_rates_vs_chance)
chance = pd.DataFrame([{"label": lab, "model": name, "rate": c["observed"], "chance": c["chance"], "ratio": c["enrichment"],
                        "low": c["low"], "high": c["high"], "resampled": f"{c['units']:,} {c['unit']}"}
                       for name, rep in reports.items() for lab, c in rep.get("chance", {}).items()])
if not chance.empty:
    percent = {k: st.column_config.NumberColumn(k, format="percent") for k in ("rate", "chance")}
    st.dataframe(chance, hide_index=True, width="stretch", column_config={
        **percent, "ratio": st.column_config.NumberColumn("rate / chance", format="%.2f×"),
        "low": st.column_config.NumberColumn("rate − chance: 95% from", format="percent"),
        "high": st.column_config.NumberColumn("to", format="percent")})
    st.caption("**Chance**: how often the same rule fires on all (word, earlier word) pairs at the same distances, "
               "whether attention chose them or not. A rate near chance (rate / chance ≈ 1, an interval around 0) "
               "means the highlights fit the pattern no more often than their distances alone predict. The interval "
               "resamples documents (sentences where there are none); blank with a single one.")

st.subheader("Strongest examples", anchor=False)
f1, f2, f3 = st.columns([3, 3, 2])
ui.keep_choices("cases_labels", list(LABEL_DESCRIPTIONS), list(LABEL_DESCRIPTIONS))
labels = f1.pills("Labels", list(LABEL_DESCRIPTIONS), selection_mode="multi", key="cases_labels")
ui.keep_choices("cases_gallery_models", list(reports), list(reports))
# a multiselect, not pills: a narrow column showed the buttons of two models of eight
gallery_models = f2.multiselect("Models", list(reports), key="cases_gallery_models", placeholder="Pick models to show")
query = f3.text_input("Word filter", key="cases_query", placeholder="e.g. they, because, are…",
                      help="Show only examples whose predicted or attended word contains this text.").strip().lower()

examples = [(name, lab, ex) for name, rep in reports.items() if name in gallery_models
            for lab in labels for ex in rep["examples"].get(lab, [])]
if query:
    examples = [e for e in examples if query in e[2]["word"].lower() or query in e[2]["attended"].lower()]
examples = gallery_order(examples, rank)
if not examples:
    st.info("No example matches these filters. Lower the threshold, use more sentences or clear the filters.", icon=":material/filter_alt_off:")
    st.stop()
SHOW = 30
st.caption(f"{min(len(examples), SHOW)} of {len(examples)} example(s), {RANK_ORDER[rank]}, one per word pair, the "
           "models taking turns. Each is drawn as in the Explorer: the predicted word is outlined, the attended words "
           "are coloured by weight. Filter by label, model or word.")
st.caption("Why above uniform: a model whose attention has one slot (a window of 1, like `attention-doc`) always "
           "puts weight 1 there, so its weight chooses nothing. The weight minus 1 / the slots the word could attend "
           "to says how much the attention chose a slot over an even spread: 0 for such a model.")
st.html(attention_key_html())


grid = st.columns(2, gap="medium")
for i, (name, lab, ex) in enumerate(examples[:SHOW]):
    with grid[i % 2].container(border=True):
        effect = "" if ex.get("effect") is None else f" · effect {ex['effect']:+.2f} bits"
        if ex.get("attribution_bits") is not None:
            effect += f" · attribution {ex['attribution_bits']:+.2f} bits"
        st.markdown(f"{ui.label_badge(lab)} **{ui.md_escape(ex['attended'])}** → "
                    f"**{ui.md_escape(ex['word'])}** · weight {ex['weight']:.2f} (uniform {1 / ex['slots']:.2f})"
                    f"{effect} · {ui.md_escape(name)} · "
                    f":small[{ui.md_escape(ex['sentence_id'])}]")
        idx = results.sentence_index(corpus, split, ex["sentence_id"])
        reading = ex.get("reading")  # a document read as running text: the case within its document
        if reading and idx is not None:  # the document read up to the target's sentence: all the card shows
            first = results.sentence_index(corpus, split, reading["document"][0])
            sa = results.analyze_corpus_passage(name, corpus, split, first, idx)
            span = (reading["span"][0], min(reading["span"][1] or len(sa.tokens), len(sa.tokens)))
            st.html(highlighted_html(sa, reading["target"], highlight, caption=False, span=span))
            text = ex["sentence"]
        elif idx is not None:
            sa = results.analyze_corpus_sentence(name, corpus, split, idx)
            st.html(highlighted_html(sa, ex["target"], highlight, caption=False))
            text = results.sentence_text(corpus, split, idx)
        else:
            st.markdown(ui.md_escape(ex.get("sentence", "")))
            text = ex.get("sentence", "")
        st.caption(ui.md_escape(ex["evidence"]))
        st.page_link(EXPLORER, label="Open in the Explorer", icon=":material/open_in_new:",
                     query_params=explorer_query(name, text, target=ex["target"], highlight=highlight))
