"""The coordinator ASGI app: routers, uniform JSON errors, and start-up migration."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.errors import ApiError
from swarmrl.coordinator.server.bodylimit import BodySizeLimit
from swarmrl.coordinator.server.db_metrics import DatabaseMetrics
from swarmrl.coordinator.server.ratelimit import TokenBuckets
from swarmrl.coordinator.server.request_metrics import RequestMetrics
from swarmrl.coordinator.server.routes import (
    admin,
    contract,
    dashboard,
    leases,
    nodes,
    pack_judging,
    packs,
    read,
    reports,
    trainer,
    uploads,
    work,
)
from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.store.db import make_engine, make_sessionmaker, migrate
from swarmrl.coordinator.store.storage import LocalStorage, Storage, StorageError
from swarmrl.httpserve.streams import StreamBudget

log = logging.getLogger(__name__)

_HTTP_KINDS = {404: "not_found", 405: "method_not_allowed", 413: "too_large", 415: "unsupported_media_type"}


def _error(status: int, kind: str, detail: str, retry_after_s: float | None = None) -> JSONResponse:
    """The JSON error body; a 429/503 also says when to ask again (Retry-After, whole seconds, at least 1)."""
    headers = None if retry_after_s is None else {"Retry-After": str(max(1, math.ceil(retry_after_s)))}
    return JSONResponse({"error": kind, "detail": detail}, status_code=status, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        request.app.state.coordinator.metrics.refusals.labels(kind=exc.kind).inc()
        return _error(exc.status, exc.kind, exc.detail, getattr(exc, "retry_after_s", None))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in exc.errors()[:10]
        )
        request.app.state.coordinator.metrics.refusals.labels(kind="invalid_request").inc()
        return _error(422, "invalid_request", problems or "request does not match the schema")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, _HTTP_KINDS.get(exc.status_code, "http_error"), str(exc.detail))

    @app.exception_handler(IntegrityError)
    async def integrity_error(_: Request, exc: IntegrityError) -> JSONResponse:
        # Two requests raced for the same row (e.g. the same step published twice at once); the loser retries.
        return _error(409, "conflict", "a concurrent request changed this record; retry")

    @app.exception_handler(OperationalError)
    async def database_busy(_: Request, exc: OperationalError) -> JSONResponse:
        log.warning("database error: %s", exc)
        return _error(503, "database_unavailable", "the database is busy or unreachable; retry", 1.0)

    @app.exception_handler(StorageError)
    async def storage_error(_: Request, exc: StorageError) -> JSONResponse:
        return _error(404, "file_missing", str(exc))


def create_app(
    *,
    db_url: str,
    storage: Storage | str | Path,
    admin_token: str | None,
    config: CoordinatorConfig | None = None,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    """Build the service; the database is migrated here, before the first request."""
    config = config or CoordinatorConfig()
    engine = make_engine(db_url)
    migrate(engine)
    if not isinstance(storage, Storage):
        storage = LocalStorage(storage)
    staging_dir = storage.staging_dir()
    app = FastAPI(
        title="swarmrl coordinator",
        version="1",
        description="Identities, heartbeats, the step counter, task seeds, uploads, submissions, verdicts, ledger.",
    )
    app.state.coordinator = ServiceState(
        config=config,
        sessions=make_sessionmaker(engine),
        engine=engine,
        storage=storage,
        staging_dir=staging_dir,
        admin_token=admin_token or None,
        clock=clock,
        limiter=TokenBuckets(config.requests_per_minute, clock),
        streams=StreamBudget.of(config.connections),
    )
    app.state.engine = engine
    app.state.coordinator.metrics.registry.register(DatabaseMetrics(app.state.coordinator))
    for module in (admin, nodes, contract, leases, uploads, work, trainer, reports, read, dashboard):
        app.include_router(module.router)
    for module in (packs, pack_judging):  # community task packs (docs/task-packs.md)
        app.include_router(module.router)
    _install_error_handlers(app)
    app.add_middleware(BodySizeLimit, limit_bytes=config.max_request_body_bytes)
    app.add_middleware(RequestMetrics, metrics=app.state.coordinator.metrics)

    return app
