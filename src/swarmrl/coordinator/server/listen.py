"""Serve the app with uvicorn on a socket bound here, so port 0 works and the chosen port can be reported.

Every connection passes the slow-client guard (`swarmrl.httpserve`): request head and body deadlines, caps on
open connections per address and in all, figures on /metrics.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from swarmrl.configs.connections import ConnectionLimits
from swarmrl.httpserve import ConnectionGuard, guarded_uvicorn_config, raise_open_file_limit
from swarmrl.httpserve.guard import GuardCollector

log = logging.getLogger(__name__)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle off (TCP_NODELAY) only on sockets whose proto says TCP, and with
    # Nagle on, a response written as headers then body waits for the delayed ACK (~40 ms) of the first write.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def build_server(
    app: FastAPI, limits: ConnectionLimits | None = None, log_level: str = "warning"
) -> tuple[uvicorn.Server, ConnectionGuard]:
    """The uvicorn server of the coordinator app and its connection guard (limits: the app's config)."""
    state = app.state.coordinator
    config, guard = guarded_uvicorn_config(
        app,
        limits or state.config.connections,
        streams=state.streams,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    state.metrics.registry.register(GuardCollector(guard, "swarmrl_coordinator"))
    return uvicorn.Server(config), guard


def serve(
    app: FastAPI, host: str, port: int, port_file: Path | None = None, log_level: str = "warning"
) -> None:
    """Blocks until interrupted. `port_file` receives the bound port once the socket is listening."""
    raise_open_file_limit()
    server, guard = build_server(app, log_level=log_level)
    sock = bind(host, port)
    sock.listen(guard.backlog)
    bound_port = sock.getsockname()[1]
    if port_file is not None:
        tmp = port_file.with_name(f".{port_file.name}.tmp")
        tmp.write_text(str(bound_port))
        tmp.replace(port_file)
    log.info("coordinator listening on http://%s:%d", host, bound_port)
    server.run(sockets=[sock])
