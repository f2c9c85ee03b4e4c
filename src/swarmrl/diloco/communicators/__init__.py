"""Communicators: one interface (`Communicator`), one file per implementation."""

from swarmrl.diloco.communicators.base import CommStats, Communicator
from swarmrl.diloco.communicators.local import LocalCommunicator
from swarmrl.diloco.communicators.throttled import SimulatedLink, ThrottledCommunicator
from swarmrl.diloco.communicators.torch_dist import TorchDistCommunicator, init_process_group

__all__ = [
    "CommStats",
    "Communicator",
    "LocalCommunicator",
    "SimulatedLink",
    "ThrottledCommunicator",
    "TorchDistCommunicator",
    "init_process_group",
]
