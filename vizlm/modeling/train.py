"""Training: Adam, gradient-norm clipping, early stopping on validation perplexity,
``--init-from`` (with ``--freeze``: only what it did not copy trains), ``--resume`` and
``--match-params``. Sentence-context models train on length-bucketed batches of
sentences; document-context models on parallel document streams with truncated BPTT,
the state carried (detached) between segments and reset at each document start.

Data parallel (``torchrun --nproc-per-node N vizlm train ...``, see docs/SCALING.md): the
model is wrapped in :class:`~torch.nn.parallel.DistributedDataParallel`, every rank plans the
same global steps and reads its share (sentences ``r, r + N, ...`` of each batch, or streams
``r, r + N, ...`` of each document step; :mod:`vizlm.data.batches`). A rank's loss is its summed NLL
divided by the step's token count over all ranks, times N, so DDP's average of the ranks'
gradients is the gradient of the whole step: the same step as one process, to float rounding
(``tests/test_distributed.py``). Rank 0 alone writes the checkpoint, the logs, the resume state
and the progress bar; validation and test are scored in shares and summed.

Output folder layout::

    model.safetensors, config.json   best model so far (the checkpoint; ``train.world_size``)
    train_log.jsonl                  one JSON object per epoch
    steps.jsonl                      with ``log_steps``: the NLL per token of every step
    resume/state.safetensors, .json  weights + Adam state at the last epoch end or every
                                     ``save_every`` steps, with the position in the epoch and the
                                     carried document state of every stream (not committed;
                                     :mod:`vizlm.modeling.resume`)

How a run trains is :class:`vizlm.modeling.config.TrainConfig`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from vizlm.core import files
from vizlm.modeling.checkpoint import Checkpoint, check_memory, load_checkpoint, save_checkpoint
from vizlm.modeling.config import TrainConfig
from vizlm.modeling.resume import gather_carried, load_resume, save_resume, scatter_carried
from vizlm.data.registry import CORPORA, corpus_card
from vizlm.data.vocab import Vocab
from vizlm.core.distributed import SINGLE, Context
from vizlm.core.errors import VizlmError
from vizlm.modeling.evaluate import perplexity, score_split, unigram_perplexity
from vizlm.models import LMOutput, build_model, check_config, count_parameters, match_parameters, parameter_count
from vizlm.models.base import State, attention_entropy
from vizlm.data.batches import DocumentEpoch, SentenceEpoch
from vizlm.data.tokens import TokenSplit, open_split


def lm_loss(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, state: State | None = None
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(loss to minimise, summed NLL, token count) of ``model(inputs, state)``; see :func:`output_loss`."""
    return output_loss(model, model(inputs, state), targets, state)


def output_loss(
    model: nn.Module, out: LMOutput, targets: torch.Tensor, state: State | None = None,
    denominator: float | None = None, tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(loss to minimise, summed NLL, token count) of an output for ``targets`` (B, T),
    read after ``state``. Adds AMSRN's entropy term.

    The entropy regulariser (Liu & Lee) is lambda * sum_t H(alpha_t); we divide it
    by the token count like the cross-entropy so lambda does not depend on batch size.
    ``denominator`` replaces that count: data-parallel training passes the step's tokens over
    all ranks divided by the world size (module docstring). ``tokens``: the count of non-padding
    targets when the caller knows it (counting them on a GPU would wait for the device).
    """
    nll = out.nll(targets)  # fused with the output layer: the (B, T, V) logits are never stored
    n = int((targets != 0).sum()) if tokens is None else tokens
    d = max(n, 1) if denominator is None else denominator
    loss = nll / d
    weight = getattr(model.config, "entropy_weight", 0.0)
    if weight and out.attention is not None:
        mask = model.allowed_slots(targets.shape[1], state, device=targets.device)  # (T, S) or (B, T, S)
        ent = attention_entropy(out.attention, mask)  # (B, T)
        loss = loss + weight * (ent * (targets != 0)).sum() / d
    return loss, nll.detach(), n


def init_from(model: nn.Module, source: Checkpoint, vocab: Vocab) -> dict[str, torch.Tensor | None]:
    """Start from a trained checkpoint: a model's own ``init_from_lstm`` when the source is
    an LSTM and the model has one (Daniluk models), else copy every tensor whose name and
    shape match (AMSRN from a trained LSTM). Returns what was copied: tensor name -> None
    (the whole tensor) or a bool mask of the copied entries (an LSTM taken into part of a
    wider one)."""
    if source.vocab.itos != vocab.itos:
        raise ValueError("--init-from checkpoint has a different vocabulary")
    if source.name == "lstm" and hasattr(model, "init_from_lstm"):
        return model.init_from_lstm(source.model.state_dict())
    own = model.state_dict()
    copied = [k for k, v in source.model.state_dict().items() if k in own and own[k].shape == v.shape]
    if not copied:
        raise ValueError(f"--init-from {source.name}: no tensor matches this model")
    model.load_state_dict({**own, **{k: source.model.state_dict()[k] for k in copied}})
    return dict.fromkeys(copied)


def freeze(model: nn.Module, copied: dict[str, torch.Tensor | None]) -> int:
    """Keep what :func:`init_from` copied fixed (``--freeze``); returns how many numbers that is.

    A tensor copied whole stops requiring a gradient. One copied in part has the gradient of
    its copied entries zeroed before it is used, so Adam's moments stay zero there and its
    step is exactly zero: the entries stay bit for bit what was copied.
    """
    params = dict(model.named_parameters())
    fixed = 0
    for name, mask in copied.items():
        p = params[name]
        if mask is None:
            p.requires_grad_(False)
            fixed += p.numel()
        else:
            keep = (~mask).to(device=p.device, dtype=p.dtype)
            p.register_hook(lambda grad, keep=keep: grad * keep)
            fixed += int(mask.sum())
    return fixed


def _check_frozen(model: nn.Module, copied: dict[str, torch.Tensor | None], source: dict[str, torch.Tensor],
                  init: str) -> None:
    """After a resume with ``--freeze``: the copied entries must still be ``source``'s (the run was frozen)."""
    params = dict(model.named_parameters())
    for name, mask in copied.items():
        now, then = params[name].detach(), source[name]
        if mask is not None:
            now, then = now[mask.to(now.device)], then[mask.to(then.device)]
        if not torch.equal(now, then):
            raise ValueError(f"--freeze: the resume state's {name} is not the one copied from {init}: "
                             "that run was trained without --freeze")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _quiet(msg: str) -> None:
    pass


def _step_seed(seed: int, epoch: int, step: int, rank: int) -> int:
    """The random seed (dropout) of a rank from ``step`` of an epoch on: one process's epoch seed
    at the start of an epoch on rank 0, other streams elsewhere (dropout masks differ per rank)."""
    return seed + epoch + 1_000_003 * rank + 7_919 * step


def _idle(model: nn.Module, document: bool, device: torch.device) -> tuple:
    """(inputs, targets, state) of a rank with no rows at a step (the last sentence batch or
    document steps can be smaller than the world): one padding target, so the loss is zero but
    every parameter is in the graph and DDP's gradient all-reduce still meets the other ranks."""
    inputs = torch.full((1, 1), Vocab.bos_id, dtype=torch.long, device=device)
    return inputs, torch.zeros_like(inputs), model.initial_state(1) if document else None


def _truncate_logs(out: Path, state: dict) -> None:
    """After a resume: drop what a killed run logged after the state it resumes from."""
    epoch, step = state["epoch"], state.get("step", 0)
    for name, keep in (("train_log.jsonl", lambda r: r["epoch"] <= epoch),
                       ("steps.jsonl", lambda r: r["epoch"] <= epoch or (r["epoch"] == epoch + 1 and r["step"] < step))):
        path = out / name
        if path.exists():
            lines = [line for line in path.read_text().splitlines() if line.strip()]
            path.write_text("".join(line + "\n" for line in lines if keep(json.loads(line))))


def synchronize(device: torch.device) -> None:
    """Wait until ``device`` has done its queued work (CUDA); nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def hardware(device: torch.device) -> dict:
    """What a run trained on, for its config (``train.device``, ``train.torch``): the same seed gives
    the same weights on the same kind of device and PyTorch only; a resumed run records its last."""
    kind = f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else device.type
    return {"device": kind, "torch": torch.__version__}


def train(
    name: str,
    model_kwargs: dict,
    corpus: str,
    out: Path,
    tc: TrainConfig,
    init: str | None = None,
    resume: bool = False,
    match: str | None = None,
    ctx: Context = SINGLE,
    force: bool = False,
) -> Checkpoint:
    """Train model ``name`` on ``corpus`` and write the best checkpoint to ``out``.

    A folder ``out`` that already holds a checkpoint (:func:`vizlm.core.files.checkpoint_files`) is
    refused before anything is built or written, unless ``resume`` (and it has a resume state) or
    ``force`` (start afresh: its log is replaced, and its weights and config at the first epoch's
    end, each written whole).

    ``match``: a model name (``lstm``); ``hidden_dim`` is then chosen so that this model
    has that one's parameter count (built with ``model_kwargs``' sizes), see
    :func:`vizlm.models.match_parameters`; the match is recorded in the checkpoint.
    ``tc.freeze`` needs ``init``: what :func:`init_from` copies from it stays fixed
    (:func:`freeze`), also after a resume (which then checks that it did).
    ``ctx``: this process in a data-parallel run (:func:`vizlm.core.distributed.session`); every
    rank calls ``train`` with the same arguments.

    One process at a time trains into ``out``: while one does, another is refused at once
    (:class:`vizlm.core.files.BusyError`, :func:`vizlm.core.files.training_into`).
    """
    if tc.freeze and not init:
        raise ValueError("--freeze needs --init-from: it keeps the tensors copied from that checkpoint fixed")
    out = Path(out)
    _check_out(out, resume, force)  # a refusal writes nothing, not even the lock
    with files.training_into(out, hold=ctx.main):
        _check_out(out, resume, force)  # again, the lock held: what another process wrote meanwhile counts
        there = set(files.checkpoint_files(out))
        try:
            return _train(name, model_kwargs, corpus, out, tc, init, resume, match, ctx)
        except TrainingDiverged:
            if ctx.main and "model.safetensors" not in files.checkpoint_files(out):
                _remove_new(out, there)  # no checkpoint came of it: the retry (a lower --lr) needs no --force
            raise


def _remove_new(out: Path, there: set[str]) -> None:
    """Remove the logs and resume state a run wrote into ``out`` that were not there before it (``there``)."""
    for name in [*files.CHECKPOINT_FILES, "steps.jsonl"]:
        path = out / name
        if name in there or not path.exists():
            continue
        if path.is_dir():
            for f in path.iterdir():
                f.unlink()
            path.rmdir()
        else:
            path.unlink()


class TrainingDiverged(VizlmError, ValueError):
    """The training loss (or the valid perplexity) became NaN or infinite: the learning rate is too high."""


def _diverged(epoch: int, step: int | None, lr: float, ppl: tuple[float, float] | None = None) -> TrainingDiverged:
    where = (f"epoch {epoch} step {step}" if ppl is None else
             f"the end of epoch {epoch} (train perplexity {ppl[0]:.4g}, valid {ppl[1]:.4g})")
    return TrainingDiverged(f"training diverged: loss is not finite at {where}; lower --lr (it was {lr:g})")


def _check_out(out: Path, resume: bool, force: bool) -> None:
    """Refuse a folder that holds a checkpoint, unless ``resume`` (and it has a resume state) or ``force``."""
    present = files.checkpoint_files(out)
    if present and not force and not (resume and (out / "resume" / "state.safetensors").exists()):
        raise files.OverwriteError(
            f"{out} already holds a checkpoint ({', '.join(present)}); pass --resume to continue its training"
            + (" (it has no resume state)" if resume else "") + ", --force to train a new one in its place, "
            "or choose another --out")


@dataclass
class _Run:
    """One training in progress: what its steps share (:func:`_train`)."""

    name: str
    out: Path
    tc: TrainConfig
    ctx: Context
    vocab: Vocab
    splits: dict[str, TokenSplit]
    core: nn.Module  # the model itself
    model: nn.Module  # what the steps call: ``core``, or its DistributedDataParallel wrapper
    opt: torch.optim.Optimizer
    meta: dict  # what every checkpoint of the run records besides its metrics
    state: dict  # what a resume restores: epoch, best valid perplexity, bad epochs, lr, wall time ...
    plateau: float | None  # valid perplexity of the initial plateau (TrainConfig.plateau)
    say: Callable[[str], None]

    @property
    def document(self) -> bool:
        return self.core.config.context == "document"

    @property
    def log_path(self) -> Path:
        return self.out / "train_log.jsonl"

    @property
    def steps_path(self) -> Path:
        return self.out / "steps.jsonl"


def _train(name: str, model_kwargs: dict, corpus: str, out: Path, tc: TrainConfig, init: str | None, resume: bool,
           match: str | None, ctx: Context) -> Checkpoint:
    """:func:`train`'s work, the folder's training lock held and the folder checked: set up, then epochs until
    the cap or the patience runs out, then the test scores."""
    say = _log if ctx.main else _quiet
    torch.manual_seed(tc.seed)
    vocab = Vocab.for_corpus(corpus)
    splits = _open_splits(corpus, vocab, tc)
    model_kwargs, matched = _match(name, model_kwargs, len(vocab), match, say)
    core = _build(name, model_kwargs, len(vocab), ctx)
    opt = torch.optim.Adam(core.parameters(), lr=tc.lr, fused=True)
    meta = _meta(corpus, splits, core, tc, ctx, matched)
    plateau = _plateau(tc, splits, len(vocab), meta)
    resuming = resume and (out / "resume" / "state.safetensors").exists()
    state, saved_carried = _start(name, core, opt, out, tc, init, resuming, vocab, meta, ctx, say)
    # the parameters are rank 0's from here on: DDP broadcasts them when it wraps the model
    model = (DistributedDataParallel(core, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
                                     broadcast_buffers=False) if ctx.distributed else core)
    run = _Run(name, out, tc, ctx, vocab, splits, core, model, opt, meta, state, plateau, say)
    _open_logs(run, resuming)
    while state["epoch"] < tc.epochs and state["bad_epochs"] < tc.patience:
        sums = _train_epoch(run, saved_carried)
        saved_carried = None
        _end_epoch(run, *sums)
    ctx.barrier()  # the checkpoint is written before any rank reads it
    return finalize(out, corpus, tc.eval_batches, state, ctx)


def _open_splits(corpus: str, vocab: Vocab, tc: TrainConfig) -> dict[str, TokenSplit]:
    """train, valid and test of ``corpus`` (valid and test cut to ``tc.eval_batches`` batches)."""
    splits = {s: open_split(corpus, s, vocab) for s in ("train", "valid", "test")}
    if tc.eval_batches is not None:
        for s in ("valid", "test"):
            splits[s] = splits[s].head(tc.eval_batches * tc.batch_size)
    return splits


def _match(name: str, model_kwargs: dict, vocab_size: int, match: str | None, say) -> tuple[dict, dict | None]:
    """``model_kwargs`` with the ``hidden_dim`` that gives ``match``'s parameter count (``--match-params``)."""
    if not match:
        return model_kwargs, None
    matched = match_parameters(name, {**model_kwargs, "vocab_size": vocab_size}, match)
    say(f"{name}: hidden_dim {matched['hidden_dim']} has {matched['parameters']:,} parameters, "
        f"{matched['ratio'] - 1:+.2%} of {match}'s at hidden_dim {matched['reference_hidden_dim']} "
        f"({matched['reference_parameters']:,})")
    return {**model_kwargs, "hidden_dim": matched["hidden_dim"]}, matched


def _build(name: str, model_kwargs: dict, vocab_size: int, ctx: Context) -> nn.Module:
    """The model on ``ctx.device``; what the loader would refuse must not train for hours first: its limits, and
    the memory training needs, are checked before anything is built."""
    config = check_config(name, {"vocab_size": vocab_size, **model_kwargs})
    n = parameter_count(name, **dataclasses.asdict(config))
    if ctx.device.type == "cpu":  # weights, gradients and Adam's two moments, in float32
        check_memory(16 * n, f"training {name} with these sizes ({n:,} parameters)", ValueError)
    return build_model(name, config).to(ctx.device)


def _meta(corpus: str, splits: dict[str, TokenSplit], core: nn.Module, tc: TrainConfig, ctx: Context,
          matched: dict | None) -> dict:
    """What every checkpoint of the run records besides its metrics: the corpus, the sizes, the training."""
    card = corpus_card(corpus) or {}  # a prepared corpus: how typed text is read for models trained on it
    reading = {"reading": card["reading"]} if isinstance(card.get("reading"), dict) else {}
    meta = {
        "corpus": {"name": corpus, "checksums": {s: sp.checksum for s, sp in splits.items()}, **reading},
        "parameters": count_parameters(core),
        "train": {k: v for k, v in tc.__dict__.items() if k != "extra"} | {"world_size": ctx.world_size}
        | hardware(ctx.device) | tc.extra,
    }
    if matched:
        meta["match_params"] = matched
    return meta


def _plateau(tc: TrainConfig, splits: dict[str, TokenSplit], vocab_size: int, meta: dict) -> float | None:
    """The valid perplexity of the initial plateau (``tc.plateau`` x the unigram model's), recorded in ``meta``."""
    if not tc.plateau:
        return None
    unigram = unigram_perplexity(splits["train"], splits["valid"], vocab_size)
    plateau = tc.plateau * unigram
    meta["train"] |= {"unigram_valid_perplexity": round(unigram, 2), "plateau_perplexity": round(plateau, 2)}
    return plateau


def _start(name: str, core: nn.Module, opt, out: Path, tc: TrainConfig, init: str | None, resuming: bool,
           vocab: Vocab, meta: dict, ctx: Context, say) -> tuple[dict, list | None]:
    """The state the first epoch starts from: fresh, copied from ``init``, or resumed (then with the carried
    document state of the step it stopped at); ``--freeze`` applied. Says what it did."""
    state = {"epoch": 0, "best_valid": math.inf, "bad_epochs": 0, "lr": tc.lr, "wall_time": 0.0}
    saved_carried = None
    if init and (tc.freeze or not resuming):  # a frozen run resumed needs to know what was copied
        src = load_checkpoint(init)
        copied = init_from(core, src, vocab)
        source = {k: v.detach().clone() for k, v in core.named_parameters() if k in copied} if resuming else {}
    if resuming:
        state, saved_carried = load_resume(out / "resume", core, opt)
        if state.get("init_from"):
            meta["init_from"] = state["init_from"]  # keep the lineage across resumes
        if tc.freeze:
            _check_frozen(core, copied, source, init)
        where = f", step {state['step']} of epoch {state['epoch'] + 1}" if state.get("step") else ""
        say(f"resumed {name} from epoch {state['epoch']}{where} (best valid ppl {state['best_valid']:.2f})"
            + (f", trained with {state['world_size']} processes, now {ctx.world_size}"
               if state.get("world_size", ctx.world_size) != ctx.world_size else ""))
    elif init:
        meta["init_from"] = {"checkpoint": str(init), "tensors": list(copied),
                             "valid_perplexity": src.meta.get("metrics", {}).get("valid_perplexity")}
        state["init_from"] = meta["init_from"]
        say(f"initialised {len(copied)} tensors from {init}")
    if tc.freeze:
        fixed = freeze(core, copied)
        say(f"--freeze: {fixed:,} copied parameters stay fixed, {count_parameters(core) - fixed:,} train")
    state["world_size"] = ctx.world_size
    return state, saved_carried


def _open_logs(run: _Run, resuming: bool) -> None:
    """Say what trains; start the logs afresh, or cut them back to the resumed state's epoch."""
    train_split, tc, ctx, document = run.splits["train"], run.tc, run.ctx, run.document
    run.say(f"{run.name}: {count_parameters(run.core):,} parameters, {len(train_split):,} training sentences"
            + (f" in {train_split.n_documents:,} documents, {tc.streams} streams, bptt {tc.bptt}" if document else "")
            + (f"; {ctx.world_size} processes ({ctx.backend}, {ctx.device.type})" if ctx.distributed else ""))
    if document and train_split.n_documents < tc.streams:
        run.say(f"warning: {run.meta['corpus']['name']} has {train_split.n_documents} training documents (sentence "
                f"ids document:index) for {tc.streams} streams; the streams cannot all be busy")
    if ctx.main:
        run.out.mkdir(parents=True, exist_ok=True)
        if resuming:
            _truncate_logs(run.out, run.state)
        else:
            run.log_path.unlink(missing_ok=True)
            run.steps_path.unlink(missing_ok=True)


def _train_epoch(run: _Run, saved_carried: list | None) -> tuple[float, int, int, float, float, tuple | None]:
    """One epoch's steps (the rest of a resumed one), with resume states every ``save_every`` steps:
    ``(summed NLL, tokens, tokens after the warm-up, start time, end time, (warm-up end time, tokens then))``,
    this rank's, the NLL and tokens of a resumed epoch's earlier steps included on rank 0."""
    tc, ctx, core, state, document = run.tc, run.ctx, run.core, run.state, run.document
    epoch = state["epoch"] + 1
    begun = state.get("step", 0)  # global steps of this epoch already done (a resumed epoch)
    core.train()
    torch.manual_seed(_step_seed(tc.seed, epoch, begun, ctx.rank))
    train_split = run.splits["train"]
    if document:
        plan = DocumentEpoch(train_split, tc.streams, tc.bptt, seed=tc.seed + epoch)
    else:
        plan = SentenceEpoch(train_split, tc.batch_size, seed=tc.seed + epoch)
    total = len(plan) if tc.max_batches is None else min(len(plan), tc.max_batches)
    t0 = time.time() - state.get("epoch_seconds", 0.0)
    # the epoch's summed NLL and tokens so far: a resumed run's (all ranks') go to rank 0
    tot_nll, tot_n = (state.get("epoch_nll", 0.0), state.get("epoch_tokens", 0)) if ctx.main else (0.0, 0)
    seen = state.get("epoch_tokens", 0)  # tokens of all ranks, for the progress bar
    bar = tqdm(total=total, initial=begun, desc=f"{run.name} epoch {epoch}", unit="batch", file=sys.stderr,
               mininterval=1.0 if sys.stderr.isatty() else 60.0, disable=None if ctx.main else True)
    carried = scatter_carried(saved_carried, ctx, ctx.device, core.start_slots()) if begun else None
    steps = itertools.islice(plan.steps(ctx.rank, ctx.world_size, start=begun), max(0, total - begun))
    # the NLL summed on the device: reading it every step would make the host wait for a GPU
    running = torch.zeros((), dtype=torch.float64, device=ctx.device)
    host = ctx.device.type == "cpu"
    warm = None  # (time, this rank's tokens) when the steady timing began, after warmup_steps
    for k, step in enumerate(steps, start=begun):
        if k == begun + tc.warmup_steps:
            synchronize(ctx.device)
            warm = (time.time(), tot_n)
        idle = step.inputs is None
        if idle:  # within a chunk a rank's streams only end, so it has none to carry any more
            inputs, targets, before = _idle(core, document, ctx.device)
            carried = None
            real = 0
        else:
            real = int((step.targets != 0).sum())  # counted on the host, where the batch was made
            inputs, targets = step.inputs.to(ctx.device), step.targets.to(ctx.device)
            before = None
            if document:  # truncated BPTT: carry the state, detached, and reset it where documents start
                if carried is None or step.fresh:
                    carried = core.initial_state(inputs.shape[0])
                before = carried.narrow(inputs.shape[0]).reset(step.starts)
        result = run.model(inputs, before)
        loss, nll, n = output_loss(core, result, targets, before, denominator=step.tokens / ctx.world_size,
                                   tokens=real)
        # on the CPU reading the loss costs nothing: a diverged run stops at its step; on a GPU it would wait
        # for the device every step, and data-parallel ranks decide together: both at the epoch's end
        if host and not ctx.distributed and not math.isfinite(float(nll)):
            raise _diverged(epoch, k + 1, state["lr"])
        if document and not idle:
            carried = result.state.detach()
        run.opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(core.parameters(), tc.clip)
        run.opt.step()
        running += nll
        tot_n += n
        seen += step.tokens
        bar.update(1)
        if host or k % 50 == 0:  # on a GPU the perplexity shown waits for the device: every 50 steps
            bar.set_postfix(ppl=f"{perplexity(tot_nll + float(running), tot_n):.1f}",
                            tok_s=f"{seen / (time.time() - t0):.0f}")
        if tc.log_steps:
            step_nll, step_n = ctx.sum([nll, n])
            if ctx.main:
                with run.steps_path.open("a") as f:
                    f.write(json.dumps({"epoch": epoch, "step": k, "nll": step_nll / step_n, "tokens": int(step_n)}) + "\n")
        if tc.save_every and (k + 1) % tc.save_every == 0 and k + 1 < total:
            sums = ctx.sum([tot_nll + float(running), tot_n])
            everyone = gather_carried(carried, ctx) if document else None
            if ctx.main:
                save_resume(run.out / "resume", core, run.opt, {
                    **state, "step": k + 1, "epoch_nll": sums[0], "epoch_tokens": int(sums[1]),
                    "epoch_seconds": time.time() - t0}, everyone)
    bar.close()
    synchronize(ctx.device)
    steady = tot_n - warm[1] if warm else 0  # this rank's tokens after the warm-up steps
    return tot_nll + float(running), tot_n, steady, t0, time.time(), warm


def _end_epoch(run: _Run, nll: float, tokens: int, steady: int, t0: float, done: float, warm: tuple | None) -> None:
    """Score valid, keep the checkpoint if it improved, else spend patience and decay the lr (not on the initial
    plateau); log the epoch and write the resume state. Every rank takes the same decisions."""
    tc, ctx, state = run.tc, run.ctx, run.state
    epoch = state["epoch"] + 1
    seconds = done - t0
    tot_nll, tot_n, steady = ctx.sum([nll, tokens, steady])
    v = score_split(run.core, run.splits["valid"], ctx.rank, ctx.world_size)
    v_nll, v_tokens = ctx.sum([v.nll, v.tokens])
    valid = ctx.broadcast(perplexity(v_nll, v_tokens))  # every rank takes the same decisions below
    train_ppl = perplexity(tot_nll, tot_n)  # exp of the mean NLL: infinite past ~709 nats a word, far past chance
    if not (math.isfinite(train_ppl) and math.isfinite(valid)):  # every rank has the same sums: all stop
        raise _diverged(epoch, None, state["lr"], (train_ppl, valid))
    for key in ("step", "epoch_nll", "epoch_tokens", "epoch_seconds"):
        state.pop(key, None)
    state["wall_time"] += time.time() - t0
    record = {
        "epoch": epoch, "train_perplexity": train_ppl, "valid_perplexity": valid,
        "lr": state["lr"], "seconds": round(seconds, 1), "tokens_per_s": round(tot_n / seconds),
    }
    if warm and steady:  # tokens/s after the first warmup_steps steps (allocations, kernel choices)
        record["steady_tokens_per_s"] = round(steady / (done - warm[0]))
    improved = valid < state["best_valid"]
    if improved:
        state["best_valid"], state["bad_epochs"], state["best_epoch"] = valid, 0, epoch
        metrics = {"valid_perplexity": valid, "best_epoch": epoch, "epochs_trained": epoch,
                   "wall_time_s": round(state["wall_time"], 1)}
        if ctx.main:
            save_checkpoint(run.out, run.core, run.name, run.vocab, metrics=metrics, **run.meta)
    elif run.plateau is not None and state["best_valid"] >= run.plateau:
        record["plateau"] = True  # still on the initial plateau: the lr stays, patience is not spent
    else:
        state["bad_epochs"] += 1
        state["lr"] *= tc.lr_decay
        for g in run.opt.param_groups:
            g["lr"] = state["lr"]
    state["epoch"] = epoch
    if ctx.main:
        with run.log_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        save_resume(run.out / "resume", run.core, run.opt, state)
    run.say(f"epoch {epoch}: train ppl {record['train_perplexity']:.2f}  valid ppl {valid:.2f}"
            f"  {record['tokens_per_s']} tok/s  {seconds:.0f}s{'  *best*' if improved else ''}")


def finalize(out: Path, corpus: str, eval_batches: int | None, state: dict, ctx: Context = SINGLE) -> Checkpoint:
    """Evaluate the best checkpoint on test (and WSJ for English) and store the metrics; in a
    data-parallel run every rank scores its share and rank 0 writes."""
    ckpt = load_checkpoint(out)
    model = ckpt.model.to(ctx.device)
    metrics = dict(ckpt.meta.get("metrics", {}))
    evals = {"test": (corpus, "test")}
    if corpus == "brown":
        evals["wsj"] = ("wsj", "test")
    for key, (c, split) in evals.items():
        sp = open_split(c, split, ckpt.vocab)
        if eval_batches is not None:
            sp = sp.head(eval_batches * 64)
        t = score_split(model, sp, ctx.rank, ctx.world_size)
        nll, tokens = ctx.sum([t.nll, t.tokens])
        metrics[f"{key}_perplexity"] = ctx.broadcast(perplexity(nll, tokens))
    metrics.update(epochs_trained=state["epoch"], wall_time_s=round(state["wall_time"], 1))
    meta = {k: v for k, v in ckpt.meta.items() if k not in ("format", "format_version", "vizlm_version", "model", "config", "vocab")}
    meta["metrics"] = metrics
    if ctx.main:
        save_checkpoint(out, model, ckpt.name, ckpt.vocab, **meta)
        _log(f"{ckpt.name}: " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()))
    ctx.barrier()
    return load_checkpoint(out)


__all__ = ["TrainingDiverged", "train", "lm_loss", "output_loss", "init_from", "freeze", "CORPORA"]
