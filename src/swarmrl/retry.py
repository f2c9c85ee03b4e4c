"""Retrying calls to other machines of the swarm (coordinator, relays, object storage), built on tenacity.

Waits grow exponentially and are drawn with full jitter, uniform in [0, min(max, initial × 2^(n−1))] before
attempt n + 1, so nodes that lost the coordinator at the same moment do not come back in lockstep; a server that
says when to come back (HTTP Retry-After, given through `wait_hint`) is not asked again sooner. A retry stops
after `attempts` calls or `deadline_seconds`, whichever comes first, and at once when the caller's stop event is
set (a node shutting down does not sleep out its back-off). The last error is re-raised as itself.

What is said about it: a `Notices` shared by a client's calls warns once per kind of failure ("429
rate_limited", "0 unreachable") and then stays quiet (debug) for five minutes, so a node held back for a long
time says so once, not on every attempt.
"""

from __future__ import annotations

import logging
import math
import threading
import time
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
# Seconds the failed call's answer asked the caller to wait (HTTP Retry-After), or None.
WaitHint = Callable[[BaseException], float | None]


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


NO_RETRY = RetryPolicy(attempts=1)


class Notices:
    """Says each kind of failure once (warning), then again only after `repeat_after_s`; debug meanwhile."""

    def __init__(
        self,
        logger: logging.Logger = log,
        repeat_after_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger, self.repeat_after_s, self.clock = logger, repeat_after_s, clock
        self._said: dict[str, float] = {}
        self._lock = threading.Lock()

    def failure(self, kind: str, message: str) -> None:
        now = self.clock()
        with self._lock:
            due = now - self._said.get(kind, -math.inf) >= self.repeat_after_s
            if due:
                self._said[kind] = now
        if due:
            self.logger.warning("%s (said once per %.0f s)", message, self.repeat_after_s)
        else:
            self.logger.debug("%s", message)

    def success(self) -> None:
        self.logger.debug("the call went through")


class _Stopped(Exception):
    """The stop event was set during a wait."""


def call_with_retries(
    fn: Callable[[], T],
    *,
    retry_on: RetryOn,
    what: str,
    policy: RetryPolicy | None = None,
    stop: threading.Event | None = None,
    wait_hint: WaitHint | None = None,
    notices: Notices | None = None,
    kind_of: Callable[[BaseException], str] = lambda exc: type(exc).__name__,
) -> T:
    """`fn()`, called again after a jittered wait while it raises what `retry_on` accepts (types or predicate).

    Anything else propagates at once. When attempts, deadline or the stop event end the retries, the last
    error is raised unchanged, so callers handle one exception type whether or not a retry happened. A wait is
    never shorter than `wait_hint(error)` (capped by the deadline); failures are announced through `notices`
    (once per `kind_of(error)`), or each one logged when no `notices` is given.
    """
    policy = policy or RetryPolicy()
    stop = stop or threading.Event()
    accept = _acceptor(retry_on)
    jitter = wait_random_exponential(multiplier=policy.initial_seconds, max=policy.max_seconds)
    last: list[BaseException] = []

    def wait(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        hinted = (wait_hint(error) if wait_hint and error is not None else None) or 0.0
        return max(jitter(state), min(hinted, policy.deadline_seconds))

    def sleep(seconds: float) -> None:
        if stop.wait(seconds):
            raise _Stopped

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        last[:] = [error] if error is not None else []
        message = f"{what} failed ({type(error).__name__}: {error})"
        if notices is not None and error is not None:
            notices.failure(kind_of(error), f"{message}; retrying with jittered back-off")
            return
        log.warning(
            "%s; attempt %d of %d in %.2f s",
            message,
            state.attempt_number + 1,
            policy.attempts,
            state.upcoming_sleep,
        )

    retrying = Retrying(
        retry=retry_if_exception(accept),
        stop=stop_after_attempt(policy.attempts) | stop_after_delay(policy.deadline_seconds),
        wait=wait,
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        result = retrying(fn)
    except _Stopped:
        raise last[0] from None
    if notices is not None:
        notices.success()
    return result


def _acceptor(retry_on: RetryOn) -> Callable[[BaseException], bool]:
    """Whether an error is retried: `retry_on` itself when it is a predicate, else an isinstance test."""
    if isinstance(retry_on, tuple | type):  # exception classes
        kinds = retry_on
        return lambda exc: isinstance(exc, kinds)
    return retry_on
