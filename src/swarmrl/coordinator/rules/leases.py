"""Work leases: the coordinator rations generation to what the open step needs.

A unit of work is (step, batch index); its seed is `task_seed(run, node, step, batch)`, so a node learns the
seeds of the units it holds and of no other. The open step gets `demand + slack` active units (leased,
submitted or accepted); a unit whose deadline passes, or whose node dies, expires and its batch index is
re-issued to the next node that asks. A lease holds as many units as the node finishes in about
`lease_target_s` at its measured speed, each with a deadline scaled to that speed, so a slow node gets one unit
and time to finish it, never past `lease_max_deadline_s`. Only accepted work earns: a node's speed is measured
on its accepted files alone, and every unit it let expire or filled with a rejected file, of any severity, counts
against its standing: past a grace no larger than its accepted units, the failed fraction shrinks its leases and
then stops them (a node that generates many units and submits the ones it likes is this node; a fresh key that
drops its one unit is refused for good, worse off than the next fresh key).

Identities are free, so a node earns room with measured work, in tiers (`trust_tier`): until
`lease_proven_files` of its files were judged and accepted it is unproven and holds at most one unit at a time;
until `lease_trusted_files` it is low-trust. The step's demand is shared fairly among the nodes of the best tier
alive; each tier below it shares one pool (`lease_unproven_fraction`, `lease_low_trust_fraction` of the step)
leased on top of the demand (counted once its file arrives), a low-trust node holding at most as many units as it
had files accepted. So a hundred fresh keys polling, or keys that proved themselves with one file and then
defect, can neither dilute nor take what trusted nodes get, nor make the trainer wait for what they hold.
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
from swarmrl.coordinator.store.db import ACTIVE_UNIT_STATES, Membership, Run, Step, Submission, WorkUnit
from swarmrl.coordinator.store.rows import rows_changed


@dataclass(frozen=True)
class Standing:
    """A node's record in one run: units it let expire or filled with a rejected file vs units whose file was
    accepted (a file still waiting for its verdict counts for neither)."""

    expired: int
    delivered: int
    rejected: int = 0

    @property
    def failed(self) -> int:
        return self.expired + self.rejected

    @property
    def drop_fraction(self) -> float:
        total = self.failed + self.delivered
        return self.failed / total if total else 0.0

    def counts_against(self, config: CoordinatorConfig) -> bool:
        """Past the grace: `standing_drop_grace` failures, but never more than the node's accepted units (keys
        are free: a per-key allowance would let every fresh key drop units for nothing)."""
        return self.failed > min(config.standing_drop_grace, self.delivered)

    def allows_lease(self, config: CoordinatorConfig) -> bool:
        return not (self.counts_against(config) and self.drop_fraction > config.standing_max_drop_fraction)


class HeldUnit(NamedTuple):
    """A unit a node holds, as its lease names it."""

    step: int
    batch_index: int
    expires_at: float


MIN_UNIT_S = 0.5  # a measurement below this is timer noise, not a speed to size leases by


def expected_seconds(unit_seconds: float | None, config: CoordinatorConfig) -> float:
    """Seconds the node is expected to take per unit: measured on its accepted files, or the configured guess
    before any; never more than a unit's deadline may allow."""
    if unit_seconds is None:
        return min(config.lease_initial_unit_s, config.lease_max_deadline_s)
    return min(max(MIN_UNIT_S, unit_seconds), config.lease_max_deadline_s)


def lease_size(unit_seconds: float | None, standing: Standing, config: CoordinatorConfig) -> int:
    """Units in the node's next lease: what it finishes in `lease_target_s` (and within the longest deadline),
    shrunk by its failed fraction."""
    expected = expected_seconds(unit_seconds, config)
    fits = math.floor(min(config.lease_target_s, config.lease_max_deadline_s) / expected)
    units = min(config.lease_max_units, max(1, fits))
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


UNPROVEN, LOW_TRUST, TRUSTED = 0, 1, 2  # trust tiers, earned with files a validator judged and accepted


def tier_floor(tier: int, config: CoordinatorConfig) -> int:
    """Judged and accepted files a node needs to be in `tier`."""
    return (0, config.lease_proven_files, config.lease_trusted_files)[tier]


def trust_tier(member: Membership, config: CoordinatorConfig) -> int:
    return max(
        tier for tier in (UNPROVEN, LOW_TRUST, TRUSTED) if member.judged_accepted >= tier_floor(tier, config)
    )


def is_proven(member: Membership, config: CoordinatorConfig) -> bool:
    return trust_tier(member, config) > UNPROVEN


def proven_nodes(run_id: str, config: CoordinatorConfig):
    """Node ids proven in the run: at least `lease_proven_files` of their files judged and accepted (a
    subquery)."""
    return select(Membership.node_id).where(
        Membership.run_id == run_id, Membership.judged_accepted >= tier_floor(LOW_TRUST, config)
    )


def nodes_below(run_id: str, files: int):
    """Node ids of the run with fewer than `files` of their files judged and accepted (a subquery; a file the
    spot-check draw skipped proves nothing)."""
    return select(Membership.node_id).where(Membership.run_id == run_id, Membership.judged_accepted < files)


def nodes_between(run_id: str, low: int, high: int):
    """Node ids of the run with at least `low` and fewer than `high` files judged and accepted (a subquery)."""
    return nodes_below(run_id, high).where(Membership.judged_accepted >= low)


def live_members(
    session: Session, run_id: str, config: CoordinatorConfig, now: float, *, at_least: int = 0
) -> int:
    """Active workers of the run (members that joined as relays generate nothing) that are not yet unhealthy
    (heartbeat within the grace), with at least `at_least` files judged and accepted."""
    query = (
        select(func.count())
        .select_from(Membership)
        .where(
            Membership.run_id == run_id,
            Membership.status == "active",
            Membership.role == "worker",
            Membership.last_seen > unhealthy_cutoff(now, config),
            Membership.judged_accepted >= at_least,
        )
    )
    return session.scalar(query) or 0


def top_tier(session: Session, run_id: str, config: CoordinatorConfig, now: float) -> tuple[int, int]:
    """The best trust tier with a live member, and how many live members are in it or above (UNPROVEN and
    every live member while no proven node is alive)."""
    for tier in (TRUSTED, LOW_TRUST):
        alive = live_members(session, run_id, config, now, at_least=tier_floor(tier, config))
        if alive:
            return tier, alive
    return UNPROVEN, live_members(session, run_id, config, now)


def apart_units(
    session: Session,
    run: Run,
    config: CoordinatorConfig,
    states: tuple[str, ...],
    tier: int,
    step: int | None = None,
) -> int:
    """Units of `step` (default: the open one) in `states` held by nodes below `tier`: apart from the step's
    demand while a node of `tier` is alive."""
    below = WorkUnit.node_id.in_(nodes_below(run.run_id, tier_floor(tier, config)))
    return step_units(session, run, WorkUnit.status.in_(states), below, step=step)


def silent_leased(
    session: Session, run: Run, config: CoordinatorConfig, now: float, *, step: int, tier: int = UNPROVEN
) -> int:
    """Units of `step` leased to nodes that missed a heartbeat (killed, or cut off): they hold them until they
    are dead, but the step does not wait on them (of nodes in `tier` or above alone: leases of nodes below the
    best tier alive never count before their file)."""
    silent = select(Membership.node_id).where(
        Membership.run_id == run.run_id,
        Membership.last_seen <= unhealthy_cutoff(now, config),
        Membership.judged_accepted >= tier_floor(tier, config),
    )
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
    for the open step sizes it: units that may still be leased (`open_units`), the best trust tier alive and its
    live members (`top_alive`, who share the demand fairly), how many units one more unproven node may take (0 or
    1: it holds at most one) and how many the low-trust pool has left.

    Identities are free, so the nodes of each tier below the best one alive share one pool however many they
    are: unproven nodes `lease_unproven_fraction` of the step (the whole step while no proven node is alive),
    low-trust ones `lease_low_trust_fraction` while a trusted node is alive. Their leases are extra to the step's
    demand (`open_units` does not count them until they deliver), so what a pool of idle or defecting keys holds
    no better node waits for. The best tier's leases count: else each file delivered reopened a unit under leases
    still in flight, and a run's first steps, when no node is proven yet, were leased up to twice over with the
    first policy, more than the async window can train.

    A node that missed a heartbeat is as good as gone for the step: its leases count only once their file
    arrives, so nodes still beating lease fresh units in their place at once, not when it is found dead seconds
    later (its units then expire and are re-issued; should it deliver meanwhile, its files carry over)."""

    step: int
    demand: int  # the units the trainer wanted for the step when this was read
    open_units: int
    top_tier: int
    top_alive: int
    unproven_room: int
    low_trust_room: int


def step_room(
    session: Session, run: Run, config: CoordinatorConfig, now: float, step: int | None = None
) -> StepRoom:
    """The room in `step` (default: the open one). A step past the open one is sized by the open step's demand,
    less what the open step leased beyond it (its slack: those files carry over into the next step); the trainer
    sets the step's own demand when it opens it, less the work of earlier steps waiting for it."""
    step = run.current_step if step is None else step
    demand = step_demand(run, config)
    units = demand + config.lease_slack_units
    tier, top_alive = top_tier(session, run.run_id, config, now)
    held = partial(step_units, session, run, WorkUnit.status == "leased", step=step)
    unproven_held = held(WorkUnit.node_id.in_(nodes_below(run.run_id, config.lease_proven_files)))
    low_held = held(
        WorkUnit.node_id.in_(nodes_between(run.run_id, config.lease_proven_files, config.lease_trusted_files))
    )
    unproven_pool = units if tier == UNPROVEN else max(1, math.floor(units * config.lease_unproven_fraction))
    low_pool = max(1, math.floor(units * config.lease_low_trust_fraction)) if tier == TRUSTED else 0
    uncounted = apart_units(session, run, config, ("leased",), tier, step) if tier > UNPROVEN else 0
    silent = partial(silent_leased, session, run, config, now, tier=tier)
    room = open_units(session, run, config, uncounted=uncounted + silent(step=step), step=step)
    if step > run.current_step:
        room = max(0, room - carried_over(session, run, config, uncounted=silent(step=run.current_step)))
    return StepRoom(
        step=step,
        demand=demand,
        open_units=room,
        top_tier=tier,
        top_alive=top_alive,
        unproven_room=1 if unproven_held < unproven_pool else 0,
        low_trust_room=max(0, low_pool - low_held),
    )


def room_for(member: Membership, room: StepRoom, config: CoordinatorConfig) -> int:
    """Most units the node may take in the step: of the best tier alive, its fair share of the open units;
    low-trust below a trusted node, what the low-trust pool has left, at most as many units as it had files
    accepted; unproven, one unit of the unproven pool; 0 when that is none."""
    if room.open_units <= 0:
        return 0
    tier = trust_tier(member, config)
    if tier == UNPROVEN:
        return room.unproven_room
    share = fair_share(room.demand + config.lease_slack_units, room.top_alive)
    if tier >= room.top_tier:
        return min(room.open_units, share)
    return min(room.low_trust_room, max(1, member.judged_accepted), share)


def unit_deadlines(
    now: float, units: int, unit_seconds: float | None, config: CoordinatorConfig
) -> list[float]:
    """The i-th unit of a lease is due after i + 1 units of the node's expected time, times the safety factor,
    and never later than `lease_max_deadline_s` from now: `unit_seconds` comes from accepted work alone, so a
    node lengthens its deadlines only by delivering slow accepted files, and no further than that cap."""
    expected = expected_seconds(unit_seconds, config)
    return [
        now
        + min(
            config.lease_max_deadline_s,
            (i + 1) * expected * config.lease_deadline_factor + config.lease_grace_s,
        )
        for i in range(units)
    ]


def newcomer_seconds(session: Session, run_id: str, config: CoordinatorConfig) -> float | None:
    """Seconds per unit to expect of a node never measured: the slowest speed the run's proven nodes measured on
    their accepted files, if below the `lease_initial_unit_s` guess (None: the guess). A fresh key's unit then
    lapses about when the slowest proven node's would: a key that squats on a pool unit holds it briefly."""
    slowest = session.scalar(
        select(func.max(Membership.unit_seconds)).where(
            Membership.run_id == run_id,
            Membership.judged_accepted >= max(1, config.lease_proven_files),
        )
    )
    return None if slowest is None or slowest >= config.lease_initial_unit_s else slowest


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
    return Standing(
        expired=rows.get("expired", 0), rejected=rows.get("rejected", 0), delivered=rows.get("accepted", 0)
    )


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


def seconds_for(session: Session, unit: WorkUnit, delivered_at: float) -> float:
    """Time this unit took to its file's submission at `delivered_at`: since its lease began, or since the node
    delivered an earlier unit of the same lease."""
    previous = session.scalar(
        select(func.max(Submission.submitted_at))
        .join(WorkUnit, WorkUnit.submission_id == Submission.id)
        .where(
            WorkUnit.lease_id == unit.lease_id,
            WorkUnit.id != unit.id,
            Submission.submitted_at <= delivered_at,
        )
    )
    return max(0.0, delivered_at - max(unit.leased_at, previous or unit.leased_at))


def measure_accepted(
    session: Session, member: Membership, unit: WorkUnit, delivered_at: float, config: CoordinatorConfig
) -> None:
    """Fold the time an accepted unit took into its node's speed: only accepted work measures a node, so junk
    delivered at once makes no one fast, and a unit held to its deadline and then filled with junk no slower."""
    member.unit_seconds = updated_speed(
        member.unit_seconds, seconds_for(session, unit, delivered_at), config.speed_smoothing
    )


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
