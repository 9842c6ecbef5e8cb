"""Models: one card per checkpoint (architecture, size, corpus, training curve, perplexity),
then every model in one table next to the numbers published in the papers."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from vizlm.app import checkpoints as ck
from vizlm.app import widgets as ui
from vizlm.app.shell import page_setup
from vizlm.modeling.checkpoint import meta_corpus
from vizlm.present.export import export_frame, safe_filename
from vizlm.present.charts import training_curve_chart
from vizlm.present.tables import config_items, epochs_text, models_frame, paper_frame

page_setup()
st.title("Models", anchor=False)
st.caption("The checkpoints this app can show. Perplexity: lower is better; test = Brown test split, "
           "WSJ = the Penn Treebank sample, out of domain for models trained on Brown.")

names = ck.model_names()
if not names:
    st.error("No checkpoints found in `checkpoints/`. Train one with `vizlm train --model lstm`.", icon=":material/error:")
    st.stop()

table = models_frame({name: ck.model_meta(name) for name in names})
fmt = {c: st.column_config.NumberColumn(c, format="%.1f") for c in ("valid ppl", "test ppl", "WSJ ppl")}
fmt["parameters"] = st.column_config.NumberColumn("parameters", format="localized")
fmt["test ppl vs LSTM"] = st.column_config.NumberColumn("test ppl vs LSTM", format="percent", help="negative = better than the LSTM of the same corpus and reading (blank: there is none)")

per_row = 2
group = None
for i, name in enumerate(names):
    if ck.model_group(name) != group:  # a heading per paper and protocol (names come grouped)
        group = ck.model_group(name)
        st.subheader(group, anchor=False, divider="gray")
        cols, i0 = st.columns(per_row, gap="medium"), i
    meta = ck.model_meta(name)
    metrics = meta.get("metrics", {})
    with cols[(i - i0) % per_row].container(border=True):
        head, badge = st.columns([3, 1], vertical_alignment="center")
        head.subheader(name, anchor=False)
        badge.markdown(f":blue-badge[{ui.md_escape(meta.get('model', '?'))}]" + (" :orange-badge[uploaded]" if name.startswith(ck.UPLOAD_PREFIX) else ""))
        if first := ck.first_seed(name):
            st.caption(f"**{ui.md_escape(first)}** trained again with seed {ui.md_escape(str(ck.model_seed(name)))}, "
                       f"for the spread of attention across seeds: the Faithfulness page shows {ui.md_escape(first)} "
                       "reading this model's attention.")
        with st.container(horizontal=True, wrap=True, gap="medium"):  # wraps instead of cutting numbers off
            n_params = meta.get("parameters")
            st.metric("Parameters", f"{n_params / 1e6:.2f} M" if isinstance(n_params, int) else "—", width="content",
                      help=f"{n_params:,} trainable weights" if isinstance(n_params, int) else None)
            for label, key in (("Valid ppl", "valid_perplexity"), ("Test ppl", "test_perplexity"), ("WSJ ppl", "wsj_perplexity")):
                v = metrics.get(key)
                st.metric(label, f"{v:.1f}" if isinstance(v, (int, float)) else "—", width="content",
                          help=None if v is not None else "not measured yet (training still running?)")
        corpus = meta_corpus(meta) or "?"
        st.caption(f"Trained on **{ui.md_escape(corpus)}** · vocabulary {meta.get('vocab_size', 0):,} words · "
                   f"{ui.md_escape(epochs_text(meta))} · "
                   + " · ".join(f"{ui.md_escape(k)} {ui.md_escape(v)}" for k, v in config_items(meta)))
        log = meta.get("train_log", [])
        if log:
            chart = training_curve_chart(name, log)
            ui.show_chart(chart, width="stretch")
            with st.popover("Download curve", icon=":material/download:"):
                ui.chart_downloads(chart, f"training-{safe_filename(name)}", f"curve_{name}", pd.DataFrame(log))
        else:
            st.caption("No training log beside this checkpoint.")
        command = (meta.get("train") or {}).get("command")
        imported = meta.get("imported")
        if isinstance(imported, dict) and not command:
            what = imported.get("model") or imported.get("cell") or "a model"
            source = "pytorch/examples' main.py" if imported.get("kind") == "pytorch-examples" else "elsewhere"
            st.caption(f"Trained by {source} ({ui.md_escape(str(what))}) and imported with `vizlm import`"
                       + (f"; {ui.md_escape(str(imported.get('log')))} is its training log" if imported.get("log") else "")
                       + ". The commands are in experiments.toml and docs/RESULTS.md.")
        if command:
            st.code(command, language="bash", wrap_lines=True)
            for path in ck.missing_run_folders(command):
                st.caption(f"**{ui.md_escape(path)}** is not in the repository: it is an earlier training run that is not bundled "
                           "(made by a first stage, as above for lstm; every command is in docs/RESULTS.md).")

st.subheader("All models and the papers", anchor=False)
st.caption("This app's checkpoints. The last column is the change in test perplexity relative to the LSTM of the same "
           "corpus and reading (sentence or running text) — the number to hold against the papers' own.")
st.dataframe(table, hide_index=True, column_config=fmt, width="stretch")
ui.download_row([("CSV", lambda: export_frame(table, "csv"), "models.csv", "text/csv"),
                  ("JSON", lambda: export_frame(table, "json"), "models.json", "application/json")], "models_table")
st.caption("Published test perplexities. Other corpora and model sizes, so compare the change relative to each paper's LSTM.")
papers = paper_frame()
st.dataframe(papers.drop(columns=["family"]), hide_index=True, width="stretch",
             column_config={"test_perplexity": st.column_config.NumberColumn("test ppl", format="%.2f"),
                            "vs LSTM": st.column_config.NumberColumn("vs LSTM", format="percent")})
st.caption("Sources: Liu & Lee, *Attention-based memory selection recurrent network for language modeling* (Penn Treebank, "
           "50-unit models); Daniluk et al. (2017), *Frustratingly short attention spans in neural language modeling* (Wikipedia).")
