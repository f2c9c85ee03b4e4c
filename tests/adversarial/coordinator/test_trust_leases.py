"""Issue 57, attacks 3 to 6: trust earned only by accepted work.

The red team found that a rejected file counted as delivered (junk submitted at once made four proven keys the
swarm's fastest nodes, never refused), that one accepted file bought a long-standing node's lease rights (four
such keys leased everything and delivered nothing: honest throughput 0.04×), that fresh keys held the unproven
pool for a whole 270 s deadline while the honest newcomer got no unit, and that a node holding each unit to its
deadline grew its next one 1.3× a round, past the trainer's 600 s give-up. Each test acts as many keys.
"""

from __future__ import annotations

import pytest

from swarmrl.configs import RunConfig
from swarmrl.configs.base import ConfigError
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.identity import Identity
from swarmrl_lab.coordinator_double import LEASE_TESTS, ClockedCoordinator, accept, leased_submit, refusal

BASE = dict(
    LEASE_TESTS,
    lease_initial_unit_s=20.0,
    lease_target_s=20.0,
    lease_grace_s=5.0,
    heartbeat_interval_s=600.0,  # the clock jumps far: nobody is found dead for skipping a beat
    lease_trusted_files=4,
)


@pytest.fixture
def make_world(clocked):
    return lambda **config: clocked(**{**BASE, **config})


def deliver(world: ClockedCoordinator, node, unit, seconds: float, *, good: bool = True):
    """`node` returns `unit` after `seconds`: a file the validator accepts, or junk it rejects softly (a policy
    outside the async window, the red team's junk)."""
    world.wait(seconds, node)
    submission = node.upload_and_submit(
        "r", unit.step, unit.batch_index, f"{node.node_id} {unit}".encode(), 1, 1
    )
    if good:
        return accept(world.validator, submission)
    return world.validator.post_verdict(
        submission.id, accept=False, check="async_window", reason="stale policy"
    )


def node_with(world: ClockedCoordinator, accepted: int, seconds: float = 4.0):
    """A node with `accepted` files judged and accepted, each taking `seconds`."""
    node = world.node()
    for _ in range(accepted):
        deliver(world, node, node.lease_work("r", max_units=1).units[0], seconds)
    return node


def held(node) -> int:
    """Units the node holds after asking (0: refused, the step being full or its standing lost)."""
    try:
        return len(node.lease_work("r").units)
    except CoordinatorError as exc:
        assert exc.kind in ("step_full", "poor_standing"), exc
        return 0


def current_step(world: ClockedCoordinator) -> int:
    return world.admin.reads.run_state("r").current_step


def test_proven_keys_sending_junk_lose_standing_and_get_no_faster(make_world):
    """Attack 3: soft rejections cost; junk delivered at once measures no one as fast."""
    world = make_world(default_step_units=200, standing_drop_grace=8)
    junkers = [node_with(world, 1, seconds=10.0) for _ in range(4)]
    before = {n.node_id: n.lease_work("r").unit_seconds for n in junkers}
    refused = {}
    for junker in junkers:
        for round_ in range(10):
            try:
                units = junker.lease_work("r").units
            except CoordinatorError as exc:
                refused[junker.node_id] = (round_, exc.kind)
                break
            for unit in units:
                deliver(world, junker, unit, 0.1, good=False)
    # Each proven by one file: the grace is one failure, so the second rejected file ends its leases.
    assert {kind for _, kind in refused.values()} == {"poor_standing"} and len(refused) == 4
    assert all(round_ <= 2 for round_, _ in refused.values()), refused
    speeds = {w.node_id: w.unit_seconds for w in world.admin.reads.work("r") if w.node_id in before}
    assert speeds == pytest.approx(before)  # 10 s a unit, as its accepted file measured; junk changed nothing
    with pytest.raises(CoordinatorError) as info:
        junkers[0].lease_work("r")
    assert str(info.value).count("\n") == 0 and "standing:" in str(info.value)  # one line naming the rule


@pytest.mark.parametrize("count", [4, pytest.param(30, marks=pytest.mark.slow)])
def test_prove_then_defect_keys_hold_a_bounded_share_whatever_their_number(make_world, count):
    """Attack 4: keys proven by one file each share the low-trust pool, extra to the demand; the trusted node
    gets the whole demand, however many of them ask first."""
    world = make_world(default_step_units=200, lease_max_units=9, lease_target_s=1000.0)
    trusted = node_with(world, 4)
    defectors = [node_with(world, 1) for _ in range(count)]  # proven while the step wants 200 units
    world.trainer.publish_step("r", 1, units=8)
    grabbed = sum(held(d) for d in defectors)
    assert grabbed == 2  # a quarter of the step's 9 units, however many keys ask
    units = trusted.lease_work("r").units
    assert len(units) == 9 and {u.step for u in units} == {1}  # nothing the defectors hold is its
    assert all(u.expires_at - world.clock() <= 300.0 for u in units)  # the default cap
    work = world.trainer.reads.step_work("r", 1)
    assert work.unproven == 2 and work.open_units == 0  # the trainer waits for none of theirs


def test_a_low_trust_nodes_lease_grows_with_its_accepted_work(make_world):
    world = make_world(lease_max_units=9, lease_target_s=1000.0, default_step_units=40)
    node_with(world, 4)  # a trusted node alive: the others are low-trust until their fourth file
    climber = world.node()
    sizes = []
    for _ in range(4):
        units = climber.lease_work("r").units
        sizes.append(len(units))
        for unit in units:
            deliver(world, climber, unit, 1.0)
    # Unproven: one unit; low-trust: as many as its accepted files (1, then 2); trusted at 4: its fair share.
    assert sizes == [1, 1, 2, 9]


@pytest.mark.slow  # a hundred keys, fifty rounds
def test_a_fresh_key_that_squats_on_a_pool_unit_is_worse_off_than_a_fresh_key(make_world):
    """Attack 5 with pool tickets off (`lease_pool_ticket_bits` = 0; with them, test_pool_tickets.py): an unproven
    key that lets its pool unit lapse is refused for good, so a hundred squatting keys delay an honest newcomer
    by at most one short deadline per pool unit each, and its unit's deadline is the slowest proven node's, not
    the 270 s guess."""
    world = make_world(
        lease_initial_unit_s=120.0, lease_target_s=300.0, lease_grace_s=5.0, lease_pool_ticket_bits=0
    )
    proven = node_with(world, 4, seconds=4.0)  # measured at 4 s a unit
    squatters = [world.node() for _ in range(100)]
    newcomer = world.node()
    waiting, spent, rounds = list(squatters), [], 0
    while True:  # the squatters win every race for a freed unit: the newcomer asks once they hold the pool
        while waiting:
            try:
                (unit,) = waiting[0].lease_work("r").units
            except CoordinatorError as exc:
                assert exc.kind == "step_full", exc
                break
            assert unit.expires_at - world.clock() == pytest.approx(4.0 * 2 + 5.0)  # not 120 · 2 + 5
            spent.append(waiting.pop(0))
        if held(newcomer):
            break
        rounds += 1
        world.wait(14.0, proven)  # past the squatters' deadlines
    assert rounds <= 100 // 2  # each squatter held one pool unit (two per step) once: 50 rounds of 14 s
    assert {refusal(lambda s=s: s.lease_work("r")).kind for s in spent[:-2]} == {"poor_standing"}


def test_a_node_cannot_grow_its_own_deadline(make_world):
    """Attack 6: holding each unit to its deadline, then junk: the deadline stays what accepted work measured;
    slow accepted work grows it no further than the cap."""
    world = make_world(
        default_step_units=100,
        lease_max_deadline_s=30.0,
        standing_drop_grace=100,
        standing_max_drop_fraction=1.0,
    )
    node = node_with(world, 4, seconds=6.0)
    horizons = []
    for _ in range(4):
        (unit,) = node.lease_work("r", max_units=1).units
        horizons.append(unit.expires_at - world.clock())
        deliver(world, node, unit, unit.expires_at - world.clock() - 0.5, good=False)
    assert horizons == pytest.approx([6.0 * 2 + 5.0] * 4)  # what its accepted files measured, every round
    for _ in range(4):  # slow but accepted: the node's speed grows, its deadline stops at the cap
        (unit,) = node.lease_work("r", max_units=1).units
        horizons.append(unit.expires_at - world.clock())
        deliver(world, node, unit, unit.expires_at - world.clock() - 0.5)
    assert max(horizons) <= 30.0 and horizons[-1] == pytest.approx(30.0)  # 17, 23.3, then capped


def test_the_deadline_cap_stays_below_the_trainers_give_up():
    with pytest.raises(ConfigError, match="lease_max_deadline_s"):
        RunConfig.model_validate(
            {"coordinator": {"lease_max_deadline_s": 900.0}, "trainer": {"max_wait_seconds": 600.0}}
        )


def test_an_operator_allow_list_admits_only_the_keys_on_it(make_world):
    key = Identity.generate()
    world = make_world(worker_allow_list=[key.node_id])
    listed, stranger = world.client(key), world.client(Identity.generate())
    for node in (listed, stranger):
        node.register()
    listed.join("r", world.contract)
    assert refusal(lambda: stranger.join("r", world.contract)).kind == "not_allowed"
    assert leased_submit(listed, "r", b"listed work").status == "pending"
