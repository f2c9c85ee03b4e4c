"""Kept-alive connections for shard bytes: httpcore's connection pool (the transport under httpx) on sockets
that read a megabyte at a time and that another thread can cut.

Shard bytes move on fetch threads (`range_get.py`), where hashing and writing release the GIL. httpcore reads
64 KiB per socket read: at a gigabyte a second that is 16,000 trips a second through h11 and Python, which
nearly doubled the receive path's CPU per byte against a megabyte per read (one thread on loopback). So the
pool's network backend (httpcore's extension point) reads READ_SIZE at a time.

A request is cut from another thread by shutting its socket down (a read blocked on a silent source then
returns at once). httpcore picks the connection inside the pool, so the stream learns which request it
carries when that request is sent: the sending thread names its `Cut` (a thread-local, set only around
`RangePool.open`) and the stream attaches itself to it on its first write.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import typing

import httpcore

READ_SIZE = 1024 * 1024
KEEP_ALIVE = 64  # idle connections kept across downloads, all sources together
# Everything httpcore raises for a network or protocol failure (its exceptions share no base class).
TRANSPORT_ERRORS = (
    httpcore.NetworkError,
    httpcore.TimeoutException,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    OSError,
)

_sending = threading.local()  # .cut: the Cut of the request this thread is sending, if any


class RequestCut(Exception):
    """The request was cut before it went out."""


class Cut:
    """Ends one request from any thread: the socket carrying it is shut down, so a blocked read returns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stream: _CuttableStream | None = None
        self.done = False

    def __call__(self) -> None:
        with self._lock:
            self.done = True
            stream = self._stream
        if stream is not None:
            stream.shutdown()

    def attach(self, stream: _CuttableStream) -> None:
        """The request now travels on `stream`; RequestCut if it was cut already."""
        with self._lock:
            self._stream = stream
            done = self.done
        if done:
            raise RequestCut("request cut")

    def release(self) -> _CuttableStream | None:
        """The exchange is over (its connection may carry another request now): a later cut touches nothing.
        Returns the stream, for a cut that takes the rest of the exchange over (`hand_over`)."""
        with self._lock:
            stream, self._stream = self._stream, None
        return stream

    def hand_over(self, to: Cut) -> None:
        """`to` cuts this request from now on (a parked request's answer taken over by a download)."""
        stream = self.release()
        if stream is not None:
            to.attach(stream)


class _CuttableStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max(max_bytes, READ_SIZE), timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        cut: Cut | None = getattr(_sending, "cut", None)
        if cut is not None:
            cut.attach(self)
        self._inner.write(buffer, timeout)

    def shutdown(self) -> None:
        sock = self._inner.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: typing.Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _CuttableStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _CuttableBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _CuttableStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _CuttableStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class RangePool:
    """httpcore's thread-safe pool of kept-alive connections, per source, for the fetch threads of a client or
    relay and kept from one version's download to the next (a new connection costs a round trip more, a long
    one across regions). httpcore checks that the server has not closed an idle connection before reusing it.
    """

    def __init__(self, connect_timeout_s: float, read_timeout_s: float, keep_alive: int = KEEP_ALIVE) -> None:
        self.timeouts = {
            "connect": connect_timeout_s,
            "read": read_timeout_s,
            "write": read_timeout_s,
            "pool": connect_timeout_s,
        }
        self._pool = httpcore.ConnectionPool(
            max_connections=None,  # the fetch threads bound how many run at once
            max_keepalive_connections=keep_alive,
            network_backend=_CuttableBackend(),
        )

    def open(self, url: httpcore.URL, headers: dict[str, str], cut: Cut) -> httpcore.Response:
        """Send a GET and return the response once its head arrived (read its body, then close it)."""
        _sending.cut = cut
        try:
            return self._pool.handle_request(
                httpcore.Request("GET", url, headers=headers, extensions={"timeout": self.timeouts})
            )
        finally:
            _sending.cut = None

    def close(self) -> None:
        self._pool.close()
