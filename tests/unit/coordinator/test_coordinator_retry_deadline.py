"""A node that loses its coordinator keeps trying for `[swarm] coordinator_retry_s` (120 s by default, as
docs/cross-machine.md says), not until a count of attempts runs out (which took about 26 s)."""

from types import SimpleNamespace

import pytest
import tenacity

from swarmrl.configs.swarm import SwarmSection
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.transport import node_retry, retryable
from swarmrl.retry import call_with_retries


class Clock:
    """tenacity's clock, and a stop event whose waits move it instead of sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.now += seconds
        return False


@pytest.mark.parametrize("deadline", [SwarmSection().coordinator_retry_s, 300.0])
def test_a_node_gives_up_on_a_down_coordinator_at_the_deadline(monkeypatch, deadline):
    clock = Clock()
    monkeypatch.setattr(tenacity, "time", SimpleNamespace(monotonic=clock.monotonic))
    attempts: list[float] = []

    def down():
        attempts.append(clock.now)
        raise CoordinatorError(0, "unreachable", "connection refused")

    with pytest.raises(CoordinatorError):
        call_with_retries(down, retry_on=retryable, what="lease", policy=node_retry(deadline), stop=clock)
    assert deadline <= attempts[-1] <= deadline + 8.0  # the last wait is at most max_seconds
    assert SwarmSection().coordinator_retry_s == 120.0  # what the docs state
