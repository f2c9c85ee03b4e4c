"""What every request handler shares: config, database sessions, storage, clock, limits and metrics."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.server.held import HeldLeases
from swarmrl.coordinator.server.ratelimit import TokenBuckets
from swarmrl.coordinator.store.storage import Storage
from swarmrl.httpserve.notify import Notifier
from swarmrl.httpserve.streams import StreamBudget

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.requests = Counter(
            "swarmrl_coordinator_requests", "HTTP requests answered", ["status"], registry=self.registry
        )
        self.refusals = Counter(
            "swarmrl_coordinator_refusals",
            "requests refused, by error kind",
            ["kind"],
            registry=self.registry,
        )
        self.submissions = Counter(
            "swarmrl_coordinator_submissions", "work submissions received", registry=self.registry
        )
        self.verdicts = Counter(
            "swarmrl_coordinator_verdicts", "verdicts recorded", ["outcome"], registry=self.registry
        )
        self.latency = Histogram(
            "swarmrl_coordinator_request_seconds",
            "time from the request reaching the app to its response, by route",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.units_leased = Counter(
            "swarmrl_coordinator_units_leased", "work units leased to nodes", registry=self.registry
        )
        self.orphans_purged = Counter(
            "swarmrl_coordinator_orphan_uploads_purged",
            "uploaded files never submitted, deleted when their slot expired",
            registry=self.registry,
        )
        self.orphan_bytes_purged = Counter(
            "swarmrl_coordinator_orphan_bytes_purged", "bytes of those files", registry=self.registry
        )
        self.released_purged = Counter(
            "swarmrl_coordinator_released_uploads_purged",
            "submitted files rejected or voided (their node hard-invalidated or banned), deleted",
            registry=self.registry,
        )
        self.released_bytes_purged = Counter(
            "swarmrl_coordinator_released_bytes_purged", "bytes of those files", registry=self.registry
        )


@dataclass
class ServiceState:
    config: CoordinatorConfig
    sessions: sessionmaker[Session]
    engine: Engine  # the sessions' own, for hot paths that run Core statements on a connection, no session
    storage: Storage
    staging_dir: Path
    admin_token: str | None
    clock: Callable[[], float]
    limiter: TokenBuckets
    # Dashboard event streams open now: a small budget of their own, per address and in all, that the server's
    # connection guard also keeps them to (so node and trainer traffic always finds a connection slot).
    streams: StreamBudget
    metrics: Metrics = field(default_factory=Metrics)
    nonce_purged_at: float = 0.0
    orphans_purged_at: float = 0.0
    purge_lock: threading.Lock = field(default_factory=threading.Lock)
    # Serialises the read-count-then-grant of work leases inside this process (the unique index on active
    # units guards against a second coordinator process; its IntegrityError is retried).
    lease_lock: threading.Lock = field(default_factory=threading.Lock)
    units_swept_at: dict[str, float] = field(default_factory=dict)  # run id → last sweep of lapsed units
    # Wakes lease requests waiting for room: a step opened, its demand changed, a run drains.
    work_changed: Notifier = field(default_factory=Notifier)
    held_leases: HeldLeases = field(default_factory=HeldLeases)  # who waits for room, and how fast it works
    files_pending: Notifier = field(default_factory=Notifier)  # wakes validation leases: a file was submitted
    files_decided: Notifier = field(default_factory=Notifier)  # wakes the trainer's feed: a file was decided
    # run id → step → (read at, (open step, demand) then, StepRoom): the rooms a refusal may stand on
    step_rooms: dict[str, dict[int, tuple[float, Any, Any]]] = field(default_factory=dict)
    # run id → (monotonic time, summary): every open dashboard stream of a run shares one read per second
    streamed_summaries: dict[str, tuple[float, Any]] = field(default_factory=dict)
