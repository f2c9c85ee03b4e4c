"""Wide-area link simulated on one machine: every collective first waits latency + wire bytes / bandwidth.

The link is a serialising token bucket: a transfer starts when the previous one has drained, so
back-to-back collectives queue up exactly as they would on a saturated WAN uplink.
"""

from __future__ import annotations

import threading
import time

import torch

from swarmrl.diloco.communicators.base import Communicator


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
        super().__init__(inner.rank, inner.world_size)
        self.inner = inner
        self.link = link

    def _before_transfer(self, wire_bytes: int) -> None:
        if self.world_size > 1:
            self.link.transmit(wire_bytes)

    def _all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.inner.all_reduce_mean(tensor)

    def _all_to_all(self, rows: torch.Tensor) -> torch.Tensor:
        return self.inner.all_to_all(rows)

    def _all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.inner.all_gather(tensor)

    def begin_round(self) -> None:
        self.inner.begin_round()

    def round_number(self) -> int | None:
        return self.inner.round_number()

    def end_round(self) -> bool:
        return self.inner.end_round()

    def close(self) -> None:
        self.inner.close()
