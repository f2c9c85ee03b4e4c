"""Who is calling: a node proven by its request signature, or the operator holding the admin token."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import bindparam, delete, insert, select
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool

from swarmrl.coordinator.errors import AuthError, ForbiddenError, RateLimitError
from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.signing import RequestSignatureError, SignedHeaders, verify_request
from swarmrl.coordinator.store.db import Ban, Nonce

NONCE_PURGE_EVERY_S = 60.0


@dataclass(frozen=True)
class Caller:
    """`node_id` is None for the admin."""

    node_id: str | None

    @property
    def is_admin(self) -> bool:
        return self.node_id is None

    def require_node(self) -> str:
        if self.node_id is None:
            raise ForbiddenError(
                "this endpoint needs a node signature, not the admin token", kind="node_required"
            )
        return self.node_id


def state_of(request: Request) -> ServiceState:
    return request.app.state.coordinator


def signed_target(request: Request) -> str:
    """The path and query exactly as they came over the wire (what the client signed)."""
    raw_path = request.scope.get("raw_path") or request.scope["path"].encode()
    query = request.scope.get("query_string", b"")
    target = raw_path.decode("latin-1")
    return f"{target}?{query.decode('latin-1')}" if query else target


def check_admin(state: ServiceState, authorization: str | None) -> Caller:
    if state.admin_token is None:
        raise ForbiddenError("this coordinator has no admin token configured", kind="admin_disabled")
    if not authorization:
        raise AuthError("admin endpoints need 'Authorization: Bearer <token>'", kind="admin_token_required")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        token.strip().encode(), state.admin_token.encode()
    ):
        raise ForbiddenError("admin token does not match", kind="admin_token_invalid")
    return Caller(node_id=None)


# Two statements on a plain connection: the ORM session, its identity-map load of the ban and its flush cost
# most of a heartbeat's CPU, and every signed request pays this. (Not one INSERT ... WHERE NOT EXISTS: the
# Postgres driver does not report how many rows an INSERT wrote.)
_BANNED = select(Ban.node_id).where(Ban.node_id == bindparam("node_id"))
_BURN_NONCE = insert(Nonce)


def _record_nonce(state: ServiceState, signed: SignedHeaders, now: float) -> None:
    try:
        with state.engine.begin() as connection:
            if connection.execute(_BANNED, {"node_id": signed.node_id}).first() is not None:
                raise ForbiddenError("this node is banned", kind="banned")
            # The primary key refuses a nonce this node used before, in any coordinator process.
            connection.execute(
                _BURN_NONCE, {"node_id": signed.node_id, "nonce": signed.nonce, "seen_at": now}
            )
    except IntegrityError as exc:
        raise AuthError("nonce already used by this node", kind="replayed_nonce") from exc
    _purge_old_nonces(state, now)


def _purge_old_nonces(state: ServiceState, now: float) -> None:
    # A nonce older than the skew window can never be replayed: its timestamp would be refused first.
    if now - state.nonce_purged_at < NONCE_PURGE_EVERY_S or not state.purge_lock.acquire(blocking=False):
        return
    try:
        state.nonce_purged_at = now
        with state.sessions() as session, session.begin():
            session.execute(delete(Nonce).where(Nonce.seen_at < now - 2 * state.config.clock_skew_s))
    finally:
        state.purge_lock.release()


async def authenticate_node(request: Request, body_sha256: str, *, now: float | None = None) -> str:
    """Verify the signature over this request, refuse banned keys, burn the nonce, apply the rate limit."""
    state = state_of(request)
    now = state.clock() if now is None else now
    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        signed = verify_request(
            headers,
            request.method,
            signed_target(request),
            body_sha256,
            now=now,
            max_skew_s=state.config.clock_skew_s,
        )
    except RequestSignatureError as exc:
        raise AuthError(exc.detail, kind=exc.kind) from exc
    await run_in_threadpool(_record_nonce, state, signed, now)
    if not state.limiter.take(signed.node_id):
        raise RateLimitError(
            f"more than {state.config.requests_per_minute} requests per minute from this node",
            retry_after_s=60.0 / state.config.requests_per_minute,  # the time one token takes to refill
        )
    return signed.node_id


async def caller(request: Request) -> Caller:
    """FastAPI dependency: the admin when a bearer token is sent, else the signing node."""
    state = state_of(request)
    authorization = request.headers.get("authorization")
    if authorization is not None:
        return check_admin(state, authorization)
    body = await request.body()
    return Caller(node_id=await authenticate_node(request, hashlib.sha256(body).hexdigest()))


async def admin_only(request: Request) -> Caller:
    return check_admin(state_of(request), request.headers.get("authorization"))


SignedCaller = Annotated[Caller, Depends(caller)]
AdminCaller = Annotated[Caller, Depends(admin_only)]
