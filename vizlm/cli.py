"""The ``vizlm`` command line: prepare, train, eval (and the analysis commands)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from vizlm import commands
from vizlm.core import paths
from vizlm.commands import fraction, positive_number, read_text, scoring_progress, whole
from vizlm.data.registry import CORPORA, TRAINABLE
from vizlm.data.vocab import SPECIALS, VOCAB_SIZE
from vizlm.core.choices import DEVICES, FAMILIES, IMPORT_SOURCES
from vizlm.data.layouts import LAYOUT_HELP, LAYOUTS
from vizlm.modeling.config import TrainConfig
from vizlm.modeling.config import options as train_options

# `vizlm reproduce WHAT`: each word and the option it stands for (its dest)
REPRODUCE_MODES = ("list", "run", "report", "evidence", "bundle", "attribution", "faithfulness", "cases")
REPRODUCE_FLAGS = {"--list": "list", "--only": "only", "--all": "all", "--report": "report", "--evidence": "evidence",
                   "--cases": "cases", "--attribution": "attribution", "--faithfulness": "faithfulness",
                   "--bundle": "bundle"}

# how the command line checks a TrainConfig option (its field's metadata["check"])
CHECKS = {"whole>=1": whole(1), "whole>=0": whole(0), "number>0": positive_number, "fraction": fraction, "int": int}

MODEL_OPTIONS = {  # flag -> (config field, type, help)
    "--emb-dim": ("emb_dim", whole(1), "embedding size (default 50)"),
    "--hidden-dim": ("hidden_dim", whole(1), "LSTM output size; for kv/kvp/ngram the size of each part (default 50)"),
    "--dropout": ("dropout", fraction, "dropout on embeddings and outputs, from 0 to 1 (default 0)"),
    "--selection": ("selection", str, "AMSRN gates: none | independent | shared | complementary"),
    "--entropy-weight": ("entropy_weight", float, "AMSRN attention-entropy weight lambda (default 0)"),
    "--window": ("window", whole(1), "Daniluk attention window L (default 5); RM: the last n words (default 15)"),
    "--n": ("n", whole(1), "N of the N-gram RNN (default 4)"),
    "--score": ("score", str, "Salton attention score: single | combined"),
    "--context": ("context", str, (
        "sentence: every sentence read alone from a zero state (default); document: documents read as "
        "running text, state and memory carried across sentences and segments (Daniluk et al.)")),
    "--memory": ("memory", int, "AMSRN/Salton: attend to the last N states (default: the sentence; 100 in documents)"),
    "--layers": ("layers", whole(1), "stacked recurrent layers (default 1); attention and output layer read the top one"),
    "--rnn": ("rnn", str, "lstm model: its recurrent cell, lstm (default) | gru | rnn_tanh | rnn_relu"),
    "--tie": ("tie", bool, "lstm model: the output layer's weight is the embedding (needs --emb-dim = --hidden-dim)"),
    "--heads": ("heads", whole(1), "transformer: attention heads per layer (--emb-dim a multiple of it; default 2)"),
    "--start-slot": ("start_slot", bool, (
        "AMSRN: keep the zero start slot h_0 in the memory (default); --no-start-slot attends to h_1 .. h_{t-1} "
        "only, and the first step reads nothing")),
}


def model_name(text: str) -> str:
    """argparse type: a built-in family or an installed plugin's model (read only for a name vizlm lacks)."""
    from vizlm import models

    try:
        models.lookup(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="train a model on a corpus")
    p.add_argument("--model", required=True, type=model_name, metavar="MODEL",
                   help=f"model family: {', '.join(FAMILIES)}, or an installed plugin's (`vizlm plugins` lists them)")
    p.add_argument("--corpus", default="brown", metavar="NAME", help=f"training corpus: {', '.join(TRAINABLE)} "
                   "(default brown), or yours (`vizlm corpora` lists them)")
    p.add_argument("--out", type=Path, help="checkpoint folder (default RUNS/MODEL, runs/ of the vizlm home; a temp dir "
                   "with --dry-run); one that holds a checkpoint needs --resume or --force")
    p.add_argument("--force", action="store_true", help="train a new model in place of the checkpoint in --out")
    for flag, (_, typ, hlp) in MODEL_OPTIONS.items():
        if typ is bool:  # --flag / --no-flag; None (not given) keeps the config's default
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=hlp)
        else:
            p.add_argument(flag, type=typ, default=None, help=hlp)
    p.add_argument("--match-params", nargs="?", const="lstm", default=None, choices=FAMILIES, metavar="MODEL",
                   help="choose --hidden-dim (the part size for kv/kvp/ngram) so the total parameter count is within "
                        "2%% of MODEL's (default lstm) built with the given --hidden-dim (default 50) and --emb-dim; "
                        "e.g. --model kvp --match-params, or --model lstm --match-params amsrn (the AMSRN-sized LSTM)")
    for f in train_options():  # TrainConfig's fields: their defaults, help and checks are kept there
        flag, meta = "--" + f.name.replace("_", "-"), f.metadata
        if meta["check"] == "switch":
            p.add_argument(flag, action="store_true", help=meta["help"])
        else:
            p.add_argument(flag, type=CHECKS[meta["check"]], default=f.default, metavar=meta["metavar"],
                           help=meta["help"].replace("%", "%%"))
    p.add_argument("--threads", type=whole(1), default=None, help="torch CPU threads")
    p.add_argument("--init-from", default=None, help="start from a trained checkpoint: AMSRN copies the LSTM; attention/kv/kvp/ngram take a trained LSTM as their predict part")
    p.add_argument("--resume", action="store_true",
                   help="continue from OUT/resume (the last epoch end or --save-every step; any number of processes)")
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="auto: this process's GPU (cuda:LOCAL_RANK) when CUDA is available, else the CPU; "
                        "under torchrun the process group uses NCCL on GPUs, gloo on CPUs")
    p.add_argument("--dry-run", action="store_true", help="a few batches of one epoch, to check the pipeline (without --out: in "
                   "a temporary folder, removed when it ends)")


def _add_eval(sub) -> None:
    p = sub.add_parser("eval", help="perplexity of a checkpoint on a corpus split or a text file")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or bundled name")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--corpus", metavar="NAME", help=f"processed corpus: {', '.join(CORPORA)}, or yours "
                     "(`vizlm corpora` lists them)")
    src.add_argument("--text-file", type=Path, help="raw text, one paragraph or sentence a line; "
                     "a blank line separates documents (read as running text by document-context checkpoints)")
    p.add_argument("--split", default="test", help="corpus split (train/valid/test)")
    p.add_argument("--batch-size", type=whole(1), default=128, help="sentences per batch (sentence-context checkpoints)")
    p.add_argument("--device", choices=DEVICES, default="auto", help="auto: the GPU when CUDA is available, else the CPU")
    p.add_argument("--context", choices=("own", "stream"), default="own", help=(
        "own: the checkpoint's context (sentences alone, or documents as running text; default); stream: the whole "
        "split as one token stream (every line's words and </s>) in --streams contiguous columns, --bptt steps at a "
        "time, the state carried and never reset, as pytorch/examples' word_language_model evaluates"))
    p.add_argument("--streams", type=whole(1), default=10, help="with --context stream: columns (pytorch/examples: 10)")
    p.add_argument("--bptt", type=whole(1), default=35, help="with --context stream: steps read at a time (default 35)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _add_import(sub) -> None:
    p = sub.add_parser("import", help="convert a model trained elsewhere into a vizlm checkpoint, and its data into "
                       "a vizlm corpus")
    p.add_argument("source", choices=IMPORT_SOURCES, help="what made the model: pytorch-examples (pytorch/examples' "
                   "word_language_model: its RNNModel, LSTM, GRU, RNN_TANH, RNN_RELU, or its TransformerModel)")
    p.add_argument("model_file", type=Path, metavar="MODEL.pt", help="its checkpoint: a state dict, or the whole "
                   "module as its main.py saves it (read without running pickled code)")
    p.add_argument("--data", dest="source_data", type=Path, required=True, metavar="FOLDER",
                   help="the folder with train.txt, valid.txt, test.txt the model was trained on (its vocabulary)")
    named = p.add_mutually_exclusive_group(required=True)
    named.add_argument("--corpus", metavar="NAME", help="the vizlm corpus FOLDER becomes (written to the "
                       "data folder, beside the processed corpora)")
    named.add_argument("--vocab-of", metavar="NAME", help="instead: the vizlm corpus whose words the model has (trained "
                       "on it as scripts/anchor_corpus.py writes it out): the checkpoint takes its vocabulary and reads "
                       "it; no corpus is written")
    p.add_argument("--out", type=Path, required=True, help="the checkpoint folder to write")
    p.add_argument("--nonlinearity", choices=("tanh", "relu"), default=None,
                   help="an Elman RNN's (RNN_TANH / RNN_RELU) saved as a state dict: its weights do not say which")
    p.add_argument("--nhead", type=whole(1), default=None, metavar="N",
                   help="a TransformerModel saved as a state dict: its heads per layer (main.py's --nhead; the "
                   "weights do not say; a module saved whole does)")
    p.add_argument("--bptt", type=whole(1), default=35, metavar="N",
                   help="a TransformerModel: the chunk length it was trained on (main.py's --bptt, default 35); "
                   "vizlm reads text in blocks of this many tokens, as main.py does")
    p.add_argument("--log", type=Path, metavar="FILE", help="what its main.py printed while it trained: kept as the "
                   "checkpoint's training log (epochs, valid perplexity, learning rate), with main.py's test perplexity")
    p.add_argument("--force", action="store_true", help="replace a checkpoint in --out or a corpus NAME that differs")


def cmd_import(args) -> int:
    from vizlm.modeling.importer import import_pytorch_examples

    summary = import_pytorch_examples(args.model_file, args.source_data, args.corpus, args.out,
                                      nonlinearity=args.nonlinearity, force=args.force, heads=args.nhead,
                                      block=args.bptt, vocab_of=args.vocab_of, log=args.log)
    print(json.dumps(summary))  # for scripts; people read what follows, on stderr
    corpora = f" --corpora {paths.corpora_dir()}" if getattr(args, "corpora", None) is not None else ""
    wrote = f"with the vocabulary of the corpus {summary['corpus']}" if args.vocab_of else \
        f"and the corpus {summary['corpus']} ({summary['corpus_folder']})"
    print(f"wrote the checkpoint {summary['checkpoint']} {wrote}. Next:\n"
          f"  vizlm{corpora} eval --checkpoint {summary['checkpoint']} --corpus {summary['corpus']} --split test\n"
          f"  streamlit run app.py -- --checkpoints {Path(summary['checkpoint']).parent}{corpora}"
          "   # the app, the model beside the bundled ones", file=sys.stderr)
    return 0


def _add_reproduce(sub) -> None:
    p = sub.add_parser(
        "reproduce", help="the runs of experiments.toml (or your manifest): list, train what is missing, write the "
                          "result tables",
        description="The repository's manifest (experiments.toml) trains into runs/, keeps its evidence in evidence/ "
                    "and reports into docs/RESULTS.md. Your manifest (--manifest PATH/NAME.toml, e.g. the papers' "
                    "protocols on a corpus you prepared: examples/my-corpus.toml) keeps all it makes in PATH/NAME/: "
                    "runs/, evidence/ and RESULTS.md, never the repository's; $VIZLM_RUNS and $VIZLM_EVIDENCE, or "
                    "--runs, --evidence-dir and --report-out, put them elsewhere (an option wins over a variable).")
    p.add_argument("mode", nargs="?", choices=REPRODUCE_MODES, metavar="WHAT",
                   help=f"what to do, as a word ({', '.join(REPRODUCE_MODES)}; `run NAME ...` trains those runs, "
                        "`run --all` every one): the same as its option below (`list` is --list, `run NAME` is --only "
                        "NAME, `evidence NAME` is --evidence NAME ...)")
    p.add_argument("names", nargs="*", metavar="NAME", help="with a WHAT: the runs or checkpoints it takes")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="every run with its state (finished / partial / not run / blocked / foreign: its "
                      "folder holds another manifest's run)")
    what.add_argument("--only", nargs="+", metavar="NAME", help="train these runs (and the runs they start from) if not finished")
    what.add_argument("--all", action="store_true", help="train every run that is not finished or blocked")
    what.add_argument("--report", action="store_true", help="write the result tables from the runs' evidence (no "
                      "weights, no model evaluation) into the report file (--report-out: docs/RESULTS.md for "
                      "experiments.toml, PATH/NAME/RESULTS.md for your PATH/NAME.toml)")
    what.add_argument("--evidence", nargs="*", metavar="NAME", help="write the evidence of these finished runs (none "
                      "named: of every finished run whose checkpoint is here and whose evidence is not)")
    what.add_argument("--cases", nargs="*", metavar="CHECKPOINT", help="label the highlighted pairs of the manifest's "
                      "[cases] checkpoints (these only, if named) over its split against chance and write their evidence "
                      "(evidence/cases/)")
    what.add_argument("--attribution", nargs="*", metavar="CHECKPOINT", help="attribute the predictions of the "
                      "manifest's [attribution] checkpoints (these only, if named) over its split and write their evidence "
                      "(evidence/attribution/; beyond the papers: is attention an explanation?)")
    what.add_argument("--faithfulness", nargs="*", metavar="CHECKPOINT", help="put the attention of the manifest's "
                      "[faithfulness] checkpoints (these only, if named) through the literature's tests over its split "
                      "and write their evidence (evidence/faithfulness/; beyond the papers: is attention an explanation?)")
    what.add_argument("--bundle", metavar="NAME", help="copy a finished run into checkpoints/ (float16 where test "
                      "perplexity changes < 0.1%%) and mark it bundled in the manifest")
    p.add_argument("--as", dest="bundle_as", metavar="FOLDER", default=None, help="with --bundle: the folder name in "
                   "checkpoints/ (default: the run's name)")
    p.add_argument("--manifest", type=Path, default=None, help="the manifest (default: experiments.toml in the vizlm "
                   "home); yours, PATH/NAME.toml, keeps its runs, evidence and report in PATH/NAME/")
    where = p.add_argument_group("where a manifest's results go (an option wins over $VIZLM_RUNS / $VIZLM_EVIDENCE)")
    where.add_argument("--runs", type=Path, metavar="DIR", default=None, help="the runs' checkpoints (default: "
                       "$VIZLM_RUNS, else runs/ of the vizlm home for experiments.toml, PATH/NAME/runs for yours)")
    where.add_argument("--evidence-dir", type=Path, metavar="DIR", default=None, help="the runs' evidence (default: "
                       "$VIZLM_EVIDENCE, else evidence/ of the vizlm home for experiments.toml, PATH/NAME/evidence for "
                       "yours)")
    where.add_argument("--report-out", type=Path, metavar="FILE", default=None, help="the file --report writes its "
                       "part of (default: docs/RESULTS.md of the vizlm home for experiments.toml, PATH/NAME/RESULTS.md "
                       "for yours)")
    p.add_argument("--threads", type=whole(1), default=None, help="torch CPU threads for training and for the evidence commands")
    p.add_argument("--jobs", type=whole(1), default=1, metavar="N", help="with --only/--all: train N runs at once, each "
                   "in a process of its own with its output in RUNS/NAME.log (a run starts once the run it starts from "
                   "has finished); --threads defaults to the CPUs shared out. 2 on a 2-core machine; several on a GPU")
    p.add_argument("--device", choices=DEVICES, default="cpu", help="what --only/--all train on (default cpu: the "
                   "repository's evidence trained on the CPU, and one seed gives the same weights only on the same kind "
                   "of device; cuda trains several times faster and records it, train.device; a run's evidence is "
                   "scored on the CPU), and where --attribution / --faithfulness / --cases compute (recorded in their "
                   "evidence's config, device)")
    p.add_argument("--json", action="store_true", help="with --list: print JSON")
    p.add_argument("--force", action="store_true", help="with --evidence / --attribution / --faithfulness / --cases: "
                   "rewrite evidence that exists; with run NAME ...: train those finished runs again from scratch (a "
                   "stale run: its evidence from an older protocol) into RUNS/NAME, a bundled one too, and replace "
                   "their evidence; with --bundle NAME: bundle such a retrained run in place of its bundled checkpoint")
    p.add_argument("--dry-run", action="store_true", help="a few batches per run, to check the pipeline (not results)")


def cmd_plugins() -> int:
    """One line per plugin: its model name, package, version and description; then the skipped ones."""
    from vizlm.models import REGISTRY, plugins

    found, skipped = plugins.installed(REGISTRY), plugins.skipped(REGISTRY)
    for name, p in found.items():
        kind = "attention" if p.plugin.model.has_attention else "no attention"
        print(f"{name:<16} {p.distribution or '(in-process)'} {p.version or ''}  {kind}; {p.plugin.description}".rstrip("; "))
    for name, why in skipped.items():
        print(f"{name:<16} skipped: {why}")
    if not found and not skipped:
        print(f"no plugins installed (entry point group {plugins.GROUP!r}; docs/PLUGINS.md)")
    return 0


def reproduce_what(args) -> None:
    """``vizlm reproduce WHAT [NAME ...]`` as its option (``run A B`` is ``--only A B``, ``run --all`` is ``--all``,
    ``bundle A`` is ``--bundle A``, ``report`` is ``--report`` ...): one way on from here. Exactly one of a WHAT and
    the options that say what to do."""
    given = [flag for flag, dest in REPRODUCE_FLAGS.items() if getattr(args, dest) not in (None, False)]
    if args.mode is None:  # (a first word that is no WHAT argparse refuses, naming the choices)
        if not given:
            raise ValueError(f"say what to do: one of {', '.join(REPRODUCE_MODES)} (or its option: "
                             f"{', '.join(REPRODUCE_FLAGS)})")
        return
    if given and not (args.mode == "run" and given == ["--all"] and not args.names):
        raise ValueError(f"{args.mode} and {given[0]} both say what to do: give one")
    if args.mode == "run":
        if not args.names and not args.all:
            raise ValueError("run what? `vizlm reproduce run NAME ...` (those runs) or `run --all` (every one)")
        if args.names:
            args.only = args.names
    elif args.mode in ("list", "report"):
        if args.names:
            raise ValueError(f"{args.mode} takes no names (given: {' '.join(args.names)})")
        setattr(args, args.mode, True)
    elif args.mode == "bundle":
        if len(args.names) != 1:
            raise ValueError("bundle takes one run: `vizlm reproduce bundle NAME [--as FOLDER]`")
        args.bundle = args.names[0]
    else:  # evidence, cases, attribution, faithfulness: these names, or none (all of the manifest's)
        setattr(args, args.mode, args.names)


def cmd_reproduce(args) -> int:
    from vizlm.reproduce import corpus_runs, experiments, report, runner

    reproduce_what(args)

    # a manifest of yours keeps its runs and evidence beside it (experiments.locations), for the whole command
    where = experiments.locations(args.manifest, args.runs, args.evidence_dir, args.report_out)
    with where.applied():
        runs = experiments.load_manifest(args.manifest)
        if args.list:
            rows = runner.table(runs, experiments.load_claims(args.manifest, runs))
            if args.json:
                print(json.dumps(rows))
                return 0
            if not where.own:
                print(f"reproduce: {where.manifest}: runs in {where.runs}, evidence in {where.evidence}, "
                      f"report {where.report}", file=sys.stderr)
            for r in rows:
                ppl = f"test {r['test']:.2f}" if r["test"] is not None else ""
                notes = [r["note"]] if r["note"] else []
                if r["device"] and r["device"] != "cpu":  # the repository's evidence trained on the CPU
                    notes.append(f"trained on {r['device']}")
                if r["status"] == "finished" and not r["evidence"]:
                    notes.append(f"no evidence yet: {runs[r['run']].command('--evidence')}")
                if r["status"] in runner.TO_TRAIN and r["claims"]:
                    notes.append("needed by " + ", ".join(r["claims"]))
                print(f"{r['run']:<24} {r['paper']:<10} {r['model']:<10} {r['context']:<9} {r['status']:<9} {ppl:<12}"
                      + (f"  ({'; '.join(notes)})" if notes else ""))
            return 0
        if args.evidence is not None:
            for name in args.evidence:
                if name not in runs:
                    raise ValueError(f"no run {name!r} in the manifest; see `vizlm reproduce --list`")
            names = args.evidence or [r.name for r in runs.values() if r.status() == "finished" and not r.done()
                                      and (r.folder / "model.safetensors").is_file()]
            for name in names:
                runner.write_evidence(runs[name], force=args.force)
            if not names:
                print("reproduce: every finished run here has its evidence", file=sys.stderr)
            return 0
        for asked, load_plan, write, table in ((args.attribution, corpus_runs.load_attribution,
                                                corpus_runs.write_attribution_evidence, "attribution"),
                                               (args.faithfulness, corpus_runs.load_faithfulness_plan,
                                                corpus_runs.write_faithfulness_evidence, "faithfulness"),
                                               (args.cases, corpus_runs.load_cases_plan,
                                                corpus_runs.write_cases_evidence, "cases")):
            if asked is None:
                continue
            plan = load_plan(args.manifest)
            if plan is None:
                raise ValueError(f"the manifest has no [{table}] table")
            if args.threads:
                import torch

                torch.set_num_threads(args.threads)
            write(plan, asked, force=args.force, device=args.device)
            return 0
        if args.bundle:
            if args.bundle not in runs:
                raise ValueError(f"no run {args.bundle!r} in the manifest; see `vizlm reproduce --list`")
            runner.bundle(runs[args.bundle], args.bundle_as, args.manifest, force=args.force)
            return 0
        if args.report:
            claims = experiments.load_claims(args.manifest, runs)
            path = report.write_report(runs, where.report, claims, corpus_runs.load_attribution(args.manifest), where,
                                       corpus_runs.load_cases_plan(args.manifest),
                                       corpus_runs.load_faithfulness_plan(args.manifest))
            print(f"wrote {path}", file=sys.stderr)
            return 0
        names = list(runs) if args.all else args.only
        if args.force:  # train finished runs again (stale ones), one after another, each named
            if args.all or args.jobs > 1 or args.dry_run:
                raise ValueError("--force trains the runs named (run NAME ... --force) again, one after another: not "
                                 "with --all, --jobs or --dry-run")
            for run in experiments.start_order(runs, names):
                if run.name in names:
                    print(f"reproduce: {run.name}: {runner.retrain(run, runs, args.threads, device=args.device)}",
                          file=sys.stderr)
            return 0
        if args.jobs > 1:
            result = runner.run_many(args.manifest, names, args.jobs, args.threads, args.dry_run, args.device)
        else:
            result = runner.run_serial(runs, names, args.threads, args.dry_run, args.device)
        return 1 if any(why.startswith(("error", "skipped")) for why in result.values()) else 0  # each said why


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vizlm", description=__doc__)
    where = parser.add_argument_group("locations (default: $VIZLM_HOME, else the vizlm checkout, else the current folder)")
    where.add_argument("--data", type=Path, help="processed corpora folder (default HOME/data, or $VIZLM_DATA)")
    where.add_argument("--checkpoints", type=Path, help="checkpoints folder (default HOME/checkpoints, or $VIZLM_CHECKPOINTS)")
    where.add_argument("--corpora", type=Path, help="your prepared corpora (default: the user data folder's corpora/, "
                                                   "or $VIZLM_CORPORA)")
    where.add_argument("--cache", type=Path, help="cache of corpus statistics (default: the user cache folder, or $VIZLM_CACHE)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="prepare your corpus from a folder of text (--corpus NAME --from FOLDER), or "
                                       "regenerate vizlm's own processed corpora and the shipped analysis assets",
                       description="Your corpus: vizlm prepare --corpus NAME --from FOLDER [--layout L] [--vocab-size N | "
                                   "--min-count K | --all-words] [--lowercase] [--chars] [--force]. FOLDER holds "
                                   "train / valid / test as .txt, .txt.gz or WikiText's wiki.*.tokens; the corpus goes "
                                   "to your corpora folder (--corpora, $VIZLM_CORPORA) and every command reads it by "
                                   "name. vizlm's own: vizlm prepare --shared ../shared/data --out data/.")
    yours = p.add_argument_group("your corpus")
    yours.add_argument("--corpus", metavar="NAME", help="the name your corpus gets (lowercase letters, digits, _ . -)")
    yours.add_argument("--from", dest="source", type=Path, metavar="FOLDER",
                       help="the folder with train / valid / test (.txt, .txt.gz, wiki.SPLIT.tokens, ptb.SPLIT.txt)")
    yours.add_argument("--layout", choices=LAYOUTS, help="override the detected layout: " + "; ".join(
        f"{k}: {v}" for k, v in LAYOUT_HELP.items()))
    vocab = yours.add_mutually_exclusive_group()
    vocab.add_argument("--vocab-size", type=whole(len(SPECIALS) + 1), metavar="N",
                       help=f"the N most frequent words of train, vizlm's {len(SPECIALS)} specials included "
                            f"(default {VOCAB_SIZE:,}, as the bundled models)")
    vocab.add_argument("--min-count", type=whole(1), metavar="K", help="every word seen at least K times in train")
    vocab.add_argument("--all-words", action="store_true", help="every word of train")
    yours.add_argument("--lowercase", action="store_true", help="lowercase the words models read (the originals are kept)")
    yours.add_argument("--chars", action="store_true", help="character level: every non-space character a token (Chinese)")
    yours.add_argument("--json", action="store_true", help="print the corpus card as JSON")
    own = p.add_argument_group("vizlm's own corpora")
    own.add_argument("--shared", type=Path, default=Path("../shared/data"), help="folder with the raw corpus zips")
    own.add_argument("--out", type=Path, default=None, help="output folder (default: the data folder)")
    p.add_argument("--force", action="store_true", help="replace files in --out whose content would change; with "
                                                        "--corpus: prepare again a corpus prepared with other options")
    own.add_argument("--assets", type=Path, default=paths.ASSETS,
                     help="where the tagger, collocation table and examples go (default: the package's vizlm/assets)")
    own.add_argument("--token-ids", action="store_true",
                   help="only write the token-id files (SPLIT.tokens.npy, streamed by train and eval, for corpora "
                        "larger than memory) of the processed splits already in --out; no raw corpora needed")
    _add_train(sub)
    _add_eval(sub)
    _add_import(sub)
    _add_reproduce(sub)
    p = sub.add_parser("corpora", help="the corpora every command reads by name: vizlm's own and yours (with their "
                                       "sizes, vocabulary, OOV rates); NAME: one corpus's card")
    p.add_argument("name", nargs="?", metavar="NAME", help="show this corpus's card")
    p.add_argument("--json", action="store_true", help="print JSON")
    sub.add_parser("plugins", help="model families from installed packages (entry points 'vizlm.models', "
                   "docs/PLUGINS.md), and those skipped with the reason")
    commands.add_analysis_commands(sub)
    return parser


def train_config(args) -> TrainConfig:
    """The TrainConfig ``vizlm train``'s options say (0 where a field's None is meant: its ``zero``)."""
    values = {}
    for f in train_options():
        value = getattr(args, f.name)
        values[f.name] = None if f.metadata["zero"] and value == 0 else value
    tc = TrainConfig(**values, extra={"command": "vizlm " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["train"]
                                      else None})
    return tc.dry_run() if args.dry_run else tc


def cmd_train(args) -> int:
    from vizlm.core.distributed import session
    from vizlm.modeling.train import train

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from vizlm.data.registry import corpus_splits

    if "train" not in corpus_splits(args.corpus):
        raise ValueError(f"corpus {args.corpus!r} has no train split; trainable: {', '.join(TRAINABLE)}")
    kwargs = {field: getattr(args, flag[2:].replace("-", "_")) for flag, (field, _, _) in MODEL_OPTIONS.items()}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    tc = train_config(args)
    with session(args.device) as ctx:
        out = args.out
        scratch = out is None and args.dry_run  # a dry run without --out keeps nothing: its folder is removed
        if out is None:  # rank 0 chooses (a temp dir is different in every process)
            out = ctx.broadcast(Path(tempfile.mkdtemp(prefix="vizlm-dry-")) if args.dry_run and ctx.main
                                else paths.runs_dir() / args.model)
        try:
            ckpt = train(args.model, kwargs, args.corpus, out, tc, init=args.init_from, resume=args.resume,
                         match=args.match_params, ctx=ctx, force=args.force)
        finally:
            if scratch and ctx.main:
                shutil.rmtree(out, ignore_errors=True)
        if ctx.main:
            print(json.dumps({"checkpoint": None if scratch else str(out), "model": ckpt.name,
                              "context": ckpt.model.config.context,
                              "hidden_dim": ckpt.model.config.hidden_dim, "parameters": ckpt.meta["parameters"],
                              "world_size": ctx.world_size, **ckpt.meta["metrics"]}))
    return 0


def cmd_eval(args) -> int:
    """A text file is scored in memory (it is at most MAX_TEXT_FILE_BYTES); a corpus split is read a
    chunk at a time (from its token-id files when there are some), shared out under torchrun."""
    from vizlm.api import load
    from vizlm.data.registry import corpus_splits
    from vizlm.data.vocab import encode_sentences
    from vizlm.core.distributed import session
    from vizlm.modeling.evaluate import Totals, score, score_split, score_stream, split_stream
    from vizlm.data.tokens import TokenSplit, open_split

    stream = args.context == "stream"
    model = load(args.checkpoint)
    ckpt = model.checkpoint
    with session(args.device) as ctx:
        if stream and ctx.world_size > 1:
            raise ValueError("--context stream reads the split in one process; run it without torchrun")
        ckpt.model.to(ctx.device)
        if args.text_file:  # blank lines separate documents (for document-context checkpoints)
            sizes: list[int] = []
            sents, source = read_text(args.text_file, sizes), str(args.text_file)
            if not sents:
                raise ValueError(f"no sentences to score: {source} has no words")
            if stream:
                t = score_stream(ckpt.model, split_stream(TokenSplit.from_sequences(encode_sentences(sents, ckpt.vocab))),
                                 args.streams, args.bptt)
                result = Totals(t.nll, t.tokens, len(sents)).summary()
            else:
                with scoring_progress([ckpt], sents, "eval"):
                    result = score(ckpt.model, encode_sentences(sents, ckpt.vocab), sizes, args.batch_size).summary()
            result["documents"] = len(sizes)
        else:
            corpus_splits(args.corpus)  # a known corpus, or one of yours, before any file is opened
            if ctx.main:
                commands.warn_off_corpus([model], args)
            split, source = open_split(args.corpus, args.split, ckpt.vocab), f"{args.corpus}/{args.split}"
            if not len(split):
                raise ValueError(f"no sentences to score: {source} is empty")
            if stream:
                t = score_stream(ckpt.model, split_stream(split), args.streams, args.bptt)
                mine = Totals(t.nll, t.tokens, len(split))
            else:
                with scoring_progress([ckpt] if ctx.main else [], None, "eval", total=len(split) // ctx.world_size):
                    mine = score_split(ckpt.model, split, ctx.rank, ctx.world_size, args.batch_size)
            result = Totals(*ctx.sum([mine.nll, mine.tokens, mine.sentences])).summary()
            result = {**result, "tokens": int(result["tokens"]), "sentences": int(result["sentences"])}
        if stream and result["tokens"] == 0:
            raise ValueError(f"no tokens to score: {source} has fewer than 2 tokens per stream; use fewer --streams")
        if not ctx.main:
            return 0
    context = {"context": "stream", "streams": args.streams, "bptt": args.bptt} if stream else \
        {"context": ckpt.model.config.context}
    result = {"checkpoint": str(args.checkpoint), "source": source, **context, **result}
    if args.json:
        commands.dump_json(result)
    else:
        print(f"{source}: perplexity {result['perplexity']:.2f}  (NLL {result['nll']:.4f} nats/token, "
              f"{result['tokens']:,} tokens, {result['sentences']:,} sentences)")
        if "note" in result:
            print(f"note: {result['note']}")
    return 0


def cmd_prepare_corpus(args) -> int:
    """``vizlm prepare --corpus NAME --from FOLDER``: your corpus, through the API."""
    import vizlm
    from vizlm.present import tables

    if args.corpus is None or args.source is None:
        raise ValueError("give both --corpus NAME and --from FOLDER")
    if args.token_ids or args.out is not None:
        raise ValueError("--token-ids and --out are for vizlm's own corpora; your corpus goes to the corpora folder "
                         "(--corpora, $VIZLM_CORPORA) with its token ids")
    card = vizlm.prepare_corpus(args.corpus, args.source, layout=args.layout, vocab_size=args.vocab_size,
                                min_count=args.min_count, all_words=args.all_words, lowercase=args.lowercase,
                                chars=args.chars, force=args.force, progress=not args.json)
    for note in card.get("notes") or ():
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(card, ensure_ascii=False))
        return 0
    print(tables.card_text(card))
    return 0


def cmd_corpora(args) -> int:
    """``vizlm corpora [NAME] [--json]``: every corpus the commands read by name, or one card."""
    import vizlm
    from vizlm.present import tables

    if args.name:
        card = vizlm.corpus_card(args.name)
        if card is None:
            frame = vizlm.corpora()
            card = {"name": args.name, "kind": "vizlm", "splits": frame[frame.corpus == args.name].to_dict("records")}
            print(json.dumps(card, ensure_ascii=False) if args.json else frame[frame.corpus == args.name].to_string(index=False))
            return 0
        print(json.dumps(card, ensure_ascii=False) if args.json else tables.card_text(card))
        return 0
    import pandas as pd

    frame = vizlm.corpora()
    if args.json:
        print(frame.to_json(orient="records", force_ascii=False))
        return 0
    shown = frame.drop(columns=["path"]).astype(object)
    for col in ("documents", "sentences", "tokens", "vocab_size"):
        shown[col] = frame[col].map(lambda x: "" if pd.isna(x) else f"{int(x):,}")
    shown["oov_rate"] = frame.oov_rate.map(lambda x: "" if pd.isna(x) else f"{x:.2%}")
    print(shown.where(shown.notna(), "").to_string(index=False))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    paths.set_overrides(data=args.data, checkpoints=args.checkpoints, cache=args.cache, corpora=args.corpora)
    from vizlm.core.errors import VizlmError

    try:
        if args.command == "prepare":
            if args.corpus is not None or args.source is not None:
                return cmd_prepare_corpus(args)
            from vizlm.data.prepare import prepare, prepare_token_ids

            if args.token_ids:
                counts = prepare_token_ids(args.out or paths.data_dir())
            else:
                counts = prepare(args.shared, args.out or paths.data_dir(), assets=args.assets, force=args.force)
            print(json.dumps(counts))
            return 0
        if args.command == "train":
            return cmd_train(args)
        if args.command == "eval":
            return cmd_eval(args)
        if args.command == "import":
            return cmd_import(args)
        if args.command == "reproduce":
            return cmd_reproduce(args)
        if args.command == "plugins":
            return cmd_plugins()
        if args.command == "corpora":
            return cmd_corpora(args)
        return commands.run(args)
    except (VizlmError, ValueError) as exc:  # bad input: a message for a person, no traceback
        print(f"vizlm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file that cannot be read or written (FileNotFoundError included): no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"vizlm {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: what was cut has been cleaned up on the way out; no traceback
        print(f"vizlm {args.command}: interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as a shell reports it


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
