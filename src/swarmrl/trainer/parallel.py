"""Data parallelism for the trainer: FSDP2 (`fully_shard`) under torchrun, a no-op in one process.

The same code path runs on CPU with gloo (tested) and on GPUs with NCCL. Checkpoints are always written as
full, unsharded state: rank 0 writes what every worker and relay downloads, and any world size can resume.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar, cast

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)


def world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_distributed() -> bool:
    return world()[1] > 1


def shard_model(root: ModuleT, blocks: Iterable[torch.nn.Module], *, bf16: bool = False) -> ModuleT:
    """Shard each transformer block, then the root (embeddings, final norm, head and whatever the root's
    forward adds); in place. With `bf16`, parameters are gathered in bf16 for compute and gradients reduced
    in fp32 into the fp32 shards (the master weights)."""
    if not is_distributed():
        return root
    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if bf16
        else MixedPrecisionPolicy()
    )
    for block in blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(root, mp_policy=policy)
    return root


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """The unsharded weights on rank 0 (None elsewhere); every rank must call it."""
    if not is_distributed():
        return None
    state = get_model_state_dict(model, options=_FULL)  # full_state_dict: every value a plain tensor
    return cast(dict[str, torch.Tensor], state) if dist.get_rank() == 0 else None


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
    """The optimizer state keyed by parameter name (so any world size can resume it), on rank 0 only.

    Every rank must call it.
    """
    options = _FULL if is_distributed() else StateDictOptions(full_state_dict=True)
    state = get_optimizer_state_dict(model, optimizer, options=options)
    return state if world()[0] == 0 else None


def load_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any] | None
) -> None:
    """Restore a full optimizer state read on rank 0 (other ranks pass None); every rank must call it."""
    distributed = is_distributed()
    set_optimizer_state_dict(
        model,
        optimizer,
        optim_state_dict=state or {},
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=distributed),
    )


def to_float(value: torch.Tensor | float) -> float:
    """A Python float from a tensor that may be a DTensor (FSDP2 grad norms are)."""
    if hasattr(value, "full_tensor"):
        value = value.full_tensor()
    return float(value)
