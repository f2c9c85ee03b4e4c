"""The trainer's side: the accepted feed, the open step's demand for work, what each step used, its audits of
files the spot-check draw left unjudged, draining.

Accepted files become visible in submission order per step: a file is offered only once every earlier file of
its step has its verdict, so which files a step trains on does not depend on which validator finished first.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from sqlalchemy import exists, or_, select, update
from sqlalchemy.orm import Session, aliased
from starlette.concurrency import run_in_threadpool

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import (
    MAX_LEASE_WAIT_S,
    FileAudit,
    OutcomeReceipt,
    RowId,
    RunId,
    RunState,
    Step,
    StepDemand,
    StepOutcomes,
    StepWork,
    SubmissionInfo,
    VerdictInfo,
)
from swarmrl.coordinator.errors import ConflictError, ForbiddenError, NotFoundError
from swarmrl.coordinator.rules import leases
from swarmrl.coordinator.rules.judgement import judge
from swarmrl.coordinator.server.access import get_run, require_privileged, require_trainer_or_admin
from swarmrl.coordinator.server.auth import Caller, SignedCaller, state_of
from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.server.stats import is_drained, step_work
from swarmrl.coordinator.server.views import run_state, submission_info, verdict_info
from swarmrl.coordinator.store.db import Run, Submission, Verdict
from swarmrl.coordinator.store.db import Step as StepRow
from swarmrl.coordinator.store.rows import rows_changed

router = APIRouter(tags=["trainer"])

AfterId = Annotated[int, Query(ge=0, le=2**62)]


def _in_submission_order():
    """True for a file no earlier file of its step is still waiting behind."""
    earlier = aliased(Submission)
    return ~exists().where(
        earlier.run_id == Submission.run_id,
        earlier.step == Submission.step,
        earlier.status == "pending",
        earlier.id < Submission.id,
    )


@router.get("/v1/runs/{run_id}/steps/{step}/accepted", response_model=list[SubmissionInfo])
def accepted_for_step(
    run_id: RunId, step: Step, request: Request, who: SignedCaller, after_id: AfterId = 0
) -> list[SubmissionInfo]:
    """Accepted submissions of `step` (ids above `after_id`), in submission order."""
    state = state_of(request)
    with state.sessions() as session:
        require_privileged(session, get_run(session, run_id), who)
        rows = session.scalars(
            select(Submission)
            .where(
                Submission.run_id == run_id,
                Submission.step == step,
                Submission.status == "accepted",
                Submission.id > after_id,
                _in_submission_order(),
            )
            .order_by(Submission.id)
            .limit(state.config.list_limit)
        )
        return [submission_info(s) for s in rows]


@router.get("/v1/runs/{run_id}/feed", response_model=list[SubmissionInfo])
async def training_feed(
    run_id: RunId,
    request: Request,
    who: SignedCaller,
    step: Annotated[Step, Query()],
    after_id: AfterId = 0,
    wait_s: Annotated[float, Query(ge=0, le=MAX_LEASE_WAIT_S)] = 0.0,
) -> list[SubmissionInfo]:
    """What training step `step` may read: accepted files of steps `step - async_level .. step` that no other
    step used, oldest first. Work of an earlier step that arrived after that step filled is not wasted while
    its policy is recent enough (the trainer checks the policy step of every file).

    With `wait_s`, an empty page is held until a file is decided (any verdict may let files behind it in
    submission order through) or the time is up: the trainer hears of a file the moment it can train on it,
    not at its next poll."""
    state = state_of(request)
    woken = False
    async for last in state.files_decided.looks(wait_s):
        page = await run_in_threadpool(_feed_page, state, run_id, who, step, after_id)
        if page or last or woken:
            return page
        woken = True  # the next look comes after a decision (or at the end): it answers
    raise AssertionError("a long poll's last look answers")


def _feed_page(
    state: ServiceState, run_id: str, who: Caller, step: int, after_id: int
) -> list[SubmissionInfo]:
    with state.sessions() as session:
        run = get_run(session, run_id)
        require_privileged(session, run, who)
        rows = session.scalars(
            select(Submission)
            .where(
                Submission.run_id == run_id,
                Submission.step.between(step - run.async_level, step),
                Submission.status == "accepted",
                or_(Submission.used_step.is_(None), Submission.used_step == step),
                Submission.id > after_id,
                _in_submission_order(),
            )
            .order_by(Submission.id)
            .limit(state.config.list_limit)
        )
        return [submission_info(s) for s in rows]


@router.put("/v1/runs/{run_id}/demand", response_model=StepWork)
def set_demand(run_id: RunId, body: StepDemand, request: Request, who: SignedCaller) -> StepWork:
    """The trainer says how many units the open step wants (more when groups had no signal, fewer when
    earlier work carried over)."""
    state = state_of(request)
    now = state.clock()
    with state.sessions() as session, session.begin():
        run = _trainer_run(session, run_id, who)
        if body.step != run.current_step:
            raise ConflictError(
                f"step {body.step} is not the open step ({run.current_step})", kind="not_open_step"
            )
        run.step_units = body.units
        leases.expire_lapsed(session, run_id, state.config, now)
        answer = step_work(session, run, body.step, state.config, now)
    state.work_changed.notify()
    return answer


@router.post("/v1/runs/{run_id}/steps/{step}/outcomes", response_model=OutcomeReceipt)
def record_outcomes(
    run_id: RunId, step: Step, body: StepOutcomes, request: Request, who: SignedCaller
) -> OutcomeReceipt:
    """What step `step` did with the files it read: trained on (how many rows), or refused as stale or bad.
    A file another step already used keeps that record and is listed back as `ignored`."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        _trainer_run(session, run_id, who)
        outcomes: list[tuple[int, str, int | None]] = [(f.id, "trained", f.rows) for f in body.trained]
        outcomes += [(i, "stale", None) for i in body.stale] + [(i, "refused", None) for i in body.refused]
        ignored = []
        for submission_id, outcome, rows in outcomes:
            result = session.execute(
                update(Submission)
                .where(
                    Submission.id == submission_id,
                    Submission.run_id == run_id,
                    Submission.status.in_(("accepted", "voided")),
                    or_(Submission.used_step.is_(None), Submission.used_step == step),
                )
                .values(used_step=step, use_outcome=outcome, used_rows=rows)
            )
            if not rows_changed(result):
                ignored.append(submission_id)
    return OutcomeReceipt(recorded=len(outcomes) - len(ignored), ignored=ignored)


@router.post("/v1/runs/{run_id}/submissions/{submission_id}/audit", response_model=VerdictInfo)
def audit_submission(
    run_id: RunId, submission_id: RowId, body: FileAudit, request: Request, who: SignedCaller
) -> VerdictInfo:
    """The trainer's own checks of a file the spot-check draw left unjudged, posted before it trains on it:
    passed, the file is credited with the rows and tokens the trainer measured in it; failed, it is rejected
    as a validator's rejection by that check would be (a forgery voids the node's unpaid work and bans it).
    One judgement per file: a file a validator judges, an audited one and a voided one are refused."""
    state = state_of(request)
    now = state.clock()
    with state.sessions() as session, session.begin():
        run = get_run(session, run_id)
        if who.node_id != run.trainer_public_key:
            raise ForbiddenError("only the run's trainer audits the files it trains on", kind="not_trainer")
        submission = session.get(Submission, submission_id)
        if submission is None or submission.run_id != run_id:
            raise NotFoundError(f"no submission {submission_id} in run {run_id!r}", kind="unknown_submission")
        if submission.checked:
            raise ConflictError(f"submission {submission_id} is judged by a validator", kind="checked")
        if submission.status != "accepted" or session.get(Verdict, submission_id) is not None:
            raise ConflictError(
                f"submission {submission_id} is {submission.status} and cannot be audited now",
                kind="voided" if submission.status == "voided" else "already_decided",
            )
        verdict = judge(session, submission, run.trainer_public_key, body, state.config, now)
        info = verdict_info(verdict, submission)
    state.metrics.verdicts.labels(outcome="audit_pass" if body.accept else f"audit_{verdict.severity}").inc()
    return info


@router.post("/v1/runs/{run_id}/drain", response_model=RunState)
def drain(run_id: RunId, request: Request, who: SignedCaller) -> RunState:
    """The run is ending: lease no new work, keep taking the files of units already leased and keep judging,
    until every submitted file has its verdict (status `drained`)."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        run = _trainer_run(session, run_id, who)
        run.status = "draining"
        answer = current_state(session, run, state.config, state.clock())
    state.work_changed.notify()  # nodes waiting for room hear the run drains
    return answer


def _trainer_run(session: Session, run_id: str, who) -> Run:
    run = get_run(session, run_id)
    require_trainer_or_admin(run, who)
    return run


def current_state(session: Session, run: Run, config: CoordinatorConfig, now: float) -> RunState:
    drained = run.status == "draining" and is_drained(session, run, config, now)
    return run_state(run, session.get(StepRow, (run.run_id, run.current_step)), drained=drained)
