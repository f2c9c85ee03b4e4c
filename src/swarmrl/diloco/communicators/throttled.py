"""Wide-area link simulated on one machine: every collective first waits latency + wire bytes / bandwidth.

The link is a serialising token bucket: a transfer starts when the previous one has drained, so
back-to-back collectives queue up exactly as they would on a saturated WAN uplink.
"""

from __future__ import annotations

import threading
import time

import torch

from swarmrl.diloco.communicators.base import (
    Communicator,
    all_gather_bytes,
    all_to_all_bytes,
    ring_all_reduce_bytes,
    tensor_bytes,
)


class SimulatedLink:
    """Charges transfers against a link of `bandwidth_bps` bits/s with a fixed per-transfer latency."""

    def __init__(self, bandwidth_bps: float, latency_s: float) -> None:
        self.bandwidth_bps = bandwidth_bps
        self.latency_s = latency_s
        self._busy_until = 0.0
        self._lock = threading.Lock()

    def transfer_seconds(self, wire_bytes: int) -> float:
        return self.latency_s + wire_bytes * 8 / self.bandwidth_bps

    def transmit(self, wire_bytes: int) -> float:
        """Block until the transfer would have finished; returns the seconds waited."""
        with self._lock:
            now = time.perf_counter()
            self._busy_until = max(now, self._busy_until) + self.transfer_seconds(wire_bytes)
            wait = self._busy_until - now
        time.sleep(wait)
        return wait


class ThrottledCommunicator(Communicator):
    """Wraps a real communicator; its stats count the same bytes, its time includes the simulated link."""

    def __init__(self, inner: Communicator, link: SimulatedLink) -> None:
        super().__init__()
        self.inner = inner
        self.link = link

    @property
    def rank(self) -> int:
        return self.inner.rank

    @property
    def world_size(self) -> int:
        return self.inner.world_size

    def _charge(self, wire_bytes: int) -> float:
        return self.link.transmit(wire_bytes) if self.world_size > 1 else 0.0

    def all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        wire = ring_all_reduce_bytes(tensor_bytes(tensor), self.world_size)
        self._charge(wire)
        self.inner.all_reduce_mean(tensor)
        self.stats.record(wire, time.perf_counter() - started)
        return tensor

    def all_to_all(self, rows: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        wire = all_to_all_bytes(tensor_bytes(rows), self.world_size)
        self._charge(wire)
        received = self.inner.all_to_all(rows)
        self.stats.record(wire, time.perf_counter() - started)
        return received

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        wire = all_gather_bytes(tensor_bytes(tensor), self.world_size)
        self._charge(wire)
        gathered = self.inner.all_gather(tensor)
        self.stats.record(wire, time.perf_counter() - started)
        return gathered

    def begin_round(self) -> None:
        self.inner.begin_round()

    def end_round(self) -> bool:
        return self.inner.end_round()

    def close(self) -> None:
        self.inner.close()
