"""What the server counts, for Prometheus (`GET /metrics`), and the one log line it writes per request.

`request_reporter` is told of every answered request (`httpserve.Answered`, which times a streamed response to
its last byte): each gets a line `METHOD PATH STATUS SECONDS` plus, for a generation, its model, choices,
whether it streamed, prompt and completion tokens; the same request feeds the counters and the latency
histogram (labelled by route template, so ids in paths add no series). The queue's depth and the
rows decoding are read from the engine's thread when Prometheus scrapes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from swarmrl.httpserve.answered import Report, route_template

log = logging.getLogger("swarmrl.serve.requests")
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)


class ServeMetrics:
    """The server's metrics in a registry of their own (each app, each test, its own counts)."""

    def __init__(self, waiting: Callable[[], int], running: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "swarmrl_serve_requests",
            "HTTP requests answered, by route and status",
            ["path", "status"],
            registry=self.registry,
        )
        self.prompt_tokens = Counter(
            "swarmrl_serve_prompt_tokens", "Prompt tokens of answered generations", registry=self.registry
        )
        self.completion_tokens = Counter(
            "swarmrl_serve_completion_tokens",
            "Tokens generated for answered requests",
            registry=self.registry,
        )
        self.latency = Histogram(
            "swarmrl_serve_request_seconds",
            "Time from a request's arrival to the last byte of its answer, by route",
            ["path"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.first_token = Histogram(
            "swarmrl_serve_time_to_first_token_seconds",
            "Time from a generation request's arrival to its first token",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        Gauge(
            "swarmrl_serve_requests_waiting",
            "Completions accepted and waiting for a row in the engine's batch (the queue)",
            registry=self.registry,
        ).set_function(waiting)
        Gauge(
            "swarmrl_serve_requests_running", "Completions being decoded", registry=self.registry
        ).set_function(running)


def request_usage(scope: MutableMapping[str, Any]) -> dict[str, Any]:
    """Where a route leaves what its request generated, for the log line and the counters."""
    return scope.setdefault("state", {}).setdefault("usage", {})


def request_reporter(metrics: ServeMetrics) -> Report:
    """What `Answered` calls for each request: the counters, the latency, the log line."""

    def report(scope: dict[str, Any], status: int, seconds: float) -> None:
        path = route_template(scope)
        metrics.requests.labels(path, str(status)).inc()
        metrics.latency.labels(path).observe(seconds)
        usage = request_usage(scope)
        if "prompt_tokens" in usage:
            metrics.prompt_tokens.inc(usage["prompt_tokens"])
            metrics.completion_tokens.inc(usage["completion_tokens"])
        if path != "/metrics":
            detail = "".join(f" {key}={value}" for key, value in usage.items())
            log.info("%s %s %d %.3fs%s", scope["method"], scope["path"], status, seconds, detail)

    return report
