"""One HTTP range request of an untrusted source, written straight into a file region and hashed as it arrives.

This is the bulk path of every shard download and runs on a fetch thread over `RangePool` (urllib3): reading,
hashing and pwritev release the GIL, so several of these threads move bytes while the event loop only schedules them.
(aiohttp's streaming reader delivered one small chunk per coroutine step, which kept a core busy on Python
overhead on the receive side.)
"""

from __future__ import annotations

import http.client
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import urllib3

from swarmrl.shardcast.hashing import Hasher
from swarmrl.shardcast.range_pool import READ_SIZE, TRANSPORT_ERRORS, Cut, RangePool, RequestCut

WRITE_BATCH = 4 * 1024 * 1024
# The server closed a kept-alive connection just as the request went out: asked again once, afresh.
_STALE_CONNECTION = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


class SourceFailure(Exception):
    """One request to one source went wrong; `unavailable` means the source does not hold the bytes."""

    def __init__(self, message: str, unavailable: bool = False) -> None:
        super().__init__(message)
        self.unavailable = unavailable


class CorruptShard(Exception):
    """The bytes a source sent do not hash to the signed value."""


@dataclass(eq=False)
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
    request: Cut = field(default_factory=Cut, init=False)

    @property
    def cancelled(self) -> bool:
        return self.request.done or self.stop.is_set()

    def cut(self) -> None:
        """End this request now, from any thread: a read blocked on a silent source returns at once."""
        self.request()


def fetch_range_into(pool: RangePool, url: str, sink: RangeSink) -> None:
    """GET bytes [first, first + length) of `url` into the sink.

    SourceFailure for anything the network or the source got wrong (status, headers, silence longer than the
    pool's read timeout, slower than `deadline`, a short body), CorruptShard for a body longer than asked.
    The caller compares the digest with the signed value.
    """
    if sink.cancelled:
        raise SourceFailure("download cancelled")
    receive_range(request_range(pool, url, sink.first, sink.length, sink.request), sink)


@dataclass
class RangeAnswer:
    """A range request whose answer's head has arrived; its body is still to be read (`receive_range`)."""

    response: urllib3.BaseHTTPResponse
    request: Cut

    def close(self) -> None:
        """Nobody will read the body: drop the connection (its bytes stop coming)."""
        self.request()
        RangePool.done(self.response, complete=False)


def request_range(
    pool: RangePool, url: str, first: int, length: int, request: Cut | None = None
) -> RangeAnswer:
    """Send the range request and wait for the answer's head (SourceFailure for a wrong status or range);
    `request` (cut it to end the request from another thread) defaults to a fresh one."""
    request = request or Cut()
    _check_address(url)
    headers = {"Range": f"bytes={first}-{first + length - 1}"}
    for attempt in range(2):
        try:
            response = pool.open(url, headers, request)
        except RequestCut as exc:
            raise SourceFailure("request cut") from exc
        except TRANSPORT_ERRORS as exc:
            if attempt == 0 and isinstance(_cause(exc), _STALE_CONNECTION) and not request.done:
                continue  # the server closed a kept connection as the request went out: once more, afresh
            raise _failure(exc, request) from exc
        try:
            _check_head(response, first, length)
        except BaseException:
            request.release()
            RangePool.done(response, complete=False)
            raise
        return RangeAnswer(response, request)
    raise AssertionError("unreachable: the second attempt returns or raises")


def receive_range(answer: RangeAnswer, sink: RangeSink) -> None:
    """Read an answered range request's body into the sink; its connection is kept for the next request
    when the body ended where its head said (httpcore closes it otherwise)."""
    complete = False
    try:
        answer.request.hand_over(sink.request)
        _receive(answer.response, sink)
        complete = True
    except RequestCut as exc:
        raise SourceFailure("request cut") from exc
    except TRANSPORT_ERRORS as exc:
        raise _failure(exc, sink.request) from exc
    finally:
        sink.request.release()  # before the connection goes back to the pool: a late cut must not reach it
        RangePool.done(answer.response, complete)


def _check_address(url: str) -> None:
    """SourceFailure for an address no request can go to."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise SourceFailure(f"unsupported URL scheme {parts.scheme!r}")
    try:
        parts.port  # noqa: B018 (parsing it is the check)
    except ValueError as exc:
        raise SourceFailure(f"bad source address {parts.netloc!r}: {exc}") from exc
    if not parts.hostname:
        raise SourceFailure(f"bad source address {parts.netloc!r}: no host")


def _cause(exc: BaseException) -> BaseException:
    """The error urllib3 wrapped (its ProtocolError carries the socket's or http.client's as an argument)."""
    inner = exc.args[-1] if isinstance(exc, urllib3.exceptions.ProtocolError) and exc.args else None
    return inner if isinstance(inner, BaseException) else exc


def _failure(exc: BaseException, request: Cut) -> SourceFailure:
    if request.done:
        return SourceFailure("request cut")
    if isinstance(exc, urllib3.exceptions.NewConnectionError | urllib3.exceptions.ConnectTimeoutError):
        return SourceFailure(f"cannot connect: {type(exc).__name__} {exc}".strip())
    return SourceFailure(f"{type(exc).__name__} {exc}".strip())


def _check_head(response: urllib3.BaseHTTPResponse, first: int, length: int) -> None:
    if response.status == 206:
        expected = f"bytes {first}-{first + length - 1}/"
        content_range = response.headers.get("Content-Range", "")
        if not content_range.startswith(expected):
            raise SourceFailure(f"wrong Content-Range {content_range!r}")
    elif not (
        response.status == 200 and first == 0 and response.headers.get("Content-Length") == str(length)
    ):
        raise SourceFailure(f"HTTP {response.status}", unavailable=response.status in (404, 416, 503))


def _receive(response: urllib3.BaseHTTPResponse, sink: RangeSink) -> None:
    position = sink.first if sink.position is None else sink.position
    batch: list[bytes] = []
    batched = 0
    while chunk := response.read1(READ_SIZE):
        if sink.cancelled:
            raise SourceFailure("request cut" if not sink.stop.is_set() else "download cancelled")
        if time.monotonic() > sink.deadline:
            raise SourceFailure("slower than the minimum throughput")
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
