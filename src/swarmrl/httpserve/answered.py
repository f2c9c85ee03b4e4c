"""ASGI middleware that reports every HTTP request once it is answered: its status and its seconds from arrival
to the last byte (a streamed response included), for a server's metrics and request log.

A plain ASGI wrapper rather than `@app.middleware("http")`: Starlette's BaseHTTPMiddleware runs each request
through an extra task and stream, a measurable share of a heartbeat's cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# (the request's ASGI scope, its status — 500 when no response started —, seconds) -> None
Report = Callable[[dict[str, Any], int, float], None]


def route_template(scope: dict[str, Any]) -> str:
    """The route that answered (set by the router on the scope): its template, never the raw path."""
    route = scope.get("route")
    return route.path if route is not None else "unmatched"


class Answered:
    def __init__(self, app: Any, report: Report) -> None:
        self.app = app
        self.report = report

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            self.report(scope, status, time.perf_counter() - started)
