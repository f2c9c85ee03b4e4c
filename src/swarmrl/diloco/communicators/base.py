"""The one interface every communicator implements, plus the wire-byte model shared by all of them.

Bytes are counted as what one worker puts on the wire under bandwidth-optimal (ring) algorithms, the same
model the throttled link charges for, so figures compare across backends and with the DDP baseline.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from swarmrl.diloco.errors import CommunicatorError


def ring_all_reduce_bytes(payload_bytes: int, world_size: int) -> int:
    """Reduce-scatter + all-gather: each worker sends 2 (n - 1) / n of the payload."""
    return 2 * (world_size - 1) * payload_bytes // world_size


def all_to_all_bytes(payload_bytes: int, world_size: int) -> int:
    """Each worker keeps its own 1/n row and sends the other n - 1 rows."""
    return (world_size - 1) * payload_bytes // world_size


def all_gather_bytes(local_bytes: int, world_size: int) -> int:
    """Ring all-gather: each worker forwards n - 1 pieces of the local size."""
    return (world_size - 1) * local_bytes


def tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


@dataclass
class CommStats:
    """Thread-safe counters of one worker's traffic."""

    bytes_sent: int = 0
    collectives: int = 0
    seconds_in_collectives: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, wire_bytes: int, seconds: float) -> None:
        with self._lock:
            self.bytes_sent += wire_bytes
            self.collectives += 1
            self.seconds_in_collectives += seconds


class Communicator(ABC):
    """Collectives over a group of workers. Every worker must issue the same calls in the same order.

    The public collectives check their input, time the call and count its wire bytes; subclasses implement
    only the transport (`_all_reduce_mean`, `_all_to_all`, `_all_gather`).
    """

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.stats = CommStats()

    def participants(self) -> int:
        """Workers taking part in the current collective (elastic communicators: the round's quorum)."""
        return self.world_size

    def round_number(self) -> int | None:
        """The current round's number as the whole group agreed it (elastic communicators: the quorum's step),
        so a message replayed from another round can be told apart; None where the group agrees on none."""
        return None

    def all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """Average an fp32 tensor across workers, in place; returns it."""
        if tensor.dtype != torch.float32:
            raise CommunicatorError(f"all_reduce_mean sums in fp32 only, got {tensor.dtype}")
        wire = ring_all_reduce_bytes(tensor_bytes(tensor), self.participants())
        return self._timed(wire, self._all_reduce_mean, tensor)

    def all_to_all(self, rows: torch.Tensor) -> torch.Tensor:
        """Send row j of a (world_size, ...) tensor to worker j; row i of the result came from worker i."""
        if rows.shape[0] != self.world_size:
            raise CommunicatorError(f"all_to_all needs {self.world_size} rows, got {rows.shape[0]}")
        return self._timed(all_to_all_bytes(tensor_bytes(rows), self.world_size), self._all_to_all, rows)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Stack every worker's tensor into a (world_size, *shape) tensor, ordered by rank."""
        wire = all_gather_bytes(tensor_bytes(tensor), self.world_size)
        return self._timed(wire, self._all_gather, tensor)

    def _timed(
        self, wire_bytes: int, transport: Callable[[torch.Tensor], torch.Tensor], tensor: torch.Tensor
    ) -> torch.Tensor:
        started = time.perf_counter()
        self._before_transfer(wire_bytes)
        result = transport(tensor)
        self.stats.record(wire_bytes, time.perf_counter() - started)
        return result

    def _before_transfer(self, wire_bytes: int) -> None:
        """Hook run inside the timed span before the transport (a simulated link waits here)."""
        return None

    @abstractmethod
    def _all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def _all_to_all(self, rows: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def _all_gather(self, tensor: torch.Tensor) -> torch.Tensor: ...

    def begin_round(self) -> None:
        """Called before the collectives of one sync; elastic communicators settle membership here."""
        return None

    def end_round(self) -> bool:
        """Called after them; False means the round failed and its result must be discarded."""
        return True

    def close(self) -> None:
        """Release the process group or connections."""
        return None
