"""Community task packs: an author's submission, what anyone may read of packs, each step's mix, the archives
nodes fetch, and the run's pack policy (its operator's [tasks.community]).

A submission is a signed upload of the pack's archive: the signature covers the query (the archive's sha256,
size and proof-of-work ticket), so the request is authenticated and its caps checked before a byte is read,
and the bytes must hash to what it declared. On receipt the archive is read in memory, never extracted, and
checked statically (`tasks/packs`: caps, manifest, rows, the author's signature over every file); the signing
key must be the manifest's author. Nothing of the pack runs here.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from swarmrl.configs.task_packs import CommunityTasksConfig, PackLimitsConfig
from swarmrl.coordinator.api import HexKey, Ok, RowId, RunId, Step
from swarmrl.coordinator.errors import ApiError, ConflictError, ForbiddenError, NotFoundError
from swarmrl.coordinator.pack_api import (
    PackDetail,
    PackInfo,
    PackMix,
    PackPolicyInfo,
    PackShareInfo,
    PackStatus,
    PackUpload,
)
from swarmrl.coordinator.rules import pack_credit
from swarmrl.coordinator.rules.pack_mix import policy_of, step_mix
from swarmrl.coordinator.server.access import get_run, require_privileged
from swarmrl.coordinator.server.auth import AdminCaller, SignedCaller, authenticate_node, state_of
from swarmrl.coordinator.server.pack_views import pack_detail, pack_infos
from swarmrl.coordinator.server.routes.uploads import transfer_seconds
from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.store.pack_tables import IN_MIX, WAITING, PackPolicy, TaskPackRecord
from swarmrl.tasks.packs.errors import PackError
from swarmrl.tasks.packs.files import archive_files
from swarmrl.tasks.packs.mix import PackShare
from swarmrl.tasks.packs.pack import TaskPack, pack_from_files
from swarmrl.tasks.packs.ticket import ticket_ok

router = APIRouter(tags=["packs"])
PUBLIC_STATES = (*IN_MIX, "retired")  # packs whose archive any signed node may fetch


def pack_of(session: Session, run_id: str, pack_id: int) -> TaskPackRecord:
    pack = session.get(TaskPackRecord, pack_id)
    if pack is None or pack.run_id != run_id:
        raise NotFoundError(f"no pack {pack_id} in run {run_id!r}", kind="unknown_pack")
    return pack


def accepting_policy(session: Session, run_id: str) -> CommunityTasksConfig:
    get_run(session, run_id)
    policy = policy_of(session, run_id)
    if policy is None or not policy.accept:
        raise ForbiddenError(f"run {run_id!r} takes no task packs", kind="packs_not_accepted")
    return policy


# --- submission -----------------------------------------------------------------------------------------------
@router.put(
    "/v1/uploads/runs/{run_id}/packs",
    status_code=201,
    response_model=PackInfo,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def submit_pack(run_id: RunId, claim: Annotated[PackUpload, Query()], request: Request) -> PackInfo:
    """A pack's .tar.gz, signed by its author; refused before any byte is read past the run's caps."""
    state = state_of(request)
    started = state.clock()
    author = await authenticate_node(request, claim.sha256, now=started)
    policy = await run_in_threadpool(_room_for, state, run_id, author, claim)
    data = await _receive(request, state, claim, started)
    pack = await run_in_threadpool(_read_pack, data, policy.admission.limits, f"pack {claim.sha256[:16]}")
    if pack.manifest.author != author:
        raise ForbiddenError(
            f"the pack's author is {pack.manifest.author[:16]}…, not the submitting key", kind="not_author"
        )
    if not ticket_ok(run_id, pack.digest, author, claim.ticket, policy.budget.ticket_bits):
        raise ApiError(
            f"the ticket does not have {policy.budget.ticket_bits} leading zero bits for this run, pack and author",
            kind="bad_ticket",
            status=422,
        )
    return await run_in_threadpool(_keep, state, run_id, pack, data)


def _room_for(state: ServiceState, run_id: str, author: str, claim: PackUpload) -> CommunityTasksConfig:
    """The run takes packs, this one's size fits, and neither the author's nor the run's waiting packs are at
    their caps: all known before the body is read."""
    with state.sessions() as session:
        policy = accepting_policy(session, run_id)
        cap = policy.admission.limits.max_archive_bytes
        if claim.size_bytes > cap:
            raise ApiError(
                f"{claim.size_bytes} bytes is over the {cap}-byte cap on a pack", kind="too_large", status=413
            )
        _check_waiting(session, run_id, author, policy)
    return policy


def _check_waiting(session: Session, run_id: str, author: str, policy: CommunityTasksConfig) -> None:
    waiting = (
        select(func.count())
        .select_from(TaskPackRecord)
        .where(TaskPackRecord.run_id == run_id, TaskPackRecord.status.in_(WAITING))
    )
    if (
        session.scalar(waiting.where(TaskPackRecord.author == author)) or 0
    ) >= policy.budget.max_pending_per_author:
        raise ConflictError(
            f"this author has {policy.budget.max_pending_per_author} pack(s) waiting for admission already",
            kind="author_packs_waiting",
        )
    queued = session.scalar(waiting.where(TaskPackRecord.status == "pending")) or 0
    if queued >= policy.budget.max_pending:
        raise ApiError(
            f"run {run_id!r} has {queued} packs waiting for admission: try later",
            kind="packs_queue_full",
            status=503,
        )


async def _receive(request: Request, state: ServiceState, claim: PackUpload, started: float) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) != claim.size_bytes:
        raise ApiError(
            f"body of {declared} bytes; the query declared {claim.size_bytes}",
            kind="size_mismatch",
            status=422,
        )
    chunks, size = [], 0
    try:
        async with asyncio.timeout(transfer_seconds(claim.size_bytes, state.config)):
            async for chunk in request.stream():
                size += len(chunk)
                if size > claim.size_bytes:
                    raise ApiError(
                        f"body exceeds the declared {claim.size_bytes} bytes", kind="too_large", status=413
                    )
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(
            f"upload did not finish in time ({size} of {claim.size_bytes} bytes)",
            kind="upload_deadline",
            status=408,
        ) from None
    data = b"".join(chunks)
    if len(data) != claim.size_bytes or hashlib.sha256(data).hexdigest() != claim.sha256:
        raise ApiError("the bytes are not the archive the query declared", kind="sha256_mismatch", status=422)
    return data


def _read_pack(data: bytes, limits: PackLimitsConfig, origin: str) -> TaskPack:
    try:
        return pack_from_files(archive_files(data, origin, limits), limits)
    except PackError as exc:
        raise ApiError(str(exc)[:2000], kind="invalid_pack", status=422) from exc


def _keep(state: ServiceState, run_id: str, pack: TaskPack, data: bytes) -> PackInfo:
    key = f"runs/{run_id}/packs/{pack.digest}.tar.gz"
    staged = state.staging_dir / f"pack-{secrets.token_hex(8)}.part"
    with state.sessions() as session, session.begin():
        policy = accepting_policy(session, run_id)
        _check_waiting(session, run_id, pack.manifest.author, policy)
        taken = select(TaskPackRecord.id).where(
            TaskPackRecord.run_id == run_id, TaskPackRecord.digest == pack.digest
        )
        if session.scalar(taken) is not None:
            raise ConflictError(f"pack {pack.digest} was submitted to this run before", kind="duplicate_pack")
        staged.write_bytes(data)
        try:
            state.storage.put(key, staged)
        finally:
            if os.path.exists(staged):
                os.unlink(staged)
        record = TaskPackRecord(
            run_id=run_id,
            digest=pack.digest,
            author=pack.manifest.author,
            label=pack.manifest.label,
            rows=len(pack.rows),
            pass_score=pack.manifest.verifier.pass_score,
            size_bytes=len(data),
            storage_key=key,
            status="pending",
            submitted_at=state.clock(),
        )
        session.add(record)
        session.flush()
        return pack_infos(session, [record])[0]


# --- reads ----------------------------------------------------------------------------------------------------
@router.get("/v1/runs/{run_id}/packs", response_model=list[PackInfo])
def list_packs(
    run_id: RunId,
    request: Request,
    status: PackStatus | None = None,
    digest: Annotated[str | None, Query(pattern=r"^[0-9a-f]{64}$")] = None,
    author: HexKey | None = None,
    after_id: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 200,
) -> list[PackInfo]:
    state = state_of(request)
    with state.sessions() as session, session.begin():
        get_run(session, run_id)
        pack_credit.settle(session, run_id, state.clock())
        query = select(TaskPackRecord).where(TaskPackRecord.run_id == run_id, TaskPackRecord.id > after_id)
        for column, value in (
            (TaskPackRecord.status, status),
            (TaskPackRecord.digest, digest),
            (TaskPackRecord.author, author),
        ):
            if value is not None:
                query = query.where(column == value)
        return pack_infos(session, list(session.scalars(query.order_by(TaskPackRecord.id).limit(limit))))


@router.get("/v1/runs/{run_id}/packs/{pack_id:int}", response_model=PackDetail)
def get_pack(run_id: RunId, pack_id: RowId, request: Request) -> PackDetail:
    """A pack with its whole admission report: every check with its figures (the author sees why)."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        pack_credit.settle(session, run_id, state.clock())
        return pack_detail(session, pack_of(session, run_id, pack_id))


@router.get("/v1/runs/{run_id}/packs/{pack_id:int}/archive", response_class=Response)
def pack_archive(run_id: RunId, pack_id: RowId, request: Request, who: SignedCaller) -> Response:
    """The pack's archive: to any signed node once it is in the run's mix (its prompts are what units hold);
    before, to its author and the run's trusted roles only."""
    state = state_of(request)
    with state.sessions() as session:
        pack = pack_of(session, run_id, pack_id)
        if pack.status not in PUBLIC_STATES and who.node_id != pack.author:
            require_privileged(session, get_run(session, run_id), who)
        key = pack.storage_key
    return Response(state.storage.get(key), media_type="application/gzip")


@router.get("/v1/runs/{run_id}/packs/mix/{step}", response_model=PackMix)
def pack_mix(run_id: RunId, step: Step, request: Request) -> PackMix:
    """The packs of step `step` and their shares of its units, fixed the first time anyone reads them."""
    state = state_of(request)
    try:
        shares = _mix(state, run_id, step)
    except IntegrityError:  # another reader fixed it at the same moment: read theirs
        shares = _mix(state, run_id, step)
    return PackMix(step=step, packs=[PackShareInfo(**share.__dict__) for share in shares])


def _mix(state: ServiceState, run_id: str, step: int) -> list[PackShare]:
    with state.sessions() as session, session.begin():
        return step_mix(session, get_run(session, run_id), step, state.config, state.clock())


# --- the operator's policy ---------------------------------------------------------------------------------------
@router.put("/v1/runs/{run_id}/packs/policy", response_model=Ok)
def set_policy(run_id: RunId, body: CommunityTasksConfig, request: Request, _: AdminCaller) -> Ok:
    """The run's [tasks.community]: whether it takes packs, their shares, budgets and retirement."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        get_run(session, run_id)
        row = session.get(PackPolicy, run_id)
        if row is None:
            session.add(PackPolicy(run_id=run_id, policy=body.model_dump(mode="json"), set_at=state.clock()))
        else:
            row.policy, row.set_at = body.model_dump(mode="json"), state.clock()
    return Ok()


@router.get("/v1/runs/{run_id}/packs/policy", response_model=PackPolicyInfo)
def get_policy(run_id: RunId, request: Request) -> PackPolicyInfo:
    state = state_of(request)
    with state.sessions() as session:
        get_run(session, run_id)
        row = session.get(PackPolicy, run_id)
        if row is None:
            raise NotFoundError(
                f"run {run_id!r} has no pack policy: it takes no task packs", kind="no_pack_policy"
            )
        return PackPolicyInfo(run_id=run_id, policy=row.policy, set_at=row.set_at)
