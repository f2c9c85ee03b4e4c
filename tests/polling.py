"""Waiting for a condition in tests: bounded, and the failure names what never happened."""

import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
