"""The resume state of a training run (``OUT/resume``): weights, Adam state, the position in the epoch and
the carried document state of every stream, written whole at an epoch's end or every ``save_every``
steps (:mod:`vizlm.modeling.train`), and read back by ``--resume`` at any world size."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from vizlm.core.distributed import Context, shard
from vizlm.models.base import State

CARRIED = ("h", "c", "memory", "valid")  # the State fields a mid-epoch resume keeps, per stream


def save_resume(folder: Path, model: nn.Module, opt: torch.optim.Optimizer, state: dict,
                 carried: dict[str, torch.Tensor] | None = None) -> None:
    """Weights, Adam state, ``state`` (in the file's metadata and, for people, state.json) and the
    carried document state of every stream. Written to a temporary name and renamed, so a run
    killed while saving keeps the previous resume state whole."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    state = {k: v for k, v in state.items() if k != "steps"}
    for i, p in enumerate(model.parameters()):
        s = opt.state.get(p)
        if s:
            tensors[f"opt.{i}.exp_avg"] = s["exp_avg"].contiguous().cpu()
            tensors[f"opt.{i}.exp_avg_sq"] = s["exp_avg_sq"].contiguous().cpu()
            state.setdefault("steps", {})[str(i)] = float(s["step"])
    for k, v in (carried or {}).items():
        tensors[f"carried.{k}"] = v.contiguous().cpu()
    doc = json.dumps(state, indent=1)
    for name, write in (("state.safetensors", lambda p: save_file(tensors, str(p), metadata={"state": doc})),
                        ("state.json", lambda p: p.write_text(doc))):
        tmp = folder / f".{name}.tmp"
        write(tmp)
        os.replace(tmp, folder / name)


def load_resume(folder: Path, model: nn.Module, opt: torch.optim.Optimizer) -> tuple[dict, dict | None]:
    """(state, carried document state or None), weights and Adam state loaded into ``model`` / ``opt``."""
    with safe_open(str(folder / "state.safetensors"), framework="pt") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
    # the file's own copy first: state.json is written after it, so a kill between the two leaves it older
    state = json.loads(meta["state"]) if "state" in meta else json.loads((folder / "state.json").read_text())
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    for i, p in enumerate(model.parameters()):
        if f"opt.{i}.exp_avg" in tensors:
            opt.state[p] = {
                "step": torch.tensor(state["steps"][str(i)], dtype=torch.float32, device=p.device),
                "exp_avg": tensors[f"opt.{i}.exp_avg"].to(p.device),
                "exp_avg_sq": tensors[f"opt.{i}.exp_avg_sq"].to(p.device),
            }
    for g in opt.param_groups:
        g["lr"] = state["lr"]
    carried = {k: tensors[f"carried.{k}"] for k in CARRIED if f"carried.{k}" in tensors} or None
    return state, carried


def gather_carried(carried: State | None, ctx: Context) -> dict[str, torch.Tensor] | None:
    """Every stream's carried state on rank 0, in one process's stream order (rank ``r`` holds
    streams ``r, r + world, ...``), so a resume can use any world size; None on other ranks."""
    mine = None if carried is None else {k: getattr(carried, k).detach().cpu() for k in CARRIED}
    parts = ctx.gather(mine)
    if parts is None or all(p is None for p in parts):
        return None
    parts = [p for p in parts if p is not None]
    B = sum(p["valid"].shape[0] for p in parts)
    out = {}
    for k in CARRIED:
        dim = 1 if k in ("h", "c") else 0  # h, c: (1, B, H); memory: (B, M, H); valid: (B,)
        shape = list(parts[0][k].shape)
        shape[dim] = B
        full = parts[0][k].new_zeros(shape)
        for r, p in enumerate(parts):  # ranks without streams are the last ones: the others keep their index
            full[(slice(None),) * dim + (slice(r, None, ctx.world_size),)] = p[k]
        out[k] = full
    return out


def scatter_carried(saved: dict[str, torch.Tensor] | None, ctx: Context, device: torch.device,
                     start_slots: int = 1) -> State | None:
    """This rank's streams (``rank, rank + world, ...``) of a saved carried state, for a model whose
    documents start with ``start_slots`` slots (:meth:`~vizlm.models.base.RecurrentLM.start_slots`)."""
    if saved is None:
        return None
    rows = torch.as_tensor(list(shard(saved["valid"].shape[0], ctx.rank, ctx.world_size)), dtype=torch.long)
    if not len(rows):
        return None
    return State(saved["h"][:, rows].to(device), saved["c"][:, rows].to(device), saved["memory"][rows].to(device),
                 saved["valid"][rows].to(device), start_slots)


__all__ = ["CARRIED", "gather_carried", "load_resume", "save_resume", "scatter_carried"]
