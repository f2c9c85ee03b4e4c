"""Answering one generation request: its prompts checked against the model's context, a completion per
(prompt, choice) handed to the engine's thread, and the events that come back turned into one response or an
event stream."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse, StreamingResponse
from transformers import PreTrainedTokenizerBase

from swarmrl.configs.model import PromptSection
from swarmrl.inference.engine import GenerationRequest, SamplingParams
from swarmrl.inference.errors import InferenceError
from swarmrl.inference.paged.running import Row
from swarmrl.rollouts.assignment import sample_seed
from swarmrl.serve.completion import Completion, Delta, Event, Finished
from swarmrl.serve.engine_loop import EngineLoop, Job, ServerBusy
from swarmrl.serve.grammar import FormatError, GrammarConstraint, Grammars
from swarmrl.serve.metrics import ServeMetrics
from swarmrl.serve.responses import (
    ChoiceState,
    chat_chunk,
    chat_response,
    text_chunk,
    text_response,
    usage_chunk,
)
from swarmrl.serve.schema import SamplingRequest, error_body


class BadRequest(Exception):
    """A request the server cannot answer as asked (400)."""


@dataclass
class Served:
    """What the routes serve: the engine's thread, the tokenizer, the chat settings, the model's limits."""

    loop: EngineLoop
    tokenizer: PreTrainedTokenizerBase
    prompt: PromptSection
    names: tuple[str, ...]  # the first names the model in responses; a request may use any of them
    max_positions: int
    grammars: Grammars
    api_key: str | None = None
    metrics: ServeMetrics = field(init=False)
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        self.metrics = ServeMetrics(lambda: self.loop.waiting, lambda: self.loop.running)

    @property
    def model_name(self) -> str:
        return self.names[0]


async def answer(
    served: Served,
    body: SamplingRequest,
    prompts: list[list[int]],
    max_tokens: int | None,
    usage: dict[str, Any],
    *,
    chat: bool,
) -> JSONResponse | StreamingResponse:
    """Generate `body.n` completions of every prompt; one response, or the event stream. `usage` receives the
    request's token counts for its log line once it is answered."""
    limit = _token_limit(served, prompts, max_tokens)
    try:
        constraints = await asyncio.to_thread(
            served.grammars.constraints, body.response_format, len(prompts) * body.n
        )
    except FormatError as exc:
        raise BadRequest(str(exc)) from exc
    events: asyncio.Queue[Event | Exception] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def deliver(item: Event | Exception) -> None:  # the engine thread's: flushed to this loop after each step
        served.loop.outbox.post(loop, events, item)

    states, job = _job(served, body, prompts, limit, deliver, constraints)
    try:
        served.loop.submit(job)
    except ServerBusy as exc:
        return JSONResponse(error_body(str(exc), "server_busy"), status_code=503)
    respond = _Response(served, body, states, sum(len(p) for p in prompts), chat, usage)
    if body.stream:
        return StreamingResponse(respond.stream(events, job), media_type="text/event-stream")
    return await respond.whole(events)


def _token_limit(served: Served, prompts: list[list[int]], max_tokens: int | None) -> int:
    for index, prompt in enumerate(prompts):
        if not prompt:
            raise BadRequest(f"prompt {index} is empty: give at least one token to continue from")
    longest = max(len(p) for p in prompts)
    room = served.max_positions - longest
    limit = max_tokens if max_tokens is not None else room
    if limit > room or room < 1:
        raise BadRequest(
            f"a prompt of {longest} tokens and max_tokens {limit} exceed the model's context of "
            f"{served.max_positions} tokens"
        )
    return limit


def _job(
    served: Served,
    body: SamplingRequest,
    prompts: list[list[int]],
    limit: int,
    deliver: Callable[[Event | Exception], None],
    constraints: list[GrammarConstraint] | None,
) -> tuple[list[ChoiceState], Job]:
    """One completion per (prompt, choice), seeded from the request's seed (a fresh random one without it)."""
    seed = body.seed if body.seed is not None else secrets.randbits(63)
    stops = frozenset(served.loop.stop_token_ids)
    requests, completions, rows, states = [], [], [], []
    for p, prompt_ids in enumerate(prompts):
        for j in range(body.n):
            index = p * body.n + j
            completion = Completion(
                index, served.tokenizer, body.stop_strings, stops, deliver, with_logprobs=body.wants_logprobs
            )
            requests.append(GenerationRequest(prompt_ids, sample_seed(seed, p, j), max_new_tokens=limit))
            completions.append(completion)
            rows.append(
                Row(
                    processing=body.processing,
                    top_logprobs=body.alternatives,
                    constraint=constraints[index] if constraints is not None else None,
                    on_token=completion.add,
                )
            )
            states.append(ChoiceState(index))
    params = SamplingParams(
        max_new_tokens=limit,
        temperature=body.temperature,
        top_p=body.top_p,
        stop_token_ids=served.loop.stop_token_ids,
    )
    return states, Job(requests, completions, params, rows, deliver)


@dataclass
class _Response:
    served: Served
    body: SamplingRequest
    states: list[ChoiceState]
    prompt_tokens: int
    chat: bool
    usage_out: dict[str, Any]
    id: str = field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))
    started: float = field(default_factory=time.perf_counter)
    first_token: bool = False

    async def whole(self, events: asyncio.Queue[Event | Exception]) -> JSONResponse:
        while not all(state.finish_reason for state in self.states):
            event = await events.get()
            if isinstance(event, Exception):
                return _failure(event)
            self._take(event)
        build = chat_response if self.chat else text_response
        return JSONResponse(build(self, self.usage()))

    async def stream(self, events: asyncio.Queue[Event | Exception], job: Job) -> AsyncIterator[str]:
        try:
            if self.chat:
                for state in self.states:  # each choice opens with its role, as OpenAI's stream does
                    yield _sse(chat_chunk(self, state.choice, {"role": "assistant", "content": ""}))
            while not all(state.finish_reason for state in self.states):
                event = await events.get()
                if isinstance(event, Exception):
                    yield _sse(_failure_body(event))
                    break
                self._take(event)
                yield _sse(self._chunk(event))
            else:
                usage = self.usage()
                if self.body.include_usage:
                    yield _sse(usage_chunk(self, self.chat, usage))
            yield "data: [DONE]\n\n"
        finally:  # the client went away, or the stream ended: nothing more to generate for it
            for completion in job.completions:
                completion.cancelled = True

    def _take(self, event: Event) -> None:
        if not self.first_token and isinstance(event, Delta):
            self.first_token = True
            self.served.metrics.first_token.observe(time.perf_counter() - self.started)
        self.states[event.choice].take(event)

    def _chunk(self, event: Delta | Finished) -> dict[str, Any]:
        if self.chat:
            delta = {"content": event.text} if isinstance(event, Delta) else {}
            return chat_chunk(self, event.choice, delta, event)
        return text_chunk(self, event)

    def usage(self) -> dict[str, int]:
        """The token counts of the whole answer (also left for the request's log line)."""
        completion_tokens = sum(state.completion_tokens for state in self.states)
        self.usage_out.update(
            model=self.body.model or self.served.model_name,
            n=len(self.states),
            stream=self.body.stream,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=completion_tokens,
        )
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        }


def _sse(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


def _failure_body(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, InferenceError):
        return error_body(str(exc))
    return error_body(f"generation failed: {type(exc).__name__}", "server_error")


def _failure(exc: Exception) -> JSONResponse:
    return JSONResponse(_failure_body(exc), status_code=400 if isinstance(exc, InferenceError) else 500)
