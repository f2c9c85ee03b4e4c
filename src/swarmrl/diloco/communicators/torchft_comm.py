"""Elastic communicator on torchft: membership is agreed per sync round through a lighthouse quorum.

Workers may leave (crash) or join between rounds; a joining worker heals by fetching the state registered
with its `torchft.Manager` from a healthy peer. torchft's managed all-reduce averages over the workers that
take part in the round, so this communicator carries the fp32 codec only (lossy codecs need all-to-all and
all-gather, which torchft does not manage).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from swarmrl.diloco.communicators.base import Communicator
from swarmrl.diloco.errors import CommunicatorError

if TYPE_CHECKING:
    from torchft import Manager
    from torchft.checkpointing import CheckpointTransport
    from torchft.process_group import ProcessGroup


class TorchFTCommunicator(Communicator):
    """`rank` / `world_size` are the data shard of this replica; the round's membership comes from torchft."""

    def __init__(self, manager: Manager, replica_rank: int, replica_count: int) -> None:
        super().__init__(replica_rank, replica_count)
        self.manager = manager

    def participants(self) -> int:
        return self.manager.num_participants()

    def round_number(self) -> int:
        # Every member of a quorum is at its max step once start_quorum returns (laggards heal to it).
        return self.manager.current_step()

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


def replica_manager(
    group: ProcessGroup,
    *,
    replica_id: str,
    lighthouse_addr: str,
    min_replica_size: int,
    use_async_quorum: bool,
    timeout: timedelta,
    quorum_timeout: timedelta,
    checkpoint_transport: CheckpointTransport | None = None,
    host: str = "127.0.0.1",
) -> tuple[Manager, dist.TCPStore]:
    """A `torchft.Manager` for a replica of one process (rank 0 of 1) on this host, and the store it talks to on an
    OS-chosen port. Peers reach both at `host` (this machine's address; loopback when every replica shares one
    machine; the servers listen on every interface). The caller holds the store for as long as the manager runs
    (the store's server stops when it is collected); state to heal from is registered by the caller, not passed
    here, and travels by `checkpoint_transport` (None: torchft's HTTP transport)."""
    # Imported here: torchft is the optional `elastic` extra.
    from torchft import Manager

    store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=group,
        load_state_dict=None,
        state_dict=None,
        min_replica_size=min_replica_size,
        use_async_quorum=use_async_quorum,
        timeout=timeout,
        quorum_timeout=quorum_timeout,
        connect_timeout=timeout,
        rank=0,
        world_size=1,
        store_addr=host,
        store_port=store.port,
        lighthouse_addr=lighthouse_addr,
        replica_id=replica_id,
        hostname=host,
        init_sync=False,
        checkpoint_transport=checkpoint_transport,
    )
    return manager, store
