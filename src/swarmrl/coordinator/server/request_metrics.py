"""Count every answer of the coordinator by status and time it by route template (Prometheus)."""

from __future__ import annotations

from typing import Any

from swarmrl.coordinator.server.state import Metrics
from swarmrl.httpserve.answered import Answered, route_template


class RequestMetrics(Answered):
    def __init__(self, app: Any, metrics: Metrics) -> None:
        def report(scope: dict[str, Any], status: int, seconds: float) -> None:
            metrics.requests.labels(status=str(status)).inc()
            metrics.latency.labels(method=scope["method"], route=route_template(scope)).observe(seconds)

        super().__init__(app, report)
