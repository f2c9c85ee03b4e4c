"""ASGI middleware: count every answer by status and time it by route template (Prometheus).

A plain ASGI wrapper rather than `@app.middleware("http")`: Starlette's BaseHTTPMiddleware runs each request
through an extra task and stream, a measurable share of a heartbeat's cost.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from swarmrl.coordinator.server.state import Metrics


class RequestMetrics:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            self.metrics.requests.labels(status=str(status)).inc()
            route = scope.get("route")  # set by the router on this scope: the template, never the raw path
            path = route.path if route is not None else "unmatched"
            self.metrics.latency.labels(method=scope["method"], route=path).observe(
                time.perf_counter() - started
            )
