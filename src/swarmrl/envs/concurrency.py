"""Environment steps run side by side: a tool run is mostly waiting on a sandbox process to start and exit,
so the rows of one round (a worker's batch, a trainer's or validator's replay) need not wait in line."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


@contextmanager
def submitted(
    fn: Callable[[Item], Result], items: Iterable[Item], workers: int
) -> Iterator[list[Future[Result]]]:
    """`fn` over `items` on up to `workers` threads: one future per item, in item order, so a caller reads the
    results in order and names the first item that failed. Items not yet started when the block exits (say,
    after that failure) are cancelled."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="env-step") as pool:
        futures = [pool.submit(fn, item) for item in items]
        try:
            yield futures
        finally:
            for future in futures:
                future.cancel()
