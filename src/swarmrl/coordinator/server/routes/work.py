"""Work: submissions of uploaded files, the files themselves for judges, and verdicts.

A submission fills a unit the node holds a live lease on; one for a unit it does not hold is refused. Its
claimed rows and tokens must fit the run's unit bounds (a claim outside is a lie: hard rejection), and are
never credited: a file's credit is what its judge measured in it (`rules/judgement.py`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from swarmrl.coordinator.api import (
    Measured,
    RowId,
    RunId,
    SubmissionInfo,
    SubmitWork,
    VerdictInfo,
    VerdictRequest,
)
from swarmrl.coordinator.errors import ApiError, ConflictError, NotFoundError
from swarmrl.coordinator.rules import janitor, leases, spot_checks
from swarmrl.coordinator.rules.judgement import COORDINATOR_JUDGE, claims_out_of_bounds, judge
from swarmrl.coordinator.server.access import (
    active_member,
    check_step_window,
    get_run,
    require_privileged,
    require_registered,
    require_validator,
)
from swarmrl.coordinator.server.auth import SignedCaller, state_of
from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.server.views import submission_info, verdict_info
from swarmrl.coordinator.store.db import Submission, UploadSlot, WorkUnit
from swarmrl.coordinator.store.storage import StorageError

router = APIRouter(tags=["work"])


def _confirm_direct_upload(state: ServiceState, slot: UploadSlot) -> None:
    """A presigned upload went straight to the store, which enforced the SHA-256; check it landed whole."""
    assert slot.storage_key is not None  # a slot the node uploads to directly
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


def _uploaded_slot(
    state: ServiceState, session: Session, run_id: str, node_id: str, body: SubmitWork
) -> UploadSlot:
    """The node's slot holding the very file it submits, not submitted before."""
    slot = session.get(UploadSlot, body.slot_id)
    if slot is None or slot.node_id != node_id or slot.run_id != run_id:
        raise NotFoundError("no upload slot with that id for this node and run", kind="unknown_slot")
    if not slot.uploaded and slot.storage_key is not None:
        _confirm_direct_upload(state, slot)
    if not slot.uploaded or slot.storage_key is None:
        raise ConflictError("the file for this slot has not been uploaded", kind="not_uploaded")
    if slot.sha256 != body.sha256 or slot.step != body.step:
        raise ApiError("sha256/step differ from the uploaded file's", kind="sha256_mismatch", status=422)
    taken = select(Submission.id).where(Submission.run_id == run_id, Submission.sha256 == body.sha256)
    if slot.submitted or session.scalar(taken) is not None:
        raise ConflictError("this file was already submitted", kind="duplicate_submission")
    return slot


@router.post("/v1/runs/{run_id}/submissions", status_code=201, response_model=SubmissionInfo)
def submit(run_id: RunId, body: SubmitWork, request: Request, who: SignedCaller) -> SubmissionInfo:
    """Claim an uploaded file as the work of its leased unit: (sha256, rows, tokens). The file waits for a
    validator, or, in spot-check mode, goes to the trainer's feed unjudged when the draw skips it; either way
    it is credited only with what its judge measures."""
    return record_submission(state_of(request), run_id, who.require_node(), body)


def record_submission(state: ServiceState, run_id: str, node_id: str, body: SubmitWork) -> SubmissionInfo:
    """The submission of the file in the node's slot `body.slot_id` (uploaded), filling the slot's live unit."""
    config, now = state.config, state.clock()
    with state.sessions() as session, session.begin():
        run = get_run(session, run_id)
        require_registered(session, node_id)
        member = active_member(session, run_id, node_id, config, now)
        slot = _uploaded_slot(state, session, run_id, node_id, body)
        check_step_window(run, body.step, config)
        unit = _unit_of_slot(session, slot, now)
        submission = Submission(
            run_id=run_id,
            node_id=node_id,
            step=body.step,
            sha256=body.sha256,
            size_bytes=slot.size_bytes,
            rows=body.rows,
            tokens=body.tokens,
            storage_key=slot.storage_key,
            status="pending",
            submitted_at=now,
            batch_index=slot.batch_index,
            checked=True,
        )
        session.add(submission)
        session.flush()
        unit.status, unit.submission_id, unit.ended_at = "submitted", submission.id, now
        slot.submitted = True
        lie = claims_out_of_bounds(run, body.rows, body.tokens)
        if lie is not None:
            judge(
                session,
                submission,
                COORDINATOR_JUDGE,
                Measured(accept=False, check="claims", reason=lie),
                config,
                now,
            )
        elif not spot_checks.must_judge(member, config):
            submission.checked, submission.status, unit.status = False, "accepted", "accepted"
            leases.measure_accepted(session, member, unit, now, config)
        info = submission_info(submission)
    state.metrics.submissions.inc()
    if info.status == "pending":
        state.files_pending.notify()
    else:  # accepted unjudged (spot checks) or refused for its claims: decided already
        state.files_decided.notify()
    if lie is not None:  # recorded and penalised above; the node hears why
        janitor.release_node(state, node_id, now)
        raise ApiError(lie, kind="claims_out_of_bounds", status=422)
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
    """Accept (credit the rows and tokens the validator measured, pending until the window passes) or reject
    (soft: drop; hard: void the node's unpaid work, eject, maybe ban). One verdict per file: a file another
    validator holds a live lease on, a decided file and a voided file are refused."""
    state = state_of(request)
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
        verdict = judge(session, submission, validator_key, body, state.config, now, body.rewards_summary)
        info = verdict_info(verdict, submission)
    state.files_decided.notify()
    if not body.accept:
        janitor.release_node(state, submission.node_id, now)
    state.metrics.verdicts.labels(outcome="accept" if body.accept else f"reject_{verdict.severity}").inc()
    return info
