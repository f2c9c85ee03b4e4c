"""The long-poll rounds of `Notifier.looks`: how many looks, when the last one comes, what wakes a round."""

from __future__ import annotations

import asyncio
import threading
import time

from swarmrl.httpserve import Notifier


async def _rounds(notifier: Notifier, seconds: float, recheck: float, done_after: int = 10**6) -> list[float]:
    """The time of each look from the start, until the last look or the `done_after`-th one answers."""
    start, looked = time.monotonic(), []
    async for last in notifier.looks(seconds, recheck=recheck):
        looked.append(time.monotonic() - start)
        if last or len(looked) == done_after:
            break
    return looked


def test_no_wait_is_one_look_and_the_last():
    async def run() -> list[bool]:
        return [last async for last in Notifier().looks(0.0)]

    assert asyncio.run(run()) == [True]


def test_without_notices_a_poll_looks_at_each_recheck_and_once_more_at_its_end():
    looked = asyncio.run(_rounds(Notifier(), seconds=0.5, recheck=0.2))
    # Looks at 0, 0.2, 0.4, then at the deadline (0.5) a last one: four, the last not before the deadline.
    assert len(looked) == 4
    assert looked[-1] >= 0.5
    assert looked[1] >= 0.2 and looked[2] >= 0.4


def test_a_notice_from_another_thread_wakes_the_round_long_before_its_recheck():
    notifier = Notifier()

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        notifier.bind(loop)
        threading.Timer(0.1, notifier.notify).start()
        return await _rounds(notifier, seconds=5.0, recheck=5.0, done_after=2)

    looked = asyncio.run(run())
    assert len(looked) == 2
    assert 0.05 <= looked[1] < 5.0 / 2  # woken by the notice (0.1 s after the timer started), not after 5 s


def test_a_round_never_sleeps_past_the_deadline():
    looked = asyncio.run(_rounds(Notifier(), seconds=0.3, recheck=60.0))
    assert len(looked) == 2
    assert 0.3 <= looked[1] < 60.0 / 4  # at the deadline, not at the recheck


def test_waiting_counts_the_waits_asleep_until_a_notice_wakes_them():
    notifier = Notifier()

    async def run() -> tuple[int, int]:
        notifier.bind(asyncio.get_running_loop())
        waits = [asyncio.create_task(notifier.wait(60.0)) for _ in range(3)]
        await asyncio.sleep(0)  # one turn of the loop: each task starts and sleeps on the notifier
        asleep = notifier.waiting
        notifier.notify()
        await asyncio.wait_for(asyncio.gather(*waits), 10.0)
        return asleep, notifier.waiting

    assert asyncio.run(run()) == (3, 0)
