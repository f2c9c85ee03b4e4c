import hashlib
import http.server
import os
import re
import socket
import threading
import time

import pytest
from polling import wait_for

from swarmrl.shardcast.range_get import (
    CorruptShard,
    RangeSink,
    SourceFailure,
    fetch_range_into,
    receive_range,
    request_range,
)
from swarmrl.shardcast.range_pool import Cut, RangePool

BODY = os.urandom(3 * 1024 * 1024 + 17)


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the shardcast servers do
    connections: list[int] = []
    extra = b""  # bytes appended past the requested range (a lying source)
    requests = 0

    closed: list[int] = []  # ports of the connections whose sockets the server closed

    def setup(self) -> None:
        super().setup()
        type(self).connections.append(self.client_address[1])

    def do_GET(self) -> None:
        type(self).requests += 1
        first, last = map(int, re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers["Range"]).groups())
        payload = BODY[first : last + 1] + type(self).extra
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{last}/{len(BODY)}")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        return None


class _RangeServer(http.server.ThreadingHTTPServer):
    def shutdown_request(self, request) -> None:
        port = request.getpeername()[1]
        super().shutdown_request(request)
        _RangeHandler.closed.append(port)  # the socket itself is closed: a client reading it sees the end


@pytest.fixture
def server():
    _RangeHandler.connections = []
    _RangeHandler.closed = []
    _RangeHandler.extra = b""
    _RangeHandler.requests = 0
    _RangeHandler.timeout = None
    httpd = _RangeServer(("127.0.0.1", 0), _RangeHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/f"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


def _fetch(pool, url, tmp_path, first, length):
    target = tmp_path / "out.bin"
    if not target.exists():
        target.write_bytes(b"\0" * len(BODY))
    fd = os.open(target, os.O_WRONLY)
    digest, counted = hashlib.sha256(), []
    try:
        sink = RangeSink(fd, first, length, digest, time.monotonic() + 30, threading.Event(), counted.append)
        fetch_range_into(pool, url, sink)
    finally:
        os.close(fd)
    return digest.hexdigest(), sum(counted), target


def test_ranges_land_at_their_offsets_hashed_and_counted_over_one_kept_alive_connection(server, tmp_path):
    pool = RangePool(connect_timeout_s=5, read_timeout_s=5)
    half = len(BODY) // 2
    first_digest, first_count, _ = _fetch(pool, server, tmp_path, 0, half)
    second_digest, second_count, target = _fetch(pool, server, tmp_path, half, len(BODY) - half)
    pool.close()
    assert target.read_bytes() == BODY
    assert first_digest == hashlib.sha256(BODY[:half]).hexdigest()
    assert second_digest == hashlib.sha256(BODY[half:]).hexdigest()
    assert (first_count, second_count) == (half, len(BODY) - half)
    assert len(_RangeHandler.connections) == 1


def test_connections_the_server_closed_while_idle_are_not_reused(server, tmp_path):
    """A server drops keep-alive connections idle past its limit (aiohttp's keepalive_timeout), so after a
    pause between two versions every kept connection is dead: the next request must not fail on them (a
    failed request marks its source out of reach, and the download goes to a distant one)."""
    _RangeHandler.timeout = 0.3  # the handler closes a connection whose next request has not come by then
    pool = RangePool(connect_timeout_s=5, read_timeout_s=5)
    kept = [request_range(pool, server, 0, 10) for _ in range(3)]  # three connections at once
    for answer in kept:
        answer.response.read()
        answer.response.close()  # read to the end: each goes back to the pool, kept alive
    wait_for(lambda: len(_RangeHandler.closed) == 3, 30, "the server to close its idle connections", 0.05)
    digest, count, _ = _fetch(pool, server, tmp_path, 0, 1000)
    pool.close()
    assert digest == hashlib.sha256(BODY[:1000]).hexdigest() and count == 1000
    assert len(_RangeHandler.connections) == 4


def test_a_body_longer_than_the_range_is_corrupt_and_not_written_past_it(server, tmp_path):
    _RangeHandler.extra = b"x" * 10
    pool = RangePool(connect_timeout_s=5, read_timeout_s=5)
    with pytest.raises(CorruptShard, match="more bytes"):
        _fetch(pool, server, tmp_path, 0, 1000)
    pool.close()
    assert (tmp_path / "out.bin").read_bytes()[1000:1010] == b"\0" * 10


def test_an_unreachable_source_is_a_source_failure(tmp_path):
    with socket.socket() as probe:  # a port the OS just handed out and nobody listens on any more
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pool = RangePool(connect_timeout_s=2, read_timeout_s=2)
    with pytest.raises(SourceFailure, match="cannot connect"):
        _fetch(pool, f"http://127.0.0.1:{port}/f", tmp_path, 0, 10)


def test_a_stopped_download_ends_at_the_next_read(server, tmp_path):
    pool = RangePool(connect_timeout_s=5, read_timeout_s=5)
    stop = threading.Event()
    stop.set()
    fd = os.open(tmp_path / "x.bin", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(SourceFailure, match="cancelled"):
            sink = RangeSink(fd, 0, 100, hashlib.sha256(), time.monotonic() + 30, stop, print)
            fetch_range_into(pool, server, sink)
    finally:
        os.close(fd)


@pytest.mark.parametrize("head", [False, True], ids=["before-its-head", "mid-body"])
def test_a_cut_ends_a_read_blocked_on_a_silent_source(tmp_path, head):
    """A source that goes silent before its answer's head, or after the head and a few bytes: without the cut
    the fetch thread would sit in recv for the whole 30 s read timeout."""
    release, asked = threading.Event(), threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def stall() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            if head:
                connection.sendall(
                    b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-99/100\r\n"
                    b"Content-Length: 100\r\n\r\n" + b"x" * 10
                )
            asked.set()
            release.wait(timeout=60)

    server = threading.Thread(target=stall, daemon=True)
    server.start()
    pool = RangePool(connect_timeout_s=5, read_timeout_s=30)
    stop, outcome = threading.Event(), []
    fd = os.open(tmp_path / "x.bin", os.O_WRONLY | os.O_CREAT)
    sink = RangeSink(fd, 0, 100, hashlib.sha256(), time.monotonic() + 60, stop, lambda n: None)

    def fetch() -> None:
        try:
            fetch_range_into(pool, f"http://127.0.0.1:{listener.getsockname()[1]}/f", sink)
        except SourceFailure as exc:
            outcome.append(exc)

    fetcher = threading.Thread(target=fetch)
    fetcher.start()
    try:
        # The request has arrived. `stop` stays clear: the fetch loop checks it between reads, which would end
        # the fetch without the cut whenever it won the race to a read.
        assert asked.wait(timeout=10), "the fetch never sent its request"
        sink.cut()
        fetcher.join(timeout=10)
        assert not fetcher.is_alive()
        assert [str(exc) for exc in outcome] == ["request cut"]
    finally:
        release.set()
        fetcher.join(timeout=30)
        server.join(timeout=10)
        listener.close()
        os.close(fd)
        pool.close()


def test_a_request_cut_before_it_goes_out_is_never_sent(server):
    pool = RangePool(connect_timeout_s=5, read_timeout_s=5)
    request = Cut()
    request()
    with pytest.raises(SourceFailure, match="request cut"):
        request_range(pool, server, 0, 10, request)
    pool.close()
    assert _RangeHandler.requests == 0


def test_a_late_cut_does_not_reach_the_connection_s_next_request(server, tmp_path):
    """urllib3 gives a connection back to the pool as the last byte of a body is read, and a transfer may be cut
    just then (a hedge that lost by a hair): by that time the connection may carry another shard's request,
    which must not be cut with it."""
    pool = RangePool(connect_timeout_s=5, read_timeout_s=5)
    first = Cut()
    assert request_range(pool, server, 0, 1000, first).response.read() == BODY[:1000]  # back in the pool
    answer = request_range(pool, server, 1000, 1000)  # on the same connection, kept alive
    first()
    fd = os.open(tmp_path / "y.bin", os.O_WRONLY | os.O_CREAT)
    try:
        sink = RangeSink(
            fd, 1000, 1000, hashlib.sha256(), time.monotonic() + 30, threading.Event(), lambda n: None
        )
        receive_range(answer, sink)
    finally:
        os.close(fd)
        pool.close()
    assert sink.digest.hexdigest() == hashlib.sha256(BODY[1000:2000]).hexdigest()
    assert len(_RangeHandler.connections) == 1
