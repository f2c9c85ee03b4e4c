"""Hedged races: the first success wins, slow attempts get company after the delay, failures move on at once."""

from __future__ import annotations

import asyncio
import time

import pytest

from swarmrl.shardcast.hedge import AllAttemptsFailed, first_success


def attempt(log: list[str], name: str, delay: float, fail: bool = False):
    async def run() -> str:
        log.append(f"start {name}")
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            log.append(f"cancel {name}")
            raise
        if fail:
            raise ValueError(name)
        return name

    return run


def race(attempts, hedge_after_s: float):
    async def run():
        started = time.monotonic()
        result = await first_success(attempts, hedge_after_s)
        return result, time.monotonic() - started

    return asyncio.run(run())


def test_a_fast_first_attempt_is_asked_alone():
    log: list[str] = []
    result, _ = race([attempt(log, "a", 0.01), attempt(log, "b", 0.01)], hedge_after_s=1.0)
    assert result == "a" and log == ["start a"]


def test_a_slow_attempt_is_hedged_and_cancelled_when_the_hedge_wins():
    log: list[str] = []
    result, seconds = race([attempt(log, "slow", 30), attempt(log, "fast", 0.01)], hedge_after_s=0.2)
    assert result == "fast"
    assert log == ["start slow", "start fast", "cancel slow"]  # the hedge won: the slow one's 30 s not waited
    assert seconds >= 0.2  # the hedge waited its delay


def test_a_failure_moves_on_without_waiting_for_the_delay():
    log: list[str] = []
    result, seconds = race(
        [attempt(log, "bad", 0.0, fail=True), attempt(log, "good", 0.01)], hedge_after_s=10
    )
    assert result == "good" and seconds < 10 / 4  # not the hedge delay


def test_all_failures_are_reported_in_order():
    log: list[str] = []
    with pytest.raises(AllAttemptsFailed) as failed:
        race([attempt(log, "x", 0.0, fail=True), attempt(log, "y", 0.05, fail=True)], hedge_after_s=10)
    assert [str(f) for f in failed.value.failures] == ["x", "y"]
