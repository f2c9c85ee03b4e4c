"""Serve the app with uvicorn on a socket bound here, so port 0 works and the chosen port can be reported."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import uvicorn
from fastapi import FastAPI

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


def serve(
    app: FastAPI, host: str, port: int, port_file: Path | None = None, log_level: str = "warning"
) -> None:
    """Blocks until interrupted. `port_file` receives the bound port once the socket is listening."""
    sock = bind(host, port)
    sock.listen(2048)
    bound_port = sock.getsockname()[1]
    if port_file is not None:
        tmp = port_file.with_name(f".{port_file.name}.tmp")
        tmp.write_text(str(bound_port))
        tmp.replace(port_file)
    log.info("coordinator listening on http://%s:%d", host, bound_port)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level=log_level, access_log=False, timeout_graceful_shutdown=5)
    )
    server.run(sockets=[sock])
