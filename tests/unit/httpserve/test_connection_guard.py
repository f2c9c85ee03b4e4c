"""The connection guard's bookkeeping: admission under the caps, who is evicted, when a request is overdue."""

from __future__ import annotations

import asyncio

import pytest

from swarmrl.configs.connections import ConnectionLimits
from swarmrl.httpserve.guard import ConnectionGuard, GuardedProtocol, _Connection

LIMITS = ConnectionLimits(
    header_timeout_s=10, body_timeout_s=30, min_body_rate_bytes_s=1000, max_per_address=2, max_total=3
)


class FakeProtocol:
    def __init__(self) -> None:
        self.dropped = False
        self.inner = None

    def drop(self) -> None:
        self.dropped = True


def connection(address: str, proven: bool = False, phase: str = "head", since: float = 0.0) -> _Connection:
    return _Connection(FakeProtocol(), address, phase, since, proven=proven)  # type: ignore[arg-type]


def test_a_full_address_is_refused_and_keeps_what_it_holds():
    guard = ConnectionGuard(LIMITS)
    first, second = connection("a"), connection("a")
    assert guard.admit(first) and guard.admit(second)
    assert not guard.admit(connection("a"))
    assert not first.protocol.dropped and not second.protocol.dropped
    assert guard.open_from("a") == 2 and guard.refused == 1
    assert guard.admit(connection("b"))  # another address still gets in


def test_connections_that_sent_a_request_are_not_evicted_the_newcomer_is_refused():
    guard = ConnectionGuard(LIMITS)
    busy = [
        connection("a", proven=True, phase="busy"),
        connection("b", proven=True),
        connection("c", proven=True),
    ]
    for c in busy:
        assert guard.admit(c)
    assert not guard.admit(connection("d"))
    assert guard.refused == 1 and not any(c.protocol.dropped for c in busy)


def test_the_global_cap_evicts_across_addresses_oldest_first():
    guard = ConnectionGuard(LIMITS)
    a, b, c = connection("a"), connection("b", proven=True), connection("c")
    for conn in (a, b, c):
        assert guard.admit(conn)
    assert guard.admit(connection("d"))
    assert a.protocol.dropped and guard.open_connections == 3
    guard.remove(a)  # the transport's later report of the loss is harmless
    assert guard.open_connections == 3


def test_deadlines_head_fixed_body_grows_with_bytes_received():
    guard = ConnectionGuard(LIMITS)
    head = connection("a", since=100.0)
    assert guard.overdue(head, 110.0) is None and guard.overdue(head, 110.5) == "header"
    body = connection("a", phase="body", since=100.0)
    body.phase_bytes = 5000  # 5 s more at 1000 B/s
    assert guard.overdue(body, 134.9) is None and guard.overdue(body, 135.1) == "body"
    busy = connection("a", phase="busy", since=0.0)
    assert guard.overdue(busy, 1e9) is None


def test_phase_changes_restart_the_clock_and_prove_the_connection():
    guard = ConnectionGuard(LIMITS)
    conn = connection("a", since=0.0)
    conn.phase_bytes = 99
    guard.set_phase(conn, "body", 5.0)
    assert (conn.phase, conn.phase_since, conn.phase_bytes, conn.proven) == ("body", 5.0, 0, True)
    guard.set_phase(conn, "body", 9.0)
    assert conn.phase_since == 5.0


# uvloop's transports (which uvicorn uses whenever uvloop is installed) do not subclass asyncio.Transport.
@pytest.mark.parametrize("transport_base", [asyncio.Transport, object], ids=["asyncio", "duck-typed"])
def test_without_a_probe_the_end_of_a_request_head_proves_a_connection_across_reads(transport_base):
    guard = ConnectionGuard(LIMITS)

    class Transport(transport_base):
        def get_extra_info(self, name, default=None):
            return ("10.0.0.1", 4242) if name == "peername" else default

    class Inner(asyncio.Protocol):
        def __init__(self) -> None:
            self.data = b""

        def data_received(self, data: bytes) -> None:
            self.data += data

    async def run() -> tuple[GuardedProtocol, Inner]:
        inner = Inner()
        protocol = GuardedProtocol(lambda: inner, guard)
        protocol.connection_made(Transport())
        for part in (b"GET / HTTP/1.1\r\nHost: x\r", b"\n\r", b"\n"):
            assert not protocol._connection.proven
            protocol.data_received(part)
        return protocol, inner

    protocol, inner = asyncio.run(run())
    assert protocol._connection.proven and inner.data == b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def test_the_global_cap_stays_below_the_open_file_limit(monkeypatch):
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))
    capped = ConnectionGuard(ConnectionLimits(max_total=5000))
    assert (capped.max_total, capped.backlog) == (1024 - 64 - 2 * 128, 128)
    small = ConnectionGuard(ConnectionLimits(max_total=500))
    assert (small.max_total, small.backlog) == (500, 128)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (65536, 65536))
    roomy = ConnectionGuard(ConnectionLimits(max_total=1024))
    assert (roomy.max_total, roomy.backlog) == (1024, 1024)


def test_streams_have_their_own_budget_and_leave_the_caps_to_node_traffic():
    limits = LIMITS.model_copy(update={"max_streams_per_address": 1, "max_streams_total": 2})
    guard = ConnectionGuard(limits)
    streams = [_Connection(FakeProtocol(), "a", "busy", 0.0, proven=True, port=p) for p in (1, 2)]  # type: ignore[arg-type]
    other = _Connection(FakeProtocol(), "b", "busy", 0.0, proven=True, port=3)  # type: ignore[arg-type]
    for conn in (*streams, other):
        assert guard.admit(conn)
    assert guard.streams.acquire(streams[0].peer)
    assert not guard.streams.acquire(streams[1].peer)  # one stream per address
    assert guard.streams.acquire(other.peer)
    assert not guard.streams.acquire(("c", 4))  # two in all
    assert guard.streams.refused == 2
    # Three connections open, two of them streams: the caps (2 per address, 3 in all) see one.
    assert guard.admit(connection("a")) and guard.admit(connection("d")) and guard.admit(connection("e"))
    guard.remove(streams[0])  # a closed connection frees its stream
    assert guard.streams.open == 1 and guard.streams.acquire(("a", 9))
    guard.streams.release(("a", 9))
    guard.streams.release(("a", 9))  # the stream's end and its connection's close may both report it
    assert guard.streams.open_from("a") == 0
