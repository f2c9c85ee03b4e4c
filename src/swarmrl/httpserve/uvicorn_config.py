"""uvicorn behind the connection guard (the coordinator's server).

uvicorn offers `limit_concurrency`, but it counts requests, not half-sent ones: 1,500 sockets that never finish
their request head were all still open after 60 s, and past the limit it answers 503 to everyone, signed
requests included. It has no request-head deadline. Its h11 parser, though, says exactly what it waits for,
which is what the guard's deadlines need.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from swarmrl.configs.connections import ConnectionLimits
from swarmrl.errors import listen_error
from swarmrl.httpserve.guard import ConnectionGuard, GuardedProtocol, Phase
from swarmrl.httpserve.streams import StreamBudget


def h11_phase(protocol: asyncio.BaseProtocol) -> Phase:
    """What uvicorn's h11 connection waits for from the client."""
    assert isinstance(protocol, H11Protocol)
    state = protocol.conn.their_state
    if state is h11.IDLE:
        return "head"
    if state is h11.SEND_BODY:
        return "body"
    return "busy"


def guarded_uvicorn_config(
    app: Any, limits: ConnectionLimits | None = None, streams: StreamBudget | None = None, **config: Any
) -> tuple[uvicorn.Config, ConnectionGuard]:
    """A uvicorn config whose every connection passes the guard (h11 protocol), and that guard. `streams`: the
    budget the app's long-lived responses take (the guard frees a closed connection's share)."""
    guard = ConnectionGuard(limits, probe=h11_phase, streams=streams)

    def protocol(
        config: uvicorn.Config,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> GuardedProtocol:
        return GuardedProtocol(lambda: H11Protocol(config, server_state, app_state, _loop), guard)

    # uvicorn calls `http` as it calls a protocol class; its annotation admits only classes and names.
    return uvicorn.Config(app, http=protocol, backlog=guard.backlog, **config), guard  # type: ignore[arg-type]


def bind(host: str, port: int, what: str = "server") -> socket.socket:
    """A TCP socket bound here, to serve with `uvicorn.Server.run(sockets=[...])`: port 0 works and the bound
    port can be read back. A port another process holds is `AddressInUse` naming `what` and host:port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle off (TCP_NODELAY) only on sockets whose proto says TCP, and with
    # Nagle on, a response written as headers then body waits for the delayed ACK (~40 ms) of the first write.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise listen_error(exc, host, port, what) from exc
    sock.set_inheritable(True)
    return sock
