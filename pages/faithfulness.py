"""Faithfulness: is attention an explanation?

The literature's tests of an attention model's weights, over the first sentences of a split (each costs about a
second per word, so the sample is small at first and the cost is said before it starts): Serrano & Smith's
erasure curves, ERASER's comprehensiveness and sufficiency, Jain & Wallace's permutations (binned by the row's
largest weight), their adversarial attention and the agreement of attention with the explanations beside the
explanations' agreement with each other (the ceiling), Wiegreffe & Pinter's uniform baseline, and the two paths
(the attention read vs the recurrent state) by distance. A bundled model opens on the repository's evidence
(``vizlm reproduce --faithfulness``: the first sentences of every test document, intervals over documents), read at
once. Thin page: inputs -> the evidence (:func:`vizlm.app.faithfulness.evidence_result`) or
:meth:`vizlm.Model.corpus_faithfulness` (through :mod:`vizlm.app.faithfulness`, in the background) -> render.
"""

from __future__ import annotations

import streamlit as st

from vizlm.app import checkpoints as ck
from vizlm.app import faithfulness as fv
from vizlm.app import widgets as ui
from vizlm.app.shell import page_setup

page_setup()

with st.sidebar:
    models = ui.attention_models_picker("Faithfulness", "faith_models", "None of the checkpoints has attention.",
                                        first=fv.first_models, self_attention=True)
    label, corpus, split = ui.corpus_picker("faith_corpus", models)
    heads = {m: fv.head_picker(m) for m in models}  # a Transformer's head tested
    kept = {m: fv.evidence_result(m, corpus, split, heads[m]) for m in models}  # the repository's, read at once
    source = fv.RUN
    if any(res for res, _ in kept.values()):
        ui.keep_choice("faith_source", [fv.EVIDENCE, fv.RUN], fv.EVIDENCE)
        source = st.radio("Show", [fv.EVIDENCE, fv.RUN], key="faith_source",
                          help="The repository's evidence: the tests as `vizlm reproduce --faithfulness` ran them on "
                               "the bundled models (intervals over documents), read at once. Run the tests: over the "
                               "first sentences of the split, here.")
    if source == fv.RUN:
        ui.keep_choice("faith_sample", list(fv.SAMPLES), fv.DEFAULT_SAMPLE)
        limit = st.select_slider("Sentences", fv.SAMPLES, key="faith_sample",
                                 help="The first sentences of the split (a document model reads them as passages). "
                                      "Every test reads each word again many times: about a second per word and "
                                      "model the first time, then the result comes from the disk cache.")

st.title("Is attention an explanation?", anchor=False)
st.caption("The literature's tests of attention as an explanation of a prediction, over the first sentences of a split: "
           "does dropping, shuffling or replacing the weights change the prediction, do they agree with other "
           "explanations, and does an earlier word reach the prediction through the attention at all?")
if not models:
    st.info("Pick at least one attention model in the sidebar.", icon=":material/info:")
    st.stop()

ui.off_corpus_warning(models, corpus, split)  # a model not trained on this corpus: its overlap, above the result
if source == fv.EVIDENCE:
    for name in models:
        st.subheader(fv.title(name, heads[name]), anchor=False, divider="gray")
        res, why = kept[name]
        if res is None:
            st.info(f"The repository holds no evidence of {ui.md_escape(name)} on {ui.md_escape(corpus)}/"
                    f"{ui.md_escape(split)}{f' ({ui.md_escape(why)})' if why else ''}: choose “{fv.RUN}” in the "
                    "sidebar to test it here.", icon=":material/info:")
            continue
        fv.render_result(res, f"faith_{name}")
    st.stop()
try:
    cost = fv.estimate(models, corpus, split, limit, heads)
except (ValueError, ck.UserError) as exc:
    ui.show_error(exc)
    st.stop()
if cost:
    st.caption(cost)  # said before it starts
run = cost is None or st.toggle(  # a result in the disk cache shows at once
    "Run the tests", key="faith_run",
    help="Starts the tests of the chosen models that are not in the disk cache, in the background (a Cancel button "
         "stops one). They go on if you open another page.")
if not run:
    st.stop()

for name in models:
    st.subheader(fv.title(name, heads[name]), anchor=False, divider="gray")
    try:
        res = fv.corpus_result(name, corpus, split, limit, heads[name])
    except (ValueError, ck.UserError) as exc:
        ui.show_error(exc)
        continue
    fv.render_result(res, f"faith_{name}")
