"""Is attention an explanation? The Faithfulness page's glue and the Explorer's panel of one word.

Over a split: :meth:`vizlm.api.Model.corpus_faithfulness` of each chosen model, in the background for every
session (:mod:`vizlm.app.jobs`, a Cancel button, then the disk cache), its cost said first
(:meth:`vizlm.api.Model.faithfulness_seconds`), and each test drawn with its 95% interval
(:mod:`vizlm.present.faithfulness_plots`). For one predicted word of the Explorer, on request only: the adversarial
weights beside the model's own (:func:`vizlm.inspect.faithfulness.adversarial_row`) and the two paths
(:func:`vizlm.inspect.faithfulness.two_paths` of that row), cached per (model, text, word).
"""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from vizlm.api import Model
from vizlm.app import checkpoints as ck
from vizlm.app import jobs, results
from vizlm.app.widgets import chart_downloads, download_row, head_select, md_escape, show_chart, show_error
from vizlm.present.export import MIME, export_frame, safe_filename
from vizlm.present.links import head_code
from vizlm.present.tables import sample_text
from vizlm.inspect.faithfulness import EPSILON, FaithfulnessError, adversarial_row, two_paths
from vizlm.inspect.faithfulness_erasure import MASKING
from vizlm.inspect.analysis import view_label
from vizlm.inspect.cache import checkpoint_digest
from vizlm.data.registry import DataError, split_checksum
from vizlm.reproduce.corpus_evidence import (
    EvidenceError,
    faithfulness_checkpoint,
    faithfulness_name,
    faithfulness_names,
    read_faithfulness,
    sample_words,
)
from vizlm.present.faithfulness_plots import (
    adversarial_row_chart,
    agreement_chart,
    agreement_frame,
    aopc_chart,
    aopc_frame,
    erasure_chart,
    erasure_frame,
    paths_chart,
    paths_frame,
    permutation_chart,
    permutation_frame,
    row_paths_chart,
    uniform_frame,
)

EVIDENCE, RUN = "The repository's evidence", "Run the tests"  # what the page shows: read at once, or computed here
SAMPLES = (5, 10, 25, 50, 100, 200)  # sentences of the split: every test costs about a second per word
DEFAULT_SAMPLE = 10
DEFAULT_MODELS = 2  # models chosen at first: each costs minutes


def first_models(names: list[str]) -> list[str]:
    """The models the page opens on: those whose tests the repository holds (shown at once), else the first."""
    kept = {faithfulness_checkpoint(n) for n in faithfulness_names()}
    return ([n for n in names if n in kept] or names)[:DEFAULT_MODELS]


def head_picker(name: str) -> tuple[int, int] | None:
    """A Transformer's head to test, in the sidebar (one head: the tests replace its weights; default the last
    layer's first); None for attention over memory slots."""
    if not ck.self_attending(name):
        return None
    config = ck.get_checkpoint(name).model.config
    return head_select(name, config.layers, config.heads, f"faith_head_{name}", (config.layers - 1, 0), means=False)


def title(name: str, head: tuple[int, int] | None) -> str:
    """A model's heading on the page: its name, and a Transformer's head tested."""
    return view_label(name, head, 0)  # one head: the count of heads is not said


def _when(seconds: float) -> str:
    return f"about {seconds / 60:.0f} minutes" if seconds >= 90 else f"about {max(1, round(seconds))} seconds"


def estimate(models: list[str], corpus: str, split: str, limit: int,
             heads: dict[str, tuple[int, int] | None] | None = None) -> str | None:
    """What running the tests over the first ``limit`` sentences costs, for the models not in the disk cache,
    written for people; None when every one is cached. ``heads``: the Transformers' heads tested."""
    heads = heads or {}
    costs = {m: Model(ck.get_checkpoint(m)).faithfulness_seconds(corpus, split, limit, head=heads.get(m))
             for m in models}
    todo = {m: s for m, s in costs.items() if s is not None}
    if not todo:
        return None
    kept = len(models) - len(todo)
    return (f"Testing {len(todo)} model{'s' if len(todo) != 1 else ''} over {limit:,} sentences takes "
            f"{_when(sum(todo.values()))} the first time on one core (then it comes from the disk cache)"
            + (f"; {kept} more {'is' if kept == 1 else 'are'} read from the cache" if kept else "") + ".")


def corpus_result(model: str, corpus: str, split: str, limit: int, head: tuple[int, int] | None = None) -> dict:
    """:meth:`vizlm.api.Model.corpus_faithfulness` of one model (a Transformer's ``head``), in the background for
    every session, with a progress bar and a Cancel button; :class:`~vizlm.app.checkpoints.UserError` when
    cancelled."""
    version = results.corpus_version(corpus, split)  # a corpus prepared again is read again
    try:
        return jobs.result(("faithfulness", ck.model_key(model), corpus, split, version, limit, head),
                           Model(ck.get_checkpoint(model)).corpus_faithfulness, corpus, split, limit=limit, head=head,
                           text=f"Testing {model}'s attention over {limit:,} sentences of {corpus}/{split}",
                           cancellable=True)
    except jobs.Cancelled:
        raise ck.UserError(f"The tests of {model} were cancelled: switch the run off and on to start again.") from None


@st.cache_data(show_spinner=False, max_entries=64)
def _evidence(model: str, key: str, corpus: str, split: str, version: object,
              head: tuple[int, int] | None) -> tuple[dict | None, str | None]:
    ev = read_faithfulness(faithfulness_name(model, head))
    if ev is None:
        return None, None
    c = ev.config
    if (c["corpus"], c["split"]) != (corpus, split):
        return None, f"its evidence is of {c['corpus']}/{c['split']}"
    if c["checkpoint_sha256"] != checkpoint_digest(ck.get_checkpoint(model)):
        return None, "the checkpoint is not the one its evidence was computed with"
    if c["corpus_sha256"] != split_checksum(corpus, split):
        return None, f"{corpus}/{split} was prepared again since its evidence was computed"
    sample = (f"The repository's evidence ({c['written_by']}, commit {str(c.get('commit') or '—')[:7]}) over "
              f"{corpus}/{split}, {sample_words(c.get('per_document'), c.get('limit'))}: {c['documents']} documents, "
              f"{c['units']:,} {c['unit']}, {c['targets']:,} predicted words, read in {c['context']} context; every "
              f"interval is a 95% bootstrap over the documents.")
    return {"model": model, "corpus": corpus, "split": split, "context": c["context"], "units": c["units"],
            "read_in": c["unit"], "documents": c["documents"], "head": c.get("head"), "view": c.get("view"),
            "resampled": "documents", "sample": sample,
            "masking": c["masking"], "unit": "nats", "permutations_per_row": c["permutations"],
            "epsilon": c["epsilon"], "other": c.get("frozen"), **ev.statistics()}, None


def evidence_result(model: str, corpus: str, split: str,
                    head: tuple[int, int] | None = None) -> tuple[dict | None, str | None]:
    """The repository's faithfulness evidence of a bundled model over ``corpus``/``split`` (``vizlm reproduce
    --faithfulness``, :meth:`vizlm.reproduce.corpus_evidence.FaithfulnessEvidence.statistics`, intervals over
    documents) as a result :func:`render_result` draws, read at once: ``(result, None)``; ``(None, why)`` when
    the evidence is of another split, checkpoint or preparation of the corpus; ``(None, None)`` when there is
    none. A Transformer's: of its ``head``."""
    try:
        return _evidence(model, ck.model_key(model), corpus, split, results.corpus_version(corpus, split),
                         None if head is None else tuple(head))
    except (EvidenceError, DataError) as exc:
        return None, str(exc)


def _interval(d: dict | None, fmt: str = ".3f") -> str:
    d = d or {}
    lo, hi = d.get("lo"), d.get("hi")
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return "no interval"
    return f"95% {lo:{fmt}} to {hi:{fmt}}"


def _tau(value: float, lo: float, hi: float) -> str:
    """A mean τ-b with its interval for a table cell; a dash where no word gave one."""
    if not math.isfinite(value):
        return "—"
    return f"{value:+.3f} ({lo:+.3f} to {hi:+.3f})" if math.isfinite(lo) and math.isfinite(hi) else f"{value:+.3f}"


def _chart(chart, frame: pd.DataFrame, stem: str, key: str, width: str = "content") -> None:
    show_chart(chart, width)
    chart_downloads(chart, stem, key, frame)


def render_result(res: dict, key: str) -> None:
    """Every test of one model's :meth:`~vizlm.api.Model.corpus_faithfulness` result, each chart with its 95%
    interval, its downloads and a caption saying what the test asks and how to read it."""
    head = res.get("head")  # a Transformer's head: in the files' names too
    where = "" if head is None else f"-head{head_code(tuple(head))}"
    stem = safe_filename(f"faithfulness-{res['model']}{where}-{res['corpus']}-{res['split']}")
    sample = res.get("sample") or (f"{sample_text(res)} of "
                                   f"{res['corpus']}/{res['split']}, read in {res['context']} context; every interval "
                                   f"is a 95% bootstrap over the {res['resampled']}.")
    st.caption(f"{md_escape(sample)} Changes are in nats (log P(word) as read minus as changed). Masking: "
               f"{md_escape(res.get('masking') or MASKING)}.")

    left, right = st.columns(2, gap="large")
    with left:
        frame = erasure_frame(res)
        if not frame.empty:
            _chart(erasure_chart(frame), frame, f"{stem}-erasure", f"{key}_erasure", "stretch")
            st.caption("**Erasure** (Serrano & Smith 2019): drop the k most important memory slots by each ranking. "
                       "If attention explains the prediction, dropping its top slots should hurt it more than dropping "
                       "random ones, and about as much as dropping the gradient's.")
    with right:
        frame = aopc_frame(res)
        if not frame.empty:
            _chart(aopc_chart(frame), frame, f"{stem}-aopc", f"{key}_aopc")
            st.caption("**Comprehensiveness / sufficiency** (ERASER, DeYoung et al. 2020): drop a ranking's top 1–50% of "
                       "a word's slots (comprehensiveness: higher means it found what mattered) or keep only them "
                       "(sufficiency: lower means they suffice). Compare attention with random.")

    left, right = st.columns(2, gap="large")
    with left:
        frame = permutation_frame(res)
        if not frame.empty and (frame["rows"] > 0).any():
            _chart(permutation_chart(frame), frame, f"{stem}-permutations", f"{key}_perm")
            st.caption("**Shuffled attention** (Jain & Wallace 2019): each word's weights shuffled over its word slots "
                       f"{res.get('permutations_per_row', 100)} times, by the word's largest weight. Small changes "
                       "where the weight is peaked mean the model does not need its attention's choice.")
    with right:
        frame = paths_frame(res)
        if res.get("head") is not None:  # a Transformer's head
            st.caption("**The two paths** are recurrent attention's: a Transformer has no recurrent state, so an "
                       "earlier word reaches the prediction through self-attention alone (its layers and heads).")
        elif not frame.empty and frame["read_share"].notna().any():
            _chart(paths_chart(frame), frame, f"{stem}-paths", f"{key}_paths", "stretch")
            st.caption("**The two paths**: a word occluded changes the prediction through the attention read and "
                       "through the recurrent state. The share through the read, by distance: where it is small, "
                       "the attention is not how the word reaches the prediction, whatever its weight.")

    frame = agreement_frame(res)
    if not frame.empty:
        # ten long pair names read better as a table (the page's width) than on a chart's axis; the chart is in
        # the downloads
        st.markdown("**Agreement of the rankings**: mean Kendall τ-b per word over the words both cover")
        shown = pd.DataFrame({"rankings compared": frame["pair"],
                              "": frame["ceiling"].map({False: "attention", True: "ceiling"}),
                              "τ-b (95% interval)": [_tau(v, lo, hi) for v, lo, hi in
                                                     zip(frame["value"], frame["lo"], frame["hi"])]})
        st.dataframe(shown, hide_index=True, width="content",
                     column_config={"": st.column_config.TextColumn(
                         help="attention: attention against a method; ceiling: two methods against each other")})
        chart_downloads(agreement_chart(frame), f"{stem}-agreement", f"{key}_agreement", frame)
        st.caption("**Agreement** (Jain & Wallace 2019): Kendall τ-b between attention and each explanation "
                   "(slot effects: the same memory slots; word-level attribution), and between the explanations "
                   "themselves: the ceiling. Attention below the ceiling ranks the words unlike them.")
    _uniform_and_adversary(res, stem, key)


def _uniform_and_adversary(res: dict, stem: str, key: str) -> None:
    frame = uniform_frame(res)
    if not frame.empty:
        st.markdown("**Uniform attention** (Wiegreffe & Pinter 2019)")
        own = frame.iloc[0]
        with st.container(horizontal=True, wrap=True, gap="medium"):
            for _, row in frame.iterrows():
                delta = None if row["attention"] == "own" else (
                    f"{row['change']:+.3f} nats/word ({_interval({'lo': row['change_lo'], 'hi': row['change_hi']}, '+.3f')})")
                st.metric(f"perplexity, {row['attention']} attention", f"{row['perplexity']:.1f}", delta=delta,
                          delta_color="inverse", delta_arrow="off" if delta is None else "auto", width="content",
                          help=f"exp of the mean NLL per word ({row['nll']:.3f} nats, "
                               f"{_interval({'lo': row['nll_lo'], 'hi': row['nll_hi']})}); the change is the NLL "
                               "minus the model's own")
        st.caption(f"Every word's weights replaced by uniform ones over its slots: if the perplexity barely moves from "
                   f"{own['perplexity']:.1f}, the model does not need what its attention chooses.")
        chart_downloads_frame(frame, f"{stem}-uniform", f"{key}_uniform")
    adv = res.get("adversarial")
    if adv:
        st.markdown("**Adversarial attention** (Jain & Wallace 2019)")
        with st.container(horizontal=True, wrap=True, gap="medium"):
            st.metric("mean JSD found", f"{adv['mean_jsd']['value']:.3f} nats", width="content",
                      delta=_interval(adv["mean_jsd"]), delta_color="off", delta_arrow="off",
                      help=f"the Jensen-Shannon divergence (at most ln 2 = 0.693) of the farthest weights found from "
                           f"the model's own with |Δ log P(word)| < {res.get('epsilon', EPSILON)} nats, over "
                           f"{adv.get('rows', adv['mean_jsd'].get('n', 0)):,} words with two slots or more")
            share = adv["share_over_half_ln2"]
            st.metric("words moved > ½ ln 2", f"{share['value']:.0%}", width="content",
                      delta=_interval(share, ".0%"), delta_color="off", delta_arrow="off",
                      help="share of the words whose attention could be moved more than half the largest divergence "
                           "while the prediction stays put")
            seed = (res.get("uniform") or {}).get("seed_jsd")
            if seed:
                st.metric("another seed's attention: mean JSD", f"{seed['value']:.3f} nats", width="content",
                          delta=_interval(seed), delta_color="off", delta_arrow="off",
                          help=f"how far the attention of another training seed of the model ({res.get('other')}) "
                               "lies from its own on the same words (Wiegreffe & Pinter 2019): the distance training "
                               "alone puts between two attentions, beside the adversary's")
        st.caption("Weights as far as possible from the model's own that leave the prediction where it is: a large "
                   "divergence means other attention explains the prediction as well. The Explorer shows them for "
                   "one word.")


def chart_downloads_frame(frame: pd.DataFrame, stem: str, key: str) -> None:
    """CSV / JSON of a table without a chart (the uniform baseline's metrics)."""
    download_row([(fmt.upper(), (lambda f=fmt: export_frame(frame, f)), f"{stem}.{fmt}", MIME[fmt])
                  for fmt in ("csv", "json")], key)


# --------------------------------------------------------------------------- one word (the Explorer)
@st.cache_data(show_spinner=False, max_entries=256)
def _adversarial_row(name: str, key: str, text: str, row: int, head: tuple[int, int] | None) -> pd.DataFrame:
    return adversarial_row(ck.get_checkpoint(name), results.analyze_text(name, text, head), row)


@st.cache_data(show_spinner=False, max_entries=256)
def _row_paths(name: str, key: str, text: str, row: int) -> pd.DataFrame:
    return two_paths(ck.get_checkpoint(name), results.analyze_text(name, text), rows=[row])


def word_panel(name: str, text: str, row: int, head: tuple[int, int] | None = None) -> None:
    """On request (a toggle, off at first): for the selected word of an attention model, the adversarial weights
    beside its own and the two paths by distance, computed for that word alone; a Transformer's ``head`` has the
    adversary only (no recurrent state)."""
    paths_said = ("" if head is not None else ", and how much each earlier word reaches the prediction through the "
                  "attention read and through the recurrent state")
    if not st.toggle("Is this attention an explanation?", key=f"faith_word_{name}",
                     help="For the selected word, computed on request: the attention weights farthest from the model's "
                          f"own that leave P(word) within 0.01 nats (Jain & Wallace's adversary){paths_said}. The "
                          "Faithfulness page runs these tests over a corpus."):
        return
    try:
        with st.spinner(f"Testing {name}'s attention for this word…", show_time=True):
            adv = _adversarial_row(name, ck.model_key(name), text, row, head)
            paths = pd.DataFrame() if head is not None else _row_paths(name, ck.model_key(name), text, row)
    except (FaithfulnessError, ck.UserError) as exc:
        show_error(exc)
        return
    a = adv.attrs
    stem = safe_filename(f"{name}-word{row}-{text[:20]}")
    if len(adv) >= 2:
        chart = adversarial_row_chart(adv)
        show_chart(chart)
        chart_downloads(chart, f"{stem}-adversarial", f"faith_adv_{name}", adv)
        st.caption(f"Own (blue) and adversarial (red) weights: Jensen-Shannon divergence {a['jsd']:.3f} nats (at most "
                   f"0.693), log P(word) changed by {a['dlogp']:+.4f} nats (bound ±{a['epsilon']}). A large divergence "
                   "with the prediction kept: other attention would explain it as well.")
    else:
        st.caption("This word has fewer than two slots to attend to: there is no other attention to find.")
    if not paths.empty:
        chart = row_paths_chart(paths)
        show_chart(chart)
        chart_downloads(chart, f"{stem}-paths", f"faith_paths_{name}", paths)
        read, state = paths["read"].abs().sum(), paths["state"].abs().sum()
        share = f"{read / (read + state):.0%}" if read + state > 0 else "none"
        st.caption(f"Each earlier word replaced by <unk>: the change of log P(word) through the attention read "
                   f"(blue) and through the recurrent state (orange); the read's share of both: {share}.")
