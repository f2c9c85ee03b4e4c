"""Wake-ups for long polls: a request that waits for something to happen (a version published, a step opened)
sleeps on a `Notifier` and is woken the moment whoever makes it happen calls `notify`, from any thread."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator


class Notifier:
    """Wakes every waiter at once; `notify` is safe from any thread. Bound to the server's event loop at its
    start (`bind`), or by the first `wait`. `waiting` counts the waits asleep now (requests held between looks)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self.waiting = 0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    def notify(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._fire()
        else:
            loop.call_soon_threadsafe(self._fire)

    def _fire(self) -> None:
        if self._event is not None:
            self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        if self._loop is None:
            self.bind(asyncio.get_running_loop())
        event = self._event
        self.waiting += 1
        try:
            if event is None:
                await asyncio.sleep(timeout)
            else:
                await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            self.waiting -= 1

    async def looks(self, seconds: float, recheck: float = math.inf) -> AsyncIterator[bool]:
        """A long poll's rounds: yields before each look whether it is the last (`seconds` are up: answer with
        what it finds); between looks, sleeps until notified, and at most `recheck` seconds when something no
        `notify` announces (a lease lapsing) may change the answer. The caller answers on the last look."""
        deadline = time.monotonic() + seconds  # real time: the service's clock may be a test's
        while True:
            if deadline - time.monotonic() <= 0:
                yield True
                return
            yield False
            left = deadline - time.monotonic()
            if left > 0:
                await self.wait(min(left, recheck))
