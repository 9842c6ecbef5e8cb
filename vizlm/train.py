"""Training: Adam, gradient-norm clipping, early stopping on validation perplexity,
``--init-from``, ``--resume`` and ``--match-params``. Sentence-context models train on
length-bucketed batches of sentences; document-context models on parallel document
streams with truncated BPTT, the state carried (detached) between segments and
reset at each document start.

Output folder layout::

    model.safetensors, config.json   best model so far (the checkpoint)
    train_log.jsonl                  one JSON object per epoch
    resume/state.safetensors, .json  last epoch's weights + Adam state (not committed)
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm import tqdm

from vizlm.checkpoint import MAX_PARAMETERS, Checkpoint, load_checkpoint, save_checkpoint
from vizlm.data import (
    CORPORA,
    Vocab,
    document_batches,
    document_sizes,
    encode_sentences,
    iter_batches,
    load_corpus,
    split_documents,
)
from vizlm.evaluate import score
from vizlm.models import LMOutput, build_model, check_config, count_parameters, match_parameters, parameter_count
from vizlm.models.base import State, attention_entropy


@dataclass
class TrainConfig:
    epochs: int = 30
    batch_size: int = 64  # sentences per batch (sentence context)
    bptt: int = 20  # tokens per segment (document context)
    streams: int = 64  # parallel document streams (document context)
    lr: float = 1e-3
    clip: float = 5.0
    patience: int = 2  # epochs without improvement before stopping
    lr_decay: float = 0.5  # multiply lr by this after an epoch without improvement
    seed: int = 1234
    max_batches: int | None = None  # per epoch; for --dry-run
    eval_batches: int | None = None
    extra: dict = field(default_factory=dict)  # stored in the checkpoint (command line, ...)


def lm_loss(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, state: State | None = None
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(loss to minimise, summed NLL, token count) of ``model(inputs, state)``; see :func:`output_loss`."""
    return output_loss(model, model(inputs, state), targets, state)


def output_loss(
    model: nn.Module, out: LMOutput, targets: torch.Tensor, state: State | None = None
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(loss to minimise, summed NLL, token count) of an output for ``targets`` (B, T),
    read after ``state``. Adds AMSRN's entropy term.

    The entropy regulariser (Liu & Lee) is lambda * sum_t H(alpha_t); we divide it
    by the token count like the cross-entropy so lambda does not depend on batch size.
    """
    logits = out.logits  # (B, T, V); flat view keeps log_softmax on the contiguous axis
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=0, reduction="sum")
    n = int((targets != 0).sum())
    loss = nll / max(n, 1)
    weight = getattr(model.config, "entropy_weight", 0.0)
    if weight and out.attention is not None:
        mask = model.allowed_slots(targets.shape[1], state, device=targets.device)  # (T, S) or (B, T, S)
        ent = attention_entropy(out.attention, mask)  # (B, T)
        loss = loss + weight * (ent * (targets != 0)).sum() / max(n, 1)
    return loss, nll.detach(), n


def _save_resume(folder: Path, model: nn.Module, opt: torch.optim.Optimizer, state: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.contiguous() for k, v in model.state_dict().items()}
    for i, p in enumerate(model.parameters()):
        s = opt.state.get(p)
        if s:
            tensors[f"opt.{i}.exp_avg"] = s["exp_avg"].contiguous()
            tensors[f"opt.{i}.exp_avg_sq"] = s["exp_avg_sq"].contiguous()
            state.setdefault("steps", {})[str(i)] = float(s["step"])
    save_file(tensors, str(folder / "state.safetensors"))
    (folder / "state.json").write_text(json.dumps(state, indent=1))


def _load_resume(folder: Path, model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    tensors = load_file(str(folder / "state.safetensors"))
    state = json.loads((folder / "state.json").read_text())
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    for i, p in enumerate(model.parameters()):
        if f"opt.{i}.exp_avg" in tensors:
            opt.state[p] = {
                "step": torch.tensor(state["steps"][str(i)]),
                "exp_avg": tensors[f"opt.{i}.exp_avg"],
                "exp_avg_sq": tensors[f"opt.{i}.exp_avg_sq"],
            }
    for g in opt.param_groups:
        g["lr"] = state["lr"]
    return state


def init_from(model: nn.Module, source: Checkpoint, vocab: Vocab) -> list[str]:
    """Start from a trained checkpoint: a model's own ``init_from_lstm`` when the source is
    an LSTM and the model has one (Daniluk models), else copy every tensor whose name and
    shape match (AMSRN from a trained LSTM)."""
    if source.vocab.itos != vocab.itos:
        raise ValueError("--init-from checkpoint has a different vocabulary")
    if source.name == "lstm" and hasattr(model, "init_from_lstm"):
        return model.init_from_lstm(source.model.state_dict())
    own = model.state_dict()
    copied = [k for k, v in source.model.state_dict().items() if k in own and own[k].shape == v.shape]
    if not copied:
        raise ValueError(f"--init-from {source.name}: no tensor matches this model")
    model.load_state_dict({**own, **{k: source.model.state_dict()[k] for k in copied}})
    return copied


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def train(
    name: str,
    model_kwargs: dict,
    corpus: str,
    out: Path,
    tc: TrainConfig,
    init: str | None = None,
    resume: bool = False,
    match: str | None = None,
) -> Checkpoint:
    """Train model ``name`` on ``corpus`` and write the best checkpoint to ``out``.

    ``match``: a model name (``lstm``); ``hidden_dim`` is then chosen so that this model
    has that one's parameter count (built with ``model_kwargs``' sizes), see
    :func:`vizlm.models.match_parameters`; the match is recorded in the checkpoint.
    """
    torch.manual_seed(tc.seed)
    out = Path(out)
    vocab = Vocab.for_corpus(corpus)
    splits = {s: load_corpus(corpus, s) for s in ("train", "valid", "test")}
    data = {s: encode_sentences(c.sentences, vocab) for s, c in splits.items()}
    if tc.eval_batches is not None:
        data["valid"] = data["valid"][: tc.eval_batches * tc.batch_size]
        data["test"] = data["test"][: tc.eval_batches * tc.batch_size]
    sizes = {s: document_sizes(c.ids[: len(data[s])]) for s, c in splits.items()}  # sentences per document
    matched = None
    if match:
        matched = match_parameters(name, {**model_kwargs, "vocab_size": len(vocab)}, match)
        model_kwargs = {**model_kwargs, "hidden_dim": matched["hidden_dim"]}
        _log(f"{name}: hidden_dim {matched['hidden_dim']} has {matched['parameters']:,} parameters, "
             f"{matched['ratio'] - 1:+.2%} of {match}'s at hidden_dim {matched['reference_hidden_dim']} "
             f"({matched['reference_parameters']:,})")
    # What the loader would refuse must not train for hours first: its limits, before anything is built.
    config = check_config(name, {"vocab_size": len(vocab), **model_kwargs})
    if (n := parameter_count(name, **dataclasses.asdict(config))) > MAX_PARAMETERS:
        raise ValueError(f"{name} with these sizes has {n:,} parameters; checkpoints are limited to {MAX_PARAMETERS:,}")
    model = build_model(name, config)
    document = model.config.context == "document"
    opt = torch.optim.Adam(model.parameters(), lr=tc.lr, fused=True)
    meta = {
        "corpus": {"name": corpus, "checksums": {s: c.checksum for s, c in splits.items()}},
        "parameters": count_parameters(model),
        "train": {k: v for k, v in tc.__dict__.items() if k != "extra"} | tc.extra,
    }
    if matched:
        meta["match_params"] = matched
    state = {"epoch": 0, "best_valid": math.inf, "bad_epochs": 0, "lr": tc.lr, "wall_time": 0.0}
    if resume and (out / "resume" / "state.json").exists():
        state = _load_resume(out / "resume", model, opt)
        if state.get("init_from"):
            meta["init_from"] = state["init_from"]  # keep the lineage across resumes
        _log(f"resumed {name} from epoch {state['epoch']} (best valid ppl {state['best_valid']:.2f})")
    elif init:
        src = load_checkpoint(init)
        copied = init_from(model, src, vocab)
        meta["init_from"] = {"checkpoint": str(init), "tensors": copied, "valid_perplexity": src.meta.get("metrics", {}).get("valid_perplexity")}
        state["init_from"] = meta["init_from"]
        _log(f"initialised {len(copied)} tensors from {init}")
    _log(f"{name}: {count_parameters(model):,} parameters, {len(data['train']):,} training sentences"
         + (f" in {len(sizes['train']):,} documents, {tc.streams} streams, bptt {tc.bptt}" if document else ""))
    if document and len(sizes["train"]) < tc.streams:
        _log(f"warning: {corpus} has {len(sizes['train'])} training documents (sentence ids document:index) "
             f"for {tc.streams} streams; the streams cannot all be busy")
    log_path = out / "train_log.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    if not resume and log_path.exists():
        log_path.unlink()
    while state["epoch"] < tc.epochs and state["bad_epochs"] < tc.patience:
        epoch = state["epoch"] + 1
        model.train()
        torch.manual_seed(tc.seed + epoch)
        t0 = time.time()
        tot_nll, tot_n = 0.0, 0
        if document:
            docs = split_documents(data["train"], sizes["train"])
            batches = document_batches(docs, tc.streams, tc.bptt, shuffle=True, seed=tc.seed + epoch)
        else:
            batches = list(iter_batches(data["train"], tc.batch_size, shuffle=True, seed=tc.seed + epoch))
        if tc.max_batches is not None:
            batches = batches[: tc.max_batches]
        bar = tqdm(batches, desc=f"{name} epoch {epoch}", unit="batch", file=sys.stderr,
                   mininterval=1.0 if sys.stderr.isatty() else 60.0, disable=None)
        carried = None
        for batch in bar:
            if document:  # truncated BPTT: carry the state, detached, and reset it where documents start
                if carried is None:
                    carried = model.initial_state(batch.inputs.shape[0])
                carried = carried.narrow(batch.inputs.shape[0]).reset(batch.starts)
                result = model(batch.inputs, carried)
                loss, nll, n = output_loss(model, result, batch.targets, carried)
                carried = result.state.detach()
            else:
                _, inputs, targets = batch
                loss, nll, n = lm_loss(model, inputs, targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), tc.clip)
            opt.step()
            tot_nll += float(nll)
            tot_n += n
            bar.set_postfix(ppl=f"{math.exp(tot_nll / tot_n):.1f}", tok_s=f"{tot_n / (time.time() - t0):.0f}")
        seconds = time.time() - t0
        valid = score(model, data["valid"], sizes["valid"]).perplexity
        state["wall_time"] += time.time() - t0
        record = {
            "epoch": epoch, "train_perplexity": math.exp(tot_nll / max(tot_n, 1)), "valid_perplexity": valid,
            "lr": state["lr"], "seconds": round(seconds, 1), "tokens_per_s": round(tot_n / seconds),
        }
        improved = valid < state["best_valid"]
        if improved:
            state["best_valid"], state["bad_epochs"], state["best_epoch"] = valid, 0, epoch
            metrics = {"valid_perplexity": valid, "best_epoch": epoch, "epochs_trained": epoch,
                       "wall_time_s": round(state["wall_time"], 1)}
            save_checkpoint(out, model, name, vocab, metrics=metrics, **meta)
        else:
            state["bad_epochs"] += 1
            state["lr"] *= tc.lr_decay
            for g in opt.param_groups:
                g["lr"] = state["lr"]
        state["epoch"] = epoch
        with log_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        _save_resume(out / "resume", model, opt, state)
        _log(f"epoch {epoch}: train ppl {record['train_perplexity']:.2f}  valid ppl {valid:.2f}"
             f"  {record['tokens_per_s']} tok/s  {seconds:.0f}s{'  *best*' if improved else ''}")
    return finalize(out, corpus, tc.eval_batches, state)


def finalize(out: Path, corpus: str, eval_batches: int | None, state: dict) -> Checkpoint:
    """Evaluate the best checkpoint on test (and WSJ for English) and store the metrics."""
    ckpt = load_checkpoint(out)
    metrics = dict(ckpt.meta.get("metrics", {}))
    evals = {"test": (corpus, "test")}
    if corpus == "brown":
        evals["wsj"] = ("wsj", "test")
    for key, (c, split) in evals.items():
        split_corpus = load_corpus(c, split)
        seqs = encode_sentences(split_corpus.sentences, ckpt.vocab)
        if eval_batches is not None:
            seqs = seqs[: eval_batches * 64]
        sizes = document_sizes(split_corpus.ids[: len(seqs)])
        metrics[f"{key}_perplexity"] = score(ckpt.model, seqs, sizes).perplexity
    metrics.update(epochs_trained=state["epoch"], wall_time_s=round(state["wall_time"], 1))
    meta = {k: v for k, v in ckpt.meta.items() if k not in ("format", "format_version", "vizlm_version", "model", "config", "vocab")}
    meta["metrics"] = metrics
    save_checkpoint(out, ckpt.model, ckpt.name, ckpt.vocab, **meta)
    _log(f"{ckpt.name}: " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()))
    return load_checkpoint(out)


__all__ = ["TrainConfig", "train", "lm_loss", "output_loss", "init_from", "CORPORA"]
