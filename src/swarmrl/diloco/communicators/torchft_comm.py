"""Elastic communicator on torchft: membership is agreed per sync round through a lighthouse quorum.

Workers may leave (crash) or join between rounds; a joining worker heals by fetching the state registered
with its `torchft.Manager` from a healthy peer. torchft's managed all-reduce averages over the workers that
take part in the round, so this communicator carries the fp32 codec only (lossy codecs need all-to-all and
all-gather, which torchft does not manage).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch.distributed import ReduceOp

from swarmrl.diloco.communicators.base import Communicator
from swarmrl.diloco.errors import CommunicatorError

if TYPE_CHECKING:
    from torchft import Manager


class TorchFTCommunicator(Communicator):
    """`rank` / `world_size` are the data shard of this replica; the round's membership comes from torchft."""

    def __init__(self, manager: Manager, replica_rank: int, replica_count: int) -> None:
        super().__init__(replica_rank, replica_count)
        self.manager = manager

    def participants(self) -> int:
        return self.manager.num_participants()

    def _all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        self.manager.allreduce(tensor, reduce_op=ReduceOp.AVG).wait()
        return tensor

    def _all_to_all(self, rows: torch.Tensor) -> torch.Tensor:
        raise CommunicatorError(
            "the torchft communicator carries the fp32 codec only (no managed all-to-all)"
        )

    def _all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        raise CommunicatorError(
            "the torchft communicator carries the fp32 codec only (no managed all-gather)"
        )

    def begin_round(self) -> None:
        self.manager.start_quorum()

    def end_round(self) -> bool:
        return bool(self.manager.should_commit())

    def close(self) -> None:
        self.manager.shutdown(wait=False)
