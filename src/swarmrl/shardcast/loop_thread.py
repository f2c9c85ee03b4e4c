"""One event loop on a daemon thread, for synchronous callers of async code that call again and again.

Running each call in its own `asyncio.run` would create and tear down a loop per call, and with it whatever
lives on a loop: the connections an `httpx.AsyncClient` keeps alive, its tasks. Here they live as long as the
owner does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the loop and wait for its result, from any thread but the loop's own (several
        callers at once run side by side there). A caller interrupted while it waits cancels its coroutine."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("LoopThread.run called from its own loop: it would wait for itself")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Stop the loop (after the coroutines running on it were awaited or cancelled) and join its thread."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self._loop.close()
