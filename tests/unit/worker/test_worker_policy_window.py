"""Which policy a swarm worker generates a unit with: it waits for a download in flight only when the policy it
holds is the oldest the async window allows (issue 35: asia's files generated at the edge, read one step late,
were refused as stale), and how long it pauses after a refused lease."""

from __future__ import annotations

import pytest

from swarmrl.worker.node import can_finish, left_window, refusal_pause, worth_waiting


@pytest.mark.parametrize(
    ("held", "ceiling", "async_level", "fetching", "wait"),
    [
        (3, 5, 2, 4, True),  # at the edge, a fresher version for this unit is on its way
        (3, 5, 2, 5, True),
        (3, 5, 2, 6, False),  # newer than the unit's step: no use to it
        (4, 5, 2, 5, False),  # one step behind: a late file still trains
        (3, 5, 2, None, False),  # nothing in flight: generate now
        (5, 5, 0, 5, False),  # synchronous: it holds the unit's own step
    ],
)
def test_a_worker_waits_only_for_a_policy_that_keeps_its_file_usable(
    held, ceiling, async_level, fetching, wait
):
    assert worth_waiting(held, ceiling, async_level, fetching) is wait


@pytest.mark.parametrize(
    ("step", "opened", "async_level", "gone"),
    [
        (3, 5, 2, False),  # the oldest step the window still takes
        (2, 5, 2, True),  # refused at submission: not generated (a held unit that outlived a restart)
        (5, 5, 0, False),
        (4, 5, 0, True),
        (0, None, 2, False),  # the run's step not known yet
    ],
)
def test_a_unit_whose_step_left_the_window_is_not_generated(step, opened, async_level, gone):
    assert left_window(step, opened, async_level) is gone


@pytest.mark.parametrize(
    ("expires_at", "now", "unit_seconds", "starts"),
    [
        (116.0, 100.0, 4.0, True),  # a fresh lease: its deadline was sized for the unit
        (104.0, 100.0, 4.0, True),
        (103.0, 100.0, 4.0, False),  # given back after a restart with 3 s left: refused if generated
    ],
)
def test_a_unit_is_started_only_with_time_left_to_finish_it(expires_at, now, unit_seconds, starts):
    assert can_finish(expires_at, now, unit_seconds) is starts


@pytest.mark.parametrize(
    ("full_streak", "waited_s", "wait_s", "pause"),
    [
        (0, 0.0, 0.0, 0.5),  # another refusal: one poll interval
        (1, 0.0, 0.0, 0.5),
        (2, 0.0, 0.0, 1.0),  # the step stays full: the interval doubles
        (3, 0.0, 0.0, 2.0),
        (12, 0.0, 0.0, 2.0),  # up to MAX_BACKOFF intervals
        (3, 0.5, 0.0, 1.5),  # the time the refusal took counts against the pause
        (3, 0.1, 5.0, 1.9),  # refused before the wait asked for (a coordinator that holds nothing): backoff
        (3, 1.0, 1.0, 0.0),  # held for room all the wait asked for: ask again at once
        (3, 5.2, 5.0, 0.0),
    ],
)
def test_a_refused_worker_pauses_only_when_the_coordinator_did_not_wait_for_it(
    full_streak, waited_s, wait_s, pause
):
    assert refusal_pause(0.5, full_streak, waited_s, wait_s) == pytest.approx(pause)
