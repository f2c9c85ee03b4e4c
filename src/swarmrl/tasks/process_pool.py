"""A process pool whose calls each carry their own wall-clock limit.

`concurrent.futures.ProcessPoolExecutor` cannot stop one running call: a hung task keeps its worker forever
and killing workers breaks the whole executor. Here each worker owns a pipe; a call that misses its deadline
gets its worker SIGKILLed and replaced, and the other calls never notice. Callers may be any thread, or a
worker process of some other pool (the workers are not daemonic, so a daemon-free parent may nest them).
"""

from __future__ import annotations

import atexit
import multiprocessing
import queue
import threading
import traceback
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Literal

from swarmrl.tasks.errors import RewardError, VerifierCrash, VerifierTimeout

_START_TIMEOUT_S = 120.0


def _serve(conn: Connection, warm: Callable[[], object] | None) -> None:
    """Worker loop: run (fn, args) requests until the parent closes the pipe. `warm` runs before the worker
    says it is ready, so imports and lazy caches are paid under the start-up limit, never a call's own."""
    if warm is not None:
        warm()
    conn.send(("ready", None))
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send(("ok", fn(*args)))
        except BaseException as exc:  # noqa: BLE001 — every failure is reported to the caller, not fatal here
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"))


class _Worker:
    def __init__(
        self,
        context: multiprocessing.context.SpawnContext | multiprocessing.context.ForkServerContext,
        warm: Callable[[], object] | None,
    ) -> None:
        self.conn, child_conn = context.Pipe(duplex=True)
        self.process = context.Process(target=_serve, args=(child_conn, warm), daemon=False)
        self.process.start()
        child_conn.close()
        try:
            ready = self.conn.poll(_START_TIMEOUT_S) and self.conn.recv()[0] == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.kill()
            raise RewardError(
                "a verifier worker failed to start (is the caller's main module guarded by "
                "`if __name__ == '__main__'` under the spawn start method?)"
            )

    def kill(self) -> None:
        self.conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)


class WallClockPool:
    """Run picklable functions in worker processes, each call bounded by its own timeout. A new worker (the
    first, or one replacing a killed one) runs the picklable `warm` before its first call."""

    def __init__(
        self,
        max_workers: int = 2,
        start_method: Literal["spawn", "forkserver"] = "spawn",
        warm: Callable[[], object] | None = None,
    ) -> None:
        if max_workers < 1:
            raise RewardError("max_workers must be >= 1")
        self._context = (
            multiprocessing.get_context("forkserver")
            if start_method == "forkserver"
            else multiprocessing.get_context("spawn")
        )
        self._warm = warm
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(max_workers)
        self._closed = False
        self._finalizer = weakref.finalize(self, WallClockPool._kill_all, self._all)
        atexit.register(self._finalizer)

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float) -> Any:
        """fn(*args) in a worker: VerifierTimeout past `timeout` s, VerifierCrash if fn raised or died."""
        self._slots.acquire()
        try:
            worker: _Worker | None = self._take()
        except BaseException:
            self._slots.release()
            raise
        assert worker is not None
        try:
            worker.conn.send((fn, args))
            if not worker.conn.poll(timeout):
                self._discard(worker)
                worker = None
                raise VerifierTimeout(f"{getattr(fn, '__name__', fn)} exceeded {timeout:.1f}s; worker killed")
            status, value = worker.conn.recv()
        except (EOFError, OSError) as exc:
            if worker is not None:
                self._discard(worker)
            worker = None
            raise VerifierCrash(f"verifier worker died: {exc!r}") from exc
        finally:
            if worker is not None:
                self._idle.put(worker)
            self._slots.release()
        if status == "error":
            raise VerifierCrash(f"verifier raised: {value}")
        return value

    def close(self) -> None:
        self._closed = True
        self._finalizer()

    def __enter__(self) -> WallClockPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self) -> _Worker:
        if self._closed:
            raise RewardError("pool is closed")
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            worker = _Worker(self._context, self._warm)
            with self._lock:
                self._all.add(worker)
            return worker

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._all.discard(worker)
        worker.kill()

    @staticmethod
    def _kill_all(workers: set[_Worker]) -> None:
        for worker in list(workers):
            worker.kill()
        workers.clear()
