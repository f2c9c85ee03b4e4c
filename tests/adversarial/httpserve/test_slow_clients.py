"""Slow and numerous unauthenticated sockets against our HTTP servers (issue 20, item 5, server level).

Before the fix, 1,500 half-sent requests to the coordinator were all still open after 60 s, and the shardcast
servers kept a half-sent request for aiohttp's default hour. Attackers connect from other loopback addresses
(127.0.0.2 and up) so that the per-address cap applies to them and not to the signed client on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import socket

import pytest
from polling import wait_for

from swarmrl.configs.connections import ConnectionLimits
from swarmrl.configs.contract import ContractSection
from swarmrl.configs.shardcast import OriginConfig
from swarmrl.coordinator.client import AdminClient, NodeClient
from swarmrl.coordinator.server.app import create_app
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl.shardcast import Origin
from swarmrl_lab.coordinator_double import serve_guarded_in_thread

LIMITS = ConnectionLimits(
    header_timeout_s=1.0, body_timeout_s=1.0, min_body_rate_bytes_s=1e6, max_per_address=20, max_total=60
)
PARTIAL_HEAD = b"POST /v1/runs/r/heartbeat HTTP/1.1\r\nHost: x\r\nX-Slow: "


@pytest.fixture
def coordinator(tmp_path):
    app = create_app(db_url=f"sqlite:///{tmp_path / 'c.db'}", storage=tmp_path / "store", admin_token="t")
    server, guard = serve_guarded_in_thread(app, LIMITS)
    url = server.url
    admin = AdminClient.at(url, admin_token="t", retry=NO_RETRY)
    trainer, worker = Identity.generate(), NodeClient.at(url, Identity.generate(), retry=NO_RETRY)
    admin.create_run("r", trainer.node_id, ContractSection())
    worker.register()
    worker.join("r", ContractSection())
    try:
        yield url, guard, worker
    finally:
        server.stop()
        app.state.engine.dispose()


@pytest.fixture
def origin_url(tmp_path):
    (tmp_path / "step_1").mkdir()
    (tmp_path / "step_1" / "model.safetensors").write_bytes(b"x" * 1000)
    origin = Origin(tmp_path, Identity.from_seed(b"o" * 32), "x", OriginConfig(connections=LIMITS))
    origin.publish(tmp_path / "step_1", 1)
    server = origin.serve_in_thread()
    yield server.url, origin
    server.stop()


def half_sent(url: str, count: int, address: str, payload: bytes = PARTIAL_HEAD) -> list[socket.socket]:
    host, port = url.removeprefix("http://").split(":")
    sockets = []
    for _ in range(count):
        sock = socket.create_connection((host, int(port)), timeout=5, source_address=(address, 0))
        sock.sendall(payload)
        sockets.append(sock)
    return sockets


def closed_by_server(sock: socket.socket, wait_s: float) -> bool:
    sock.settimeout(wait_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:  # reset
        return True


def read_response(sock: socket.socket) -> bytes:
    """One whole response with a Content-Length (head and body may come in separate reads)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head


def still_open(sockets: list[socket.socket]) -> int:
    return sum(not closed_by_server(s, 0.01) for s in sockets)


def all_seen(guard, addresses: list[str], sent: int) -> None:
    """Waits until the server has taken or turned away the `sent` connections from `addresses`."""

    def seen() -> int:
        held = sum(guard.open_from(address) for address in addresses)
        return held + guard.refused + guard.evicted + guard.header_timeouts

    wait_for(lambda: seen() >= sent, 10, f"the server to take or turn away {sent} connections", 0.01)


def close_all(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.close()


def test_half_sent_request_heads_are_closed_after_the_header_deadline(coordinator):
    url, guard, _ = coordinator
    sockets = half_sent(url, 15, "127.0.0.2")
    try:
        all_seen(guard, ["127.0.0.2"], 15)
        for sock in sockets:  # trickling does not help
            sock.sendall(b"a")
        assert all(closed_by_server(s, 3.0) for s in sockets)
        assert guard.header_timeouts >= 15
    finally:
        close_all(sockets)


def test_a_trickled_body_is_closed_after_the_body_deadline(coordinator):
    url, guard, _ = coordinator
    head = b"POST /v1/runs/r/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"
    sockets = half_sent(url, 3, "127.0.0.2", head)
    try:
        assert all(closed_by_server(s, 4.0) for s in sockets)
        assert guard.body_timeouts >= 3  # closed by the body deadline, not by chance
    finally:
        close_all(sockets)


def test_a_slow_head_after_a_good_request_on_the_same_connection_is_closed(coordinator):
    url, _, _ = coordinator
    [sock] = half_sent(url, 1, "127.0.0.2", b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        sock.settimeout(5)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # the next head never ends
        assert closed_by_server(sock, 4.0)
    finally:
        close_all([sock])


def test_caps_hold_and_signed_requests_still_pass(coordinator):
    url, guard, worker = coordinator
    one_address = half_sent(url, 50, "127.0.0.3")
    many = [s for i in range(4, 8) for s in half_sent(url, 20, f"127.0.0.{i}")]
    try:
        all_seen(guard, [f"127.0.0.{i}" for i in range(3, 8)], 50 + 80)
        assert guard.open_from("127.0.0.3") <= LIMITS.max_per_address
        assert guard.open_connections <= LIMITS.max_total
        assert still_open(one_address) <= LIMITS.max_per_address
        for _ in range(10):  # each within its client's timeout, or it raises
            worker.heartbeat("r", policy_step=0)
        assert guard.evicted + guard.refused >= 50 + 80 - LIMITS.max_total
    finally:
        close_all(one_address + many)


def test_shardcast_server_closes_half_sent_heads_and_caps_an_address(origin_url):
    url, origin = origin_url
    sockets = half_sent(url, 40, "127.0.0.2", b"GET /versions HTTP/1.1\r\nHost: x\r\n")
    try:
        all_seen(origin.metrics.connections, ["127.0.0.2"], 40)
        assert origin.metrics.connections.open_from("127.0.0.2") <= LIMITS.max_per_address
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as good:
            good.sendall(b"GET /versions HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(good).startswith(b"HTTP/1.1 200")
        assert all(closed_by_server(s, 3.0) for s in sockets)
    finally:
        close_all(sockets)
