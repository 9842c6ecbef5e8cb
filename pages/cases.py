"""Cases: how often each model's attention highlights fit the trigger / causal / phrase / grammar
patterns of the AMSRN paper, and a gallery of the strongest examples, drawn like the Explorer.

Thin page: inputs -> one library call per model (:func:`vizlm.cases.corpus_cases`) -> render.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from vizlm import app_support as sup
from vizlm.plots import highlighted_html

sup.route_through_app()

LABEL_HELP = {
    "trigger": "the attended word comes back: same word, same stem, or a pronoun for the same entity",
    "causal": "a causal connective (because, so, due to, …) or cause–effect verb links the two",
    "phrase": "the attended word starts a phrase the target completes (collocation statistics of Brown train)",
    "grammar": "a grammatical dependency: subject–verb agreement, determiner → noun, auxiliary → verb form",
}


@st.cache_data(show_spinner=False, max_entries=32)
def case_report(name: str, key: str, corpus: str, split: str, threshold: float, limit: int | None, examples: int) -> dict:
    from vizlm.cases import corpus_cases

    return sup.with_progress(corpus_cases, sup.get_checkpoint(name), corpus, split, threshold=threshold, limit=limit,
                             examples_per_label=examples, text=f"Labelling the attention of {name} on {corpus}/{split}").to_dict()


with st.sidebar:
    models = sup.attention_models_picker("Cases", "cases_models",
                                         "No attention model among the checkpoints: cases label attention highlights.")
    label_name, corpus, split = sup.corpus_picker("cases_corpus")
    limit = sup.sample_picker("cases_sample", default="first 1,000 sentences")
    st.session_state.setdefault("cases_threshold", 0.2)
    threshold = st.slider("Attention threshold", 0.05, 1.0, step=0.05, key="cases_threshold",
                          help="A (predicted word, earlier word) pair counts when its attention weight reaches this.")
    st.session_state.setdefault("cases_examples", 8)
    per_label = st.slider("Examples per label", 3, 30, key="cases_examples")

st.title("Cases", anchor=False)
st.caption("When a model attends strongly to an earlier word, why? Transparent rules (see `vizlm/cases.py`) label each "
           "highlighted pair as **trigger**, **causal**, **phrase** or **grammar** — or leave it unlabelled.")
if not models:
    st.info("Pick at least one model in the sidebar.", icon=":material/info:")
    st.stop()

reports = {}
for name in models:
    try:
        reports[name] = case_report(name, sup.model_key(name), corpus, split, threshold, limit, per_label)
    except (ValueError, sup.UserError) as exc:
        sup.show_error(exc)
        st.stop()

rows = []
for name, rep in reports.items():
    for lab, n in rep["counts"].items():
        rows.append({"model": name, "label": lab, "count": n, "share": rep["shares"].get(lab, 0.0)})
    unlabelled = rep["pairs"] - rep["labelled"]
    rows.append({"model": name, "label": "unlabelled", "count": unlabelled, "share": unlabelled / rep["pairs"] if rep["pairs"] else 0.0})
counts = pd.DataFrame(rows)

cols = st.columns(len(reports))
for col, (name, rep) in zip(cols, reports.items()):
    col.metric(f"{name}: pairs labelled", f"{rep['labelled']:,} / {rep['pairs']:,}",
               help=f"highlighted (word, earlier word) pairs over {rep['sentences']:,} sentences with at least one label")
left, right = st.columns([3, 2], gap="large")
with left:
    chart = sup.case_counts_chart(counts)
    sup.show_chart(chart)
    sup.chart_downloads(chart, f"cases-{corpus}-{split}", "cases_counts", counts)
with right:
    st.dataframe(counts.pivot(index="label", columns="model", values="count").reset_index(), hide_index=True, width="stretch")
    for lab, text in LABEL_HELP.items():
        st.markdown(f":{sup.LABEL_COLOURS[lab]}-badge[{lab}] :small[{text}]")

st.subheader("Strongest examples", anchor=False)
f1, f2, f3 = st.columns([3, 2, 3])
sup.keep_choices("cases_labels", list(LABEL_HELP), list(LABEL_HELP))
labels = f1.pills("Labels", list(LABEL_HELP), selection_mode="multi", key="cases_labels")
sup.keep_choices("cases_gallery_models", list(reports), list(reports))
gallery_models = f2.pills("Models", list(reports), selection_mode="multi", key="cases_gallery_models")
query = f3.text_input("Word filter", key="cases_query", placeholder="e.g. they, because, are…",
                      help="Show only examples whose predicted or attended word contains this text.").strip().lower()

examples = [(name, lab, ex) for name, rep in reports.items() if name in gallery_models
            for lab in labels for ex in rep["examples"].get(lab, [])]
if query:
    examples = [e for e in examples if query in e[2]["word"].lower() or query in e[2]["attended"].lower()]
examples.sort(key=lambda e: -e[2]["weight"])
if not examples:
    st.info("No example matches these filters. Lower the threshold, use more sentences or clear the filters.", icon=":material/filter_alt_off:")
    st.stop()
SHOW = 30
st.caption(f"{min(len(examples), SHOW)} of {len(examples)} example(s), heaviest first. Each is drawn as in the Explorer: "
           "the predicted word is outlined, the attended words are coloured by weight. Filter by label, model or word.")


grid = st.columns(2, gap="medium")
for i, (name, lab, ex) in enumerate(examples[:SHOW]):
    with grid[i % 2].container(border=True):
        st.markdown(f":{sup.LABEL_COLOURS.get(lab, 'gray')}-badge[{lab}] **{sup.md_escape(ex['attended'])}** → "
                    f"**{sup.md_escape(ex['word'])}** · weight {ex['weight']:.2f} · {sup.md_escape(name)} · "
                    f":small[{sup.md_escape(ex['sentence_id'])}]")
        idx = sup.sentence_index(corpus, split, ex["sentence_id"])
        if idx is not None:
            sa = sup.analyze_corpus_sentence(name, corpus, split, idx)
            st.html(highlighted_html(sa, ex["target"], threshold=threshold, caption=False))
            text = sup.sentence_text(corpus, split, idx)
        else:
            st.markdown(sup.md_escape(ex.get("sentence", "")))
            text = ex.get("sentence", "")
        st.caption(sup.md_escape(ex["evidence"]))
        st.page_link(sup.EXPLORER, label="Open in the Explorer", icon=":material/open_in_new:",
                     query_params=sup.explorer_query(name, text, target=ex["target"], threshold=threshold))
