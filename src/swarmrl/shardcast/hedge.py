"""Hedged requests ("The Tail at Scale", Dean & Barroso 2013): ask the best source, and when it has not
answered within a short delay, ask the next one as well; the first good answer wins, the others are cancelled.

A slow or silent source then costs one hedge delay instead of its whole timeout, and a failure moves on to the
next source at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


class AllAttemptsFailed(Exception):
    """Every attempt of a hedged race failed; `failures` holds their exceptions in the order they ended."""

    def __init__(self, failures: list[BaseException]) -> None:
        super().__init__("; ".join(str(f) for f in failures) or "no attempts")
        self.failures = failures


async def first_success(attempts: Sequence[Callable[[], Awaitable[T]]], hedge_after_s: float) -> T:
    """Run `attempts` in order, starting the next one whenever `hedge_after_s` passes with no attempt done or
    an attempt fails; return the first result. The attempts still running are cancelled and awaited.

    Raises AllAttemptsFailed when every attempt raised.
    """
    running: set[asyncio.Task[T]] = set()
    failures: list[BaseException] = []
    queue = list(attempts)

    def start_next() -> None:
        if queue:
            running.add(asyncio.ensure_future(queue.pop(0)()))

    start_next()
    try:
        while running:
            done, _ = await asyncio.wait(running, timeout=hedge_after_s, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                start_next()  # everyone asked so far is slow: ask one more
                continue
            for task in done:
                running.discard(task)
                error = task.exception()
                if error is None:
                    return task.result()
                failures.append(error)
                start_next()
        raise AllAttemptsFailed(failures)
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
