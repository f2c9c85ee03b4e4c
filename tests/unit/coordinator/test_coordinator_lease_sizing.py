"""The pure parts of work leasing, against hand-computed values."""

import pytest
from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.rules.leases import (
    LOW_TRUST,
    TRUSTED,
    UNPROVEN,
    Standing,
    StepRoom,
    fair_share,
    free_batch_indices,
    lease_size,
    room_for,
    unit_deadlines,
    units_in_window,
    updated_speed,
)
from swarmrl.coordinator.store.db import Membership, Run, WorkUnit, make_engine, migrate
from swarmrl.trainer.swarm_source import next_demand

CONFIG = CoordinatorConfig(
    lease_initial_unit_s=20.0,
    lease_target_s=60.0,
    lease_max_units=4,
    lease_deadline_factor=2.0,
    lease_grace_s=5.0,
    standing_drop_grace=4,
    standing_max_drop_fraction=0.5,
)
GOOD = Standing(expired=0, delivered=0)


def test_lease_size_is_what_the_node_finishes_in_the_target_time():
    assert lease_size(None, GOOD, CONFIG) == 3  # 60 s / 20 s assumed
    assert lease_size(7.0, GOOD, CONFIG) == 4  # 8 by speed, capped at 4
    assert lease_size(25.0, GOOD, CONFIG) == 2
    assert lease_size(500.0, GOOD, CONFIG) == 1  # a slow node still gets one unit
    assert lease_size(0.0, GOOD, CONFIG) == 4  # a zero measurement is timer noise, floored


def test_a_lease_holds_what_the_node_returns_while_its_policy_may_still_train():
    assert units_in_window(4, 7.0, 2, 10.0, CONFIG) == 2  # 20 s of window, 7 s a unit
    assert units_in_window(4, 7.0, 1, 10.0, CONFIG) == 1
    assert units_in_window(4, 7.0, 0, 10.0, CONFIG) == 1  # at the window's edge: still one unit
    assert units_in_window(3, 2.0, 5, 10.0, CONFIG) == 3  # the window is no limit to a fast node
    assert units_in_window(3, None, 2, 30.0, CONFIG) == 3  # unmeasured: 20 s assumed, 60 s of window
    assert units_in_window(4, 7.0, 1, None, CONFIG) == 4  # no step period yet: no limit


def test_a_step_is_shared_among_the_live_nodes():
    assert fair_share(5, 4) == 2  # the first node to ask does not take four of five units
    assert fair_share(5, 1) == 5
    assert fair_share(3, 10) == 1
    assert fair_share(3, 0) == 3


def test_deadlines_scale_with_the_nodes_speed_and_stagger_across_the_lease():
    assert unit_deadlines(100.0, 3, None, CONFIG) == [145.0, 185.0, 225.0]  # 100 + (i+1)·20·2 + 5
    assert unit_deadlines(100.0, 1, 90.0, CONFIG) == [285.0]


def test_speed_is_a_moving_average_that_starts_at_the_first_measurement():
    assert updated_speed(None, 12.0, 0.3) == 12.0
    assert updated_speed(10.0, 20.0, 0.3) == pytest.approx(13.0)


def test_standing_shrinks_leases_past_the_grace_and_then_stops_them():
    within_grace = Standing(expired=4, delivered=4)
    assert within_grace.allows_lease(CONFIG) and lease_size(7.0, within_grace, CONFIG) == 4
    dropping = Standing(expired=5, delivered=15)  # 25% dropped
    assert dropping.allows_lease(CONFIG) and lease_size(7.0, dropping, CONFIG) == 3
    cherry_picker = Standing(expired=9, delivered=3)  # 75% dropped
    assert not cherry_picker.allows_lease(CONFIG)
    assert Standing(expired=0, delivered=0).drop_fraction == 0.0


def test_every_rejection_counts_against_standing_and_the_grace_is_no_larger_than_accepted_work():
    """Issue 57, attack 3: soft rejections cost nothing and a per-key grace let free keys drop units."""
    junk = Standing(expired=0, delivered=1, rejected=5)  # one accepted file, then five rejected: 5/6 failed
    assert junk.failed == 5 and not junk.allows_lease(CONFIG)
    shrunk = Standing(expired=2, delivered=6, rejected=3)  # 5 failed > min(4, 6): 5/11 failed
    assert shrunk.allows_lease(CONFIG) and lease_size(7.0, shrunk, CONFIG) == 2  # floor(4 · 6/11)
    assert not Standing(expired=1, delivered=0).allows_lease(CONFIG)  # a fresh key that dropped its one unit
    assert Standing(expired=0, delivered=0).allows_lease(CONFIG)  # ... is worse off than the next fresh key
    assert Standing(expired=4, delivered=4).allows_lease(CONFIG)  # within the grace its accepted work earned


def test_no_deadline_passes_the_cap_however_slow_the_node_measured():
    capped = CONFIG.model_copy(update={"lease_max_deadline_s": 100.0})
    assert unit_deadlines(100.0, 3, None, capped) == [145.0, 185.0, 200.0]  # the third: 225 capped at 200
    assert unit_deadlines(100.0, 1, 5000.0, capped) == [200.0]
    assert lease_size(60.0, GOOD, capped) == 1  # min(60 s target, 100 s cap) / 60 s a unit


def _room(tier: int, top_alive: int, open_units: int = 9, unproven: int = 1, low: int = 2) -> StepRoom:
    return StepRoom(0, 8, open_units, tier, top_alive, unproven, low)


def test_the_best_tier_alive_shares_the_demand_and_the_tiers_below_share_pools():
    trusting = CONFIG.model_copy(
        update={"lease_proven_files": 1, "lease_trusted_files": 4, "lease_slack_units": 1}
    )

    def member(files: int) -> Membership:
        return Membership(judged_accepted=files)

    # A trusted node alive: the trusted share the step's 9 units, 3 of them alive.
    assert room_for(member(4), _room(TRUSTED, 3), trusting) == 3
    # A node proven by one file takes one unit of the low-trust pool, never a trusted node's share ...
    assert room_for(member(1), _room(TRUSTED, 3), trusting) == 1
    assert room_for(member(3), _room(TRUSTED, 3, low=5), trusting) == 3  # ... growing with accepted work
    assert room_for(member(3), _room(TRUSTED, 3, low=0), trusting) == 0  # the pool is out
    assert room_for(member(0), _room(TRUSTED, 3), trusting) == 1  # unproven: one unit of its pool
    assert room_for(member(0), _room(TRUSTED, 3, unproven=0), trusting) == 0
    # No trusted node alive: the low-trust are the best tier and share the step fairly, as proven nodes did.
    assert room_for(member(1), _room(LOW_TRUST, 2), trusting) == 5
    assert room_for(member(0), _room(UNPROVEN, 4), trusting) == 1  # nobody proven: still one unit at a time
    assert room_for(member(4), _room(TRUSTED, 3, open_units=0), trusting) == 0


def test_freed_indices_are_reissued_first_but_never_to_the_node_that_held_them(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'u.db'}")
    migrate(engine)
    with Session(engine) as session:
        session.add(
            Run(
                run_id="r",
                trainer_public_key="a" * 64,
                async_level=2,
                current_step=0,
                run_secret="",
                created_at=0.0,
            )
        )
        for batch, node, status in [
            (0, "a", "accepted"),
            (1, "a", "expired"),
            (2, "b", "rejected"),
            (3, "b", "leased"),
        ]:
            session.add(
                WorkUnit(
                    run_id="r",
                    step=0,
                    batch_index=batch,
                    node_id=node * 64,
                    lease_id="l",
                    status=status,
                    leased_at=0.0,
                    expires_at=1.0,
                )
            )
        session.flush()
        assert free_batch_indices(session, "r", 0, "a" * 64, 3) == [
            2,
            4,
            5,
        ]  # 1 was a's: same seed, same file
        assert free_batch_indices(session, "r", 0, "c" * 64, 3) == [1, 2, 4]
    engine.dispose()


def test_the_trainer_asks_for_what_a_step_uses_less_what_is_waiting():
    assert next_demand(4.0, 0) == 4
    assert next_demand(3.2, 1) == 3
    assert next_demand(2.0, 9) == 1  # always at least one unit
