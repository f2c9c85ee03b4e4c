"""Upload slots and the bytes of rollout files.

A slot is bound to a unit the node holds a live lease on. Opening one reserves nothing and extends nothing:
the run's storage quota counts the bytes that arrived, and the unit stays leased only while bytes arrive. A
transfer must end by its slot's deadline (`clock_skew_s` plus the declared size at `upload_min_bytes_per_s`
from its signed start); while it runs, the unit's deadline moves (every KEEPALIVE_S) to what the bytes received so
far allow at that slowest rate, so a trickle lets the unit lapse and the transfer ends with it. A stored file extends the
unit by `lease_grace_s` for its submit. A node may also send a file and its submission in one request (a slot
made, filled and submitted at once): one round trip instead of three, where each costs a continent's latency.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import (
    FileSubmission,
    RunId,
    SlotId,
    SubmissionInfo,
    SubmitWork,
    UploadReceipt,
    UploadRequest,
    UploadSlotInfo,
)
from swarmrl.coordinator.errors import ApiError, AuthError, ConflictError, NotFoundError, RateLimitError
from swarmrl.coordinator.rules import janitor, leases, storage_room
from swarmrl.coordinator.server.access import active_member, check_step_window, get_run
from swarmrl.coordinator.server.auth import SignedCaller, authenticate_node, state_of
from swarmrl.coordinator.server.routes.work import record_submission
from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.signing import RequestSignatureError, parse_signed_headers
from swarmrl.coordinator.store.db import Membership, Run, UploadSlot, WorkUnit

router = APIRouter(tags=["work"])

HOUR_S = 3600.0
SLOTS_PER_UNIT = 3  # an upload retried a few times, not a unit kept alive by opening slot after slot
KEEPALIVE_S = 5.0  # while bytes arrive, the unit's deadline is moved at most this often (one write each)


def storage_key(run_id: str, step: int, node_id: str, sha256: str, slot_id: str) -> str:
    """One key per slot: deleting an orphan can never remove the same bytes submitted through another slot."""
    return f"runs/{run_id}/step_{step}/{node_id}/{sha256}-{slot_id}.parquet"


def transfer_seconds(size_bytes: int, config: CoordinatorConfig) -> float:
    """How long an upload of this size may take from its signed start."""
    return config.clock_skew_s + size_bytes / config.upload_min_bytes_per_s


def _too_large(size: int, config: CoordinatorConfig) -> ApiError | None:
    if size <= config.upload_max_bytes:
        return None
    return ApiError(
        f"{size} bytes is over the {config.upload_max_bytes}-byte cap", kind="too_large", status=413
    )


def _slots(session: Session, *where) -> int:
    return session.scalar(select(func.count()).select_from(UploadSlot).where(*where)) or 0


def _check_slot_budget(
    session: Session, run: Run, node_id: str, body: UploadRequest, unit: WorkUnit, now: float,
    config: CoordinatorConfig,
) -> None:  # fmt: skip
    """How many upload slots a node may open. Per leased unit a few (an upload retried, not a unit kept alive
    by opening slot after slot), and per step what the step's demand needs; both derive from the run's demand,
    so a lone node that does all of a run's work is never held back. `uploads_per_hour`, when an operator sets
    it, caps a node's slots in a rolling hour too, and says when the oldest one leaves the window."""
    mine = (UploadSlot.run_id == run.run_id, UploadSlot.node_id == node_id)
    at_unit = (UploadSlot.step == body.step, UploadSlot.batch_index == body.batch_index)
    if _slots(session, *mine, *at_unit, UploadSlot.created_at >= unit.leased_at) >= SLOTS_PER_UNIT:
        raise ConflictError(
            f"unit ({body.step}, {body.batch_index}) already had {SLOTS_PER_UNIT} upload slots",
            kind="unit_slots_used",
        )
    per_step = SLOTS_PER_UNIT * (leases.step_demand(run, config) + config.lease_slack_units)
    if _slots(session, *mine, UploadSlot.step == body.step) >= per_step:
        raise ConflictError(
            f"this node opened {per_step} upload slots for step {body.step} of {run.run_id!r}: more than its "
            "demand needs",
            kind="step_slots_used",
        )
    if config.uploads_per_hour is None:
        return
    window = (UploadSlot.node_id == node_id, UploadSlot.created_at > now - HOUR_S)
    if _slots(session, *window) >= config.uploads_per_hour:
        oldest = session.scalar(select(func.min(UploadSlot.created_at)).where(*window)) or now
        raise RateLimitError(
            f"at most {config.uploads_per_hour} uploads per hour per node",
            kind="upload_rate_limited",
            retry_after_s=max(1.0, oldest + HOUR_S - now),
        )


def _held_unit(
    session: Session, run_id: str, node_id: str, step: int, batch_index: int | None, now: float
) -> WorkUnit:
    # None: a slot from before units had batch indexes (schema v1), which no lease holds.
    unit = None if batch_index is None else leases.live_unit(session, run_id, node_id, step, batch_index, now)
    if unit is None:
        raise ConflictError(
            f"this node holds no live lease on unit ({step}, {batch_index}); lease work first",
            kind="not_leased",
        )
    return unit


@router.post("/v1/runs/{run_id}/uploads", status_code=201, response_model=UploadSlotInfo)
def request_upload(run_id: RunId, body: UploadRequest, request: Request, who: SignedCaller) -> UploadSlotInfo:
    """A slot for the file of a unit the node holds. It reserves no storage and does not extend the unit."""
    slot, upload_url = _create_slot(state_of(request), run_id, who.require_node(), body, presign=True)
    return UploadSlotInfo(
        slot_id=slot.slot_id,
        upload_path=f"/v1/uploads/{slot.slot_id}",
        upload_url=upload_url,
        max_bytes=body.size_bytes,
        expires_at=slot.expires_at,
    )


def _create_slot(
    state: ServiceState, run_id: str, node_id: str, body: UploadRequest, *, presign: bool
) -> tuple[UploadSlot, str | None]:
    """The slot, and with `presign` the storage's own upload URL for it (None: upload through here)."""
    config, now = state.config, state.clock()
    if (too_large := _too_large(body.size_bytes, config)) is not None:
        raise too_large
    janitor.maybe_purge(state, now)
    with state.sessions() as session, session.begin():
        run = get_run(session, run_id)
        member = active_member(session, run_id, node_id, config, now)
        storage_room.check_size(run, body.size_bytes, config)
        check_step_window(run, body.step, config)
        unit = _held_unit(session, run_id, node_id, body.step, body.batch_index, now)
        _check_slot_budget(session, run, node_id, body, unit, now, config)
        # early: what has arrived leaves no room
        storage_room.check_room(session, run_id, leases.is_proven(member, config), body.size_bytes, config)
        slot = UploadSlot(
            slot_id=secrets.token_hex(16),
            run_id=run_id,
            node_id=node_id,
            step=body.step,
            batch_index=body.batch_index,
            sha256=body.sha256,
            size_bytes=body.size_bytes,
            created_at=now,
            expires_at=now + min(config.upload_slot_ttl_s, transfer_seconds(body.size_bytes, config)),
            uploaded=False,
            submitted=False,
        )
        key = storage_key(run_id, body.step, node_id, body.sha256, slot.slot_id)
        upload_url = state.storage.upload_url(key, body.size_bytes, body.sha256) if presign else None
        if upload_url is not None:
            slot.storage_key = key  # the node puts the bytes there itself; submit checks they arrived
        session.add(slot)
    return slot, upload_url


@router.put(
    "/v1/uploads/{slot_id}",
    response_model=UploadReceipt,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def upload(slot_id: SlotId, request: Request) -> UploadReceipt:
    """Raw file bytes; signed like every node request (the signature covers the bytes' sha256)."""
    state = state_of(request)
    started = state.clock()
    # Cheap checks before reading up to 100 MiB: signed headers present, well formed and fresh.
    try:
        signed = parse_signed_headers({k.lower(): v for k, v in request.headers.items()})
    except RequestSignatureError as exc:
        raise AuthError(exc.detail, kind=exc.kind) from exc
    if abs(started - signed.timestamp) > state.config.clock_skew_s:
        raise AuthError("timestamp outside the skew window", kind="expired")
    slot = await run_in_threadpool(_open_slot, state, slot_id, signed.node_id, started)
    return await _keep_file(request, state, slot, started, signed_over_bytes=True)


@router.put(
    "/v1/uploads/runs/{run_id}/submissions",
    status_code=201,
    response_model=SubmissionInfo,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def upload_and_submit(
    run_id: RunId, claim: Annotated[FileSubmission, Query()], request: Request
) -> SubmissionInfo:
    """A leased unit's file and its submission in one request: the slot, the bytes and the submit that take
    three round trips otherwise (seconds, from a node a continent away). The signature covers the query, so
    the sha256 it declares: the request is authenticated before a byte is read, and the bytes must hash to it.
    Refused with `direct_upload` where the storage takes files straight from nodes (ask for a slot there)."""
    state = state_of(request)
    started = state.clock()
    node_id = await authenticate_node(request, claim.sha256, now=started)
    if state.storage.takes_direct_uploads:
        raise ConflictError(
            "this coordinator's storage takes files straight from nodes: ask for an upload slot",
            kind="direct_upload",
        )
    wanted = UploadRequest(
        step=claim.step, batch_index=claim.batch_index, sha256=claim.sha256, size_bytes=claim.size_bytes
    )
    slot, _ = await run_in_threadpool(_create_slot, state, run_id, node_id, wanted, presign=False)
    await _keep_file(request, state, slot, started, signed_over_bytes=False)
    work = SubmitWork(
        slot_id=slot.slot_id, sha256=claim.sha256, step=claim.step, rows=claim.rows, tokens=claim.tokens
    )
    return await run_in_threadpool(record_submission, state, run_id, node_id, work)


async def _keep_file(
    request: Request, state: ServiceState, slot: UploadSlot, started: float, *, signed_over_bytes: bool
) -> UploadReceipt:
    """Receive the slot's file and store it. `signed_over_bytes`: the request's signature is checked here, over
    the bytes received (an upload to a slot); else it was checked before any were read, over the sha256 the
    query declared, and the bytes must match the slot like any upload's."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > slot.size_bytes:
        raise ApiError(
            f"upload of {declared} bytes exceeds the declared {slot.size_bytes}", kind="too_large", status=413
        )
    staged = state.staging_dir / f"{slot.slot_id}.{secrets.token_hex(8)}.part"
    try:
        size, body_sha256 = await _receive(request, state, slot, started, staged)
        if signed_over_bytes:
            await authenticate_node(request, body_sha256, now=started)
        if size != slot.size_bytes or body_sha256 != slot.sha256:
            raise ApiError(
                f"uploaded {size} bytes hashing to {body_sha256}; slot declared {slot.size_bytes} bytes "
                f"hashing to {slot.sha256}",
                kind="sha256_mismatch",
                status=422,
            )
        key = storage_key(slot.run_id, slot.step, slot.node_id, slot.sha256, slot.slot_id)
        await run_in_threadpool(_store, state, slot.slot_id, staged, key)
    finally:
        if os.path.exists(staged):
            os.unlink(staged)
    return UploadReceipt(slot_id=slot.slot_id, sha256=body_sha256, size_bytes=size)


async def _receive(
    request: Request, state: ServiceState, slot: UploadSlot, started: float, staged: Path
) -> tuple[int, str]:
    """Stream the body into `staged` by the slot's deadline, keeping the unit leased as bytes arrive; returns
    the size and sha256 received."""
    config = state.config
    deadline = min(slot.expires_at, started + transfer_seconds(slot.size_bytes, config))
    digest = hashlib.sha256()
    size, kept_alive_at = 0, started
    with open(staged, "wb") as f:
        try:
            async with asyncio.timeout(max(0.0, deadline - state.clock())):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > slot.size_bytes:
                        raise ApiError(
                            f"upload exceeds the declared {slot.size_bytes} bytes",
                            kind="too_large",
                            status=413,
                        )
                    digest.update(chunk)
                    f.write(chunk)
                    if state.clock() - kept_alive_at >= KEEPALIVE_S:
                        kept_alive_at = state.clock()
                        earned = started + transfer_seconds(size, config)
                        await run_in_threadpool(_keep_unit, state, slot, earned)
        except TimeoutError:
            raise _too_slow(size, slot.size_bytes) from None
    if state.clock() > deadline:
        raise _too_slow(size, slot.size_bytes)
    return size, digest.hexdigest()


def _too_slow(received: int, declared: int) -> ApiError:
    return ApiError(
        f"upload did not finish by its deadline ({received} of {declared} bytes received)",
        kind="upload_deadline",
        status=408,
    )


def _keep_unit(state: ServiceState, slot: UploadSlot, earned_until: float) -> None:
    """Bytes arrived: the slot's unit stays leased until `earned_until` (what they allow at the slowest rate)
    and the next keep-alive, plus the grace."""
    until = earned_until + KEEPALIVE_S + state.config.lease_grace_s
    with state.sessions() as session, session.begin():
        _extend_unit(session, slot, until, state.clock())


def _extend_unit(session: Session, slot: UploadSlot, until: float, now: float) -> None:
    """Move the deadline of the slot's unit to `until`; refused once the unit has lapsed (it may be re-leased)."""
    unit = (
        None
        if slot.batch_index is None  # a schema v1 slot: no lease holds it
        else leases.live_unit(session, slot.run_id, slot.node_id, slot.step, slot.batch_index, now)
    )
    if unit is None:
        raise ConflictError(
            f"the lease on unit ({slot.step}, {slot.batch_index}) lapsed during the upload",
            kind="lease_expired",
        )
    unit.expires_at = max(unit.expires_at, until)


def _open_slot(state: ServiceState, slot_id: str, node_id: str, now: float) -> UploadSlot:
    with state.sessions() as session:
        slot = session.get(UploadSlot, slot_id)
        if slot is None or slot.node_id != node_id:
            raise NotFoundError("no upload slot with that id for this node", kind="unknown_slot")
        if slot.uploaded:
            raise ConflictError("this slot already received its file", kind="slot_used")
        if slot.expires_at < now:
            raise ConflictError("this upload slot has expired; ask for a new one", kind="slot_expired")
        _held_unit(session, slot.run_id, node_id, slot.step, slot.batch_index, now)
        return slot


def _store(state: ServiceState, slot_id: str, staged: Path, key: str) -> None:
    """Keep the file: the quota counts it from now, and its unit waits `lease_grace_s` for the submit."""
    now = state.clock()
    with state.sessions() as session, session.begin():
        slot = session.get(UploadSlot, slot_id)
        if slot is None or slot.uploaded:
            raise ConflictError("this slot already received its file", kind="slot_used")
        member = session.get(Membership, (slot.run_id, slot.node_id))
        proven = member is not None and leases.is_proven(member, state.config)
        storage_room.check_room(session, slot.run_id, proven, slot.size_bytes, state.config)
        _extend_unit(session, slot, now + state.config.lease_grace_s, now)
        state.storage.put(key, staged)
        slot.uploaded = True
        slot.storage_key = key
