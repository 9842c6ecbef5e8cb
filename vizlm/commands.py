"""Analysis sub-commands of the CLI: analyze, compare, positions, cases, export.

Each command is argparse -> one library call -> JSON (``--json``) or a table. Models are loaded,
and texts analysed and exported, through the Python API (:mod:`vizlm.api`, what ``import vizlm``
offers), as in a notebook: comparisons and positions too (under torchrun with the process group,
``context=``); the case reports are :mod:`vizlm.inspect.case_gallery`'s. The API is imported when a command runs
(``vizlm.load`` and the rest), not to build the parser, whose choices are the light lists of
:mod:`vizlm.core.choices` and :mod:`vizlm.inspect.choices`: ``vizlm --help`` loads no PyTorch.

Also here, for every command of the CLI: the option types that refuse a bad number with a
message (argparse then exits 2), reading ``--text-file`` and writing output files, and the
progress bars of long work. Progress goes to stderr only, so ``--json`` output stays valid.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import sys
from pathlib import Path

from tqdm import tqdm

import vizlm  # the API's names on first use (vizlm.load, ...): building the parser loads no model code
from vizlm.core import files
from vizlm.core.choices import DEVICES
from vizlm.core.errors import InputError
from vizlm.data.registry import CORPORA, MAX_TEXT_FILE_BYTES, read_text_file
from vizlm.data.text import MAX_TOKENS, clean_text
from vizlm.inspect.choices import ATTRIBUTION_MAX_STEPS, ATTRIBUTION_METHODS, CASE_LABELS, CASE_RANKINGS
from vizlm.inspect.highlight import DEFAULT, MAX_TOP_K, NONE, Share, setting

TOP_K_MAX = MAX_TOP_K  # --top-k: more highlights than this per word are no longer a highlight
WINDOW_MAX = MAX_TOKENS + 1  # --window: the memory slots of the longest analysed sentence
PROGRESS_MIN_TOKENS = 50_000  # scoring more tokens than this (about 10 s on a laptop) shows a progress bar
READ_PROGRESS_BYTES = 8 * 2**20  # reading a larger --text-file shows one too


# --------------------------------------------------------------------------- option types
def fraction(text: str) -> float:
    """argparse type: a finite number from 0 to 1 (an attention weight, a dropout rate)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, not {text!r}")
    return value


def positive_number(text: str) -> float:
    """argparse type: a finite number > 0 (a learning rate, a clipping norm)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text!r}")
    return value


def whole(low: int = 1, high: int | None = None):
    """argparse type: a whole number from ``low`` to ``high`` (no upper bound when None)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise argparse.ArgumentTypeError(f"must be a whole number {bounds}, not {text!r}")
        return value

    return parse


# --------------------------------------------------------------------------- files and progress
def read_text(path: Path, documents: list[int] | None = None) -> list[list[str]]:
    """:func:`vizlm.data.registry.read_text_file` (``documents``: its blank-line blocks), with a progress
    bar on stderr for a large file."""
    from vizlm.data.ingest import wikitext_note  # a hint for WikiText read as plain text

    path = Path(path)
    size = path.stat().st_size if path.is_file() else 0  # what is wrong with it read_text_file says
    notes: list[str] = []
    if not READ_PROGRESS_BYTES < size <= MAX_TEXT_FILE_BYTES:
        out = read_text_file(path, documents=documents, notes=notes)
    else:
        with tqdm(total=size, unit="B", unit_scale=True, desc=f"reading {path.name}", file=sys.stderr) as bar:
            out = read_text_file(path, progress=lambda f: bar.update(max(0, round(f * size) - bar.n)),
                                 documents=documents, notes=notes)
    if (hint := wikitext_note(path)) is not None:
        notes.append(hint)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return out


def write_output(path: Path, data: bytes, force: bool = False) -> None:
    """Write ``data`` to ``path`` whole (:func:`vizlm.core.files.write_bytes`: never replacing other
    content unless ``force``); an error names the file (a failed ``write()`` alone does not)."""
    try:
        files.write_bytes(path, data, force=force)
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


@contextlib.contextmanager
def scoring_progress(ckpts, sentences: list[list[str]] | None, desc: str, total: int | None = None):
    """A progress bar on stderr counting the sentences the models of ``ckpts`` read.

    Shown once a model runs (nothing when the result comes from the cache), and only when
    ``sentences`` hold more than :data:`PROGRESS_MIN_TOKENS` tokens (``None``: a corpus
    loaded later, always; ``total`` sentences per model when known). It counts forward passes
    through a hook, so the library code needs no callback.
    """
    models = list({id(c.model): c.model for c in ckpts}.values())
    if not models or (sentences is not None and sum(map(len, sentences)) <= PROGRESS_MIN_TOKENS):
        yield
        return
    bar = None

    def tick(_module, args, _output):
        nonlocal bar
        if bar is None:
            count = len(sentences) if sentences is not None else total
            bar = tqdm(total=count and count * len(models), desc=desc, unit="sentence", file=sys.stderr)
        bar.update(int(args[0].shape[0]) if args and hasattr(args[0], "shape") else 1)

    handles = [m.register_forward_hook(tick) for m in models]
    try:
        yield
        # done: the bar ends full. A forward pass's rows are not always sentences (a document model reads chunks
        # of running text, several sentences a row), so the count alone stopped short (422/491).
        if bar is not None and bar.total and bar.n < bar.total:
            bar.update(bar.total - bar.n)
    finally:
        for h in handles:
            h.remove()
        if bar is not None:
            bar.close()


# --------------------------------------------------------------------------- the commands


def _source(p) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--corpus", metavar="NAME", help=f"a processed corpus: {', '.join(CORPORA)}, or yours "
                     "(`vizlm corpora` lists them)")
    src.add_argument("--text-file", type=Path, help="raw text, one paragraph or sentence a line")
    p.add_argument("--split", default="test", help="corpus split: train / valid / test (default test)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _device(p) -> None:
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="where the models run: auto (the GPU when CUDA is available, else the CPU), cpu or cuda; "
                        "under torchrun every process scores its share of a --corpus split and rank 0 prints")


def _model_device(p) -> None:
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="where the model runs: auto (the GPU when CUDA is available, else the CPU), cpu or cuda")


def _highlight_mode(p) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--threshold", type=fraction, default=None,
                      help=f"highlight slots with weight >= this, from 0 to 1 (default {DEFAULT.share:g})")
    mode.add_argument("--top-k", type=whole(1, TOP_K_MAX), default=None,
                      help=f"highlight the k heaviest slots instead (1 to {TOP_K_MAX})")


def _head_choice(p) -> None:
    p.add_argument("--layer", type=whole(1), help="a Transformer: the self-attention layer to show, 1 = the first "
                                                  "(default: the last)")
    p.add_argument("--head", type=whole(1), help="a Transformer: the head of that layer to show, 1 = the first "
                                                 "(default: the mean over its heads)")


def head_argument(ckpt, args) -> tuple[int, int | None] | None:
    """The self-attention view ``--layer`` / ``--head`` ask for (counted from 1 there), as (layer, head) counted
    from 0; None when neither is given. A clear message for a model without heads or one it does not have."""
    if args.layer is None and args.head is None:
        return None
    if not getattr(ckpt.model, "self_attention", False):
        raise InputError(f"--layer and --head choose a Transformer's self-attention head; {ckpt.label} has none")
    sizes = {"layer": ckpt.model.config.layers, "head": ckpt.model.config.heads}
    for what, value in (("layer", args.layer), ("head", args.head)):
        if value is not None and value > sizes[what]:
            raise InputError(f"--{what} {value}: {ckpt.label} has {sizes[what]} {what}s"
                             f"{' a layer' if what == 'head' else ''} (1 to {sizes[what]})")
    return sizes["layer"] - 1 if args.layer is None else args.layer - 1, None if args.head is None else args.head - 1


def analyze_at_head(model, text: str, args):
    """``model``'s analysis of ``text`` (``--threshold`` / ``--top-k``) showing the self-attention head ``--layer`` /
    ``--head`` ask for, checked before the text is read."""
    head = head_argument(model.checkpoint, args)
    sa = model.analyze(text, threshold=args.threshold, top_k=args.top_k)
    return sa if head is None else sa.at_head(*head)


def add_analysis_commands(sub) -> None:
    p = sub.add_parser("analyze", help="attention, its effects, probabilities and cases for one sentence")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or bundled name (lstm, amsrn, kvp)")
    p.add_argument("--text", required=True, help="the sentence to analyse")
    _highlight_mode(p)
    _head_choice(p)
    p.add_argument("--json", action="store_true",
                   help="print JSON instead of a table (with the read and slot effects of every word, in bits)")
    _model_device(p)

    p = sub.add_parser("compare", help="per-sentence perplexity of two models (b = the attention model)")
    p.add_argument("--a", required=True, help="baseline checkpoint")
    p.add_argument("--b", required=True, help="checkpoint compared with the baseline")
    _source(p)
    p.add_argument("--top", type=whole(0), default=10, help="how many most improved / worsened sentences to list")
    p.add_argument("--min-length", type=whole(0), default=5, help="only list sentences with at least this many words")
    p.add_argument("--csv", type=Path, help="write the whole per-sentence table as CSV")
    _force(p)
    _device(p)

    p = sub.add_parser("positions", help="average attention and its effect by relative position (Daniluk et al. Fig. 3)")
    p.add_argument("--checkpoint", nargs="+", required=True, help="one or more attention checkpoints")
    _source(p)
    p.add_argument("--window", type=whole(1, WINDOW_MAX), default=10,
                   help=f"how many positions back to show (1 to {WINDOW_MAX})")
    p.add_argument("--no-effects", action="store_true",
                   help="weights only: skip the slot and read effects (one output layer per slot: the slow part)")
    p.add_argument("--png", type=Path, help="write the plot as PNG (with effects: weight and effect side by side)")
    p.add_argument("--svg", type=Path, help="write the plot as SVG (with effects: weight and effect side by side)")
    _force(p)
    _device(p)

    p = sub.add_parser("cases", help="trigger / causal / phrase / grammar cases over a corpus")
    p.add_argument("--checkpoint", required=True, help="attention checkpoint")
    _source(p)
    p.add_argument("--label", choices=CASE_LABELS, help="only this label's examples")
    p.add_argument("--threshold", type=fraction, default=DEFAULT.share,
                   help=f"attention weight that counts as a highlight, from 0 to 1 (default {DEFAULT.share:g})")
    p.add_argument("--examples", type=whole(0), default=10, help="strongest examples listed per label")
    p.add_argument("--rank", choices=CASE_RANKINGS, default="weight",
                   help="which examples are the strongest: the heaviest, those whose slot helped the prediction most, "
                        "the heaviest above uniform (weight - 1 / the slots the row could attend to), or those whose "
                        "attended word the prediction depended on most (attribution: gradient x input of log2 P(word) "
                        "to the attended word, in bits, signed: > 0 raised P(word); costs one more batched gradient "
                        "pass per sentence, or per 64 words of a document for a document-level model)")
    _head_choice(p)
    _model_device(p)

    p = sub.add_parser("attribute", help="which earlier words each prediction of a text depended on (attribution), "
                                         "and whether the attention agrees")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or bundled name (any family, lstm too)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="the sentence or passage")
    src.add_argument("--corpus", metavar="NAME",
                     help="statistics over a processed corpus split (vizlm's or yours; cached): attribution by distance, and for "
                          "attention models the agreement and Jain & Wallace's permutation test, with 95%% intervals")
    p.add_argument("--split", default="test", help="with --corpus: train / valid / test (default test)")
    p.add_argument("--limit", type=whole(1), help="with --corpus: its first sentences only")
    p.add_argument("--method", choices=ATTRIBUTION_METHODS, default=None,
                   help="gradient x input, integrated gradients (with its convergence delta), occlusion (the word "
                        "replaced by <unk>), or the attention's slot effect; default: integrated-gradients for a "
                        "text, gradient-x-input (the fast one) for a corpus")
    p.add_argument("--steps", type=whole(1, ATTRIBUTION_MAX_STEPS), default=32,
                   help=f"integrated gradients' steps, 1 to {ATTRIBUTION_MAX_STEPS} (doubled for a word whose convergence "
                        "delta exceeds 1%%, up to that)")
    p.add_argument("--json", action="store_true", help="print JSON: per word its attributions, IG's convergence "
                                                       "delta and, for attention models, the agreement")
    p.add_argument("--out", type=Path, default=None,
                   help="with --text: also write the attribution to this file, as --format says: its heat map (png, "
                        "svg, html; the --top-k or --threshold highlights outlined), every (word, word read) pair "
                        "(csv, nats and bits) or the JSON --json prints")
    p.add_argument("--format", choices=["png", "svg", "html", "csv", "json"], default=None,
                   help="with --out: the file's format (default: its extension)")
    _force(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--threshold", type=fraction, default=None,
                      help="with --out: outline the words holding at least this share of a word's |attribution|")
    mode.add_argument("--top-k", type=whole(1, TOP_K_MAX), default=None,
                      help="with --out: outline each word's k largest |attribution| instead")
    _model_device(p)

    p = sub.add_parser("export", help="attention heatmap and data of one sentence (or a corpus sentence) to a file")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or bundled name")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="the sentence or passage to analyse")
    src.add_argument("--corpus", metavar="NAME", help=f"a sentence of a processed corpus ({', '.join(CORPORA)}, or "
                     "yours), chosen with --sentence; a document-level checkpoint reads it with the sentences of its "
                     "document before it (as many as fit), as the app's passages")
    p.add_argument("--split", default="test", help="with --corpus: train / valid / test (default test)")
    p.add_argument("--sentence", metavar="ID", help="with --corpus: the sentence's id (the first column of "
                   "`vizlm compare --csv`; default: the split's first sentence)")
    p.add_argument("--format", choices=["png", "svg", "html", "csv", "json"],
                   help="output format (default: the --out file's suffix, as the API's Analysis.export)")
    p.add_argument("--out", required=True, type=Path, help="output file")
    _force(p)
    _highlight_mode(p)
    _head_choice(p)


def _force(p) -> None:
    p.add_argument("--force", action="store_true", help="replace an output file that exists (else it is refused)")


def check_outputs(args, *names: str) -> None:
    """Refuse, before any work, output files (the options ``names``) that exist and are not empty,
    unless ``--force`` (:func:`vizlm.core.files.check_replace`)."""
    for name in names:
        if (path := getattr(args, name, None)) is not None:
            files.check_replace(path, None, args.force)


def _sentences(args, verb: str) -> tuple[list[list[str]], list[str], str, str | None]:
    """(normalised sentences, ids, label, corpus checksum) from --corpus/--split or --text-file.

    A text file's sentences get ids ``docD:lineI``: blank lines separate its documents (read as
    running text by document-context checkpoints). A text file without a word is an error
    (``no sentences to <verb>``), not an empty result."""
    from vizlm.data.registry import load_corpus

    if args.text_file:
        sizes: list[int] = []
        sents = read_text(args.text_file, sizes)
        if not sents:
            raise ValueError(f"no sentences to {verb}: {args.text_file} has no words")
        doc_of = itertools.chain.from_iterable(itertools.repeat(d, n) for d, n in enumerate(sizes, 1))
        return sents, [f"doc{d}:line{i}" for i, d in enumerate(doc_of)], str(args.text_file), None
    corpus = load_corpus(args.corpus, args.split)
    return corpus.sentences, corpus.ids, f"{args.corpus}/{args.split}", corpus.checksum


def warn_off_corpus(models, args) -> None:
    """With ``--corpus``: a warning on stderr for each model not trained on it (:meth:`vizlm.api.Model.off_corpus`)."""
    if getattr(args, "corpus", None) is None:
        return
    for model in models:
        if note := model.off_corpus(args.corpus, args.split):
            print(f"warning: {note}", file=sys.stderr)


def _bits(x: float) -> str:
    """A signed effect in bits, two decimals, with no "-0.00"."""
    text = f"{x:+.2f}b"
    return "+0.00b" if text == "-0.00b" else text


def dump_json(obj) -> None:
    """One JSON document on stdout; clean_text makes sure no lone surrogate (raw bytes) gets out."""
    from vizlm.present.export import json_safe

    print(clean_text(json.dumps(json_safe(obj), ensure_ascii=False, allow_nan=False)))


def cmd_analyze(args) -> int:
    from vizlm.api import ATTENTION_OFF, READINGS

    sa = analyze_at_head(vizlm.load(args.checkpoint, device=args.device), args.text, args)
    doc = sa.to_dict()
    if args.json:
        dump_json(doc)
        return 0
    print(f"{sa.model}: perplexity {sa.perplexity:.1f} over {len(sa.targets)} predicted tokens")
    if sa.boundaries:
        print(f"{len(sa.boundaries) + 1} sentences; {sa.model} ({sa.context} level) {READINGS[sa.context]}")
    effects = doc["effects"]
    if effects:
        rho = effects["rank_correlation"]
        print(f"attention read: {effects['read_effect_mean_bits']:+.3f} bits per word on average, "
              f"{effects['share_over_1_bit']:.0%} of the words moved by more than 1 bit; weight-effect rank "
              f"correlation {'n/a' if rho is None else f'{rho:+.2f}'}")
        if sa.self_attention:
            print("effect = log2 P(word) minus the same with the head's output zeroed at every position (the layer's "
                  "heads for a mean); per highlight: (weight, effect in bits of dropping that word from this row)")
        else:
            print("effect = log2 P(word) with the attention read minus without it; per highlight: (weight, effect "
                  "of that slot in bits); off = most weight on the empty start slot")
    if sa.head is not None:
        print(f"self-attention, {sa.head_label} (of {sa.layers} layers x {sa.heads_per_layer} heads; --layer and "
              "--head choose): a word attends to the words read so far, itself included")
    for note in sa.notes:
        print(f"note: {note}")
    for t in doc["targets"]:
        hl = ", ".join(f"{h['word']}({h['weight']:.2f}" + ("" if h["effect_bits"] is None else f", {_bits(h['effect_bits'])}")
                       + ")" for h in t["highlights"])
        labels = "; ".join(f"{c['attended']}: {'/'.join(c['labels'])}" for c in t["cases"] if c["labels"])
        read = ""
        if t["read_effect_bits"] is not None:
            off = t["start_weight"] is not None and t["start_weight"] >= ATTENTION_OFF
            read = f"  effect {_bits(t['read_effect_bits'])}" + (" off" if off else "    ")
        print(f"{t['index']:>3} {t['word']:<15} p={t['prob']:.4f}{read}  {hl}" + (f"  [{labels}]" if labels else ""))
    return 0


def cmd_compare(args) -> int:
    from vizlm.core.distributed import session
    from vizlm.present.export import export_frame

    check_outputs(args, "csv")
    ma, mb = vizlm.load(args.a), vizlm.load(args.b)
    warn_off_corpus([ma, mb], args)
    a, b = ma.checkpoint, mb.checkpoint
    with session(args.device) as ctx:
        for c in (a, b):
            c.model.to(ctx.device)
        if args.text_file:
            sents, ids, _, _ = _sentences(args, "compare")
            with scoring_progress([a, b], sents, "compare"):
                result = vizlm.compare(ma, mb, sentences=sents, ids=ids).result
        else:
            with scoring_progress([a, b] if ctx.main else [], None, "compare"):
                result = vizlm.compare(ma, mb, args.corpus, args.split, context=ctx).result
        if not ctx.main:
            return 0
    if args.csv:
        write_output(args.csv, export_frame(result.table, "csv"), args.force)
    if args.json:
        doc = result.to_dict()
        doc["most_improved"] = result.most_improved(args.top, args.min_length).to_dict("records")
        doc["most_worsened"] = result.most_worsened(args.top, args.min_length).to_dict("records")
        doc.pop("table", None)
        dump_json(doc)
        return 0
    for k, v in result.summary.items():
        print(f"{k:>28}: {v:.4f}" if isinstance(v, float) else f"{k:>28}: {v}")
    import pandas as pd

    with pd.option_context("display.width", 160, "display.max_colwidth", 70):
        print(f"\nmost improved by {b.label} over {a.label}:")
        print(result.most_improved(args.top, args.min_length)[["sentence_id", "length", "ppl_a", "ppl_b", "text"]].to_string(index=False))
        print("\nmost worsened:")
        print(result.most_worsened(args.top, args.min_length)[["sentence_id", "length", "ppl_a", "ppl_b", "text"]].to_string(index=False))
    return 0


def cmd_positions(args) -> int:
    from vizlm.core.distributed import session

    check_outputs(args, "png", "svg")
    models = [vizlm.load(c) for c in args.checkpoint]
    warn_off_corpus(models, args)
    ckpts = [m.checkpoint for m in models]
    attending = [c for c in ckpts if c.has_attention]
    effects = not args.no_effects
    with session(args.device) as ctx:
        for c in ckpts:
            c.model.to(ctx.device)
        if args.text_file:
            sents, ids, _, _ = _sentences(args, "analyse")  # ids: a document model reads each block as running text
            with scoring_progress(attending, sents, "positions"):
                stats = vizlm.positions(models, window=args.window, effects=effects, sentences=sents, ids=ids).result
        else:
            with scoring_progress(attending if ctx.main else [], None, "positions"):
                stats = vizlm.positions(models, args.corpus, args.split, window=args.window, effects=effects,
                                  context=ctx).result
        if not ctx.main:
            return 0
    if (args.png or args.svg) and not stats.frame.empty:
        from vizlm.present.export import chart_bytes
        from vizlm.present.charts import positions_chart

        chart = positions_chart(stats.frame)
        if effects:
            chart = chart | positions_chart(stats.frame, measure="effect")
        for path, fmt in ((args.png, "png"), (args.svg, "svg")):
            if path:
                write_output(path, chart_bytes(chart, fmt), args.force)
    if args.json:
        dump_json(stats.to_dict())
        return 0
    columns = [c for c in stats.frame.columns if effects or not c.startswith("effect")]
    print(stats.frame[columns].to_string(index=False))
    if stats.resampled:
        print(f"lo, hi: {stats.band_note()}")
    print()
    for name, entropy in stats.entropy.items():
        print(f"{name}: mean attention entropy {entropy:.3f} nats, mean largest weight of a row {stats.peak[name]:.3f}, "
              f"{max(0.0, stats.beyond[name]):.1%} of the weight beyond offset {args.window}")
    if stats.effects:
        print("\neffect: mean slot effect in bits (log2 P(word) minus the same with that slot dropped)")
        for name, e in stats.effects.items():
            print(f"{name}: the attention read moves log2 P(word) by more than 1 bit for {e['share_over_1_bit']:.2%} "
                  f"of {e['tokens']:,} words (mean {e['mean_read_bits']:+.4f} bits, mean |effect| "
                  f"{e['mean_abs_read_bits']:.4f} bits)")
    for name in stats.skipped:
        print(f"{name}: no attention, left out")
    for name, why in stats.failed.items():  # the others are above
        print(f"vizlm positions: {name} failed: {why}", file=sys.stderr)
    return 1 if stats.failed else 0


def cmd_cases(args) -> int:
    from vizlm.inspect.case_gallery import corpus_cases

    model = vizlm.load(args.checkpoint, device=args.device)
    warn_off_corpus([model], args)
    ckpt = model.checkpoint
    attending = [ckpt] if ckpt.has_attention else []
    head = head_argument(ckpt, args)
    if args.text_file:
        sents, ids, _, _ = _sentences(args, "analyse")
        with scoring_progress(attending, sents, "cases"):
            report = corpus_cases(ckpt, sentences=sents, ids=ids, setting=Share(args.threshold),
                                  examples_per_label=args.examples, rank=args.rank, head=head)
    else:
        with scoring_progress(attending, None, "cases"):
            report = corpus_cases(ckpt, args.corpus, args.split, Share(args.threshold),
                                  examples_per_label=args.examples, rank=args.rank, head=head)
    doc = report.to_dict()
    if args.label:
        doc["examples"] = {args.label: doc["examples"].get(args.label, [])}
    if args.json:
        dump_json(doc)
        return 0
    print("counts: " + ", ".join(f"{k}={v}" for k, v in doc["counts"].items()))
    if doc["chance"]:
        some = next(iter(doc["chance"].values()))
        units = f"{some['units']:,} {some['unit'] if some['units'] > 1 else some['unit'][:-1]}"
        print(f"\nagainst chance: the share of the {doc['pairs']:,} highlighted pairs with the label, the rate the same "
              "rule has on all pairs at the same distances (distance-matched chance), their ratio, and observed - "
              f"chance in points with its 95% interval (bootstrap over {units})")
        for label, c in doc["chance"].items():
            ratio = "-" if c["enrichment"] is None else f"x{c['enrichment']:.2f}"
            interval = "no interval: one unit" if c["low"] is None else \
                f"{100 * c['low']:+.2f} to {100 * c['high']:+.2f}"
            print(f"  {label:<8} {c['observed']:7.2%}  chance {c['chance']:6.2%}  {ratio:>6}  "
                  f"{100 * (c['observed'] - c['chance']):+.2f} ({interval})")
    for label, examples in doc["examples"].items():
        print(f"\n{label}:")
        for ex in examples:
            effect = "" if ex["effect"] is None else f" {_bits(ex['effect'])}"
            attributed = "" if ex.get("attribution_bits") is None else f" attribution {_bits(ex['attribution_bits'])}"
            print(f"  {ex['weight']:.2f}{effect}{attributed}  {ex['attended']} -> {ex['word']}  ({ex['sentence_id']}): "
                  f"{ex['evidence']}")
    return 0


def cmd_attribute(args) -> int:
    from vizlm.api import SAY_COST_S
    from vizlm.present.export import FORMATS, export_attribution, json_safe
    from vizlm.present.tables import sample_text

    if args.out is not None:
        if args.corpus:
            raise ValueError("--out writes the attribution of one text (--text), not a corpus's statistics (--json)")
        args.format = args.format or args.out.suffix.lstrip(".").lower()
        if args.format not in FORMATS:
            raise ValueError(f"--out {args.out}: say --format ({', '.join(FORMATS)}); the extension does not")
        check_outputs(args, "out")
    model = vizlm.load(args.checkpoint, device=args.device)
    warn_off_corpus([model], args)
    if args.corpus:
        with tqdm(total=100, desc="attribute", unit="%", file=sys.stderr, delay=2) as bar:  # shown past 2 s only
            doc = model.corpus_attribution(args.corpus, args.split, method=args.method or "gradient-x-input",
                                           limit=args.limit, n_steps=args.steps,
                                           progress=lambda f: bar.update(int(100 * f) - bar.n))
        if args.json:
            dump_json(doc)
            return 0
        print(f"{doc['model']} on {doc['corpus']}/{doc['split']}, {doc['method']} ({sample_text(doc)}; intervals: 95% "
              f"bootstrap over the {doc['resampled']}; --json for attribution by distance)")
        for key in ("agreement", "permutation"):
            if doc.get(key):
                print(f"{key}: " + json.dumps(json_safe(doc[key]), ensure_ascii=False))
        return 0
    method = args.method or "integrated-gradients"
    seconds = model.attribute_seconds(args.text, method=method, n_steps=args.steps)
    if seconds > SAY_COST_S:  # a long one is said before it starts (Ctrl-C stops it)
        print(f"attribute: {method} of this text takes about {_duration(seconds)} on one core "
              f"(its tokens x {args.steps if method == 'integrated-gradients' else 1} steps; Ctrl-C stops it)",
              file=sys.stderr)
    with tqdm(total=100, desc="attribute", unit="%", file=sys.stderr, delay=2) as bar:  # shown past 2 s only
        result = model.attribute(args.text, method=method, n_steps=args.steps,
                                 progress=lambda f: bar.update(max(0, int(100 * f) - bar.n)))
    if args.out is not None:
        data = export_attribution(result, args.format, setting(args.threshold, args.top_k, NONE))
        files.write_bytes(args.out, data, force=args.force)
        print(f"wrote {args.out} ({len(data):,} bytes)", file=sys.stderr)
    doc = result.to_dict()
    if args.json:
        dump_json(doc)
        return 0
    # bits, as the app and the pictures show them (the JSON keeps the nats it says it holds)
    print(f"{doc['model']} ({doc['context']} level), {doc['method']}: attribution of log2 P(word) in bits to the "
          "words read before it, the three largest |score| first")
    for t in doc["targets"]:
        top = sorted(t["attributions"], key=lambda a: -abs(a["score"]))[:3]
        agree = t.get("agreement")
        tail = "" if not agree or agree["kendall_tau"] is None else f"   tau {agree['kendall_tau']:+.2f}"
        print(f"{t['index']:>3} {t['word']:<15} "
              + ", ".join(f"{a['input']}({a['score'] / math.log(2):+.2f})" for a in top) + tail)
    if doc["agreement"]:
        s = doc["agreement"]
        print(f"agreement with the attention over {s['targets']} words: mean Kendall tau {s['kendall_tau']:+.2f}, "
              f"most attended = most important for {s['top1_share']:.0%}")
    return 0


def _duration(seconds: float) -> str:
    """A duration for people: seconds below two minutes, then minutes."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def corpus_text(corpus: str, split: str, sentence: str | None, document: bool) -> str:
    """The text of sentence ``sentence`` (an id; None: the first) of a processed split, as typed text: its
    words as written; with ``document``, after the sentences of its document before it that fit in
    :data:`~vizlm.data.text.MAX_TOKENS` tokens with it, a sentence a line."""
    from vizlm.data.examples import passage_start
    from vizlm.data.registry import split_texts

    ids, texts, _ = split_texts(corpus, split)
    if not ids:
        raise ValueError(f"{corpus}/{split} has no sentences")
    if sentence is None:
        index = 0
    else:
        try:
            index = ids.index(sentence)
        except ValueError:
            raise ValueError(f"{corpus}/{split} has no sentence {sentence[:64]!r} (ids like {ids[0]!r}; "
                             "`vizlm compare --csv` lists them)") from None
    start = passage_start(ids, [t.count(" ") + 1 for t in texts], index) if document else index
    return "\n".join(texts[start : index + 1])


def cmd_export(args) -> int:
    args.format = args.format or args.out.suffix.lstrip(".").lower()
    if args.format not in ("png", "svg", "html", "csv", "json"):
        raise ValueError(f"--out {args.out}: say --format (png, svg, html, csv, json); the suffix does not")
    check_outputs(args, "out")
    if args.sentence is not None and args.corpus is None:
        raise ValueError("--sentence chooses a sentence of --corpus; give --corpus NAME")
    model = vizlm.load(args.checkpoint)
    text = args.text if args.corpus is None else corpus_text(args.corpus, args.split, args.sentence,
                                                              model.context == "document")
    sa = analyze_at_head(model, text, args)
    try:
        path = sa.export(args.out, args.format, force=args.force)
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(args.out)
        raise
    print(f"wrote {args.out} ({path.stat().st_size:,} bytes)", file=sys.stderr)
    return 0


COMMANDS = {"analyze": cmd_analyze, "compare": cmd_compare, "positions": cmd_positions, "cases": cmd_cases,
            "attribute": cmd_attribute, "export": cmd_export}


def run(args) -> int:
    return COMMANDS[args.command](args)
