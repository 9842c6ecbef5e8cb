"""Compare perplexity: two models on every sentence of a split.

Scatter of per-sentence perplexities (log axes, diagonal = no change), summary numbers,
and the sentences the second model improves or worsens most; select one to open it
in the Explorer. Thin page: inputs -> one library call (``vizlm.inspect.corpus_stats``) -> render.
Its state lives in the URL: ``?a=lstm-continued&b=amsrn&corpus=brown&split=test&n=all``.
"""

from __future__ import annotations

import streamlit as st

import vizlm
from vizlm.app import checkpoints as ck
from vizlm.app import jobs, results
from vizlm.app import widgets as ui
from vizlm.app.shell import EXPLORER, page_setup
from vizlm.present.export import safe_filename
from vizlm.present.links import CompareState, explorer_query
from vizlm.present.charts import comparison_scatter

page_setup()


def comparison(a: str, key_a: str, b: str, key_b: str, corpus: str, split: str, limit: int | None):
    """vizlm.compare (the whole split disk-cached, or its first ``limit`` sentences), in the background
    for every session (vizlm.app.jobs)."""
    ca, cb = ck.get_checkpoint(a), ck.get_checkpoint(b)
    version = results.corpus_version(corpus, split)  # a corpus prepared again is read again
    return jobs.result(("compare", key_a, key_b, corpus, split, version, limit), vizlm.compare, ca, cb, corpus, split,
                       limit=limit, text=f"Scoring {corpus}/{split} with {a} and {b}").result


names = ck.by_kind(ck.model_names())
with st.sidebar:
    st.header("Compare", anchor=False)
    if len(names) < 2:
        st.error("Two checkpoints are needed to compare.", icon=":material/error:")
        st.stop()
    preferred = ck.preferred_model(names)
    baseline = ck.baseline_model(names, preferred) or next(n for n in names if n != preferred)
    notes = ui.read_compare_query(names, baseline, preferred)
    ui.keep_choice("cmp_a", names, baseline)
    a = st.selectbox("Baseline (A)", names, key="cmp_a", format_func=ck.model_label,
                     help=f"{ck.KINDS_HELP} {ck.model_help(st.session_state['cmp_a'])}")
    rest = [n for n in names if n != a]
    ui.keep_choice("cmp_b", rest, preferred if preferred in rest else ck.preferred_model(rest))
    b = st.selectbox("Compared model (B)", rest, key="cmp_b", format_func=ck.model_label,
                     help=ck.model_help(st.session_state["cmp_b"]))
    label, corpus, split = ui.corpus_picker("cmp_corpus", [a, b])
    limit = ui.sample_picker("cmp_sample")
    ui.write_compare_query(CompareState(a, b, corpus, split), limit)
    st.session_state.setdefault("cmp_top", 15)
    top_n = st.slider("Sentences per table", 5, 50, key="cmp_top")
    st.session_state.setdefault("cmp_min_len", 5)
    min_length = st.slider("Minimum sentence length", 1, 30, key="cmp_min_len",
                           help="Very short sentences (headings, a lone bracket) swing most; leave them out of the rankings.")

st.title("Compare perplexity", anchor=False)
st.caption(f"Every sentence of **{ui.md_escape(label)}** scored by **{ui.md_escape(a)}** (x) and **{ui.md_escape(b)}** (y). "
           "Points below the dashed diagonal are sentences where B assigns a higher probability (lower perplexity). "
           "Hover a point for its text. The view is in the URL: share it as a link.")
for note in notes:
    st.warning(note[:1].upper() + note[1:] + ".", icon=":material/link:")
ui.off_corpus_warning([a, b], corpus, split)  # a model not trained on this corpus: its overlap, above the verdict

try:
    result = comparison(a, ck.model_key(a), b, ck.model_key(b), corpus, split, limit)
except (ValueError, ck.UserError) as exc:  # e.g. different vocabularies: the library says why
    ui.show_error(exc)
    st.stop()

summary = result.summary
metrics = st.columns(5)
shown = [("perplexity_a", f"Perplexity {a}", "{:.1f}", "corpus perplexity of the baseline"),
         ("perplexity_b", f"Perplexity {b}", "{:.1f}", "corpus perplexity of the compared model"),
         ("ratio", "Ratio B / A", "{:.3f}", "below 1: B is better on the whole split"),
         ("share_improved", "Sentences improved", "{:.0%}", "share of sentences where B's perplexity is lower"),
         ("median_sentence_ratio", "Median sentence ratio", "{:.3f}", "median over sentences of ppl B / ppl A")]
for col, (k, title, f, why) in zip(metrics, shown):
    v = summary.get(k)
    col.metric(title, f.format(v) if isinstance(v, (int, float)) else "—", help=why)

chart = comparison_scatter(result.table, a, b)
ui.show_chart(chart, width="stretch")  # the page's width: thousands of points need the room
ui.chart_downloads(chart, f"compare-{safe_filename(a)}-{safe_filename(b)}-{corpus}-{split}", "scatter", result.table)
st.markdown("**How to read it**")
st.markdown(f"Each point is a sentence. Below the diagonal, **{ui.md_escape(b)}** found it more predictable than "
            f"**{ui.md_escape(a)}**. Short sentences scatter most: one surprising word moves their perplexity a lot.")
ci = [summary.get(k) for k in ("ratio_ci_low", "ratio_ci_high")]
if all(isinstance(v, (int, float)) for v in ci):
    verdict = "better" if ci[1] < 1 else "worse" if ci[0] > 1 else "not clearly different"
    st.markdown(f"The corpus perplexity ratio has a 95% bootstrap confidence interval of **{ci[0]:.3f} – {ci[1]:.3f}** "
                f"over {summary.get('sentences', 0):,} sentences ({summary.get('tokens', 0):,} predicted tokens): "
                f"**{ui.md_escape(b)} is {verdict}** on this split.")
with st.expander("All summary numbers"):
    st.json(summary)

columns = {
    "sentence_id": st.column_config.TextColumn("sentence", width="small"),
    "text": st.column_config.TextColumn("text", width="large"),
    "length": st.column_config.NumberColumn("words", width="small"),
    "ppl_a": st.column_config.NumberColumn(f"ppl {a}", format="%.1f"),
    "ppl_b": st.column_config.NumberColumn(f"ppl {b}", format="%.1f"),
    "difference": st.column_config.NumberColumn("B − A", format="%.1f"),
    "log_ratio": st.column_config.NumberColumn("log(B/A)", format="%.3f", help="negative: B is better"),
}
st.subheader("Sentences", anchor=False)
tabs = st.tabs([f"Most improved by {b}", f"Most worsened by {b}", "All sentences"])
frames = [result.most_improved(top_n, min_length), result.most_worsened(top_n, min_length), result.table]
picked = None
for i, (tab, frame) in enumerate(zip(tabs, frames)):
    with tab:
        frame = frame[[c for c in columns if c in frame.columns]].reset_index(drop=True)
        event = st.dataframe(frame, hide_index=True, column_config=columns, width="stretch",
                             height=min(420, 38 + 35 * len(frame)), on_select="rerun", selection_mode="single-row",
                             key=f"cmp_table_{i}")
        rows = event.selection.rows if event is not None else []
        if rows:
            picked = frame.iloc[rows[0]]
st.caption(f"Improved / worsened: sentences of at least {min_length} words, ranked by log(B/A). "
           "Click a column header to sort; tick a row to open that sentence in the Explorer.")
in_context = "document" in (ck.context(a), ck.context(b))
if in_context:
    st.caption("A document-level model scores each sentence in context: after the sentences before it in its document "
               "(running text). The Explorer opens a sentence with the sentences before it, as many as it reads.")
if picked is not None:
    idx = results.sentence_index(corpus, split, str(picked["sentence_id"]))
    sentence = results.sentence_text(corpus, split, idx) if idx is not None else str(picked["text"])
    text, row = results.passage_text(corpus, split, idx) if idx is not None and in_context else (sentence, None)
    before = text.count("\n")
    st.page_link(EXPLORER, label=f"Open “{sentence[:80]}{'…' if len(sentence) > 80 else ''}” in the Explorer"
                 + (f" after the {before} sentence{'s' if before != 1 else ''} before it" if before else ""),
                 icon=":material/open_in_new:", query_params=explorer_query(b, text, compare=a, target=row))
