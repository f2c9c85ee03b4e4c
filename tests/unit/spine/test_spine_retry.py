"""The one retry helper: full-jitter exponential waits within their caps, bounded by attempts, deadline and a
stop event, re-raising the last error itself; checked against real httpx connection failures too."""

import socket
import threading
import time

import httpx
import pytest
from polling import RecordedWaits

from swarmrl.retry import RetryPolicy, call_with_retries


class Flaky:
    def __init__(self, failures: int, error: type[Exception] = ConnectionError) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return "ok"


def test_transient_failures_are_retried_with_capped_jittered_waits():
    policy = RetryPolicy(attempts=8, initial_seconds=0.5, max_seconds=3.0)
    caps = [min(3.0, 0.5 * 2**n) for n in range(6)]  # 0.5, 1, 2, 3, 3, 3
    seen: list[list[float]] = []
    for _ in range(40):
        stop, flaky = RecordedWaits(), Flaky(failures=6)
        assert call_with_retries(flaky, retry_on=ConnectionError, what="t", policy=policy, stop=stop) == "ok"
        assert flaky.calls == 7
        assert all(0 <= wait <= cap for wait, cap in zip(stop.waits, caps, strict=True))
        seen.append(stop.waits)
    # Full jitter: waits spread over [0, cap], not bunched at the cap (mean ≈ cap / 2).
    for n, cap in enumerate(caps):
        column = [waits[n] for waits in seen]
        assert len(set(column)) == len(column)
        assert 0.25 * cap < sum(column) / len(column) < 0.75 * cap


def test_other_errors_propagate_at_once():
    flaky = Flaky(failures=3, error=ValueError)
    with pytest.raises(ValueError, match="failure 1"):
        call_with_retries(flaky, retry_on=ConnectionError, what="t", stop=RecordedWaits())
    assert flaky.calls == 1


def test_exhausted_attempts_raise_the_last_error_itself():
    flaky, stop = Flaky(failures=10), RecordedWaits()
    with pytest.raises(ConnectionError, match="failure 3"):
        call_with_retries(
            flaky, retry_on=ConnectionError, what="t", policy=RetryPolicy(attempts=3), stop=stop
        )
    assert flaky.calls == 3 and len(stop.waits) == 2


def test_a_predicate_chooses_what_is_transient():
    def transient(exc: BaseException) -> bool:
        return isinstance(exc, OSError) and "failure 1" in str(exc)

    flaky = Flaky(failures=5, error=OSError)
    with pytest.raises(OSError, match="failure 2"):
        call_with_retries(flaky, retry_on=transient, what="t", stop=RecordedWaits())
    assert flaky.calls == 2


def test_the_deadline_ends_retries():
    calls = []

    def slow_failure() -> None:
        calls.append(1)
        time.sleep(0.02)
        raise ConnectionError("down")

    policy = RetryPolicy(attempts=1000, deadline_seconds=0.1, initial_seconds=0.01, max_seconds=0.01)
    with pytest.raises(ConnectionError):
        call_with_retries(slow_failure, retry_on=ConnectionError, what="t", policy=policy)
    assert (
        len(calls) <= 0.1 / 0.02 + 1
    )  # each call takes 0.02 s at least: the deadline, not the 1000 attempts


def test_a_stop_event_cuts_a_long_wait_short():
    stop, flaky = threading.Event(), Flaky(failures=100)
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    policy = RetryPolicy(attempts=100, initial_seconds=30.0, max_seconds=30.0)
    with pytest.raises(ConnectionError, match="failure"):
        call_with_retries(flaky, retry_on=ConnectionError, what="t", policy=policy, stop=stop)
    assert time.monotonic() - started < 30.0 / 2  # cut short: not the 30 s wait
    assert flaky.calls <= 3


def test_real_connection_refusals_from_httpx():
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    calls = []

    def get() -> httpx.Response:
        calls.append(1)
        return httpx.get(f"http://127.0.0.1:{port}/", timeout=2.0)

    policy = RetryPolicy(attempts=3, initial_seconds=0.01, max_seconds=0.02)
    with pytest.raises(httpx.ConnectError):
        call_with_retries(get, retry_on=httpx.TransportError, what="GET", policy=policy)
    assert len(calls) == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attempts": 0},
        {"deadline_seconds": 0},
        {"initial_seconds": 0},
        {"initial_seconds": 2, "max_seconds": 1},
    ],
)
def test_bad_policies_are_refused(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_each_retry_is_logged(caplog):
    with caplog.at_level("WARNING", logger="swarmrl.retry"):
        call_with_retries(
            Flaky(failures=2), retry_on=ConnectionError, what="coordinator run_state", stop=RecordedWaits()
        )
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith(
        "coordinator run_state failed (ConnectionError: failure 1); attempt 2 of 8 in "
    )
