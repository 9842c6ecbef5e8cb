"""Which process of a data-parallel run this is, its device, and the few collectives vizlm uses.

``torchrun --nproc-per-node N vizlm train ...`` starts N copies of the command and sets
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` in each;
:func:`session` reads them, joins the process group (NCCL on CUDA, gloo on CPU) and leaves it
at the end. Without them the command is one process, rank 0 of 1, and no process group exists:
every collective below is then the identity, so the same code runs in both cases.

Gradients are averaged by :class:`torch.nn.parallel.DistributedDataParallel` (in
:mod:`vizlm.modeling.train`); this module only carries the small facts the ranks must agree on: token
counts and summed losses (:meth:`Context.sum`), an output folder chosen by rank 0
(:meth:`Context.broadcast`), the carried document state gathered for a resume
(:meth:`Context.gather`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from vizlm.core.choices import DEVICES

TIMEOUT = timedelta(minutes=30)  # a rank waiting longer than this for the others fails instead of hanging


@dataclass(frozen=True)
class Context:
    """This process in a data-parallel run (rank 0 of 1 when not started by torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str | None = None  # "gloo" | "nccl"; None: no process group

    @property
    def main(self) -> bool:
        """Rank 0: the one process that writes checkpoints, logs and the progress bar."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None and self.world_size > 1

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over all ranks (float64; every rank gets the same numbers)."""
        if not self.distributed:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self._comm_device)
        dist.all_reduce(t)
        return t.tolist()

    def sum_array(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum over all ranks of a float64 array (per-sentence scores, position sums)."""
        if not self.distributed:
            return np.asarray(values, dtype=np.float64)
        t = torch.as_tensor(np.asarray(values, dtype=np.float64)).to(self._comm_device)
        dist.all_reduce(t)
        return t.cpu().numpy()

    def broadcast(self, obj):
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, device=self._comm_device)
        return box[0]

    def gather(self, obj) -> list | None:
        """Every rank's ``obj``, in rank order, on rank 0; None on the others."""
        if not self.distributed:
            return [obj]
        out = [None] * self.world_size if self.main else None
        dist.gather_object(obj, out, dst=0)
        return out

    @property
    def _comm_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")


SINGLE = Context()  # one process, CPU


def resolve_device(device: str = "auto", local_rank: int = 0) -> torch.device:
    """``auto``: this rank's GPU (``cuda:LOCAL_RANK``) when CUDA is available, else the CPU."""
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("--device cuda: this PyTorch sees no CUDA device (torch.cuda.is_available() is False)")
        if local_rank >= torch.cuda.device_count():
            raise ValueError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPUs: "
                             "run at most one process per GPU (torchrun --nproc-per-node)")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


@contextlib.contextmanager
def session(device: str = "auto") -> Iterator[Context]:
    """This process's :class:`Context`: joins the process group when launched by torchrun
    (NCCL when the device is CUDA, gloo otherwise; rendezvous from torchrun's environment) and
    leaves it on exit."""
    rank, world, local = (int(os.environ.get(k, d)) for k, d in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")))
    dev = resolve_device(device, local)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world <= 1:
        yield Context(device=dev)
        return
    backend = "nccl" if dev.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=TIMEOUT)
    try:
        yield Context(rank, world, local, dev, backend)
    finally:
        dist.destroy_process_group()


def shard(n: int, rank: int, world: int) -> range:
    """The items of ``n`` that rank ``rank`` of ``world`` owns: every ``world``-th from ``rank``.

    Strided, not contiguous: a length-bucketed batch is sorted by length, and document streams
    drop out from the end, so striding keeps the ranks' shares within one item of each other.
    """
    return range(rank, n, world)
