"""Serve the app with uvicorn on a socket bound here, so port 0 works and the chosen port can be reported.

Every connection passes the slow-client guard (`swarmrl.httpserve`): request head and body deadlines, caps on
open connections per address and in all, figures on /metrics.
"""

from __future__ import annotations

import logging
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from swarmrl.configs.connections import ConnectionLimits
from swarmrl.httpserve import ConnectionGuard, guarded_uvicorn_config, raise_open_file_limit
from swarmrl.httpserve.guard import GuardCollector
from swarmrl.httpserve.uvicorn_config import bind

log = logging.getLogger(__name__)


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
    sock = bind(host, port, "coordinator")
    sock.listen(guard.backlog)
    bound_port = sock.getsockname()[1]
    if port_file is not None:
        tmp = port_file.with_name(f".{port_file.name}.tmp")
        tmp.write_text(str(bound_port))
        tmp.replace(port_file)
    log.info("coordinator listening on http://%s:%d", host, bound_port)
    server.run(sockets=[sock])
