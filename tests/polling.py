"""Waiting in tests: for a condition (bounded, and the failure names what never happened), or not at all
(a stop event that records the back-off waits a retry would have slept)."""

import threading
import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class RecordedWaits(threading.Event):
    """A stop event that never stops and records each wait instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return False
