"""Issue 29, break 3: dashboard streams locked every node out.

128 `GET /v1/runs/R/summary/stream` from each of 8 loopback addresses filled the coordinator's global
connection cap, and health checks and node requests from fresh addresses failed for as long as the streams
stayed open. Streams now have their own small budget, per address and in all, and a connection serving one
counts against that budget alone: past it a stream is refused with 503 and node traffic keeps its slots.
Scaled down here (caps of 16 per address and 64 in all, 4 attacking addresses), served by the real server and
its connection guard; attackers connect from 127.0.0.2 and up.
"""

from __future__ import annotations

import contextlib
import socket
import time

import httpx
import pytest

from swarmrl.configs.connections import ConnectionLimits
from swarmrl.configs.contract import ContractSection
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.client import AdminClient, NodeClient
from swarmrl.coordinator.server.app import create_app
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl_lab.coordinator_double import serve_guarded_in_thread

LIMITS = ConnectionLimits(
    header_timeout_s=20.0,
    max_per_address=16,
    max_total=64,
    max_streams_per_address=2,
    max_streams_total=6,
)
STREAM = b"GET /v1/runs/r/summary/stream?interval_s=5 HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture
def coordinator(tmp_path):
    config = CoordinatorConfig(connections=LIMITS, requests_per_minute=100_000)
    app = create_app(
        db_url=f"sqlite:///{tmp_path / 'c.db'}", storage=tmp_path / "store", admin_token="t", config=config
    )
    server, guard = serve_guarded_in_thread(app)
    AdminClient.at(server.url, admin_token="t", retry=NO_RETRY).create_run(
        "r", Identity.generate().node_id, ContractSection()
    )
    try:
        yield server.url, guard
    finally:
        server.stop()
        app.state.engine.dispose()


def open_stream(url: str, address: str) -> tuple[socket.socket, int]:
    """A dashboard stream asked for from `address`, held open; returns the socket and the answer's status."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10, source_address=(address, 0))
    sock.sendall(STREAM)
    head = b""
    while b"\r\n" not in head:
        data = sock.recv(4096)
        if not data:
            return sock, 0  # closed without an answer: refused by the guard
        head += data
    return sock, int(head.split(b" ", 2)[1])


def test_dashboard_streams_from_many_addresses_leave_node_traffic_its_slots(coordinator):
    url, guard = coordinator
    attackers = [f"127.0.0.{i}" for i in range(2, 6)]
    held: list[socket.socket] = []
    statuses: list[int] = []
    try:
        for address in attackers:  # 16 × 4 = 64: the whole connection cap, as streams
            for _ in range(16):
                sock, status = open_stream(url, address)
                held.append(sock)
                statuses.append(status)
        assert statuses.count(200) == 6  # the stream budget: 2 per address, 6 in all
        assert set(statuses) == {200, 503}, statuses
        assert guard.streams.open == 6
        # A node from a fresh address, and the signed node traffic of 127.0.0.1, find a slot every time.
        for _ in range(10):
            with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.9")) as fresh:
                assert fresh.get(f"{url}/healthz", timeout=5).status_code == 200
        node = NodeClient.at(url, Identity.generate(), retry=NO_RETRY)
        node.register()
        assert node.join("r", ContractSection()).status == "active"
        refused = httpx.get(f"{url}/v1/runs/r/summary/stream", timeout=5)
        assert (refused.status_code, refused.json()["error"]) == (503, "stream_budget")
        assert httpx.get(f"{url}/v1/runs/r/summary", timeout=5).status_code == 200  # what the page polls
    finally:
        for sock in held:
            with contextlib.suppress(OSError):
                sock.close()
    deadline = time.monotonic() + 10
    while guard.streams.open and time.monotonic() < deadline:  # closed connections free their streams
        time.sleep(0.05)
    assert guard.streams.open == 0
    sock, status = open_stream(url, "127.0.0.2")
    sock.close()
    assert status == 200
