"""The one thread that drives the engine for the server: continuous batching across requests.

HTTP requests become jobs in a queue. The thread keeps one `RunningBatch` open: between two engine steps it
adds every job that arrived, so a request joins the batch already running (its prefill is the next step, then
its rows decode alongside the others) instead of waiting for it to finish. Every sampled token goes to its
completion as it comes (the step's events reach the event loop together), which streams it. Rows with
different sampling settings share the batch; the engine samples each group of them in its own call.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from swarmrl.inference.engine import GenerationRequest, SamplingParams
from swarmrl.inference.errors import InferenceError
from swarmrl.inference.paged.engine import PagedEngine
from swarmrl.inference.paged.running import Row, RunningBatch
from swarmrl.serve.completion import Completion

log = logging.getLogger(__name__)


class ServerBusy(Exception):
    """Too many completions are waiting for a row."""


@dataclass
class Job:
    """One HTTP request: a completion per (prompt, choice), all sampled under `params`."""

    requests: list[GenerationRequest]
    completions: list[Completion]
    params: SamplingParams
    rows: list[Row]  # how each is sampled; their on_token hands tokens to the completion
    fail: Callable[[Exception], None]  # ends the request with this error (engine thread, through the outbox)


class Outbox:
    """Events the engine thread produced in one step, handed to the event loops waiting for them with one wake-up
    per loop per step (not one per token: at 64 rows that is 64 cross-thread wake-ups a step)."""

    def __init__(self) -> None:
        self._pending: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue, Any]] = []

    def post(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, item: Any) -> None:
        """Engine thread only."""
        self._pending.append((loop, queue, item))

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, Any]]] = {}
        for loop, events, item in pending:
            by_loop.setdefault(loop, []).append((events, item))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_put_all, items)
            except RuntimeError:  # that loop has closed (the server is stopping): nobody is waiting
                log.debug("dropped %d events for a closed event loop", len(items))


def _put_all(items: list[tuple[asyncio.Queue, Any]]) -> None:
    for events, item in items:
        events.put_nowait(item)


class EngineLoop:
    def __init__(self, engine: PagedEngine, stop_token_ids: tuple[int, ...], max_waiting: int) -> None:
        self.engine = engine
        self.stop_token_ids = stop_token_ids
        self.max_waiting = max_waiting
        self._inbox: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._queued = 0  # completions in the inbox
        self.batch_waiting = 0  # completions in the batch without a row yet (the engine thread writes these)
        self.running = 0  # completions being decoded
        self.outbox = Outbox()
        self._thread = threading.Thread(target=self._run, name="serve-engine", daemon=True)

    @property
    def waiting(self) -> int:
        """Completions accepted and not yet decoding: the queue's depth."""
        return self._queued + self.batch_waiting

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._inbox.put(None)
        self._thread.join(timeout=60)

    def submit(self, job: Job) -> None:
        with self._lock:
            if self.waiting + len(job.requests) > self.max_waiting:
                raise ServerBusy(
                    f"{self.waiting} completions are waiting for the engine (at most {self.max_waiting}); "
                    "retry later"
                )
            self._queued += len(job.requests)
        self._inbox.put(job)

    def _run(self) -> None:
        closing = False
        while not closing:
            try:
                with torch.inference_mode(), self.engine.running() as batch:
                    closing = self._drive(batch)
            finally:
                self.outbox.flush()

    def _drive(self, batch: RunningBatch) -> bool:
        """Add arriving jobs and step until closing (True) or until a step fails (False: a fresh batch)."""
        active: dict[int, tuple[Job, Completion]] = {}
        closing = False
        while True:
            for job in self._arrivals(block=not batch.has_work and not closing):
                if job is None:
                    closing = True
                else:
                    self._admit(batch, job, active)
            if not batch.has_work:
                self.outbox.flush()
                if closing:  # everything asked before the close has been answered
                    return True
                continue
            try:
                finished = batch.step()
            except Exception as exc:  # noqa: BLE001 — whatever ends a batch ends its requests, never the server
                log.exception("generation failed")
                for job in {id(job): job for job, _ in active.values()}.values():
                    job.fail(exc)
                return closing
            for sequence, reason in finished:
                active.pop(sequence.index)[1].finish(reason)
            self.outbox.flush()
            self.batch_waiting, self.running = batch.waiting, batch.running

    def _arrivals(self, *, block: bool) -> list[Job | None]:
        arrived = []
        try:
            arrived.append(self._inbox.get(block=block))
            while True:
                arrived.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        return arrived

    def _admit(self, batch: RunningBatch, job: Job, active: dict[int, tuple[Job, Completion]]) -> None:
        with self._lock:
            self._queued -= len(job.requests)
        try:
            indices = batch.add(job.requests, job.params, job.rows)
        except InferenceError as exc:  # this request alone cannot run (too long for the cache)
            job.fail(exc)
            return
        for index, completion in zip(indices, job.completions, strict=True):
            active[index] = (job, completion)
        self.batch_waiting = batch.waiting
