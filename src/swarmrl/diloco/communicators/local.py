"""Single-worker communicator: every collective is the identity (debugging, tests, one-machine runs)."""

from __future__ import annotations

import torch

from swarmrl.diloco.communicators.base import Communicator
from swarmrl.diloco.errors import CommunicatorError


class LocalCommunicator(Communicator):
    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    def all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        self.stats.record(0, 0.0)
        return tensor

    def all_to_all(self, rows: torch.Tensor) -> torch.Tensor:
        if rows.shape[0] != 1:
            raise CommunicatorError(f"all_to_all needs 1 row on a single worker, got {rows.shape[0]}")
        self.stats.record(0, 0.0)
        return rows.clone()

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        self.stats.record(0, 0.0)
        return tensor.clone()[None]
