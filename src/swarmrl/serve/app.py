"""The OpenAI-compatible HTTP API over the paged engine: /v1/models (and /v1/models/{id}), /v1/completions,
/v1/chat/completions (streamed as server-sent events with `stream: true`); /health and Prometheus /metrics.

With an API key, every /v1 route wants `Authorization: Bearer <key>` (401 otherwise), as vLLM's `--api-key`;
/health and /metrics stay open. A request naming a model this server does not serve is a 404, as vLLM's.
"""

from __future__ import annotations

import asyncio
import hmac
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from swarmrl.httpserve.answered import Answered
from swarmrl.models.prompting import PromptError, apply_chat_template
from swarmrl.serve.answer import BadRequest, Served, answer
from swarmrl.serve.metrics import request_reporter, request_usage
from swarmrl.serve.schema import ChatRequest, CompletionRequest, error_body


class Unauthorized(Exception):
    """No API key, or the wrong one (401)."""


class ModelNotFound(Exception):
    """A model name this server does not serve (404)."""


def create_app(served: Served) -> Answered:
    @asynccontextmanager
    async def lifespan(_: FastAPI):
        served.loop.start()
        yield
        await asyncio.to_thread(served.loop.close)

    app = FastAPI(title="swarmrl serve", lifespan=lifespan)
    _errors(app)
    authorised = [Depends(_key_check(served.api_key))]

    @app.get("/v1/models", dependencies=authorised)
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_card(served, name) for name in served.names]}

    @app.get("/v1/models/{model_id:path}", dependencies=authorised)
    async def model(model_id: str) -> dict[str, Any]:
        _check_model(served, model_id)
        return _card(served, model_id)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(served.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/completions", response_model=None, dependencies=authorised)
    async def completions(body: CompletionRequest, request: Request) -> JSONResponse | StreamingResponse:
        _check_model(served, body.model)
        usage = request_usage(request.scope)
        return await answer(served, body, _text_prompts(served, body), body.max_tokens, usage, chat=False)

    @app.post("/v1/chat/completions", response_model=None, dependencies=authorised)
    async def chat(body: ChatRequest, request: Request) -> JSONResponse | StreamingResponse:
        _check_model(served, body.model)
        limit = body.max_completion_tokens or body.max_tokens
        usage = request_usage(request.scope)
        return await answer(served, body, [_chat_prompt(served, body)], limit, usage, chat=True)

    return Answered(app, request_reporter(served.metrics))


def _errors(app: FastAPI) -> None:
    """OpenAI's error bodies: 400 for what cannot be answered as asked, 401, 404."""

    @app.exception_handler(BadRequest)
    async def bad_request(_: Request, exc: BadRequest) -> JSONResponse:
        return JSONResponse(error_body(str(exc)), status_code=400)

    @app.exception_handler(Unauthorized)
    async def unauthorized(_: Request, exc: Unauthorized) -> JSONResponse:
        body = error_body(str(exc))
        body["error"]["code"] = "invalid_api_key"
        return JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(ModelNotFound)
    async def not_found(_: Request, exc: ModelNotFound) -> JSONResponse:
        body = error_body(str(exc), param="model")
        body["error"]["code"] = "model_not_found"
        return JSONResponse(body, status_code=404)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())[1:]) or None
        message = str(first["msg"]).removeprefix("Value error, ")
        return JSONResponse(error_body(f"{where or 'body'}: {message}", param=where), status_code=400)


def _key_check(api_key: str | None):
    async def check(request: Request) -> None:
        if api_key is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), api_key.encode()):
            raise Unauthorized("missing or wrong API key: send Authorization: Bearer <key>")

    return check


def _check_model(served: Served, name: str | None) -> None:
    if name is not None and name not in served.names:
        raise ModelNotFound(
            f"The model `{name}` does not exist: this server serves {', '.join(served.names)}"
        )


def _card(served: Served, name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": served.created, "owned_by": "swarmrl"}


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
