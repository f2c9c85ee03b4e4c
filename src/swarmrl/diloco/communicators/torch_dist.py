"""Communicator over a fixed torch.distributed process group (gloo on CPU, NCCL on GPU)."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from swarmrl.diloco.communicators.base import Communicator
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
        if not dist.is_initialized():
            raise CommunicatorError("torch.distributed is not initialised; call init_process_group first")
        super().__init__(dist.get_rank(group), dist.get_world_size(group))
        self._group = group
        on_nccl = dist.get_backend(group) == "nccl"
        self._device = torch.device("cuda", torch.cuda.current_device()) if on_nccl else torch.device("cpu")

    def _all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        staged = tensor.to(self._device)
        dist.all_reduce(staged, op=dist.ReduceOp.SUM, group=self._group)
        return tensor.copy_(staged.div_(self.world_size))

    def _all_to_all(self, rows: torch.Tensor) -> torch.Tensor:
        staged = rows.contiguous().to(self._device)
        received = torch.empty_like(staged)
        dist.all_to_all_single(received, staged, group=self._group)
        return received.cpu()

    def _all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        staged = tensor.contiguous().to(self._device)
        pieces = [torch.empty_like(staged) for _ in range(self.world_size)]
        dist.all_gather(pieces, staged, group=self._group)
        return torch.stack(pieces).cpu()

    def close(self) -> None:
        if self._group is None and dist.is_initialized():
            dist.destroy_process_group()
