"""Communicator over a fixed torch.distributed process group (gloo on CPU, NCCL on GPU)."""

from __future__ import annotations

import time
from datetime import timedelta

import torch
import torch.distributed as dist

from swarmrl.diloco.communicators.base import (
    Communicator,
    all_gather_bytes,
    all_to_all_bytes,
    ring_all_reduce_bytes,
    tensor_bytes,
)
from swarmrl.diloco.errors import CommunicatorError


def init_process_group(
    backend: str, master_addr: str, master_port: int, rank: int, world_size: int, timeout_s: float = 120.0
) -> None:
    dist.init_process_group(
        backend,
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )


class TorchDistCommunicator(Communicator):
    """Uses the default process group (or `group`); collectives are blocking calls.

    Callers hand in CPU tensors (the DiLoCo global copy lives on CPU); with NCCL they are staged through the
    current CUDA device, with gloo they are used in place.
    """

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        if not dist.is_initialized():
            raise CommunicatorError("torch.distributed is not initialised; call init_process_group first")
        self._group = group
        self._rank = dist.get_rank(group)
        self._world_size = dist.get_world_size(group)
        on_nccl = dist.get_backend(group) == "nccl"
        self._device = torch.device("cuda", torch.cuda.current_device()) if on_nccl else torch.device("cpu")

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    def all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dtype != torch.float32:
            raise CommunicatorError(f"all_reduce_mean sums in fp32 only, got {tensor.dtype}")
        started = time.perf_counter()
        staged = tensor.to(self._device)
        dist.all_reduce(staged, op=dist.ReduceOp.SUM, group=self._group)
        tensor.copy_(staged.div_(self._world_size))
        self.stats.record(
            ring_all_reduce_bytes(tensor_bytes(tensor), self._world_size), time.perf_counter() - started
        )
        return tensor

    def all_to_all(self, rows: torch.Tensor) -> torch.Tensor:
        if rows.shape[0] != self._world_size:
            raise CommunicatorError(f"all_to_all needs {self._world_size} rows, got {rows.shape[0]}")
        started = time.perf_counter()
        staged = rows.contiguous().to(self._device)
        received = torch.empty_like(staged)
        dist.all_to_all_single(received, staged, group=self._group)
        self.stats.record(
            all_to_all_bytes(tensor_bytes(rows), self._world_size), time.perf_counter() - started
        )
        return received.cpu()

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        staged = tensor.contiguous().to(self._device)
        pieces = [torch.empty_like(staged) for _ in range(self._world_size)]
        dist.all_gather(pieces, staged, group=self._group)
        self.stats.record(
            all_gather_bytes(tensor_bytes(tensor), self._world_size), time.perf_counter() - started
        )
        return torch.stack(pieces).cpu()

    def close(self) -> None:
        if self._group is None and dist.is_initialized():
            dist.destroy_process_group()
