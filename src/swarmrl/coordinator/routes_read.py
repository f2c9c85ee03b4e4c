"""Public read endpoints for dashboards: run state, steps, nodes, submissions, verdicts, ledger, metrics."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import func, select

from swarmrl.coordinator import ledger
from swarmrl.coordinator.access import get_run
from swarmrl.coordinator.api import (
    HexKey,
    LedgerView,
    MemberInfo,
    NodeInfo,
    RunId,
    RunState,
    Step,
    StepInfo,
    SubmissionInfo,
    SubmissionStatus,
    VerdictInfo,
)
from swarmrl.coordinator.auth import state_of
from swarmrl.coordinator.db import Ban, Membership, Node, Run, Submission, Verdict
from swarmrl.coordinator.db import Step as StepRow
from swarmrl.coordinator.errors import NotFoundError
from swarmrl.coordinator.health import Health, health_of
from swarmrl.coordinator.views import (
    ledger_entry_info,
    member_info,
    node_info,
    run_state,
    step_info,
    submission_info,
    verdict_info,
)

router = APIRouter(tags=["read"])

AfterId = Query(0, ge=0, le=2**62, description="return rows with a larger id (paging)")


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/runs/{run_id}", response_model=RunState)
def get_run_state(run_id: RunId, request: Request) -> RunState:
    state = state_of(request)
    with state.sessions() as session:
        run = get_run(session, run_id)
        return run_state(run, session.get(StepRow, (run_id, run.current_step)))


@router.get("/v1/runs/{run_id}/steps", response_model=list[StepInfo])
def list_steps(
    run_id: RunId, request: Request, after_step: int = Query(-1, ge=-1, le=2**31 - 1)
) -> list[StepInfo]:
    state = state_of(request)
    with state.sessions() as session:
        get_run(session, run_id)
        rows = session.scalars(
            select(StepRow)
            .where(StepRow.run_id == run_id, StepRow.step > after_step)
            .order_by(StepRow.step)
            .limit(state.config.list_limit)
        )
        return [step_info(s) for s in rows]


@router.get("/v1/runs/{run_id}/steps/{step}", response_model=StepInfo)
def get_step(run_id: RunId, step: Step, request: Request) -> StepInfo:
    state = state_of(request)
    with state.sessions() as session:
        get_run(session, run_id)
        row = session.get(StepRow, (run_id, step))
        if row is None:
            raise NotFoundError(f"step {step} of run {run_id!r} has not been published", kind="unknown_step")
        return step_info(row)


@router.get("/v1/runs/{run_id}/nodes", response_model=list[MemberInfo])
def list_members(
    run_id: RunId, request: Request, health: Literal["healthy", "unhealthy", "dead"] | None = None
) -> list[MemberInfo]:
    state = state_of(request)
    now = state.clock()
    with state.sessions() as session:
        get_run(session, run_id)
        members = session.scalars(
            select(Membership)
            .where(Membership.run_id == run_id)
            .order_by(Membership.joined_at)
            .limit(state.config.list_limit)
        )
        infos = [member_info(m, now, state.config) for m in members]
    return [m for m in infos if health is None or m.health == health]


@router.get("/v1/nodes/{node_id}", response_model=NodeInfo)
def get_node(node_id: HexKey, request: Request) -> NodeInfo:
    state = state_of(request)
    with state.sessions() as session:
        node = session.get(Node, node_id)
        if node is None:
            raise NotFoundError("no node with that key", kind="unknown_node")
        return node_info(node, banned=session.get(Ban, node_id) is not None)


@router.get("/v1/runs/{run_id}/submissions", response_model=list[SubmissionInfo])
def list_submissions(
    run_id: RunId,
    request: Request,
    status: SubmissionStatus | None = None,
    step: Step | None = None,
    node_id: HexKey | None = None,
    after_id: int = AfterId,
) -> list[SubmissionInfo]:
    state = state_of(request)
    with state.sessions() as session:
        get_run(session, run_id)
        query = select(Submission).where(Submission.run_id == run_id, Submission.id > after_id)
        if status is not None:
            query = query.where(Submission.status == status)
        if step is not None:
            query = query.where(Submission.step == step)
        if node_id is not None:
            query = query.where(Submission.node_id == node_id)
        rows = session.scalars(query.order_by(Submission.id).limit(state.config.list_limit))
        return [submission_info(s) for s in rows]


@router.get("/v1/runs/{run_id}/verdicts", response_model=list[VerdictInfo])
def list_verdicts(
    run_id: RunId, request: Request, step: Step | None = None, after_id: int = AfterId
) -> list[VerdictInfo]:
    state = state_of(request)
    with state.sessions() as session:
        get_run(session, run_id)
        query = (
            select(Verdict, Submission)
            .join(Submission, Submission.id == Verdict.submission_id)
            .where(Submission.run_id == run_id, Verdict.submission_id > after_id)
        )
        if step is not None:
            query = query.where(Submission.step == step)
        rows = session.execute(query.order_by(Verdict.submission_id).limit(state.config.list_limit))
        return [verdict_info(v, s) for v, s in rows]


@router.get("/v1/runs/{run_id}/ledger", response_model=LedgerView)
def get_ledger(run_id: RunId, request: Request, node_id: HexKey | None = None) -> LedgerView:
    """Per-node balances (pending / unlocked / wiped) and the entries behind them, settled to now."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        get_run(session, run_id)
        ledger.settle(session, run_id, state.clock())
        entries = ledger.entries_of(session, run_id, node_id, state.config.list_limit)
        return LedgerView(balances=ledger.balances(entries), entries=[ledger_entry_info(e) for e in entries])


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    state = state_of(request)
    now = state.clock()
    lines = [generate_latest(state.metrics.registry).decode()]
    with state.sessions() as session:
        by_health = {h.value: 0 for h in Health}
        for member in session.scalars(select(Membership).where(Membership.status == "active")):
            by_health[health_of(member.last_seen, now, state.config).value] += 1
        counts = dict(
            session.execute(select(Submission.status, func.count()).group_by(Submission.status)).all()
        )
        runs = session.scalar(select(func.count()).select_from(Run)) or 0
    lines.append(
        "# HELP swarmrl_coordinator_nodes active run members by health\n"
        "# TYPE swarmrl_coordinator_nodes gauge\n"
    )
    lines += [f'swarmrl_coordinator_nodes{{health="{h}"}} {n}\n' for h, n in by_health.items()]
    lines.append(
        "# HELP swarmrl_coordinator_submissions_by_status submissions by status\n"
        "# TYPE swarmrl_coordinator_submissions_by_status gauge\n"
    )
    lines += [
        f'swarmrl_coordinator_submissions_by_status{{status="{s}"}} {counts.get(s, 0)}\n'
        for s in ("pending", "accepted", "rejected")
    ]
    lines.append(
        f"# HELP swarmrl_coordinator_runs runs\n# TYPE swarmrl_coordinator_runs gauge\n"
        f"swarmrl_coordinator_runs {runs}\n"
    )
    return Response("".join(lines), media_type=CONTENT_TYPE_LATEST)
