"""How a model trains: :class:`TrainConfig`, one dataclass whose fields are ``vizlm train``'s options (their
default, help and check in one place, :func:`options`), stored in every checkpoint it trains."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


def _option(default, help: str, check: str, zero: str | None = None, metavar: str | None = None):
    """A :class:`TrainConfig` field that ``vizlm train`` offers as ``--name-with-dashes``: its help, how the
    command line checks it (``check``: ``whole>=N``, ``number>0``, ``fraction``, ``int`` or ``switch``), and, with
    ``zero``, what a 0 given on the command line means (the field's None)."""
    return field(default=default, metadata={"help": help, "check": check, "zero": zero, "metavar": metavar})


@dataclass
class TrainConfig:
    """How a model trains (not what it is: the model's options are :data:`vizlm.cli.MODEL_OPTIONS`). Every
    field with a ``help`` is a ``vizlm train`` option of the same name (:func:`options`): one place for the
    default, the help and the check."""

    epochs: int = _option(30, "maximum epochs", "whole>=1")
    batch_size: int = _option(64, "sentences per batch (sentence context)", "whole>=1")
    bptt: int = _option(20, "tokens per truncated-BPTT segment (document context)", "whole>=1")
    streams: int = _option(64, "parallel document streams (document context)", "whole>=1")
    lr: float = _option(1e-3, "Adam learning rate", "number>0")
    clip: float = _option(5.0, "gradient-norm clip", "number>0")
    patience: int = _option(2, "stop after this many epochs without improvement", "whole>=0")
    lr_decay: float = _option(0.5, "lr factor after an epoch without improvement (0 to 1)", "fraction")
    # The initial plateau: a model trained from scratch first predicts word frequencies only (valid
    # perplexity ~ the unigram model's, evaluate.unigram_perplexity) and some (the N-gram RNNs) sit
    # there for epochs, improving by < 1% an epoch. Until a run's best valid perplexity falls below
    # `plateau` x the unigram model's, an epoch without improvement neither decays the lr nor counts
    # towards `patience`: the same rule for every family, so no arm is starved of learning rate before
    # it starts to learn. None: no such rule (every non-improving epoch counts, as before).
    plateau: float | None = _option(
        0.9, "until the best valid perplexity falls below this fraction of the unigram model's (the initial "
        "plateau), an epoch without improvement neither decays the lr nor counts towards --patience "
        "(0: every such epoch counts)", "fraction", zero="no plateau rule")
    seed: int = _option(1234, "random seed", "int")
    max_batches: int | None = _option(None, "train on the first N batches of each epoch only", "whole>=1")
    eval_batches: int | None = _option(None, "score only the first N batches of valid and test (quick checks; "
                                       "not a result)", "whole>=1")
    save_every: int | None = _option(
        1000, "also write OUT/resume every STEPS steps within an epoch, so a killed run loses at most that many "
        "(0: at epoch ends only; default 1000)", "whole>=0", zero="at epoch ends only", metavar="STEPS")
    log_steps: bool = _option(False, "write the NLL per token of every step to OUT/steps.jsonl", "switch")
    freeze: bool = _option(False, "with --init-from: keep what it copied fixed and train only the rest (AMSRN from "
                           "an LSTM: the embedding, LSTM and output layer stay the LSTM's; key, gates and read "
                           "projection train)", "switch")
    warmup_steps: int = _option(10, "steps of each epoch before its steady speed is timed (train_log's "
                                "steady_tokens_per_s)", "whole>=0")
    extra: dict = field(default_factory=dict)  # stored in the checkpoint (command line, ...)

    def dry_run(self) -> TrainConfig:
        """A few batches of one epoch, scored on one batch: checks the pipeline (``--dry-run``), not a result."""
        return dataclasses.replace(self, epochs=1, max_batches=3, eval_batches=1)


def options() -> list[dataclasses.Field]:
    """The :class:`TrainConfig` fields ``vizlm train`` offers, in order."""
    return [f for f in dataclasses.fields(TrainConfig) if "help" in f.metadata]
