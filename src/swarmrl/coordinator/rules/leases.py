"""Work leases: the coordinator rations generation to what the open step needs.

A unit of work is (step, batch index); its seed is `task_seed(run, node, step, batch)`, so a node learns the
seeds of the units it holds and of no other. The open step gets `demand + slack` active units (leased,
submitted or accepted); a unit whose deadline passes, or whose node dies, expires and its batch index is
re-issued to the next node that asks. A lease holds as many units as the node finishes in about
`lease_target_s` at its measured speed, each with a deadline scaled to that speed, so a slow node gets one unit
and time to finish it. Dropping units costs standing: past a grace, the dropped fraction shrinks a node's leases
and then stops them (a node that generates many units and submits the ones it likes is this node).

Identities are free, so a node earns room with measured work: until `lease_proven_files` of its files were
judged and accepted it is unproven, holds at most one unit at a time, and shares with every other unproven
node a pool of `lease_unproven_fraction` of the step, leased on top of the step's demand (counted once its file
arrives) while any proven node is alive; fair shares are spread over proven nodes alone, so a hundred fresh keys
polling can neither dilute nor take what proven nodes get, nor make the trainer wait for what they hold.
"""

from __future__ import annotations

import itertools
import math
import secrets
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

from sqlalchemy import and_, bindparam, func, or_, select, update
from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.rules.health import dead_cutoff, unhealthy_cutoff
from swarmrl.coordinator.store.db import ACTIVE_UNIT_STATES, Membership, Run, Step, WorkUnit
from swarmrl.coordinator.store.rows import rows_changed


@dataclass(frozen=True)
class Standing:
    """A node's record in one run: units it let expire vs units it delivered."""

    expired: int
    delivered: int

    @property
    def drop_fraction(self) -> float:
        total = self.expired + self.delivered
        return self.expired / total if total else 0.0

    def counts_against(self, config: CoordinatorConfig) -> bool:
        return self.expired > config.standing_drop_grace

    def allows_lease(self, config: CoordinatorConfig) -> bool:
        return not (self.counts_against(config) and self.drop_fraction > config.standing_max_drop_fraction)


class HeldUnit(NamedTuple):
    """A unit a node holds, as its lease names it."""

    step: int
    batch_index: int
    expires_at: float


MIN_UNIT_S = 0.5  # a measurement below this is timer noise, not a speed to size leases by


def expected_seconds(unit_seconds: float | None, config: CoordinatorConfig) -> float:
    """Seconds the node is expected to take per unit: measured, or the configured guess before any."""
    return config.lease_initial_unit_s if unit_seconds is None else max(MIN_UNIT_S, unit_seconds)


def lease_size(unit_seconds: float | None, standing: Standing, config: CoordinatorConfig) -> int:
    """Units in the node's next lease: what it finishes in `lease_target_s`, shrunk by its drop rate."""
    expected = expected_seconds(unit_seconds, config)
    units = min(config.lease_max_units, max(1, math.floor(config.lease_target_s / expected)))
    if standing.counts_against(config):
        units = math.floor(units * (1.0 - standing.drop_fraction))
    return max(1, units)


def units_in_window(
    units: int,
    unit_seconds: float | None,
    carry_steps: int,
    step_seconds: float | None,
    config: CoordinatorConfig,
) -> int:
    """At most the units a node returns within `carry_steps` step periods (at least one; all of `units` while
    the step period is unknown). `carry_steps`: how many steps after the unit's own its policy still lets its
    file train (policy step + async_level - unit step). A node behind the newest policy that takes a whole
    lease generates its last units a step or two after its first, and they reach the trainer once the window
    has left its policy behind: refused as stale, honest work lost."""
    if step_seconds is None:
        return units
    fits = math.floor(carry_steps * step_seconds / expected_seconds(unit_seconds, config))
    return max(1, min(units, fits))


def step_seconds(session: Session, run_id: str, steps: int = 5) -> float | None:
    """The run's step period: the median interval between its last `steps` + 1 step openings; None before two."""
    opened = session.scalars(
        select(Step.published_at).where(Step.run_id == run_id).order_by(Step.step.desc()).limit(steps + 1)
    ).all()
    intervals = sorted(later - earlier for later, earlier in itertools.pairwise(opened))
    return intervals[len(intervals) // 2] if intervals else None


def fair_share(step_units: int, live_members: int) -> int:
    """Most units one node may take of a step: the step's units spread over the nodes that are alive, so the
    first node to ask does not take them all and generate them one after another while the others idle."""
    return max(1, math.ceil(step_units / max(1, live_members)))


def proven_nodes(run_id: str, config: CoordinatorConfig):
    """Node ids proven in the run: `lease_proven_files` of their files judged and accepted by a validator (a
    subquery; a file the spot-check draw skipped proves nothing)."""
    return select(Membership.node_id).where(
        Membership.run_id == run_id, Membership.judged_accepted >= config.lease_proven_files
    )


def is_proven(member: Membership, config: CoordinatorConfig) -> bool:
    return member.judged_accepted >= config.lease_proven_files


def live_members(
    session: Session, run_id: str, config: CoordinatorConfig, now: float, *, proven: bool = False
) -> int:
    """Active workers of the run (members that joined as relays generate nothing) that are not yet unhealthy
    (heartbeat within the grace); with `proven`, only the proven ones."""
    query = (
        select(func.count())
        .select_from(Membership)
        .where(
            Membership.run_id == run_id,
            Membership.status == "active",
            Membership.role == "worker",
            Membership.last_seen > unhealthy_cutoff(now, config),
        )
    )
    if proven:
        query = query.where(Membership.judged_accepted >= config.lease_proven_files)
    return session.scalar(query) or 0


def unproven_units(
    session: Session, run: Run, config: CoordinatorConfig, states: tuple[str, ...], step: int | None = None
) -> int:
    """Units of `step` (default: the open one) in `states` held by unproven nodes."""
    unproven = WorkUnit.node_id.not_in(proven_nodes(run.run_id, config))
    return step_units(session, run, WorkUnit.status.in_(states), unproven, step=step)


def unproven_leased(session: Session, run: Run, config: CoordinatorConfig, step: int | None = None) -> int:
    """Units of `step` (default: the open one) leased to unproven nodes, waiting for their file."""
    return unproven_units(session, run, config, ("leased",), step=step)


def silent_leased(
    session: Session, run: Run, config: CoordinatorConfig, now: float, *, step: int, proven_only: bool
) -> int:
    """Units of `step` leased to nodes that missed a heartbeat (killed, or cut off): they hold them until they
    are dead, but the step does not wait on them (with `proven_only`, of proven nodes alone: an unproven node's
    lease never counts before its file)."""
    silent = select(Membership.node_id).where(
        Membership.run_id == run.run_id, Membership.last_seen <= unhealthy_cutoff(now, config)
    )
    if proven_only:
        silent = silent.where(Membership.judged_accepted >= config.lease_proven_files)
    return step_units(session, run, WorkUnit.status == "leased", WorkUnit.node_id.in_(silent), step=step)


def ahead_steps(run: Run, config: CoordinatorConfig) -> int:
    """Steps past the open one that may be leased: `lease_ahead_steps`, but never so far that the oldest policy
    the window allows for them (step - async_level) is one the trainer has not written yet."""
    return min(config.lease_ahead_steps, max(0, run.async_level - 1))


def lease_steps(run: Run, config: CoordinatorConfig) -> range:
    """The steps a lease may be granted for, the open one first."""
    return range(run.current_step, run.current_step + ahead_steps(run, config) + 1)


@dataclass(frozen=True)
class StepRoom:
    """The room in step `step` (the open one, or one `lease_steps` allows past it) as the trainer's `demand`
    for the open step sizes it: units that may still be leased (`open_units`), the proven workers alive to share
    them, and how many units one more unproven node may take (0 or 1: it holds at most one).

    Identities are free, so unproven nodes share one pool however many they are: the whole step while no proven
    node is alive, else `lease_unproven_fraction` of it. While a proven node is alive their leases are extra to
    the step's demand (`open_units` does not count them until they deliver), so what a pool of idle keys holds
    no proven node waits for. While none is, they are the step's only producers and what they hold counts: else
    each file delivered reopened a unit under leases still in flight, and a run's first steps, when no node is
    proven yet, were leased up to twice over with the first policy, more than the async window can train.

    A node that missed a heartbeat is as good as gone for the step: its leases count only once their file
    arrives, so nodes still beating lease fresh units in their place at once, not when it is found dead seconds
    later (its units then expire and are re-issued; should it deliver meanwhile, its files carry over)."""

    step: int
    demand: int  # the units the trainer wanted for the step when this was read
    open_units: int
    proven_alive: int
    unproven_room: int


def step_room(
    session: Session, run: Run, config: CoordinatorConfig, now: float, step: int | None = None
) -> StepRoom:
    """The room in `step` (default: the open one). A step past the open one is sized by the open step's demand,
    less what the open step leased beyond it (its slack: those files carry over into the next step); the trainer
    sets the step's own demand when it opens it, less the work of earlier steps waiting for it."""
    step = run.current_step if step is None else step
    demand = step_demand(run, config)
    units = demand + config.lease_slack_units
    unproven_held = unproven_leased(session, run, config, step)
    proven_alive = live_members(session, run.run_id, config, now, proven=True)
    pool = units if proven_alive == 0 else max(1, math.floor(units * config.lease_unproven_fraction))
    uncounted = unproven_held if proven_alive else 0
    silent = partial(silent_leased, session, run, config, now, proven_only=proven_alive > 0)
    room = open_units(session, run, config, uncounted=uncounted + silent(step=step), step=step)
    if step > run.current_step:
        room = max(0, room - carried_over(session, run, config, uncounted=silent(step=run.current_step)))
    return StepRoom(
        step=step,
        demand=demand,
        open_units=room,
        proven_alive=proven_alive,
        unproven_room=1 if unproven_held < pool else 0,
    )


def unit_deadlines(
    now: float, units: int, unit_seconds: float | None, config: CoordinatorConfig
) -> list[float]:
    """The i-th unit of a lease is due after i + 1 units of the node's expected time, times the safety factor."""
    expected = expected_seconds(unit_seconds, config)
    return [
        now + (i + 1) * expected * config.lease_deadline_factor + config.lease_grace_s for i in range(units)
    ]


def updated_speed(previous: float | None, measured: float, smoothing: float) -> float:
    """Exponential moving average of seconds per unit; the first measurement stands alone."""
    if previous is None:
        return measured
    return smoothing * measured + (1.0 - smoothing) * previous


def expire_lapsed(session: Session, run_id: str, config: CoordinatorConfig, now: float) -> int:
    """Leased units past their deadline, of a step the run's async window has left behind (their file would
    be refused), or held by a node that left, was ejected or is dead, expire."""
    dead_before = dead_cutoff(now, config)
    gone = select(Membership.node_id).where(
        Membership.run_id == run_id,
        or_(Membership.status != "active", Membership.last_seen <= dead_before),
    )
    oldest_step = select(Run.current_step - Run.async_level).where(Run.run_id == run_id).scalar_subquery()
    result = session.execute(
        update(WorkUnit)
        .where(
            WorkUnit.run_id == run_id,
            WorkUnit.status == "leased",
            or_(WorkUnit.expires_at < now, WorkUnit.step < oldest_step, WorkUnit.node_id.in_(gone)),
        )
        .values(status="expired", ended_at=now)
        .execution_options(synchronize_session=False)
    )
    return rows_changed(result)


# The two reads of every lease request, most of which are answered from them (the units held, or a refusal):
# built once with bind parameters and run on the session's connection, as the ORM's query building, loading
# and identity map cost several times the statements themselves.
_STANDING = (
    select(WorkUnit.status, func.count())
    .where(WorkUnit.run_id == bindparam("run"), WorkUnit.node_id == bindparam("node"))
    .group_by(WorkUnit.status)
)
_HELD = (
    select(WorkUnit.step, WorkUnit.batch_index, WorkUnit.expires_at)
    .where(
        WorkUnit.run_id == bindparam("run"),
        WorkUnit.node_id == bindparam("node"),
        WorkUnit.status == "leased",
        WorkUnit.expires_at >= bindparam("now"),
        WorkUnit.step >= bindparam("oldest_step"),
    )
    .order_by(WorkUnit.step, WorkUnit.batch_index)
)


def standing_of(session: Session, run_id: str, node_id: str) -> Standing:
    rows = dict(session.connection().execute(_STANDING, {"run": run_id, "node": node_id}).all())
    delivered = sum(rows.get(s, 0) for s in ("submitted", "accepted", "rejected"))
    return Standing(expired=rows.get("expired", 0), delivered=delivered)


def held_units(
    session: Session, run_id: str, node_id: str, *, now: float, oldest_step: int
) -> list[HeldUnit]:
    """The node's units still waiting for their file, oldest first: those `expire_lapsed` would keep (for a
    read that does not sweep first)."""
    parameters = {"run": run_id, "node": node_id, "now": now, "oldest_step": oldest_step}
    return [HeldUnit(*row) for row in session.connection().execute(_HELD, parameters)]


def carried_over(session: Session, run: Run, config: CoordinatorConfig, *, uncounted: int = 0) -> int:
    """Active units of the open step, less `uncounted` leases its room does not count, beyond its demand: the
    step fills without some of them, and their files train in the next one."""
    active = step_units(session, run, WorkUnit.status.in_(ACTIVE_UNIT_STATES))
    return max(0, active - uncounted - step_demand(run, config))


def step_demand(run: Run, config: CoordinatorConfig) -> int:
    return run.step_units if run.step_units is not None else config.default_step_units


def step_units(session: Session, run: Run, *where, step: int | None = None) -> int:
    """Units of `step` (default: the open one) that meet `where`."""
    step = run.current_step if step is None else step
    query = select(func.count()).select_from(WorkUnit)
    query = query.where(WorkUnit.run_id == run.run_id, WorkUnit.step == step, *where)
    return session.scalar(query) or 0


def open_units(
    session: Session,
    run: Run,
    config: CoordinatorConfig,
    *,
    uncounted: int,
    step: int | None = None,
) -> int:
    """Units of `step` (default: the open one) that may still be leased: demand + slack minus those delivered or
    leased, less `uncounted` leases that count only once their file arrives (unproven or silent nodes')."""
    active = step_units(session, run, WorkUnit.status.in_(ACTIVE_UNIT_STATES), step=step)
    return max(0, step_demand(run, config) + config.lease_slack_units - active + uncounted)


def free_batch_indices(session: Session, run_id: str, step: int, node_id: str, count: int) -> list[int]:
    """Indices freed by expired or rejected units first (never one this node held: same seed, same file),
    then fresh ones."""
    rows = session.execute(
        select(WorkUnit.batch_index, WorkUnit.node_id, WorkUnit.status).where(
            WorkUnit.run_id == run_id, WorkUnit.step == step
        )
    ).all()
    taken = {b for b, _, status in rows if status in ACTIVE_UNIT_STATES}
    mine = {b for b, node, _ in rows if node == node_id}
    every = {b for b, _, _ in rows}
    reissued = sorted(every - taken - mine)[:count]
    fresh_from = max(every, default=-1) + 1
    return reissued + list(range(fresh_from, fresh_from + count - len(reissued)))


def grant(
    session: Session, run: Run, node_id: str, deadlines: list[float], now: float, step: int | None = None
) -> list[HeldUnit]:
    """Lease units of `step` (default: the open one) to the node, one per deadline."""
    step = run.current_step if step is None else step
    lease_id = secrets.token_hex(16)
    indices = free_batch_indices(session, run.run_id, step, node_id, len(deadlines))
    units = [
        WorkUnit(
            run_id=run.run_id,
            step=step,
            batch_index=index,
            node_id=node_id,
            lease_id=lease_id,
            status="leased",
            leased_at=now,
            expires_at=deadline,
        )
        for index, deadline in zip(indices, deadlines, strict=True)
    ]
    session.add_all(units)
    session.flush()  # the unique index on active units speaks here, inside the caller's retry
    return [HeldUnit(unit.step, unit.batch_index, unit.expires_at) for unit in units]


def seconds_for(session: Session, unit: WorkUnit, now: float) -> float:
    """Time this unit took: since its lease began, or since the node delivered the lease's previous unit."""
    previous = session.scalar(
        select(func.max(WorkUnit.ended_at)).where(
            WorkUnit.lease_id == unit.lease_id,
            WorkUnit.id != unit.id,
            WorkUnit.status.in_(("submitted", "accepted", "rejected")),
        )
    )
    return max(0.0, now - max(unit.leased_at, previous or unit.leased_at))


def live_unit(
    session: Session, run_id: str, node_id: str, step: int, batch_index: int, now: float
) -> WorkUnit | None:
    """The node's leased, unexpired unit (step, batch_index), if it holds one."""
    return session.scalar(
        select(WorkUnit).where(
            and_(
                WorkUnit.run_id == run_id,
                WorkUnit.node_id == node_id,
                WorkUnit.step == step,
                WorkUnit.batch_index == batch_index,
                WorkUnit.status == "leased",
                WorkUnit.expires_at >= now,
            )
        )
    )


def ever_leased(session: Session, run_id: str, node_id: str, step: int, batch_index: int) -> bool:
    """Whether the node held (step, batch_index) at some point: the seeds it may learn."""
    return (
        session.scalar(
            select(WorkUnit.id)
            .where(
                WorkUnit.run_id == run_id,
                WorkUnit.node_id == node_id,
                WorkUnit.step == step,
                WorkUnit.batch_index == batch_index,
            )
            .limit(1)
        )
        is not None
    )
