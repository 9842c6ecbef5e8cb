"""Analysis sub-commands of the CLI: analyze, compare, positions, cases, export.

Each command is argparse -> one library call (``vizlm.analysis``, ``vizlm.corpus``,
``vizlm.cases``, ``vizlm.export``) -> JSON (``--json``) or a table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vizlm.analysis import DEFAULT_THRESHOLD
from vizlm.cases import LABELS
from vizlm.data import CORPORA


def _source(p) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--corpus", choices=list(CORPORA), help="processed corpus under data/")
    src.add_argument("--text-file", type=Path, help="raw text, one paragraph or sentence a line")
    p.add_argument("--split", default="test", help="corpus split: train / valid / test (default test)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _highlight_mode(p) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--threshold", type=float, default=None, help=f"highlight slots with weight >= this (default {DEFAULT_THRESHOLD:g})")
    mode.add_argument("--top-k", type=int, default=None, help="highlight the k heaviest slots instead")


def add_analysis_commands(sub) -> None:
    p = sub.add_parser("analyze", help="attention, probabilities and cases for one sentence")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or bundled name (lstm, amsrn, kvp)")
    p.add_argument("--text", required=True, help="the sentence to analyse")
    _highlight_mode(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = sub.add_parser("compare", help="per-sentence perplexity of two models (b = the attention model)")
    p.add_argument("--a", required=True, help="baseline checkpoint")
    p.add_argument("--b", required=True, help="checkpoint compared with the baseline")
    _source(p)
    p.add_argument("--top", type=int, default=10, help="how many most improved / worsened sentences to list")
    p.add_argument("--min-length", type=int, default=5, help="only list sentences with at least this many words")
    p.add_argument("--csv", type=Path, help="write the whole per-sentence table as CSV")

    p = sub.add_parser("positions", help="average attention by relative position (Daniluk et al. Fig. 3)")
    p.add_argument("--checkpoint", nargs="+", required=True, help="one or more attention checkpoints")
    _source(p)
    p.add_argument("--window", type=int, default=10, help="how many positions back to show")
    p.add_argument("--png", type=Path, help="write the plot as PNG")
    p.add_argument("--svg", type=Path, help="write the plot as SVG")

    p = sub.add_parser("cases", help="trigger / causal / phrase / grammar cases over a corpus")
    p.add_argument("--checkpoint", required=True, help="attention checkpoint")
    _source(p)
    p.add_argument("--label", choices=LABELS, help="only this label's examples")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="attention weight that counts as a highlight")
    p.add_argument("--examples", type=int, default=10, help="strongest examples listed per label")

    p = sub.add_parser("export", help="attention heatmap and data of one sentence to a file")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or bundled name")
    p.add_argument("--text", required=True, help="the sentence to analyse")
    p.add_argument("--format", required=True, choices=["png", "svg", "html", "csv", "json"], help="output format")
    p.add_argument("--out", required=True, type=Path, help="output file")
    _highlight_mode(p)


def _sentences(args) -> tuple[list[list[str]], list[str], str, str | None]:
    """(normalised sentences, ids, label, corpus checksum) from --corpus/--split or --text-file."""
    from vizlm.data import load_corpus, read_text_file

    if args.text_file:
        sents = read_text_file(args.text_file)
        return sents, [f"line{i}" for i in range(len(sents))], str(args.text_file), None
    corpus = load_corpus(args.corpus, args.split)
    return corpus.sentences, corpus.ids, f"{args.corpus}/{args.split}", corpus.checksum


def _dump(obj) -> None:
    from vizlm.export import json_safe

    print(json.dumps(json_safe(obj), ensure_ascii=False, allow_nan=False))


def cmd_analyze(args) -> int:
    from vizlm.analysis import analyze
    from vizlm.checkpoint import load_checkpoint
    from vizlm.export import analysis_dict

    sa = analyze(load_checkpoint(args.checkpoint), args.text)
    doc = analysis_dict(sa, threshold=args.threshold, top_k=args.top_k)
    if args.json:
        _dump(doc)
        return 0
    print(f"{sa.model}: perplexity {sa.perplexity:.1f} over {len(sa.targets)} predicted tokens")
    for note in sa.notes:
        print(f"note: {note}")
    for t in doc["targets"]:
        hl = ", ".join(f"{h['word']}({h['weight']:.2f})" for h in t["highlights"])
        labels = "; ".join(f"{c['attended']}: {'/'.join(c['labels'])}" for c in t["cases"] if c["labels"])
        print(f"{t['index']:>3} {t['word']:<15} p={t['prob']:.4f}  {hl}" + (f"  [{labels}]" if labels else ""))
    return 0


def cmd_compare(args) -> int:
    from vizlm.checkpoint import load_checkpoint
    from vizlm.corpus import compare, compare_corpus
    from vizlm.export import export_frame

    a, b = load_checkpoint(args.a), load_checkpoint(args.b)
    if args.text_file:
        sents, ids, _, _ = _sentences(args)
        result = compare(a, b, sents, ids)
    else:
        result = compare_corpus(a, b, args.corpus, args.split)
    if args.csv:
        args.csv.write_bytes(export_frame(result.table, "csv"))
    if args.json:
        doc = result.to_dict()
        doc["most_improved"] = result.most_improved(args.top, args.min_length).to_dict("records")
        doc["most_worsened"] = result.most_worsened(args.top, args.min_length).to_dict("records")
        doc.pop("table", None)
        _dump(doc)
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
    from vizlm.checkpoint import load_checkpoint
    from vizlm.corpus import attention_by_position, positions_corpus

    ckpts = [load_checkpoint(c) for c in args.checkpoint]
    if args.text_file:
        sents, _, _, _ = _sentences(args)
        stats = attention_by_position(ckpts, sents, window=args.window)
    else:
        stats = positions_corpus(ckpts, args.corpus, args.split, window=args.window)
    if args.png or args.svg:
        from vizlm.export import chart_bytes
        from vizlm.plots import positions_chart

        chart = positions_chart(stats.frame)
        for path, fmt in ((args.png, "png"), (args.svg, "svg")):
            if path:
                path.write_bytes(chart_bytes(chart, fmt))
    if args.json:
        _dump(stats.to_dict())
        return 0
    print(stats.frame.to_string(index=False))
    return 0


def cmd_cases(args) -> int:
    from vizlm.cases import corpus_cases
    from vizlm.checkpoint import load_checkpoint

    ckpt = load_checkpoint(args.checkpoint)
    if args.text_file:
        sents, ids, _, _ = _sentences(args)
        report = corpus_cases(ckpt, sentences=sents, ids=ids, threshold=args.threshold, examples_per_label=args.examples)
    else:
        report = corpus_cases(ckpt, args.corpus, args.split, threshold=args.threshold, examples_per_label=args.examples)
    doc = report.to_dict()
    if args.label:
        doc["examples"] = {args.label: doc["examples"].get(args.label, [])}
    if args.json:
        _dump(doc)
        return 0
    print("counts: " + ", ".join(f"{k}={v}" for k, v in doc["counts"].items()))
    for label, examples in doc["examples"].items():
        print(f"\n{label}:")
        for ex in examples:
            print(f"  {ex['weight']:.2f}  {ex['attended']} -> {ex['word']}  ({ex['sentence_id']}): {ex['evidence']}")
    return 0


def cmd_export(args) -> int:
    from vizlm.analysis import analyze
    from vizlm.checkpoint import load_checkpoint
    from vizlm.export import export_analysis

    sa = analyze(load_checkpoint(args.checkpoint), args.text)
    data = export_analysis(sa, args.format, threshold=args.threshold, top_k=args.top_k)
    args.out.write_bytes(data)
    print(f"wrote {args.out} ({len(data):,} bytes)", file=sys.stderr)
    return 0


COMMANDS = {"analyze": cmd_analyze, "compare": cmd_compare, "positions": cmd_positions, "cases": cmd_cases, "export": cmd_export}


def run(args) -> int:
    return COMMANDS[args.command](args)
