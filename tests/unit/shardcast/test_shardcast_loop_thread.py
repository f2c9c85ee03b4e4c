"""One loop for every call of a synchronous caller (CheckpointFetcher's): calls share it, run side by side from
several threads, and fail the way their coroutine failed."""

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from swarmrl.shardcast.loop_thread import LoopThread


@pytest.fixture
def loop_thread():
    runner = LoopThread("test-loop")
    yield runner
    runner.close()


def test_every_call_runs_on_the_same_loop(loop_thread):
    async def which_loop():
        return asyncio.get_running_loop()

    assert loop_thread.run(which_loop()) is loop_thread.run(which_loop())


def test_calls_from_two_threads_run_side_by_side(loop_thread):
    """Each call waits for the other's event: run one after the other, neither would finish."""
    first, second = asyncio.Event(), asyncio.Event()

    async def meet(mine: asyncio.Event, theirs: asyncio.Event) -> str:
        mine.set()
        await asyncio.wait_for(theirs.wait(), timeout=10)
        return "met"

    with ThreadPoolExecutor(2) as callers:
        calls = [callers.submit(loop_thread.run, meet(*pair)) for pair in ((first, second), (second, first))]
        assert [call.result(timeout=20) for call in calls] == ["met", "met"]


def test_a_coroutine_s_error_reaches_its_caller(loop_thread):
    async def fail():
        raise ValueError("from the loop")

    with pytest.raises(ValueError, match="from the loop"):
        loop_thread.run(fail())


def test_a_call_from_the_loop_itself_is_refused_not_a_deadlock(loop_thread):
    async def nested():
        return loop_thread.run(asyncio.sleep(0))

    with pytest.raises(RuntimeError, match="its own loop"):
        loop_thread.run(nested())


def test_close_ends_the_thread():
    runner = LoopThread("test-loop-close")
    runner.close()
    assert not any(thread.name == "test-loop-close" for thread in threading.enumerate())
