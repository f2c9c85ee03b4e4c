"""The one thread that drives the engine for the server.

HTTP requests become jobs in a bounded queue. The thread takes every job waiting, runs those that share
sampling settings as one `generate` call (the paged engine's continuous batching interleaves them and shares
the prefill of equal prompts) and hands every sampled token to its completion as it comes, which streams it.
A job that arrives while a batch runs waits for the next one.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from swarmrl.inference.engine import GenerationRequest, SamplingParams
from swarmrl.inference.errors import InferenceError
from swarmrl.inference.paged.engine import PagedEngine
from swarmrl.serve.completion import Completion

log = logging.getLogger(__name__)


class ServerBusy(Exception):
    """The queue of waiting jobs is full."""


@dataclass
class Job:
    requests: list[GenerationRequest]
    completions: list[Completion]
    temperature: float
    top_p: float
    fail: Callable[[Exception], None]  # thread-safe: ends the request with this error

    @property
    def sampling(self) -> tuple[float, float]:
        return self.temperature, self.top_p


class EngineLoop:
    def __init__(self, engine: PagedEngine, stop_token_ids: tuple[int, ...], max_waiting_jobs: int) -> None:
        self.engine = engine
        self.stop_token_ids = stop_token_ids
        self._jobs: queue.Queue[Job | None] = queue.Queue(maxsize=max_waiting_jobs)
        self._thread = threading.Thread(target=self._run, name="serve-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=60)

    def submit(self, job: Job) -> None:
        try:
            self._jobs.put_nowait(job)
        except queue.Full as exc:
            raise ServerBusy("too many requests are waiting for the engine; retry later") from exc

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            waiting = [job]
            while True:
                try:
                    waiting.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            if None in waiting:  # closing: finish what was asked first
                self._jobs.put(None)
            jobs = [j for j in waiting if j is not None]
            for sampling in dict.fromkeys(j.sampling for j in jobs):
                self._generate([j for j in jobs if j.sampling == sampling])

    def _generate(self, jobs: list[Job]) -> None:
        requests = [r for job in jobs for r in job.requests]
        completions = [c for job in jobs for c in job.completions]
        params = SamplingParams(
            max_new_tokens=max(r.max_new_tokens or 1 for r in requests),
            temperature=jobs[0].temperature,
            top_p=jobs[0].top_p,
            stop_token_ids=self.stop_token_ids,
        )
        try:
            generations = self.engine.generate(
                requests, params, on_token=lambda i, token, logprob: completions[i].add(token, logprob)
            )
        except Exception as exc:  # noqa: BLE001 — whatever ends a batch ends its requests, never the server
            if len(jobs) > 1 and not any(c.ids for c in completions):
                for job in jobs:  # one request the engine refuses (too long for the cache) fails alone
                    self._generate([job])
                return
            if not isinstance(exc, InferenceError):
                log.exception("generation failed")
            for job in jobs:
                job.fail(exc)
            return
        for completion, generation in zip(completions, generations, strict=True):
            completion.finish(generation.finish_reason)
