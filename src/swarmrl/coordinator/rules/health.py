"""Node liveness from the time since its last heartbeat: healthy → unhealthy → dead."""

from __future__ import annotations

import math
from enum import StrEnum

from swarmrl.configs.coordinator import CoordinatorConfig


class Health(StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    DEAD = "dead"


def missed_beats(last_seen: float, now: float, interval_s: float, grace_s: float) -> int:
    """Heartbeats that were due (plus grace) since `last_seen` and did not arrive."""
    overdue = now - last_seen - grace_s
    if overdue < 0:
        return 0
    return math.floor(overdue / interval_s)


def health_of(last_seen: float, now: float, config: CoordinatorConfig) -> Health:
    missed = missed_beats(last_seen, now, config.heartbeat_interval_s, config.heartbeat_grace_s)
    if missed >= config.dead_after_missed:
        return Health.DEAD
    if missed >= config.unhealthy_after_missed:
        return Health.UNHEALTHY
    return Health.HEALTHY


def dead_cutoff(now: float, config: CoordinatorConfig) -> float:
    """The last heartbeat time at or before which a node is DEAD by `health_of`, for queries over many rows."""
    return now - config.heartbeat_grace_s - config.dead_after_missed * config.heartbeat_interval_s


def unhealthy_cutoff(now: float, config: CoordinatorConfig) -> float:
    """The last heartbeat time at or before which a node is at least UNHEALTHY by `health_of`."""
    return now - config.heartbeat_grace_s - config.unhealthy_after_missed * config.heartbeat_interval_s
