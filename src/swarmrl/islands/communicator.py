"""The islands' communicator: torchft decides each merge's membership, its gloo group carries any codec.

`TorchFTCommunicator` (diloco) runs only torchft's managed all-reduce, i.e. the fp32 codec. Islands all-gather
every island's encoded contribution (`swarmrl.islands.contributions`), so this subclass runs all-gather (and
all-to-all) on the torchft process group that the manager reconfigures to each round's quorum. The quorum is
synchronous: when `begin_round` returns, a (re)joining island has already healed from a peer and every
member of the group takes part, so the group's rank and size are the round's rank and size.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import torch
from torch.distributed.distributed_c10d import AllgatherOptions, AllToAllOptions

from swarmrl.diloco.communicators.torchft_comm import TorchFTCommunicator
from swarmrl.diloco.errors import CommunicatorError

if TYPE_CHECKING:
    from torchft import Manager
    from torchft.process_group import ProcessGroup


class QuorumCommunicator(TorchFTCommunicator):
    def __init__(
        self,
        manager: Manager,
        group: ProcessGroup,
        island: int,
        islands: int,
        collective_timeout: timedelta | None = None,
    ) -> None:
        super().__init__(manager, island, islands)
        self.group = group
        self.island = island
        # None: the group's own timeout (which a child-process group also spends on starting its child).
        self.collective_timeout = collective_timeout

    def begin_round(self) -> None:
        self.manager.start_quorum()
        rank = self.manager.participating_rank()
        if rank is None:
            raise CommunicatorError(f"island {self.island} is not a participant of the merge quorum")
        self.rank, self.world_size = rank, self.manager.num_participants()

    def _all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        return self._guarded(lambda: super(QuorumCommunicator, self)._all_reduce_mean(tensor))

    def _all_to_all(self, rows: torch.Tensor) -> torch.Tensor:
        def run() -> torch.Tensor:
            received = torch.empty_like(rows)
            work = self.group.alltoall_base(received, rows.contiguous(), [], [], AllToAllOptions())
            work.wait(self.collective_timeout)
            return received

        return self._guarded(run)

    def _all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        def run() -> torch.Tensor:
            # Zeros, not empty: a peer that sends short leaves nothing of this process's memory to decode.
            pieces = [torch.zeros_like(tensor) for _ in range(self.world_size)]
            self.group.allgather([pieces], [tensor.contiguous()], AllgatherOptions()).wait(
                self.collective_timeout
            )
            return torch.stack(pieces)

        return self._guarded(run)

    def _guarded(self, collective):
        """A collective that fails (a peer died mid-merge, a timeout) fails the round instead of the island."""
        if self.manager.errored() is not None:
            raise CommunicatorError(f"merge round already failed: {self.manager.errored()}")
        try:
            return collective()
        except Exception as exc:
            self.manager.report_error(exc)
            raise CommunicatorError(f"merge collective failed: {exc}") from exc
