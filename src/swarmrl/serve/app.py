"""The OpenAI-compatible HTTP API over the paged engine: /v1/models, /v1/completions, /v1/chat/completions
(streamed as server-sent events with `stream: true`)."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from transformers import PreTrainedTokenizerBase

from swarmrl.configs.model import PromptSection
from swarmrl.inference.engine import GenerationRequest
from swarmrl.inference.errors import InferenceError
from swarmrl.models.prompting import PromptError, apply_chat_template
from swarmrl.rollouts.assignment import sample_seed
from swarmrl.serve.completion import Completion, Delta, Event, Finished
from swarmrl.serve.engine_loop import EngineLoop, Job, ServerBusy
from swarmrl.serve.responses import (
    ChoiceState,
    chat_chunk,
    chat_response,
    text_chunk,
    text_response,
    usage_chunk,
)
from swarmrl.serve.schema import ChatRequest, CompletionRequest, SamplingRequest, error_body


class BadRequest(Exception):
    """A request the server cannot answer as asked (400)."""


@dataclass
class Served:
    """What the routes serve: the engine's thread, the tokenizer, the chat settings, the model's limits."""

    loop: EngineLoop
    tokenizer: PreTrainedTokenizerBase
    prompt: PromptSection
    model_name: str
    max_positions: int
    created: int = field(default_factory=lambda: int(time.time()))


def create_app(served: Served) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI):
        served.loop.start()
        yield
        await asyncio.to_thread(served.loop.close)

    app = FastAPI(title="swarmrl serve", lifespan=lifespan)

    @app.exception_handler(BadRequest)
    async def bad_request(_: Request, exc: BadRequest) -> JSONResponse:
        return JSONResponse(error_body(str(exc)), status_code=400)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())[1:]) or None
        return JSONResponse(error_body(f"{where or 'body'}: {first['msg']}", param=where), status_code=400)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        model = {"id": served.model_name, "object": "model", "created": served.created, "owned_by": "swarmrl"}
        return {"object": "list", "data": [model]}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest) -> JSONResponse | StreamingResponse:
        return await _answer(served, body, _text_prompts(served, body), body.max_tokens, chat=False)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest) -> JSONResponse | StreamingResponse:
        prompt_ids = _chat_prompt(served, body)
        return await _answer(
            served, body, [prompt_ids], body.max_completion_tokens or body.max_tokens, chat=True
        )

    return app


def _text_prompts(served: Served, body: CompletionRequest) -> list[list[int]]:
    encoded = []
    for prompt in body.prompts():
        if isinstance(prompt, str):
            encoded.append(list(served.tokenizer(prompt).input_ids))
        elif all(isinstance(t, int) and 0 <= t < len(served.tokenizer) for t in prompt):
            encoded.append(list(prompt))
        else:
            raise BadRequest(f"prompt token ids must lie in [0, {len(served.tokenizer)})")
    return encoded


def _chat_prompt(served: Served, body: ChatRequest) -> list[int]:
    if not getattr(served.tokenizer, "chat_template", None):
        raise BadRequest("this model's tokenizer has no chat template: use /v1/completions")
    kwargs = {**served.prompt.chat_template_kwargs, **body.chat_template_kwargs}
    settings = served.prompt.model_copy(update={"chat_template_kwargs": kwargs})
    try:
        return list(apply_chat_template(served.tokenizer, body.conversation(), settings, tokenize=True))
    except PromptError as exc:
        raise BadRequest(str(exc)) from exc


async def _answer(
    served: Served, body: SamplingRequest, prompts: list[list[int]], max_tokens: int | None, *, chat: bool
) -> JSONResponse | StreamingResponse:
    """Generate `body.n` completions of every prompt; one response, or the event stream."""
    longest = max(len(p) for p in prompts)
    room = served.max_positions - longest
    limit = max_tokens if max_tokens is not None else room
    if min(len(p) for p in prompts) == 0 or limit > room or room < 1:
        raise BadRequest(
            f"a prompt of {longest} tokens and max_tokens {limit} exceed the model's context of "
            f"{served.max_positions} tokens"
        )
    events: asyncio.Queue[Event | Exception] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def deliver(item: Event | Exception) -> None:
        loop.call_soon_threadsafe(events.put_nowait, item)

    states, job = _job(served, body, prompts, limit, deliver)
    try:
        served.loop.submit(job)
    except ServerBusy as exc:
        return JSONResponse(error_body(str(exc), "server_busy"), status_code=503)
    respond = _Response(served, body, states, sum(len(p) for p in prompts), chat)
    if body.stream:
        return StreamingResponse(respond.stream(events, job), media_type="text/event-stream")
    return await respond.whole(events)


def _job(
    served: Served,
    body: SamplingRequest,
    prompts: list[list[int]],
    limit: int,
    deliver: Callable[[Event | Exception], None],
) -> tuple[list[ChoiceState], Job]:
    """One completion per (prompt, choice), seeded from the request's seed (a fresh random one without it)."""
    seed = body.seed if body.seed is not None else secrets.randbits(63)
    stops = frozenset(served.loop.stop_token_ids)
    requests, completions, states = [], [], []
    for p, prompt_ids in enumerate(prompts):
        for j in range(body.n):
            index = p * body.n + j
            requests.append(GenerationRequest(prompt_ids, sample_seed(seed, p, j), max_new_tokens=limit))
            completions.append(Completion(index, served.tokenizer, body.stop_strings, stops, deliver))
            states.append(ChoiceState(index))
    return states, Job(requests, completions, body.temperature, body.top_p, deliver)


@dataclass
class _Response:
    served: Served
    body: SamplingRequest
    states: list[ChoiceState]
    prompt_tokens: int
    chat: bool
    id: str = field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))

    async def whole(self, events: asyncio.Queue[Event | Exception]) -> JSONResponse:
        while not all(state.finish_reason for state in self.states):
            event = await events.get()
            if isinstance(event, Exception):
                return _failure(event)
            self.states[event.choice].take(event)
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
                self.states[event.choice].take(event)
                yield _sse(self._chunk(event))
            else:
                if self.body.include_usage:
                    yield _sse(usage_chunk(self, self.chat, self.usage()))
            yield "data: [DONE]\n\n"
        finally:  # the client went away, or the stream ended: nothing more to generate for it
            for completion in job.completions:
                completion.cancelled = True

    def _chunk(self, event: Delta | Finished) -> dict[str, Any]:
        if self.chat:
            delta = {"content": event.text} if isinstance(event, Delta) else {}
            return chat_chunk(self, event.choice, delta, event)
        return text_chunk(self, event)

    def usage(self) -> dict[str, int]:
        completion_tokens = sum(state.completion_tokens for state in self.states)
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
