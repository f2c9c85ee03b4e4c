"""Counts of work, summed in the database over every row: per step, per node, and whether a run has drained."""

from __future__ import annotations

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import NodeWork, StepWork
from swarmrl.coordinator.rules import leases
from swarmrl.coordinator.store.db import Membership, Run, Submission, Verdict, WorkUnit


def _count_if(condition):
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


def _sum_if(condition, column):
    return func.coalesce(func.sum(case((condition, column), else_=0)), 0)


def step_work(session: Session, run: Run, step: int, config: CoordinatorConfig, now: float) -> StepWork:
    counts = dict(
        session.execute(
            select(WorkUnit.status, func.count())
            .where(WorkUnit.run_id == run.run_id, WorkUnit.step == step)
            .group_by(WorkUnit.status)
        ).all()
    )
    is_open = step == run.current_step and run.status == "open"
    in_flight = bool(counts.get("leased") or counts.get("submitted"))
    # The work of nodes below the best trust tier alive is apart from the demand (`leases.StepRoom`).
    tier = leases.top_tier(session, run.run_id, config, now)[0] if in_flight else leases.UNPROVEN
    return StepWork(
        step=step,
        demand=leases.step_demand(run, config),
        slack=config.lease_slack_units,
        open_units=leases.step_room(session, run, config, now).open_units if is_open else 0,
        **{state: counts.get(state, 0) for state in ("leased", "submitted", "accepted", "rejected")},
        expired=counts.get("expired", 0),
        voided=counts.get("voided", 0),
        unproven=leases.apart_units(session, run, config, ("leased", "submitted"), tier, step)
        if tier > leases.UNPROVEN
        else 0,
        silent=leases.silent_leased(session, run, config, now, step=step, tier=tier) if in_flight else 0,
    )


def node_work(
    session: Session,
    run_id: str,
    *,
    node_id: str | None = None,
    node_ids: list[str] | None = None,
    after_node: str = "",
    limit: int,
    judged_accepted: int = 0,
) -> list[NodeWork]:
    """Per-node counts for the run's members (paged by node id; `node_ids`: of these members alone;
    `judged_accepted`: of members with at least that many files judged and accepted)."""
    members = select(Membership.node_id, Membership.unit_seconds).where(
        Membership.run_id == run_id,
        Membership.node_id > after_node,
        Membership.judged_accepted >= judged_accepted,
    )
    if node_id is not None:
        members = members.where(Membership.node_id == node_id)
    if node_ids is not None:
        members = members.where(Membership.node_id.in_(node_ids))
    page = dict(session.execute(members.order_by(Membership.node_id).limit(limit)).all())
    if not page:
        return []
    works = {node: NodeWork(node_id=node, unit_seconds=speed) for node, speed in page.items()}
    units = session.execute(
        select(
            WorkUnit.node_id,
            func.count(),
            _count_if(WorkUnit.status == "expired"),
            _count_if(WorkUnit.status == "leased"),
        )
        .where(WorkUnit.run_id == run_id, WorkUnit.node_id.in_(page))
        .group_by(WorkUnit.node_id)
    )
    for node, leased, expired, held in units:
        works[node].leased, works[node].expired, works[node].held = leased, expired, held
    accepted = Submission.status == "accepted"
    trained = Submission.use_outcome == "trained"
    files = session.execute(
        select(
            Submission.node_id,
            func.count(),
            func.coalesce(func.sum(Submission.rows), 0),
            _count_if(accepted),
            _sum_if(accepted, Submission.rows),
            _count_if(Submission.status == "rejected"),
            _count_if(Submission.status == "voided"),
            _count_if(trained),
            _sum_if(trained, Submission.used_rows),
            _count_if(Submission.use_outcome == "stale"),
        )
        .where(Submission.run_id == run_id, Submission.node_id.in_(page))
        .group_by(Submission.node_id)
    )
    for node, *values in files:
        work = works[node]
        (
            work.generated,
            work.generated_rows,
            work.accepted,
            work.accepted_rows,
            work.rejected,
            work.voided,
            work.trained,
            work.trained_rows,
            work.stale,
        ) = (int(v) for v in values)
    judged = session.execute(
        select(Submission.node_id, func.count())
        .join(Verdict, Verdict.submission_id == Submission.id)
        .where(Submission.run_id == run_id, Submission.node_id.in_(page))
        .group_by(Submission.node_id)
    )
    for node, count in judged:
        works[node].judged = count
    return [works[node] for node in sorted(works)]


def is_drained(session: Session, run: Run, config: CoordinatorConfig, now: float) -> bool:
    """No unit waits for its file and no submitted file waits for its verdict."""
    leases.expire_lapsed(session, run.run_id, config, now)
    waiting_units = session.scalar(
        select(func.count())
        .select_from(WorkUnit)
        .where(WorkUnit.run_id == run.run_id, WorkUnit.status == "leased")
    )
    waiting_files = session.scalar(
        select(func.count())
        .select_from(Submission)
        .where(Submission.run_id == run.run_id, Submission.status == "pending")
    )
    return not waiting_units and not waiting_files
