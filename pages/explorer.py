"""Explorer: type a sentence or a passage and see which earlier words each model attends to.

The app's front page (``app.py`` registers it as the default page). Thin, like every
page: sidebar inputs -> validation (``st.stop()``) -> one cached call of the Python API
(:meth:`vizlm.api.Model.analyze`, through :mod:`vizlm.app.results`) -> rendering; the URL state,
the example picker, the selected word and a model's panel are :mod:`vizlm.app.explorer`'s.
A passage of several sentences is read as running text by document checkpoints and a
sentence at a time by sentence checkpoints (:data:`vizlm.inspect.reading.READINGS`); each panel says which.
Its state lives in the URL: ``?model=amsrn&compare=lstm&text=...&threshold=0.2&target=3``
(``topk=3`` instead of ``threshold`` for top-k mode, ``measure=effect`` for the heat map coloured by
effect, ``measure=integrated-gradients`` / ``gradient-x-input`` / ``occlusion`` for what each prediction
depended on, every model the LSTM included), so a view can be shared and reopened.
"""

from __future__ import annotations

import streamlit as st

from vizlm.app import checkpoints as ck
from vizlm.app import explorer as ex
from vizlm.app import results
from vizlm.app import widgets as ui
from vizlm.app.shell import page_setup
from vizlm.app.views import render_data, render_gates, render_heatmaps, render_surprisal
from vizlm.present.links import ExplorerState, head_code

page_setup()


def explorer() -> None:
    names = ck.model_names()
    if not names:
        st.error("No checkpoints found in `checkpoints/`. Train one with `vizlm train --model lstm`.", icon=":material/error:")
        st.stop()
    ex.seed_from_url(names)

    names, model, compare, highlight, measure = ex.sidebar()
    text = ex.text_input(model, compare)

    # ---------------------------------------------------------------- validation
    if not text or not text.strip():
        st.info("Type a sentence or a passage above (or pick an example) to see the models' attention.",
                icon=":material/edit:")
        st.stop()
    shown = [model] + ([compare] if compare else [])
    analyses = {}
    for name in shown:
        try:
            analyses[name] = results.analyze_text(name, text)
        except ck.UserError as exc:
            ui.show_error(exc)
            st.stop()
    analyses = {name: ex.head_picker(name, text, sa, name == model) for name, sa in analyses.items()}
    sa = analyses[model]
    for note in sa.notes:
        st.info(note[:1].upper() + note[1:] + ".", icon=":material/info:")
    ex.warn_unknown(analyses, names)

    r = ex.word_picker(sa, text, highlight)
    ui.write_explorer_query(ExplorerState(model, compare or None, text, highlight, r, measure,
                                          None if sa.head is None else head_code(sa.head)))

    # ---------------------------------------------------------------- per-model panels
    cols = st.columns(len(shown), gap="large")
    for col, name in zip(cols, shown):
        with col:
            ex.model_panel(name, analyses[name], r, highlight, text, measure)

    # ---------------------------------------------------------------- whole-text views
    st.divider()
    # Only the open tab runs: each view costs a chart or an export, so nothing is drawn unseen.
    views = {
        "Heat map": lambda: render_heatmaps(analyses, text, highlight, r, measure),
        "Surprisal per word": lambda: render_surprisal(analyses),
        "AMSRN gates": lambda: render_gates(analyses),
        "Data & downloads": lambda: render_data(analyses, r, highlight),
    }
    if all(a.gates is None for a in analyses.values()):  # only AMSRN models have selection gates
        del views["AMSRN gates"]
    if st.session_state.get("explorer_view") not in views:
        st.session_state["explorer_view"] = next(iter(views))
    for tab, render in zip(st.tabs(list(views), key="explorer_view", on_change="rerun"), views.values()):
        if tab.open:
            with tab:
                render()


explorer()
