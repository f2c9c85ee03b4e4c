"""Leases: units of work for nodes (`leases.py`), files to judge for validators.

A node asks before it spends compute: it gets the units it already holds, or new ones of the open step (once
those are all out, of the step after it: `lease_ahead_steps`, for a node whose policy the window allows there),
or a refusal naming why (the steps are full, the run is draining, its standing is lost). A validator takes one
pending file at a time, oldest first; its lease lets no other validator judge that file until it lapses, so
any number of validators judge every file exactly once, and a killed validator's file returns to the pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fastapi import APIRouter, Request
from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import (
    LeaseRequest,
    PoolTicketChallenge,
    RunId,
    ValidationLease,
    ValidationLeaseRequest,
    WorkLease,
    WorkUnitInfo,
)
from swarmrl.coordinator.errors import ConflictError, ForbiddenError
from swarmrl.coordinator.rules import leases, pool_tickets
from swarmrl.coordinator.seeds import task_seed
from swarmrl.coordinator.server.access import active_member, get_run, require_validator
from swarmrl.coordinator.server.auth import Caller, SignedCaller, state_of
from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.server.views import submission_info
from swarmrl.coordinator.store.db import Membership, Run, Submission
from swarmrl.coordinator.store.rows import rows_changed

router = APIRouter()

GRANT_ATTEMPTS = 4  # another coordinator process may take the same free index; the unique index refuses one
CANDIDATES = 16
# Grants sweep lapsed units at most this often per run: the sweep is the costliest query of a grant, and a
# unit swept a second late only delays its re-issue by that second.
SWEEP_EVERY_S = 1.0
# A refusal may stand on the open step's room as read this long ago: a hundred polling keys then cost one
# count of the step's units per interval, not one each. A grant always reads the room afresh.
ROOM_FRESH_S = 0.5
# A request held for room or for a file looks again this often: what no wake-up announces (a unit whose lease
# lapsed, a node found dead, a step opened by another coordinator process) reaches it within a second.
LEASE_RECHECK_S = 1.0


@router.post("/v1/runs/{run_id}/leases", response_model=WorkLease, tags=["work"])
async def lease_work(run_id: RunId, body: LeaseRequest, request: Request, who: SignedCaller) -> WorkLease:
    """The units this node holds, or a new lease on units of the open step. With `wait_s`, a node every step
    is full for waits here for room, woken when the trainer opens a step or changes its demand and looking again
    every LEASE_RECHECK_S (units a lapse frees, another coordinator process's step), instead of asking again at
    its next poll, a round trip and up to a backed-off poll later."""
    node_id = who.require_node()
    state = state_of(request)
    refused: ConflictError | None = None
    try:
        async for last in state.work_changed.looks(body.wait_s, recheck=LEASE_RECHECK_S):
            if refused is not None:
                if await request.is_disconnected():
                    # It hung up while held (killed, say): units it cannot receive would wait for its death.
                    raise refused
                await asyncio.sleep(state.held_leases.delay(run_id, node_id))  # a faster node first
            try:
                return await run_in_threadpool(_lease, state, run_id, node_id, body)
            except ConflictError as refusal:
                if refusal.kind != "step_full" or last:
                    raise
                if refused is None:
                    seconds = await run_in_threadpool(_unit_seconds, state, run_id, node_id)
                    state.held_leases.hold(run_id, node_id, seconds)
                refused = refusal
        raise AssertionError("a long poll's last look answers")
    finally:
        if refused is not None:
            state.held_leases.release(run_id, node_id)


def _unit_seconds(state: ServiceState, run_id: str, node_id: str) -> float | None:
    with state.sessions() as session:
        return session.scalar(
            select(Membership.unit_seconds).where(Membership.run_id == run_id, Membership.node_id == node_id)
        )


def _lease(state: ServiceState, run_id: str, node_id: str, body: LeaseRequest) -> WorkLease:
    held = _held(state, run_id, node_id, body)
    if held is not None:  # the common answer, read-only: no lock, no write
        return held
    with state.lease_lock:
        for attempt in range(GRANT_ATTEMPTS):
            try:
                return _grant(state, run_id, node_id, body)
            except IntegrityError:
                if attempt == GRANT_ATTEMPTS - 1:
                    raise
    raise AssertionError("unreachable")


def _answer(
    run: Run, member: Membership, units: list[leases.HeldUnit], config: CoordinatorConfig
) -> WorkLease:
    return WorkLease(
        run_id=run.run_id,
        units=[
            WorkUnitInfo(
                step=unit.step,
                batch_index=unit.batch_index,
                seed=task_seed(run.run_id, member.node_id, unit.step, unit.batch_index, run.run_secret),
                expires_at=unit.expires_at,
            )
            for unit in units
        ],
        # A unit of a step past the open one needs a policy that recent for its file to train.
        min_policy_step=max(0, max((u.step for u in units), default=run.current_step) - run.async_level),
        unit_seconds=leases.expected_seconds(member.unit_seconds, config),
    )


def _held(state: ServiceState, run_id: str, node_id: str, body: LeaseRequest) -> WorkLease | None:
    """The node's live units (not past their deadline, step still inside the window), if it holds any. A node
    that holds none and would be refused is refused here too, without the grant's lock: a hundred polling keys
    cost reads, not a queue in front of the nodes that get work (while the last sweep of lapsed units is
    recent: a refusal must not stand on units a sweep would free; a node without accepted work that brings no
    ticket to a contested pool, at once)."""
    now = state.clock()
    with state.sessions() as session, session.begin():
        run = get_run(session, run_id)
        member = active_member(session, run_id, node_id, state.config, now)
        units = leases.held_units(
            session, run_id, node_id, now=now, oldest_step=run.current_step - run.async_level
        )
        if units:
            return _answer(run, member, units, state.config)
        if body.pool_ticket is None and leases.trust_tier(member, state.config) == leases.UNPROVEN:
            _pool_ticket_checked(session, run_id, node_id, body, state.config, now)
        if now - state.units_swept_at.get(run_id, float("-inf")) < SWEEP_EVERY_S:
            _may_lease(session, run, member, state.config)
            _first_room(
                member,
                run,
                lambda step: _recent_room(state, session, run, now, step),
                body.policy_step,
                state.config,
            )
        return None


def _recent_room(state: ServiceState, session: Session, run: Run, now: float, step: int) -> leases.StepRoom:
    """The room in `step` as read at most ROOM_FRESH_S ago while the run's open step and demand were as now."""
    rooms = state.step_rooms.setdefault(run.run_id, {})
    current = (run.current_step, leases.step_demand(run, state.config))
    read_at, read_when, room = rooms.get(step, (float("-inf"), None, None))
    if room is None or read_when != current or now - read_at >= ROOM_FRESH_S:
        room = leases.step_room(session, run, state.config, now, step)
        rooms[step] = (now, current, room)
    return room


def _grant(state: ServiceState, run_id: str, node_id: str, body: LeaseRequest) -> WorkLease:
    config = state.config
    now = state.clock()
    if now - state.units_swept_at.get(run_id, float("-inf")) >= SWEEP_EVERY_S:
        # Its own transaction: a refusal below rolls its own back, and the refusals that stand on this sweep
        # for the next second (`_held`) must see what it expired.
        with state.sessions() as session, session.begin():
            leases.expire_lapsed(session, run_id, config, now)
        state.units_swept_at[run_id] = now
    with state.sessions() as session, session.begin():
        run = get_run(session, run_id, for_update=True)
        member = active_member(session, run_id, node_id, config, now)
        held = leases.held_units(
            session, run_id, node_id, now=now, oldest_step=run.current_step - run.async_level
        )
        if held:  # another request of this node was granted while this one waited for the lock
            return _answer(run, member, held, config)
        standing = _may_lease(session, run, member, config)
        room, room_size = _first_room(
            member,
            run,
            lambda step: leases.step_room(session, run, config, now, step),
            body.policy_step,
            config,
        )
        if leases.trust_tier(member, config) == leases.UNPROVEN:
            _pool_ticket_checked(session, run_id, node_id, body, config, now)
        size = min(room_size, body.max_units or config.lease_max_units)
        size = min(size, leases.lease_size(member.unit_seconds, standing, config))
        if body.policy_step is not None and size > 1:
            carry_steps = body.policy_step + run.async_level - room.step
            period = leases.step_seconds(session, run_id)
            size = leases.units_in_window(size, member.unit_seconds, carry_steps, period, config)
        speed = member.unit_seconds
        if speed is None:  # never measured: a typical node's time, so a squatted pool unit lapses soon
            speed = leases.newcomer_seconds(session, run_id, config)
        held = leases.grant(
            session, run, node_id, leases.unit_deadlines(now, size, speed, config), now, room.step
        )
        state.metrics.units_leased.inc(len(held))
        state.step_rooms.pop(run_id, None)
        return _answer(run, member, held, config)


def _pool_ticket_checked(
    session: Session, run_id: str, node_id: str, body: LeaseRequest, config: CoordinatorConfig, now: float
) -> None:
    """A unit of the unproven pool, while it is contested, only for a valid ticket (`pool_tickets`)."""
    if not pool_tickets.contested(session, run_id, config, now):
        return
    problem = pool_tickets.ticket_problem(session, run_id, node_id, body.pool_ticket, config, now)
    if problem is not None:
        raise ConflictError(
            f"the pool of units for nodes without accepted work is contested (a unit of it lapsed or was rejected "
            f"lately): a unit of it needs a proof-of-work ticket of {config.lease_pool_ticket_bits} bits, and this "
            f"request's does not do ({problem}); ask POST /v1/runs/{run_id}/pool-ticket for a challenge",
            kind="pool_ticket_needed",
        )


@router.post("/v1/runs/{run_id}/pool-ticket", response_model=PoolTicketChallenge, tags=["work"])
async def pool_ticket_challenge(run_id: RunId, request: Request, who: SignedCaller) -> PoolTicketChallenge:
    """What this node's ticket for its next unit of the unproven pool must bind, and how many bits it needs."""
    node_id = who.require_node()
    state = state_of(request)
    return await run_in_threadpool(_challenge, state, run_id, node_id)


def _challenge(state: ServiceState, run_id: str, node_id: str) -> PoolTicketChallenge:
    now = state.clock()
    with state.sessions() as session:
        get_run(session, run_id)
        member = active_member(session, run_id, node_id, state.config, now)
        return pool_tickets.challenge(session, member, state.config, now)


def _may_lease(session: Session, run: Run, member: Membership, config: CoordinatorConfig) -> leases.Standing:
    """The node's standing, or the refusal of any lease: a relay, a draining run, dropped units."""
    if member.role != "worker":
        raise ForbiddenError("this node joined the run as a relay: relays lease no work", kind="relay_member")
    if run.status != "open":
        raise ConflictError(f"run {run.run_id!r} is draining: no new work", kind="run_draining")
    standing = leases.standing_of(session, run.run_id, member.node_id)
    if not standing.allows_lease(config):
        raise ForbiddenError(
            f"standing: {standing.failed} of this node's units expired or were rejected against "
            f"{standing.delivered} accepted (over {config.standing_max_drop_fraction:.0%}, past a grace of at "
            "most its accepted units): no more leases in this run",
            kind="poor_standing",
        )
    return standing


def _first_room(
    member: Membership,
    run: Run,
    room_of: Callable[[int], leases.StepRoom],
    policy_step: int | None,
    config: CoordinatorConfig,
) -> tuple[leases.StepRoom, int]:
    """The first step with room for the node and the most units it may take there; `step_full` (naming the open
    step) when no step has any. A step past the open one only for a node whose policy (`policy_step`) is at
    most async_level - 1 steps older than it (the open step's own with async_level 2): a file generated ahead
    with an older one would train at the window's edge at its own step, and be refused as stale should it carry
    over to the next (a node that claims a policy it lacks wastes only its own work: its file is refused as
    stale). A step's room is read only when the steps before it are full."""
    steps = [
        step
        for step in leases.lease_steps(run, config)
        if step == run.current_step or (policy_step is not None and step - policy_step < run.async_level)
    ]
    rooms = []
    for step in steps:
        rooms.append(room := room_of(step))
        size = leases.room_for(member, room, config)
        if size > 0:
            return room, size
    open_step = rooms[0]
    raise ConflictError(
        f"step {open_step.step} has all the work it needs in flight"
        + ("" if open_step.open_units == 0 else " that nodes without accepted work may hold")
        + ("" if len(rooms) == 1 else f", and so has step {rooms[-1].step}")
        + "; ask again later",
        kind="step_full",
    )


@router.post("/v1/runs/{run_id}/validation-leases", response_model=ValidationLease, tags=["validator"])
async def lease_validation(
    run_id: RunId, body: ValidationLeaseRequest, request: Request, who: SignedCaller
) -> ValidationLease:
    """The file this validator holds (its lease renewed), or the oldest unheld pending file, or none: with
    `wait_s`, none only once that long passed with nothing to judge (woken by each file submitted, looking
    again every LEASE_RECHECK_S for lapsed validation leases), so a file is judged as soon as it arrives."""
    state = state_of(request)
    lease: ValidationLease | None = None
    async for last in state.files_pending.looks(body.wait_s, recheck=LEASE_RECHECK_S):
        if lease is not None and await request.is_disconnected():
            return lease  # it hung up while held: a file leased to it would wait for its lease to lapse
        lease = await run_in_threadpool(_lease_validation, state, run_id, who)
        if lease.submission is not None or last:
            return lease
    raise AssertionError("a long poll's last look answers")


def _lease_validation(state: ServiceState, run_id: str, who: Caller) -> ValidationLease:
    now = state.clock()
    until = now + state.config.validation_lease_s
    with state.sessions() as session, session.begin():
        get_run(session, run_id)
        validator = require_validator(session, run_id, who)
        pending = (Submission.run_id == run_id, Submission.status == "pending")
        mine = session.scalar(
            select(Submission).where(*pending, Submission.judge_key == validator).order_by(Submission.id)
        )
        if mine is not None:
            mine.judge_until = until
            return ValidationLease(submission=submission_info(mine), expires_at=until)
        free = or_(Submission.judge_key.is_(None), Submission.judge_until < now)
        candidates = session.scalars(
            select(Submission.id).where(*pending, free).order_by(Submission.id).limit(CANDIDATES)
        )
        for submission_id in list(candidates):
            taken = session.execute(
                update(Submission)
                .where(Submission.id == submission_id, *pending, free)
                .values(judge_key=validator, judge_until=until)
                .execution_options(synchronize_session=False)
            )
            if rows_changed(taken) == 1:
                submission = session.get(Submission, submission_id, populate_existing=True)
                assert submission is not None  # the row the update just took
                return ValidationLease(submission=submission_info(submission), expires_at=until)
    return ValidationLease(submission=None)
