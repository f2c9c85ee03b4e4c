"""The live dashboard: the page and its assets (package files, nothing from a CDN), the run list, one run's
summary as JSON, and the same summary pushed as Server-Sent Events. Read-only and public, like every read
endpoint: node ids are public keys, and no secret (admin token, run secret, upload URL) is in a summary."""

from __future__ import annotations

import asyncio
import time
from importlib import resources

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from sqlalchemy import select
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from swarmrl.coordinator.api import RunId, RunState, RunSummary
from swarmrl.coordinator.errors import ApiError, NotFoundError
from swarmrl.coordinator.server.access import get_run
from swarmrl.coordinator.server.auth import state_of
from swarmrl.coordinator.server.routes.trainer import current_state
from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.server.summary import run_summary
from swarmrl.coordinator.store.db import Run

router = APIRouter(tags=["dashboard"])

ASSETS = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}
# The page may load only what this server serves: a stray CDN reference would fail loudly, not phone home.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'",
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
}
STREAM_SHARE_S = 1.0  # streams reuse a summary read this recently (by any stream of the run)
STREAM_LIFETIME_S = 300.0  # a stream ends after this; EventSource reconnects by itself (bounds a dead reader)


def _asset(name: str) -> str:
    return resources.files("swarmrl.coordinator").joinpath("dashboard", name).read_text(encoding="utf-8")


@router.get("/dashboard", response_class=Response, include_in_schema=False)
def dashboard() -> Response:
    return Response(_asset("index.html"), media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


@router.get("/dashboard/{name}", response_class=Response, include_in_schema=False)
def dashboard_asset(name: str) -> Response:
    if name not in ASSETS:
        raise NotFoundError(f"no dashboard asset {name!r}", kind="unknown_asset")
    return Response(_asset(name), media_type=ASSETS[name], headers=PAGE_HEADERS)


@router.get("/v1/runs", response_model=list[RunState])
def list_runs(request: Request) -> list[RunState]:
    """Every run this coordinator holds (at most list_limit), newest first."""
    state = state_of(request)
    now = state.clock()
    with state.sessions() as session, session.begin():
        runs = session.scalars(select(Run).order_by(Run.created_at.desc()).limit(state.config.list_limit))
        return [current_state(session, run, state.config, now) for run in runs]


def read_summary(state: ServiceState, run_id: str) -> RunSummary:
    with state.sessions() as session, session.begin():
        return run_summary(session, get_run(session, run_id), state.config, state.clock())


def shared_summary(state: ServiceState, run_id: str) -> RunSummary:
    """A summary at most STREAM_SHARE_S old: a hundred open dashboards cost one read per second, not a hundred."""
    cached = state.streamed_summaries.get(run_id)
    if cached is not None and time.monotonic() - cached[0] < STREAM_SHARE_S:
        return cached[1]
    summary = read_summary(state, run_id)
    state.streamed_summaries[run_id] = (time.monotonic(), summary)
    return summary


@router.get("/v1/runs/{run_id}/summary", response_model=RunSummary)
def get_summary(run_id: RunId, request: Request) -> RunSummary:
    """The run at a glance: step and rate, reward by step, nodes, rejections by check, validator backlog."""
    return read_summary(state_of(request), run_id)


# Out of the OpenAPI schema: a fuzzer (or a generated client) calling it would wait for a stream to end.
@router.get("/v1/runs/{run_id}/summary/stream", include_in_schema=False)
async def stream_summary(
    run_id: RunId,
    request: Request,
    interval_s: float = Query(2.0, ge=0.2, le=60.0, description="seconds between two summaries"),
) -> StreamingResponse:
    """`text/event-stream`: a `summary` event (the JSON of GET …/summary) every `interval_s` seconds. Streams
    have a small budget of their own (`connections.max_streams_per_address`, `max_streams_total`); past it the
    answer is 503 `stream_budget`, and the dashboard polls GET …/summary instead."""
    state = state_of(request)
    peer = (request.client.host, request.client.port) if request.client else ("unknown", 0)
    if not state.streams.acquire(peer):
        raise ApiError(
            "no live stream to spare (each address and the server have a small budget of them): poll "
            f"GET /v1/runs/{run_id}/summary instead",
            kind="stream_budget",
            status=503,
        )
    try:
        first = await run_in_threadpool(read_summary, state, run_id)  # an unknown run is a 404, not a stream
    except BaseException:
        state.streams.release(peer)
        raise

    async def events():
        loop = asyncio.get_running_loop()
        ends = loop.time() + STREAM_LIFETIME_S
        summary = first
        try:
            yield f"retry: {int(interval_s * 1000)}\n\n"
            while True:
                yield f"event: summary\ndata: {summary.model_dump_json()}\n\n"
                await asyncio.sleep(interval_s)
                if loop.time() > ends or await request.is_disconnected():
                    return
                try:
                    summary = await run_in_threadpool(shared_summary, state, run_id)
                except NotFoundError:
                    return
        finally:
            state.streams.release(peer)

    async def release() -> None:  # async: runs on the event loop, where the budget lives
        state.streams.release(peer)

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        # Runs when the response ends however it ends (a reader gone mid-stream included); the guard also frees
        # the budget when the connection closes.
        background=BackgroundTask(release),
    )
