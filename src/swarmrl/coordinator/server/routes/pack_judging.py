"""Trusted judges of community packs: validators lease packs to check and post their reports; validators and the
trainer tell what they measured of each pack unit's file (`rules/pack_observations.py`).

Every report about a file is checked against what the coordinator recorded: the file is the run's, accepted,
judged by that validator (its scores) or trained by the run's trainer, and its unit is the pack's in the step's
fixed mix; a unit of a pack on probation is never trained, so the trainer cannot report training one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import APIRouter, Request
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from swarmrl.configs.task_packs import CommunityTasksConfig
from swarmrl.coordinator.api import RowId, RunId
from swarmrl.coordinator.errors import ApiError, ConflictError, NotFoundError
from swarmrl.coordinator.pack_api import (
    PackDetail,
    PackInfo,
    PackLease,
    PackScores,
    PackTraining,
    PackTrainingReceipt,
    PackVerdict,
    RowMeasurement,
)
from swarmrl.coordinator.rules import pack_admission, pack_observations
from swarmrl.coordinator.rules.contract import run_contract
from swarmrl.coordinator.rules.pack_mix import policy_of, unit_source
from swarmrl.coordinator.server.access import get_run, require_trainer_or_admin, require_validator
from swarmrl.coordinator.server.auth import SignedCaller, state_of
from swarmrl.coordinator.server.pack_views import pack_detail, pack_infos
from swarmrl.coordinator.server.routes.packs import pack_of
from swarmrl.coordinator.store.db import Submission
from swarmrl.coordinator.store.pack_tables import TaskPackRecord
from swarmrl.tasks.packs.mix import PackShare

router = APIRouter(tags=["packs"])


def _policy(session: Session, run_id: str) -> CommunityTasksConfig:
    policy = policy_of(session, run_id)
    if policy is None:
        raise NotFoundError(f"run {run_id!r} has no pack policy", kind="no_pack_policy")
    return policy


@router.post("/v1/runs/{run_id}/packs/lease", response_model=PackLease)
def lease_pack(run_id: RunId, request: Request, who: SignedCaller) -> PackLease:
    """The next pack this validator should check (or decide, once the run measured it), within the budgets."""
    state, now = state_of(request), state_of(request).clock()
    with state.sessions() as session, session.begin():
        validator = require_validator(session, run_id, who)
        policy = policy_of(session, run_id)
        leased = (
            None if policy is None else pack_admission.lease_pack(session, run_id, policy, validator, now)
        )
        if leased is None:
            return PackLease(pack=None)
        pack, stage = leased
        session.flush()
        measured = pack_admission.measurement(session, pack) if stage == "measure" else {}
        return PackLease(
            pack=pack_infos(session, [pack])[0],
            stage=stage,
            expires_at=pack.check_until,
            measurement=[
                RowMeasurement(row=row, samples=n, passed=c) for row, (n, c) in sorted(measured.items())
            ],
        )


@router.post("/v1/runs/{run_id}/packs/{pack_id:int}/verdict", response_model=PackDetail)
def post_pack_verdict(
    run_id: RunId, pack_id: RowId, body: PackVerdict, request: Request, who: SignedCaller
) -> PackDetail:
    """A validator's report of the stage it leased the pack for: refused, on probation, or admitted."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        validator = require_validator(session, run_id, who)
        pack = pack_of(session, run_id, pack_id)
        pack_admission.apply_verdict(pack, body.stage, body.report, validator, state.clock())
        session.flush()
        return pack_detail(session, pack)


def _unit_file(
    session: Session, run_id: str, pack: TaskPackRecord, submission_id: int
) -> tuple[Submission, PackShare]:
    """The accepted file of a unit of `pack` this report is about, and the pack's share of its step's mix."""
    submission = session.get(Submission, submission_id)
    if submission is None or submission.run_id != run_id or submission.status != "accepted":
        raise NotFoundError(
            f"no accepted submission {submission_id} in run {run_id!r}", kind="unknown_submission"
        )
    source = unit_source(session, run_id, submission.step, submission.batch_index)
    if source is None or source.pack_id != pack.id:
        raise ApiError(
            f"submission {submission_id} is not a unit of pack {pack.id} in its step's mix",
            kind="not_pack_unit",
            status=422,
        )
    return submission, source


@router.post("/v1/runs/{run_id}/packs/scores", response_model=PackInfo)
def post_scores(run_id: RunId, body: PackScores, request: Request, who: SignedCaller) -> PackInfo:
    """A validator's scores of the pack completions of a file it judged and accepted."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        validator = require_validator(session, run_id, who)
        pack = pack_of(session, run_id, body.pack_id)
        submission, _ = _unit_file(session, run_id, pack, body.submission_id)
        if submission.judge_key != validator:
            raise ConflictError(
                f"submission {submission.id} was judged by another validator", kind="not_judge"
            )
        _check_rows(body, pack)
        policy = _policy(session, run_id)
        with _once(submission.id):
            pack_observations.record_validator_scores(
                session, pack, body, submission.step, validator, policy, state.clock()
            )
        return pack_infos(session, [pack])[0]


@router.post("/v1/runs/{run_id}/packs/trained", response_model=PackTrainingReceipt)
def post_training(
    run_id: RunId, body: PackTraining, request: Request, who: SignedCaller
) -> PackTrainingReceipt:
    """The trainer's account of a step's pack files: its scores, the groups its filter was offered and kept, the
    rows trained (what the author is credited)."""
    state, now = state_of(request), state_of(request).clock()
    retired: list[int] = []
    with state.sessions() as session, session.begin():
        run = get_run(session, run_id)
        require_trainer_or_admin(run, who)
        policy, group_size = _policy(session, run_id), run_contract(run).group_size
        for file in body.files:
            pack = pack_of(session, run_id, file.pack_id)
            submission, share = _unit_file(session, run_id, pack, file.submission_id)
            if share.probation and file.rows_trained:
                raise ApiError(
                    f"submission {submission.id} is a unit of a pack on probation: never trained",
                    kind="probation_unit",
                    status=422,
                )
            if file.kept > file.groups or file.rows_trained > file.kept * group_size:
                raise ApiError(
                    f"submission {submission.id}: more kept or trained than offered",
                    kind="bad_counts",
                    status=422,
                )
            _check_rows(file, pack)
            window_s = state.config.credit_unlock_window_s
            with _once(submission.id):
                retirement = pack_observations.record_trained_file(
                    session, pack, file, body.step, run.trainer_public_key, policy, now, window_s
                )
            if retirement is not None:
                retired.append(pack.id)
    return PackTrainingReceipt(recorded=len(body.files), retired=retired)


@contextmanager
def _once(submission_id: int) -> Iterator[None]:
    """A judge tells what it measured of a file once: a second report (a retry whose answer was lost) is refused
    by name, and the judge takes it as recorded."""
    try:
        yield
    except IntegrityError:
        raise ConflictError(
            f"submission {submission_id} was reported already", kind="already_recorded"
        ) from None


def _check_rows(body: PackScores, pack: TaskPackRecord) -> None:
    stray = [row for row, _ in body.scores if row >= pack.rows]
    if stray:
        raise ApiError(
            f"pack {pack.id} has {pack.rows} rows; no row {stray[0]}", kind="unknown_row", status=422
        )
