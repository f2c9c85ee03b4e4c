"""Single-worker communicator: every collective is the identity (debugging, tests, one-machine runs)."""

from __future__ import annotations

import torch

from swarmrl.diloco.communicators.base import Communicator


class LocalCommunicator(Communicator):
    def __init__(self) -> None:
        super().__init__(rank=0, world_size=1)

    def _all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def _all_to_all(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.clone()

    def _all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.clone()[None]
