"""Elastic communicator on torchft: membership is agreed per sync round through a lighthouse quorum.

Workers may leave (crash) or join between rounds; a joining worker heals by fetching the state registered
with its `torchft.Manager` from a healthy peer. torchft's managed all-reduce averages over the workers that
take part in the round, so this communicator carries the fp32 codec only (lossy codecs need all-to-all and
all-gather, which torchft does not manage).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch
from torch.distributed import ReduceOp

from swarmrl.diloco.communicators.base import Communicator, ring_all_reduce_bytes, tensor_bytes
from swarmrl.diloco.errors import CommunicatorError

if TYPE_CHECKING:
    from torchft import Manager


class TorchFTCommunicator(Communicator):
    """`rank` / `world_size` are the data shard of this replica; the round's membership comes from torchft."""

    def __init__(self, manager: Manager, replica_rank: int, replica_count: int) -> None:
        super().__init__()
        self.manager = manager
        self._rank = replica_rank
        self._world_size = replica_count

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
        participants = self.manager.num_participants()
        self.manager.allreduce(tensor, reduce_op=ReduceOp.AVG).wait()
        self.stats.record(
            ring_all_reduce_bytes(tensor_bytes(tensor), participants), time.perf_counter() - started
        )
        return tensor

    def all_to_all(self, rows: torch.Tensor) -> torch.Tensor:
        raise CommunicatorError(
            "the torchft communicator carries the fp32 codec only (no managed all-to-all)"
        )

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        raise CommunicatorError(
            "the torchft communicator carries the fp32 codec only (no managed all-gather)"
        )

    def begin_round(self) -> None:
        self.manager.start_quorum()

    def end_round(self) -> bool:
        return bool(self.manager.should_commit())

    def close(self) -> None:
        self.manager.shutdown(wait=False)
