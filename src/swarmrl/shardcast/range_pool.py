"""Kept-alive connections for shard bytes: urllib3's connection pools, on connections another thread can cut.

Shard bytes move on fetch threads (`range_get.py`), where hashing and writing release the GIL. urllib3 reads a
body through http.client, whose `read1` hands over what the socket holds, up to a megabyte, without a copy
under the GIL. (httpx's transport, httpcore, parses bodies with h11, which copies every byte four times under
the GIL: on 8 fetch threads that doubled the receive path's CPU per byte, so shard bytes do not go through it.
Every other request of a node, small answers all, goes through httpx: `connections.py`.)

A request is cut from another thread by shutting its socket down (a read blocked on a silent source then
returns at once). urllib3 picks the connection inside the pool, so the connection learns which request it
carries when that request goes out: the sending thread names its `Cut` (a thread-local, set only around
`RangePool.open`) and the connection attaches itself to it as it sends. A connection obeys only the cut of
the request it carries now: urllib3 gives it back to the pool as the last byte of a body is read, so a late
cut of that request must not end the next one.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

READ_SIZE = 1024 * 1024
KEEP_ALIVE = 32  # idle connections kept per source across downloads (a client's and a relay's concurrency)
# Everything raised for a network or protocol failure (urllib3 wraps most of them in its HTTPError).
TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)

_sending = threading.local()  # .cut: the Cut of the request this thread is sending, if any


class RequestCut(Exception):
    """The request was cut before it went out."""


class Cut:
    """Ends one request from any thread: the socket carrying it is shut down, so a blocked read returns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connection: _Cuttable | None = None
        self.done = False

    def __call__(self) -> None:
        with self._lock:
            self.done = True
            connection = self._connection
        if connection is not None:
            connection.shutdown(self)

    def attach(self, connection: _Cuttable) -> None:
        """The request now travels on `connection`; RequestCut if it was cut already."""
        connection.carry(self)
        with self._lock:
            self._connection = connection
            done = self.done
        if done:
            raise RequestCut("request cut")

    def release(self) -> _Cuttable | None:
        """The exchange is over (its connection may carry another request now): a later cut touches nothing.
        Returns the connection, for a cut that takes the rest of the exchange over (`hand_over`)."""
        with self._lock:
            connection, self._connection = self._connection, None
        return connection

    def hand_over(self, to: Cut) -> None:
        """`to` cuts this request from now on (a parked request's answer taken over by a download)."""
        connection = self.release()
        if connection is not None:
            to.attach(connection)


class _Cuttable(HTTPConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._carrying: Cut | None = None
        self._carrying_lock = threading.Lock()

    def carry(self, cut: Cut) -> None:
        with self._carrying_lock:
            self._carrying = cut

    def send(self, data: Any) -> None:
        cut: Cut | None = getattr(_sending, "cut", None)
        if cut is not None:
            if self.sock is None:
                self.connect()  # as http.client's send would: the cut needs the socket
            cut.attach(self)
        super().send(data)

    def shutdown(self, cut: Cut) -> None:
        """Shut the socket down if `cut` is the request this connection carries now."""
        with self._carrying_lock:
            sock = self.sock if self._carrying is cut else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class _CuttableTLS(_Cuttable, HTTPSConnection):
    pass


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Cuttable


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _CuttableTLS


class RangePool:
    """urllib3's thread-safe pools of kept-alive connections, one per source, for the fetch threads of a client
    or relay and kept from one version's download to the next (a new connection costs a round trip more, a
    long one across regions). urllib3 checks that the server has not closed an idle connection before reusing
    it; at most `keep_alive` idle ones are kept per source (more may be open at once)."""

    def __init__(self, connect_timeout_s: float, read_timeout_s: float, keep_alive: int = KEEP_ALIVE) -> None:
        self.timeout = urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s)
        self._pools = urllib3.PoolManager(num_pools=64, maxsize=keep_alive, block=False)
        self._pools.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}

    def open(self, url: str, headers: dict[str, str], cut: Cut) -> urllib3.BaseHTTPResponse:
        """Send a GET and return the response once its head arrived; read its body, then `done(response)`."""
        _sending.cut = cut
        try:
            return self._pools.urlopen(
                "GET",
                url,
                headers=headers,
                preload_content=False,
                decode_content=False,
                redirect=False,
                retries=False,
                timeout=self.timeout,
            )
        finally:
            _sending.cut = None

    @staticmethod
    def done(response: urllib3.BaseHTTPResponse, complete: bool) -> None:
        """Give a response's connection back: kept alive when its body was read `complete`ly, closed (and
        opened afresh when next used) otherwise."""
        if not complete:
            response.close()
        response.release_conn()

    def close(self) -> None:
        self._pools.clear()
