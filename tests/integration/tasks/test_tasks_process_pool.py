import multiprocessing
import os
import threading
import time

import pytest

from swarmrl.configs.tasks import MathRewardConfig
from swarmrl.tasks.errors import VerifierCrash, VerifierTimeout
from swarmrl.tasks.math_verifier import MathVerifier
from swarmrl.tasks.process_pool import WallClockPool
from swarmrl.tasks.task import Task


def _pid() -> int:
    return os.getpid()


def _fail() -> None:
    raise ValueError("boom")


def _die() -> None:
    os._exit(3)


def _slow_import() -> None:
    time.sleep(1.0)  # stands for a verifier's imports on a loaded machine


def _score_in_child(queue) -> None:
    verifier = MathVerifier(MathRewardConfig(num_workers=1))
    try:
        queue.put(verifier.score(Task("m", "q", "math", {"ground_truth": "4"}), r"\boxed{4}"))
    finally:
        verifier.close()


@pytest.fixture()
def pool():
    p = WallClockPool(max_workers=1)
    yield p
    p.close()


def test_timeout_kills_and_replaces_the_worker(pool):
    first = pool.call(_pid, timeout=30)
    started = time.monotonic()
    with pytest.raises(VerifierTimeout):
        pool.call(time.sleep, 30, timeout=0.5)
    assert time.monotonic() - started < 30 / 2  # cut at its timeout, not waited for
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)
    assert pool.call(_pid, timeout=30) != first


def test_a_new_workers_warm_up_is_not_charged_to_a_calls_timeout():
    with WallClockPool(max_workers=1, warm=_slow_import) as warmed:
        first = warmed.call(_pid, timeout=0.3)  # the warm-up alone takes 3x this limit
        with pytest.raises(VerifierTimeout):
            warmed.call(time.sleep, 30, timeout=0.3)
        assert warmed.call(_pid, timeout=0.3) != first  # so does the replacement's


def test_errors_and_deaths_are_reported_and_survived(pool):
    with pytest.raises(VerifierCrash, match="boom"):
        pool.call(_fail, timeout=30)
    with pytest.raises(VerifierCrash):
        pool.call(_die, timeout=30)
    assert pool.call(_pid, timeout=30) > 0


def test_calls_from_threads(pool):
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(pool.call(pow, 2, 10, timeout=30))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == [1024] * 4


def test_usable_from_a_worker_process():
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_score_in_child, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=120) == 1.0
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
