"""Test slots: a test that times an emulated link from user space runs beside at most cores - 1 other tests.

`make test` runs more test workers than cores because with one per core a fifth of the CPU sits idle while
tests wait (emulated links, servers starting, pages polling). A test marked `timing` measures wall time against what
it emulated in user space (a round trip of 0.060 s, a rate within 10%), so a worker more than the cores would
wake its probe late. Each worker holds one of the run's slots (one per worker) while it runs a test, and a
`timing` test holds enough of them that at most `cores - 1` others run beside it: the share of the machine
it had with one worker per core. With no more workers than cores every test would hold one slot and none could
wait, so conftest.py takes no slots then.

The slots are lock files in a directory the workers share. A worker takes slots only while it holds the
turnstile, so a `timing` test waiting for its second slot is not overtaken by tests that start after it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

POLL_S = 0.02


def cores() -> int:
    return len(os.sched_getaffinity(0))


def workers() -> int:
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def slots_needed(timing: bool, workers: int, cores: int) -> int:
    """How many of `workers` slots a test holds: one, or for a timing test all but `cores - 1` of them."""
    return max(1, workers - cores + 1) if timing else 1


@contextmanager
def holding_slots(directory: Path, needed: int, total: int) -> Iterator[None]:
    """Hold `needed` of the `total` slot files under `directory` for the duration of the block."""
    with ExitStack() as held:
        with open(directory / "turnstile.lock", "w") as turnstile:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            taken: set[int] = set()
            while len(taken) < needed:
                for index in range(total):
                    if index not in taken and _try_slot(held, directory / f"slot-{index}.lock"):
                        taken.add(index)
                        if len(taken) == needed:
                            break
                else:
                    time.sleep(POLL_S)
        yield


def _try_slot(held: ExitStack, path: Path) -> bool:
    slot = open(path, "w")
    try:
        fcntl.flock(slot, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        slot.close()
        return False
    held.callback(slot.close)  # closing the file releases its lock
    return True
