"""Caps and read deadlines below the application, as an asyncio.Protocol wrapped around the server's own.

The wrapper sees every connection open and close and every byte received, before the HTTP server does. It
admits a connection under the per-address and global caps (dropping the oldest half-sent one when full), and,
given a probe that tells from the server's parser which part of a request the client is sending, closes
connections whose request head or body is overdue. Without a probe (a server with a head deadline of its own,
such as aiohttp's `keepalive_timeout`) it only counts and caps, telling half-sent connections apart by the
blank line that ends a request head.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, cast

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from swarmrl.configs.connections import ConnectionLimits
from swarmrl.httpserve.streams import Peer, StreamBudget

Phase = Literal["head", "body", "busy"]
"""What the server waits for: the client's request head, the client's request body, or nothing (it is busy
answering, and no client deadline runs)."""
PhaseProbe = Callable[[asyncio.BaseProtocol], Phase]
SWEEP_INTERVAL_S = 0.25
HEAD_END = b"\r\n\r\n"
FD_RESERVE = 64  # descriptors kept for the database, files, logs and outgoing connections
# The listen backlog, also how many sockets asyncio accepts at once before the guard sees any: a long queue
# rides out a burst of connections (a short one drops SYNs, and clients wait a second to resend), a short one
# needs less descriptor room.
LONG_BACKLOG, SHORT_BACKLOG = 1024, 128
log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Connection:
    protocol: GuardedProtocol
    address: str
    phase: Phase
    phase_since: float
    phase_bytes: int = 0
    proven: bool = False  # has sent one complete request head
    port: int = 0

    @property
    def peer(self) -> Peer:
        return (self.address, self.port)


class ConnectionGuard:
    """The open connections of one server: admission under the caps, their phases, the deadline sweep."""

    def __init__(
        self,
        limits: ConnectionLimits | None = None,
        probe: PhaseProbe | None = None,
        clock: Callable[[], float] = time.monotonic,
        streams: StreamBudget | None = None,
    ) -> None:
        self.limits = limits or ConnectionLimits()
        # Connections serving a long-lived stream count against this budget instead of the caps below.
        self.streams = streams or StreamBudget.of(self.limits)
        self.max_total, self.backlog = _within_descriptor_limit(self.limits.max_total)
        self.probe = probe
        self.clock = clock
        self._open: dict[_Connection, None] = {}  # insertion order is age
        self._by_address: dict[str, dict[_Connection, None]] = {}
        self.refused = 0
        self.evicted = 0
        self.header_timeouts = 0
        self.body_timeouts = 0
        self._sweeper: asyncio.Task | None = None

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def open_from(self, address: str) -> int:
        return len(self._by_address.get(address, ()))

    def wrap(self, inner_factory: Callable[[], asyncio.Protocol]) -> Callable[[], GuardedProtocol]:
        """A protocol factory for `loop.create_server` that puts this guard in front of `inner_factory`'s."""
        return lambda: GuardedProtocol(inner_factory, self)

    def admit(self, connection: _Connection) -> bool:
        # Past its own cap an address is refused (cheap: no protocol is built), so it hurts only itself; past
        # the global cap the newcomer may come from anyone, so the oldest half-sent connection makes room.
        streaming_here = self.streams.open_from(connection.address)
        if self.open_from(connection.address) - streaming_here >= self.limits.max_per_address:
            self.refused += 1
            return False
        if len(self._open) - self.streams.open >= self.max_total and not self._evict_oldest_half_sent():
            self.refused += 1
            return False
        self._open[connection] = None
        self._by_address.setdefault(connection.address, {})[connection] = None
        if self.probe is not None and self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_while_open())
        return True

    def remove(self, connection: _Connection) -> None:
        """Forget a connection (idempotent: a dropped one is forgotten before its transport reports the loss)."""
        if connection not in self._open:
            return
        self.streams.release(connection.peer)
        del self._open[connection]
        same_address = self._by_address[connection.address]
        del same_address[connection]
        if not same_address:
            del self._by_address[connection.address]

    def set_phase(self, connection: _Connection, phase: Phase, now: float) -> None:
        if phase != connection.phase:
            connection.phase, connection.phase_since, connection.phase_bytes = phase, now, 0
            if phase != "head":
                connection.proven = True

    def overdue(self, connection: _Connection, now: float) -> Literal["header", "body"] | None:
        waited = now - connection.phase_since
        if connection.phase == "head" and waited > self.limits.header_timeout_s:
            return "header"
        allowance = self.limits.body_timeout_s + connection.phase_bytes / self.limits.min_body_rate_bytes_s
        if connection.phase == "body" and waited > allowance:
            return "body"
        return None

    def sweep(self) -> None:
        """Close every connection whose request head or body is overdue (needs a probe)."""
        if self.probe is None:
            return
        now = self.clock()
        for connection in list(self._open):
            inner = connection.protocol.inner
            if inner is None:
                continue
            self.set_phase(connection, self.probe(inner), now)
            late = self.overdue(connection, now)
            if late == "header":
                self.header_timeouts += 1
            elif late == "body":
                self.body_timeouts += 1
            if late is not None:
                self._drop(connection)

    def _evict_oldest_half_sent(self) -> bool:
        """Drop the oldest connection that has not yet sent a complete request head."""
        for connection in self._open:  # oldest first
            if not connection.proven and connection.phase == "head":
                self._drop(connection)
                self.evicted += 1
                return True
        return False

    def _drop(self, connection: _Connection) -> None:
        self.remove(connection)
        connection.protocol.drop()

    async def _sweep_while_open(self) -> None:
        try:
            while self._open:
                await asyncio.sleep(SWEEP_INTERVAL_S)
                self.sweep()
        finally:
            self._sweeper = None

    def collect(self, prefix: str) -> Iterable[Metric]:
        """Prometheus metrics (register `GuardCollector(guard, prefix)` in a registry)."""
        gauge = GaugeMetricFamily(f"{prefix}_open_connections", "open client connections")
        gauge.add_metric([], self.open_connections)
        yield gauge
        streams = GaugeMetricFamily(f"{prefix}_open_streams", "of those, serving a long-lived stream")
        streams.add_metric([], self.streams.open)
        yield streams
        dropped = CounterMetricFamily(
            f"{prefix}_connections_dropped", "connections refused or closed by the guard", labels=["reason"]
        )
        for reason, count in (
            ("refused", self.refused),
            ("evicted", self.evicted),
            ("header_timeout", self.header_timeouts),
            ("body_timeout", self.body_timeouts),
            ("stream_budget", self.streams.refused),
        ):
            dropped.add_metric([reason], count)
        yield dropped


def _within_descriptor_limit(max_total: int) -> tuple[int, int]:
    """The global cap and the listen backlog under the process's open-file limit: past that limit the server
    could accept nothing at all (EMFILE, and asyncio then stops accepting for a second), whoever asks. Room is
    left for two backlogs of sockets accepted before the guard drops any; the short backlog when the long one
    would cost connections."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_total, LONG_BACKLOG
    for backlog in (LONG_BACKLOG, SHORT_BACKLOG):
        room = soft - FD_RESERVE - 2 * backlog
        if max_total <= room:
            return max_total, backlog
    lowered = max(room, 1)
    log.warning("open-file limit %d: capping open connections at %d instead of %d", soft, lowered, max_total)
    return lowered, SHORT_BACKLOG


def raise_open_file_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit (as Go programs do at start-up: the common
    default of 1,024 is a few hundred connections short of the caps); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft


class GuardCollector:
    """A prometheus_client collector of one guard's figures."""

    def __init__(self, guard: ConnectionGuard, prefix: str) -> None:
        self.guard, self.prefix = guard, prefix

    def collect(self) -> Iterable[Metric]:
        return self.guard.collect(self.prefix)


class GuardedProtocol(asyncio.Protocol):
    """The server's protocol behind a guard. The server's protocol is built only for an admitted connection, so
    a refused one costs an accept and a close."""

    def __init__(self, inner_factory: Callable[[], asyncio.Protocol], guard: ConnectionGuard) -> None:
        self._inner_factory = inner_factory
        self.guard = guard
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self._connection: _Connection | None = None
        self._carry = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # An event loop's own transports need not subclass asyncio's (uvloop's do not, and uvicorn picks
        # uvloop whenever it is installed): what the guard calls, every stream transport has.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        port = int(peer[1]) if isinstance(peer, tuple) and len(peer) > 1 else 0
        connection = _Connection(self, address, "head", self.guard.clock(), port=port)
        if not self.guard.admit(connection):
            self.transport.abort()
            return
        self._connection = connection
        self.inner = self._inner_factory()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        connection, inner = self._connection, self.inner
        if connection is None or inner is None:
            return
        connection.phase_bytes += len(data)
        inner.data_received(data)
        if self.guard.probe is not None:
            self.guard.set_phase(connection, self.guard.probe(inner), self.guard.clock())
        elif not connection.proven:
            window = self._carry + data
            connection.proven = HEAD_END in window
            self._carry = b"" if connection.proven else window[-(len(HEAD_END) - 1) :]

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connection is None or self.inner is None:
            return
        self.guard.remove(self._connection)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def drop(self) -> None:
        """Close at once, without a response (the client is too slow or too many)."""
        if self.transport is not None:
            self.transport.abort()
