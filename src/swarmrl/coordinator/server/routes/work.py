"""Work: upload slots, file uploads, submissions and verdicts.

Every upload and submission fills a unit the node holds a live lease on (`leases.py`); a submission for a
unit it does not hold is refused. The upload of a file must end by its slot's deadline, which allows the
signed start `clock_skew_s` plus the declared size at `upload_min_bytes_per_s`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from sqlalchemy import func, select
from starlette.concurrency import run_in_threadpool

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import (
    RowId,
    RunId,
    SlotId,
    SubmissionInfo,
    SubmitWork,
    UploadReceipt,
    UploadRequest,
    UploadSlotInfo,
    VerdictInfo,
    VerdictRequest,
)
from swarmrl.coordinator.errors import ApiError, AuthError, ConflictError, NotFoundError, RateLimitError
from swarmrl.coordinator.rules import janitor, leases, ledger
from swarmrl.coordinator.rules.penalties import hard_invalidate
from swarmrl.coordinator.server.access import (
    active_member,
    get_run,
    require_privileged,
    require_registered,
    require_validator,
)
from swarmrl.coordinator.server.auth import SignedCaller, authenticate_node, state_of
from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.server.views import submission_info, verdict_info
from swarmrl.coordinator.signing import RequestSignatureError, parse_signed_headers
from swarmrl.coordinator.store.db import Run, Submission, UploadSlot, Verdict, WorkUnit
from swarmrl.coordinator.store.storage import StorageError

router = APIRouter(tags=["work"])

HOUR_S = 3600.0
_SPOT_CHECK = secrets.SystemRandom()  # unpredictable to nodes: a draw they could foresee checks nothing
SLOTS_PER_UNIT = 3  # an upload retried a few times, not a unit kept alive by opening slot after slot


def _check_step_window(run: Run, step: int) -> None:
    """Work counts only for an opened step no older than the run's async level allows."""
    if step > run.current_step:
        raise ConflictError(f"step {step} has not opened (current {run.current_step})", kind="future_step")
    if step < run.current_step - run.async_level:
        raise ConflictError(
            f"step {step} is stale: current {run.current_step}, async level {run.async_level}",
            kind="stale_step",
        )


def storage_key(run_id: str, step: int, node_id: str, sha256: str, slot_id: str) -> str:
    """One key per slot: deleting an orphan can never remove the same bytes submitted through another slot."""
    return f"runs/{run_id}/step_{step}/{node_id}/{sha256}-{slot_id}.parquet"


def transfer_seconds(size_bytes: int, config: CoordinatorConfig) -> float:
    """How long an upload of this size may take from its signed start."""
    return config.clock_skew_s + size_bytes / config.upload_min_bytes_per_s


def _slots(session, *where) -> int:
    return session.scalar(select(func.count()).select_from(UploadSlot).where(*where)) or 0


def _check_slot_budget(
    session,
    run: Run,
    node_id: str,
    unit: WorkUnit,
    body: UploadRequest,
    config: CoordinatorConfig,
    now: float,
) -> None:
    """How many upload slots a node may open. Per leased unit a few (an upload retried, not a unit kept alive
    by opening slot after slot), and per step what the step's demand needs; both derive from the run's demand,
    so a lone node that does all of a run's work is never held back. `uploads_per_hour`, when an operator sets
    it, caps a node's slots in a rolling hour too, and says when the oldest one leaves the window."""
    run_id, mine = run.run_id, (UploadSlot.run_id == run.run_id, UploadSlot.node_id == node_id)
    at_unit = (UploadSlot.step == body.step, UploadSlot.batch_index == body.batch_index)
    if _slots(session, *mine, *at_unit, UploadSlot.created_at >= unit.leased_at) >= SLOTS_PER_UNIT:
        raise ConflictError(
            f"unit ({body.step}, {body.batch_index}) already had {SLOTS_PER_UNIT} upload slots",
            kind="unit_slots_used",
        )
    per_step = SLOTS_PER_UNIT * (leases.step_demand(run, config) + config.lease_slack_units)
    if _slots(session, *mine, UploadSlot.step == body.step) >= per_step:
        raise ConflictError(
            f"this node opened {per_step} upload slots for step {body.step} of {run_id!r}: more than its demand "
            "needs",
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


@router.post("/v1/runs/{run_id}/uploads", status_code=201, response_model=UploadSlotInfo)
def request_upload(run_id: RunId, body: UploadRequest, request: Request, who: SignedCaller) -> UploadSlotInfo:
    node_id = who.require_node()
    state = state_of(request)
    config = state.config
    now = state.clock()
    if body.size_bytes > config.upload_max_bytes:
        raise ApiError(
            f"{body.size_bytes} bytes is over the {config.upload_max_bytes}-byte cap",
            kind="too_large",
            status=413,
        )
    janitor.maybe_purge(state, now)
    with state.sessions() as session, session.begin():
        run = get_run(session, run_id)
        active_member(session, run_id, node_id, config, now)
        _check_step_window(run, body.step)
        unit = leases.live_unit(session, run_id, node_id, body.step, body.batch_index, now)
        if unit is None:
            raise ConflictError(
                f"this node holds no live lease on unit ({body.step}, {body.batch_index}); lease work first",
                kind="not_leased",
            )
        _check_slot_budget(session, run, node_id, unit, body, config, now)
        held = janitor.held_bytes(session, run_id, now)
        if held + body.size_bytes > config.storage_quota_bytes:
            raise ApiError(
                f"run {run_id!r} holds {held} bytes; {body.size_bytes} more would pass its quota of "
                f"{config.storage_quota_bytes}",
                kind="storage_quota",
                status=507,
            )
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
        # The unit lives while its file is in transit, and a little after for the submit.
        unit.expires_at = max(unit.expires_at, slot.expires_at + config.lease_grace_s)
        key = storage_key(run_id, body.step, node_id, body.sha256, slot.slot_id)
        upload_url = state.storage.upload_url(key, body.size_bytes, body.sha256)
        if upload_url is not None:
            slot.storage_key = key  # the node puts the bytes there itself; submit checks they arrived
        session.add(slot)
    return UploadSlotInfo(
        slot_id=slot.slot_id,
        upload_path=f"/v1/uploads/{slot.slot_id}",
        upload_url=upload_url,
        max_bytes=body.size_bytes,
        expires_at=slot.expires_at,
    )


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
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > slot.size_bytes:
        raise ApiError(
            f"upload of {declared} bytes exceeds the declared {slot.size_bytes}", kind="too_large", status=413
        )
    # The transfer must end by the slot's deadline and within what its size allows from the signed start:
    # a signature is fresh for clock_skew_s, not for however long a client chooses to trickle.
    deadline = min(slot.expires_at, started + transfer_seconds(slot.size_bytes, state.config))
    staged = state.staging_dir / f"{slot_id}.{secrets.token_hex(8)}.part"
    digest = hashlib.sha256()
    size = 0
    try:
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
            except TimeoutError:
                raise _too_slow(size, slot.size_bytes) from None
        if state.clock() > deadline:
            raise _too_slow(size, slot.size_bytes)
        body_sha256 = digest.hexdigest()
        await authenticate_node(request, body_sha256, now=started)
        if size != slot.size_bytes or body_sha256 != slot.sha256:
            raise ApiError(
                f"uploaded {size} bytes hashing to {body_sha256}; slot declared {slot.size_bytes} bytes "
                f"hashing to {slot.sha256}",
                kind="sha256_mismatch",
                status=422,
            )
        key = storage_key(slot.run_id, slot.step, slot.node_id, slot.sha256, slot_id)
        await run_in_threadpool(_store, state, slot_id, staged, key)
    finally:
        if os.path.exists(staged):
            os.unlink(staged)
    return UploadReceipt(slot_id=slot_id, sha256=body_sha256, size_bytes=size)


def _too_slow(received: int, declared: int) -> ApiError:
    return ApiError(
        f"upload did not finish by its deadline ({received} of {declared} bytes received)",
        kind="upload_deadline",
        status=408,
    )


def _open_slot(state: ServiceState, slot_id: str, node_id: str, now: float) -> UploadSlot:
    with state.sessions() as session:
        slot = session.get(UploadSlot, slot_id)
        if slot is None or slot.node_id != node_id:
            raise NotFoundError("no upload slot with that id for this node", kind="unknown_slot")
        if slot.uploaded:
            raise ConflictError("this slot already received its file", kind="slot_used")
        if slot.expires_at < now:
            raise ConflictError("this upload slot has expired; ask for a new one", kind="slot_expired")
        return slot


def _confirm_direct_upload(state: ServiceState, slot: UploadSlot) -> None:
    """A presigned upload went straight to the store, which enforced the SHA-256; check it landed whole."""
    size = state.storage.size(slot.storage_key)
    if size is None:
        return
    if size != slot.size_bytes:
        raise ApiError(
            f"the stored object has {size} bytes; the slot declared {slot.size_bytes}",
            kind="size_mismatch",
            status=422,
        )
    slot.uploaded = True


def _store(state: ServiceState, slot_id: str, staged: Path, key: str) -> None:
    with state.sessions() as session, session.begin():
        slot = session.get(UploadSlot, slot_id)
        if slot is None or slot.uploaded:
            raise ConflictError("this slot already received its file", kind="slot_used")
        state.storage.put(key, staged)
        slot.uploaded = True
        slot.storage_key = key


@router.post("/v1/runs/{run_id}/submissions", status_code=201, response_model=SubmissionInfo)
def submit(run_id: RunId, body: SubmitWork, request: Request, who: SignedCaller) -> SubmissionInfo:
    """Claim an uploaded file as the work of its leased unit: (sha256, rows, tokens). Credit waits for a verdict
    (or, in spot-check mode, is given at once to the files the draw leaves unchecked)."""
    node_id = who.require_node()
    state = state_of(request)
    config = state.config
    now = state.clock()
    with state.sessions() as session, session.begin():
        run = get_run(session, run_id)
        require_registered(session, node_id)
        member = active_member(session, run_id, node_id, config, now)
        slot = session.get(UploadSlot, body.slot_id)
        if slot is None or slot.node_id != node_id or slot.run_id != run_id:
            raise NotFoundError("no upload slot with that id for this node and run", kind="unknown_slot")
        if not slot.uploaded and slot.storage_key is not None:
            _confirm_direct_upload(state, slot)
        if not slot.uploaded or slot.storage_key is None:
            raise ConflictError("the file for this slot has not been uploaded", kind="not_uploaded")
        if slot.sha256 != body.sha256 or slot.step != body.step:
            raise ApiError("sha256/step differ from the uploaded file's", kind="sha256_mismatch", status=422)
        _check_step_window(run, body.step)
        if (
            session.scalar(
                select(Submission.id).where(Submission.run_id == run_id, Submission.sha256 == body.sha256)
            )
            is not None
        ):
            raise ConflictError("this file was already submitted", kind="duplicate_submission")
        unit = _unit_of_slot(session, slot, now)
        checked = config.spot_check_fraction >= 1.0 or _SPOT_CHECK.random() < config.spot_check_fraction
        submission = Submission(
            run_id=run_id,
            node_id=node_id,
            step=body.step,
            sha256=body.sha256,
            size_bytes=slot.size_bytes,
            rows=body.rows,
            tokens=body.tokens,
            storage_key=slot.storage_key,
            status="pending" if checked else "accepted",
            submitted_at=now,
            batch_index=slot.batch_index,
            checked=checked,
        )
        session.add(submission)
        session.flush()
        member.unit_seconds = leases.updated_speed(
            member.unit_seconds, leases.seconds_for(session, unit, now), config.speed_smoothing
        )
        unit.status = "submitted" if checked else "accepted"
        unit.submission_id, unit.ended_at = submission.id, now
        slot.submitted = True
        if not checked:
            ledger.credit(session, submission, now, config.credit_unlock_window_s)
        info = submission_info(submission)
    state.metrics.submissions.inc()
    return info


def _unit_of_slot(session, slot: UploadSlot, now: float) -> WorkUnit:
    """The live unit this slot's file fills; the slot was opened under it, the submit must come before it lapses."""
    unit = None
    if slot.batch_index is not None:
        unit = leases.live_unit(session, slot.run_id, slot.node_id, slot.step, slot.batch_index, now)
    if unit is None:
        raise ConflictError(
            f"no live lease on unit ({slot.step}, {slot.batch_index}) for this node: it expired, was voided "
            "or was never held",
            kind="lease_expired",
        )
    return unit


@router.get(
    "/v1/submissions/{submission_id}/file",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}},
)
def submission_file(submission_id: RowId, request: Request, who: SignedCaller) -> FileResponse:
    state = state_of(request)
    with state.sessions() as session:
        submission = session.get(Submission, submission_id)
        if submission is None:
            raise NotFoundError(f"no submission {submission_id}", kind="unknown_submission")
        require_privileged(session, get_run(session, submission.run_id), who)
        key = submission.storage_key
    try:
        path = state.storage.path(key)
    except StorageError as exc:
        raise NotFoundError(str(exc), kind="file_missing") from exc
    return FileResponse(path, media_type="application/octet-stream")


@router.post("/v1/submissions/{submission_id}/verdict", response_model=VerdictInfo)
def post_verdict(
    submission_id: RowId, body: VerdictRequest, request: Request, who: SignedCaller
) -> VerdictInfo:
    """Accept (credit pending until the window passes) or reject (soft: drop; hard: void the node's unpaid
    work, eject, maybe ban). One verdict per file: a file another validator holds a live lease on, a decided
    file and a voided file are refused."""
    state = state_of(request)
    config = state.config
    now = state.clock()
    with state.sessions() as session, session.begin():
        submission = session.get(Submission, submission_id)
        if submission is None:
            raise NotFoundError(f"no submission {submission_id}", kind="unknown_submission")
        validator_key = require_validator(session, submission.run_id, who)
        if submission.status == "voided":
            raise ConflictError(
                f"submission {submission_id} was voided: its node was hard-invalidated or banned",
                kind="voided",
            )
        if submission.status != "pending":
            raise ConflictError(
                f"submission {submission_id} is already {submission.status}", kind="already_decided"
            )
        if (
            submission.judge_key not in (None, validator_key)
            and submission.judge_until is not None
            and submission.judge_until >= now
        ):
            raise ConflictError(
                f"another validator holds the lease on submission {submission_id}", kind="lease_held"
            )
        severity = None if body.accept else config.severity_of(body.check)
        verdict = Verdict(
            submission_id=submission.id,
            validator_key=validator_key,
            accepted=body.accept,
            check_name=body.check,
            reason=body.reason,
            severity=severity,
            rewards_summary=body.rewards_summary,
            decided_at=now,
        )
        session.add(verdict)
        ledger.settle(session, submission.run_id, now)
        submission.status = "accepted" if body.accept else "rejected"
        submission.judge_key, submission.judge_until = validator_key, None
        unit = session.scalar(select(WorkUnit).where(WorkUnit.submission_id == submission.id))
        if unit is not None:
            unit.status, unit.ended_at = submission.status, now
        if body.accept:
            ledger.credit(session, submission, now, config.credit_unlock_window_s)
        elif severity == "hard":
            # Spot-checking judges only a fraction of files, so one caught forgery must cost everything.
            threshold = 1 if config.spot_check_fraction < 1.0 else config.hard_rejects_before_ban
            session.flush()
            hard_invalidate(session, submission, threshold, now)
        info = verdict_info(verdict, submission)
    state.metrics.verdicts.labels(outcome="accept" if body.accept else f"reject_{severity}").inc()
    return info
