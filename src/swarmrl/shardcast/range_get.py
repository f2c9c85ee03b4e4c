"""One HTTP range request of an untrusted source, written straight into a file region and hashed as it arrives.

This is the bulk path of every shard download and runs in a worker thread: http.client hands over up to
READ_SIZE bytes per socket read, and hashing and pwritev release the GIL, so several of these threads move
bytes while the event loop only schedules them. (aiohttp's streaming reader delivered one small chunk per
coroutine step, which kept a core busy on Python overhead on the receive side.)
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from swarmrl.shardcast.hashing import Hasher

READ_SIZE = 1024 * 1024
WRITE_BATCH = 4 * 1024 * 1024
_STALE_CONNECTION = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


class SourceFailure(Exception):
    """One request to one source went wrong; `unavailable` means the source does not hold the bytes."""

    def __init__(self, message: str, unavailable: bool = False) -> None:
        super().__init__(message)
        self.unavailable = unavailable


class CorruptShard(Exception):
    """The bytes a source sent do not hash to the signed value."""


class IdleConnections:
    """Keep-alive connections between downloads, per (scheme, host:port): the next version's shards reuse
    them, where a new connection would cost a round trip more (a long one across regions). At most
    `per_source` are kept for each source; the rest are closed."""

    def __init__(self, per_source: int = 16) -> None:
        self.per_source = per_source
        self._idle: dict[tuple[str, str], list[http.client.HTTPConnection]] = collections.defaultdict(list)
        self._lock = threading.Lock()

    def pop(self, key: tuple[str, str]) -> http.client.HTTPConnection | None:
        """The most recently used idle connection the server has not closed; closed ones are dropped. A server
        closes a keep-alive connection idle past its own limit (the shardcast servers: `header_timeout_s`),
        so after a pause longer than that, between two versions, every kept connection is dead: reusing one
        would fail the request, and the source would look out of reach."""
        while True:
            with self._lock:
                idle = self._idle[key]
                if not idle:
                    return None
                connection = idle.pop()
            if not _closed_by_peer(connection):
                return connection
            connection.close()

    def push(self, key: tuple[str, str], connection: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle[key]
            if len(idle) < self.per_source:
                idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            idle = [c for connections in self._idle.values() for c in connections]
            self._idle.clear()
        for connection in idle:
            connection.close()


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """An idle connection whose socket reads as ready: the server closed it (or sent bytes nobody asked
    for, which makes it unusable too)."""
    if connection.sock is None:
        return True
    poller = select.poll()
    try:
        poller.register(connection.sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):  # a socket already closed
        return True


class ConnectionPool:
    """Keep-alive connections per (scheme, host:port), shared by the fetch threads of one download.

    Connections in use are tracked so that `interrupt` can cut them: a fetch thread blocked in a read of a
    silent source then returns at once instead of after the read timeout. Idle ones live in `idle`: the
    pool's own, closed with it, or one that outlives it (a client's or relay's, for its next download).
    """

    def __init__(
        self, connect_timeout_s: float, read_timeout_s: float, idle: IdleConnections | None = None
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._owns_idle = idle is None
        self._idle = idle if idle is not None else IdleConnections()
        self._busy: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()
        self._closed = False

    def take(self, scheme: str, netloc: str, reuse: bool = True) -> tuple[http.client.HTTPConnection, bool]:
        """A connection to the origin (an idle one if `reuse` and there is one) and whether it was reused: the
        server may close a reused one just as the request goes out."""
        connection = self._idle.pop((scheme, netloc)) if reuse else None
        if connection is not None:
            with self._lock:
                self._busy.add(connection)
            return connection, True
        if scheme not in ("http", "https"):
            raise SourceFailure(f"unsupported URL scheme {scheme!r}")
        factory = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        try:
            connection = factory(netloc, timeout=self.connect_timeout_s)
        except http.client.HTTPException as exc:  # a malformed host:port
            raise SourceFailure(f"bad source address {netloc!r}: {exc}") from exc
        try:
            connection.connect()
        except OSError as exc:
            connection.close()
            raise SourceFailure(f"cannot connect to {netloc}: {type(exc).__name__} {exc}") from exc
        connection.sock.settimeout(self.read_timeout_s)
        with self._lock:
            self._busy.add(connection)
        return connection, False

    def give_back(self, scheme: str, netloc: str, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._busy.discard(connection)
            closed = self._closed and self._owns_idle
        if closed:
            connection.close()
        else:
            self._idle.push((scheme, netloc), connection)

    def discard(self, connection: http.client.HTTPConnection) -> None:
        """Close a connection whose state is unknown (a failed or unfinished exchange)."""
        with self._lock:
            self._busy.discard(connection)
        connection.close()

    def interrupt(self) -> None:
        """Shut down the sockets of connections in use; their blocked reads fail immediately."""
        with self._lock:
            busy = list(self._busy)
        for connection in busy:
            if connection.sock is not None:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        if self._owns_idle:
            self._idle.close()


@dataclass
class RangeSink:
    """Where one range's bytes go and the limits of receiving them.

    `length` bytes starting at byte `first` of the source's file land at offset `position` of `fd` (default:
    `first`, i.e. in place) and feed `digest`; the request fails after `deadline` (monotonic), once `stop` is
    set (the whole download ends) or once `cut()` is called (this one request ends); `on_bytes` is told of
    every batch written (from the fetch thread; a batch once `write_batch` bytes gathered). `received` and
    `written` count progress, for a watchdog in another thread, for readers of the bytes landed so far (a relay
    passing a shard on as it arrives) and for cleaning up after a failure.
    """

    fd: int
    first: int
    length: int
    digest: Hasher
    deadline: float
    stop: threading.Event
    on_bytes: Callable[[int], None]
    position: int | None = None
    write_batch: int = WRITE_BATCH
    received: int = 0
    written: int = 0
    _cut: bool = field(default=False, init=False)
    _connection: http.client.HTTPConnection | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    @property
    def cancelled(self) -> bool:
        return self._cut or self.stop.is_set()

    def cut(self) -> None:
        """End this request now, from any thread: a read blocked on a silent source returns at once."""
        with self._lock:
            self._cut = True
            connection = self._connection
        if connection is not None and connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)

    def _attach(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._connection = connection
            cut = self._cut
        if cut:
            raise SourceFailure("request cut")


def fetch_range_into(pool: ConnectionPool, url: str, sink: RangeSink) -> None:
    """GET bytes [first, first + length) of `url` into the sink.

    SourceFailure for anything the network or the source got wrong (status, headers, silence longer than the
    pool's read timeout, slower than `deadline`, a short body), CorruptShard for a body longer than asked.
    The caller compares the digest with the signed value.
    """
    if sink.cancelled:
        raise SourceFailure("download cancelled")
    receive_range(request_range(pool, url, sink.first, sink.length, sink), sink)


@dataclass
class RangeAnswer:
    """A range request whose answer's head has arrived; its body is still to be read (`receive_range`)."""

    pool: ConnectionPool
    netloc: tuple[str, str]  # (scheme, host:port), where the connection goes back to
    connection: http.client.HTTPConnection
    response: http.client.HTTPResponse

    def close(self) -> None:
        """Nobody will read the body: drop the connection (its bytes stop coming)."""
        self.pool.discard(self.connection)


def request_range(
    pool: ConnectionPool, url: str, first: int, length: int, sink: RangeSink | None = None
) -> RangeAnswer:
    """Send the range request and wait for the answer's head (SourceFailure for a wrong status or range); a
    `sink` given can cut the request while it waits."""
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    for attempt in range(2):
        connection, reused = pool.take(parts.scheme, parts.netloc, reuse=attempt == 0)
        try:
            with _discarded_on_failure(pool, connection):
                if sink is not None:
                    sink._attach(connection)
                response = _request(connection, target, first, length)
            return RangeAnswer(pool, (parts.scheme, parts.netloc), connection, response)
        except SourceFailure as failure:
            if reused and attempt == 0 and isinstance(failure.__cause__, _STALE_CONNECTION):
                continue  # the server closed the idle connection as the request went out: retry on a new one
            raise
    raise AssertionError("unreachable: the second attempt returns or raises")


def receive_range(answer: RangeAnswer, sink: RangeSink) -> None:
    """Read an answered range request's body into the sink; the connection is kept for reuse when it can be."""
    pool, connection, response = answer.pool, answer.connection, answer.response
    with _discarded_on_failure(pool, connection):
        sink._attach(connection)
        _receive(response, sink)
    if response.length == 0:
        response.read()  # marks the exhausted response closed, so the connection may send again
    if response.isclosed() and not response.will_close:
        pool.give_back(*answer.netloc, connection)
    else:
        pool.discard(connection)


@contextlib.contextmanager
def _discarded_on_failure(pool: ConnectionPool, connection: http.client.HTTPConnection) -> Iterator[None]:
    """A failed exchange leaves the connection in an unknown state: discard it; network errors become
    SourceFailure."""
    try:
        yield
    except (OSError, http.client.HTTPException) as exc:
        pool.discard(connection)
        raise SourceFailure(f"{type(exc).__name__} {exc}".strip()) from exc
    except BaseException:
        pool.discard(connection)
        raise


def _request(
    connection: http.client.HTTPConnection, target: str, first: int, length: int
) -> http.client.HTTPResponse:
    last = first + length - 1
    connection.request("GET", target, headers={"Range": f"bytes={first}-{last}"})
    response = connection.getresponse()
    if response.status == 206:
        expected = f"bytes {first}-{last}/"
        content_range = response.getheader("Content-Range", "")
        if not content_range.startswith(expected):
            raise SourceFailure(f"wrong Content-Range {content_range!r}")
    elif not (response.status == 200 and first == 0 and response.length == length):
        raise SourceFailure(f"HTTP {response.status}", unavailable=response.status in (404, 416, 503))
    return response


def _receive(response: http.client.HTTPResponse, sink: RangeSink) -> None:
    position = sink.first if sink.position is None else sink.position
    batch: list[bytes] = []
    batched = 0
    while True:
        if sink.cancelled:
            raise SourceFailure("request cut" if not sink.stop.is_set() else "download cancelled")
        if time.monotonic() > sink.deadline:
            raise SourceFailure("slower than the minimum throughput")
        chunk = response.read1(READ_SIZE)
        if not chunk:
            break
        if sink.received + len(chunk) > sink.length:
            raise CorruptShard("source sent more bytes than the shard holds")
        sink.received += len(chunk)
        batch.append(chunk)
        batched += len(chunk)
        if batched >= sink.write_batch:
            _flush(sink, batch, position)
            batch, batched = [], 0
    if batch:
        _flush(sink, batch, position)
    if sink.written != sink.length:
        raise SourceFailure(f"connection ended after {sink.written} of {sink.length} bytes")


def _flush(sink: RangeSink, batch: list[bytes], position: int) -> None:
    nbytes = sum(len(c) for c in batch)
    hash_and_write(sink.fd, sink.digest, batch, position + sink.written)
    sink.written += nbytes
    sink.on_bytes(nbytes)


def hash_and_write(fd: int, digest: Hasher, chunks: list[bytes], position: int) -> None:
    """hashlib and pwrite release the GIL, so other threads (and the event loop) keep running."""
    if len(chunks) > 256:  # stay far below IOV_MAX
        chunks = [b"".join(chunks)]
    for chunk in chunks:
        digest.update(chunk)
    written = os.pwritev(fd, chunks, position)
    total = sum(len(c) for c in chunks)
    while written < total:  # pwritev may write less than asked; finish the tail
        tail = b"".join(chunks)[written:]
        written += os.pwrite(fd, tail, position + written)
