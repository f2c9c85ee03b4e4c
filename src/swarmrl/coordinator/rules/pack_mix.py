"""Each step's community mix, fixed once: the packs in the run when the step's mix is first read, and their
shares (`tasks/packs/mix.py`). Every node reads the same mix of a step, so a worker, its validator and the
trainer derive each unit's source alike; a pack admitted or retired later changes the mix of later steps only.
"""

from __future__ import annotations

import dataclasses

from sqlalchemy import select
from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.configs.task_packs import CommunityTasksConfig
from swarmrl.coordinator.errors import ConflictError
from swarmrl.coordinator.rules.leases import lease_steps
from swarmrl.coordinator.store.db import Run
from swarmrl.coordinator.store.pack_tables import IN_MIX, PackMixRecord, PackPolicy, TaskPackRecord
from swarmrl.tasks.packs.mix import MixCandidate, PackShare, community_shares, unit_pack


def policy_of(session: Session, run_id: str) -> CommunityTasksConfig | None:
    """The run's [tasks.community] as its operator set it; None: the run takes no packs."""
    row = session.get(PackPolicy, run_id)
    return None if row is None else CommunityTasksConfig.model_validate(row.policy)


def step_mix(session: Session, run: Run, step: int, config: CoordinatorConfig, now: float) -> list[PackShare]:
    """The mix of `step`, fixed now if nobody read it before (a step not open to leases yet has none)."""
    fixed = session.get(PackMixRecord, (run.run_id, step))
    if fixed is not None:
        return [PackShare(**entry) for entry in fixed.entries]
    if step > lease_steps(run, config)[-1]:
        raise ConflictError(f"step {step} has not opened (current {run.current_step})", kind="future_step")
    policy = policy_of(session, run.run_id)
    packs = session.scalars(
        select(TaskPackRecord)
        .where(TaskPackRecord.run_id == run.run_id, TaskPackRecord.status.in_(IN_MIX))
        .order_by(TaskPackRecord.id)
    )
    candidates = [MixCandidate(p.id, p.digest, p.author, p.status != "admitted") for p in packs]
    shares = community_shares(candidates, policy) if policy is not None else []
    entries = [dataclasses.asdict(share) for share in shares]
    session.add(PackMixRecord(run_id=run.run_id, step=step, entries=entries, fixed_at=now))
    session.flush()  # two readers racing: the second's insert fails on the key and it reads the first's
    return shares


def fixed_mix(session: Session, run_id: str, step: int) -> list[PackShare]:
    """The mix a step's units were generated under (empty when it was never read: no unit was a pack's)."""
    fixed = session.get(PackMixRecord, (run_id, step))
    return [] if fixed is None else [PackShare(**entry) for entry in fixed.entries]


def unit_source(session: Session, run_id: str, step: int, batch_index: int | None) -> PackShare | None:
    """The pack whose rows fill the unit, as every node derives it from the step's fixed mix."""
    if batch_index is None:
        return None
    return unit_pack(fixed_mix(session, run_id, step), run_id, step, batch_index)
