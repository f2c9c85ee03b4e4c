"""Prometheus metrics of the trainer, workers and validators, served on their own port when configured.

The coordinator and SHARDCAST servers answer `/metrics` on their HTTP port; these roles have no server, so
`serve_metrics` starts prometheus_client's own (a thread) on `[metrics] prometheus_port` and writes its URL to
`metrics.url` in the role's directory. Values are read when scraped from what the role already keeps (its work
log, its verdict tally, the trainer's last metrics record): nothing is counted twice. Names follow the
coordinator's: `swarmrl_<role>_<what>`, counters ending in `_total`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from swarmrl.configs.metrics import MetricsSection
from swarmrl.rundir import write_text_atomic

log = logging.getLogger(__name__)

METRICS_URL_FILE = "metrics.url"
_NAME = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(role: str, key: str) -> str:
    """`swarmrl_<role>_<key>` with every character Prometheus does not allow in a name turned into `_`."""
    return f"swarmrl_{role}_" + _NAME.sub("_", key).strip("_").lower()


@dataclass
class LabelledCounter:
    """A counter family read at scrape time: labels tuple → total."""

    name: str
    help: str
    labels: tuple[str, ...]
    read: Callable[[], Mapping[tuple[str, ...], float]]


@dataclass(eq=False)  # a registry keys its collectors by identity
class RoleCollector:
    """Collects one role's counters and gauges from callables (read when Prometheus scrapes)."""

    role: str
    counters: list[LabelledCounter] = field(default_factory=list)
    gauges: Callable[[], Mapping[str, float | None]] = dict

    def collect(self) -> Iterable[Metric]:
        for counter in self.counters:
            family = CounterMetricFamily(
                metric_name(self.role, counter.name), counter.help, labels=counter.labels
            )
            for labels, value in sorted(counter.read().items()):
                family.add_metric(list(labels), float(value))
            yield family
        for key, reading in sorted(self.gauges().items()):
            if isinstance(reading, int | float) and not isinstance(reading, bool):
                yield GaugeMetricFamily(
                    metric_name(self.role, key), f"{self.role} {key}", value=float(reading)
                )


@dataclass
class MetricsServer:
    url: str
    close: Callable[[], None]


def serve_metrics(section: MetricsSection, collector: RoleCollector, directory: Path) -> MetricsServer | None:
    """Serve `collector` on the configured port (None when no port is configured); the URL goes to
    `<directory>/metrics.url`."""
    if section.prometheus_port is None:
        return None
    registry = CollectorRegistry()
    registry.register(collector)
    server, thread = start_http_server(
        section.prometheus_port, addr=section.prometheus_host, registry=registry
    )
    host = f"[{section.prometheus_host}]" if ":" in section.prometheus_host else section.prometheus_host
    url = f"http://{host}:{server.server_port}/metrics"
    directory.mkdir(parents=True, exist_ok=True)
    write_text_atomic(directory / METRICS_URL_FILE, url)
    log.info("%s metrics on %s", collector.role, url)

    def close() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return MetricsServer(url, close)
