"""Retrying calls to other machines of the swarm (coordinator, relays, object storage), built on tenacity.

Waits grow exponentially and are drawn with full jitter, uniform in [0, min(max, initial × 2^(n−1))] before
attempt n + 1, so nodes that lost the coordinator at the same moment do not come back in lockstep. A retry stops
after `attempts` calls or `deadline_seconds`, whichever comes first, and at once when the caller's stop event is
set (a node shutting down does not sleep out its back-off). The last error is re-raised as itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 8  # calls in all, the first included
    deadline_seconds: float = 120.0  # no new attempt once this long has passed since the first
    initial_seconds: float = 0.25  # cap of the first wait
    max_seconds: float = 8.0  # cap of every wait

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.deadline_seconds <= 0 or self.initial_seconds <= 0 or self.max_seconds < self.initial_seconds:
            raise ValueError("need deadline_seconds > 0 and 0 < initial_seconds <= max_seconds")


class _Stopped(Exception):
    """The stop event was set during a wait."""


def call_with_retries(
    fn: Callable[[], T],
    *,
    retry_on: RetryOn,
    what: str,
    policy: RetryPolicy | None = None,
    stop: threading.Event | None = None,
) -> T:
    """`fn()`, called again after a jittered wait while it raises what `retry_on` accepts (types or predicate).

    Anything else propagates at once. When attempts, deadline or the stop event end the retries, the last
    error is raised unchanged, so callers handle one exception type whether or not a retry happened.
    """
    policy = policy or RetryPolicy()
    stop = stop or threading.Event()
    accept = retry_on if _is_predicate(retry_on) else (lambda exc: isinstance(exc, retry_on))  # type: ignore[arg-type]
    last: list[BaseException] = []

    def sleep(seconds: float) -> None:
        if stop.wait(seconds):
            raise _Stopped

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        last[:] = [error] if error is not None else []
        log.warning(
            "%s failed (%s: %s); attempt %d of %d in %.2f s",
            what,
            type(error).__name__,
            error,
            state.attempt_number + 1,
            policy.attempts,
            state.upcoming_sleep,
        )

    retrying = Retrying(
        retry=retry_if_exception(accept),
        stop=stop_after_attempt(policy.attempts) | stop_after_delay(policy.deadline_seconds),
        wait=wait_random_exponential(multiplier=policy.initial_seconds, max=policy.max_seconds),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(fn)
    except _Stopped:
        raise last[0] from None


def _is_predicate(retry_on: RetryOn) -> bool:
    return not isinstance(retry_on, tuple) and not (
        isinstance(retry_on, type) and issubclass(retry_on, BaseException)
    )
