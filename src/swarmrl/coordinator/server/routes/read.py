"""Public read endpoints for dashboards: run state, steps, nodes, submissions, verdicts, ledger, metrics."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import select

from swarmrl.coordinator.api import (
    HexKey,
    LedgerView,
    MemberInfo,
    NodeInfo,
    NodeWork,
    RunId,
    RunState,
    Step,
    StepInfo,
    StepWork,
    SubmissionInfo,
    SubmissionStatus,
    UnitInfo,
    VerdictInfo,
)
from swarmrl.coordinator.errors import NotFoundError
from swarmrl.coordinator.rules import janitor, ledger
from swarmrl.coordinator.rules.leases import expire_lapsed
from swarmrl.coordinator.server.access import get_run
from swarmrl.coordinator.server.auth import state_of
from swarmrl.coordinator.server.ranking import ranked_members
from swarmrl.coordinator.server.routes.trainer import current_state
from swarmrl.coordinator.server.stats import node_work, step_work
from swarmrl.coordinator.server.views import (
    ledger_entry_info,
    member_info,
    node_info,
    step_info,
    submission_info,
    unit_info,
    verdict_info,
)
from swarmrl.coordinator.store.db import Ban, Node, Submission, Verdict, WorkUnit
from swarmrl.coordinator.store.db import Step as StepRow

router = APIRouter(tags=["read"])

AfterId = Query(0, ge=0, le=2**62, description="return rows with a larger id (paging)")
AfterNode = Query("", max_length=64, description="return nodes with a larger id (paging)")


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/runs/{run_id}", response_model=RunState)
def get_run_state(run_id: RunId, request: Request) -> RunState:
    state = state_of(request)
    with state.sessions() as session, session.begin():
        return current_state(session, get_run(session, run_id), state.config, state.clock())


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


LEFT_OUT_HEADER = "X-Left-Out"


@router.get("/v1/runs/{run_id}/nodes", response_model=list[MemberInfo])
def list_members(
    run_id: RunId,
    request: Request,
    response: Response,
    health: Literal["healthy", "unhealthy", "dead"] | None = None,
) -> list[MemberInfo]:
    """At most `list_limit` members, ranked by what keys cannot mint (the operator's relays, accepted work);
    the X-Left-Out header says how many of each tier the list left out ("never-proven=9503, ...")."""
    state = state_of(request)
    now = state.clock()
    with state.sessions() as session:
        page = ranked_members(session, get_run(session, run_id), state.config, now, state.config.list_limit)
        infos = [member_info(m, now, state.config) for m in page.members]
    response.headers[LEFT_OUT_HEADER] = ", ".join(f"{tier}={count}" for tier, count in page.left_out.items())
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
def get_ledger(
    run_id: RunId,
    request: Request,
    node_id: HexKey | None = None,
    after_id: int = AfterId,
    after_node: str = AfterNode,
) -> LedgerView:
    """Per-node balances (pending / unlocked / wiped) summed over every entry, settled to now, and one page of
    the entries behind them."""
    state = state_of(request)
    limit = state.config.list_limit
    with state.sessions() as session, session.begin():
        get_run(session, run_id)
        ledger.settle(session, run_id, state.clock())
        entries = ledger.entries_of(session, run_id, node_id, limit, after_id)
        return LedgerView(
            balances=ledger.balances(session, run_id, node_id, after_node=after_node, limit=limit),
            entries=[ledger_entry_info(e) for e in entries],
        )


@router.get("/v1/runs/{run_id}/work", response_model=list[NodeWork])
def get_work(
    run_id: RunId, request: Request, node_id: HexKey | None = None, after_node: str = AfterNode
) -> list[NodeWork]:
    """Per-node counts of units leased and expired, files generated, judged, accepted, trained (paged by node)."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        get_run(session, run_id)
        expire_lapsed(session, run_id, state.config, state.clock())
        return node_work(
            session, run_id, node_id=node_id, after_node=after_node, limit=state.config.list_limit
        )


@router.get("/v1/runs/{run_id}/units", response_model=list[UnitInfo])
def list_units(
    run_id: RunId,
    request: Request,
    step: Step | None = None,
    node_id: HexKey | None = None,
    after_id: int = AfterId,
) -> list[UnitInfo]:
    """Every lease of every unit (paged by id): who held which (step, batch index), and what became of it."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        get_run(session, run_id)
        expire_lapsed(session, run_id, state.config, state.clock())
        query = select(WorkUnit).where(WorkUnit.run_id == run_id, WorkUnit.id > after_id)
        if step is not None:
            query = query.where(WorkUnit.step == step)
        if node_id is not None:
            query = query.where(WorkUnit.node_id == node_id)
        rows = session.scalars(query.order_by(WorkUnit.id).limit(state.config.list_limit))
        return [unit_info(u) for u in rows]


@router.get("/v1/runs/{run_id}/steps/{step}/work", response_model=StepWork)
def get_step_work(run_id: RunId, step: Step, request: Request) -> StepWork:
    """Units of `step` by state, and how many the step still leases."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        run = get_run(session, run_id)
        now = state.clock()
        expire_lapsed(session, run_id, state.config, now)
        return step_work(session, run, step, state.config, now)


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus text: the service's counters, node health, submissions, and per run its storage, the open
    step's units and every node's work counts (server/db_metrics.py reads them at this scrape)."""
    state = state_of(request)
    janitor.maybe_purge(state, state.clock())
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
