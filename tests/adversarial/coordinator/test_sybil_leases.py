"""Issue 29, break 2: leases that free identities could starve.

Five new keys (register, join, lease: no compute) held all 9 units of a step and the honest node got
`step_full`; an upload slot declaring 100 MiB and never used pushed the unit deadlines out and reserved 100 MiB
of the run's quota; four polling identities got 55 unit grants to the honest worker's 10. Now an unproven key
holds one unit at a time from a pool unproven keys share, fair shares are spread over proven nodes, a slot
reserves and extends nothing, and a unit stays leased only while its file's bytes arrive.
"""

from __future__ import annotations

import hashlib
import time

import httpx
import pytest
from sqlalchemy import event

from swarmrl.configs.contract import ContractSection
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.rules.storage_room import unit_file_cap
from swarmrl.coordinator.server.routes.leases import ROOM_FRESH_S
from swarmrl.coordinator.signing import sign_request
from swarmrl.identity import Identity
from swarmrl_lab.coordinator_double import LEASE_TESTS, ClockedCoordinator, accept, leased_submit

MIB = 1024 * 1024
BASE = LEASE_TESTS


@pytest.fixture
def make_world(clocked):
    return lambda **config: clocked(**{**BASE, **config})


def proven_node(world: ClockedCoordinator):
    """A node with one file a validator judged and accepted: standing earned with measured work."""
    node = world.node()
    accept(
        world.validator, leased_submit(node, "r", f"honest work of {node.node_id}".encode(), rows=1, tokens=1)
    )
    return node


def held(node, policy_step: int | None = None) -> int:
    """Units the node holds after asking (a node claiming the open step's policy may be leased ahead; a fresh
    key that let its one unit expire is refused for good, and one without a ticket gets no unit of a pool
    keys abused: issue 57)."""
    try:
        return len(node.lease_work("r", policy_step=policy_step).units)
    except CoordinatorError as exc:
        assert exc.kind in ("step_full", "poor_standing", "pool_ticket_needed"), exc
        return 0


@pytest.mark.parametrize("ahead", [0, 1])
def test_five_fresh_keys_cannot_hold_a_step_the_honest_node_needs(make_world, ahead):
    world = make_world(lease_initial_unit_s=10.0, lease_target_s=100.0, lease_ahead_steps=ahead)
    honest = proven_node(world)
    hoarders = [world.node() for _ in range(5)]
    grabbed = [held(h, policy_step=0) for h in hoarders]  # a claim nobody can check: they all make it
    assert max(grabbed) <= 1  # an unproven key holds one unit at a time
    assert sum(grabbed) <= 2 * (
        1 + ahead
    )  # and unproven keys share a quarter of each leasable step's 9 units
    (unit, *_) = honest.lease_work("r", policy_step=0).units
    assert unit.step == 0  # the open step's proven share is not what the hoard took
    assert len(world.admin.reads.units("r", node_id=honest.node_id)) >= 1 + 3


def test_a_hundred_fresh_keys_leasing_ahead_hold_one_pool_per_step(make_world):
    world = make_world(lease_initial_unit_s=10.0, lease_target_s=100.0, lease_ahead_steps=1)
    proven_node(world)
    grabbed = [held(world.node(), policy_step=0) for _ in range(100)]
    assert sum(grabbed) == 2 + 2  # two units of step 0's pool, two of step 1's: identities buy nothing more


def test_what_fresh_keys_hold_is_extra_to_the_demand_and_nobody_waits_for_it(make_world):
    """A hoarded unit of the unproven pool neither takes a unit from proven nodes nor counts as work in flight
    for the trainer (it asked for one more unit only once nothing it waited for was left)."""
    world = make_world(
        default_step_units=1, lease_slack_units=1, lease_initial_unit_s=10.0, lease_target_s=100.0
    )
    honest = proven_node(world)  # its accepted file used one of step 0's two units
    assert held(world.node()) == 1  # a fresh key takes the pool's unit and sits on it
    assert held(honest) == 1  # the step's other unit: the hoard took nothing from the proven node
    work = world.trainer.reads.step_work("r", 0)
    assert (work.leased, work.unproven, work.open_units) == (2, 1, 0)
    assert held(world.node()) == 0  # the pool (a quarter of the step, at least one unit) is full


@pytest.mark.parametrize("ahead", [0, 1])
def test_a_runs_first_steps_are_leased_once_while_no_node_is_proven(make_world, ahead):
    """At a run's start every node is unproven, and their files wait for a validator. Each file delivered used
    to reopen a unit while the other nodes' leases were still in flight: six nodes had 15 units of a 10-unit
    step and 14 of the next, all with the first policy, and the window could not train them all (run 41 of
    `demo --wan` refused one as stale). With no proven node alive, what unproven nodes hold counts."""
    world = make_world(
        default_step_units=8,
        lease_slack_units=2,
        lease_initial_unit_s=10.0,
        lease_target_s=100.0,
        lease_ahead_steps=ahead,
    )
    nodes = [world.node() for _ in range(6)]
    submitted = []
    for _ in range(5):  # every node asks; then, while the others still hold theirs, each delivers, unjudged
        holding = []
        for node in nodes:
            try:
                holding += [(node, unit) for unit in node.lease_work("r", policy_step=0).units]
            except CoordinatorError as exc:
                assert exc.kind == "step_full", exc
        for node, unit in holding:
            submitted.append(
                node.upload_and_submit("r", unit.step, unit.batch_index, repr(unit).encode(), 1, 1)
            )
    leased = [u.step for u in world.admin.reads.units("r")]
    assert leased.count(0) == 8 + 2, leased  # the step's demand and its slack, not one unit more
    # The next step, less what step 0 leased beyond its demand (those files carry over into it).
    assert leased.count(1) == (8 + 2 - 2 if ahead else 0), leased
    # What the trainer reads: nothing left to lease, and the unproven nodes' work counted on (so it does not
    # raise the demand for nodes that are not there).
    work = world.trainer.reads.step_work("r", 0)
    assert (work.open_units, work.unproven, work.submitted) == (0, 0, 10)
    accept(world.validator, submitted[0])  # once a node is proven, the others' unjudged files are extra again
    others = sum(1 for s in submitted if s.step == 0 and s.node_id != submitted[0].node_id)
    assert world.trainer.reads.step_work("r", 0).unproven == others > 0


@pytest.mark.slow
def test_an_honest_node_gets_a_unit_within_one_lease_period_while_100_fresh_keys_poll(make_world):
    world = make_world(
        lease_initial_unit_s=5.0, lease_target_s=5.0, lease_grace_s=5.0, heartbeat_interval_s=60.0
    )
    honest = proven_node(world)
    sybils = [world.node() for _ in range(100)]
    grants = {"honest": 0, "sybils": 0}
    for step in range(
        3
    ):  # three lease periods of 15 s, a step each: everyone polls, the sybils deliver nothing
        if step:
            world.trainer.publish_step("r", step, units=8)
        for sybil in sybils:
            grants["sybils"] += held(sybil)
        lease = honest.lease_work("r")
        assert lease.units, "the honest node waited a whole lease period"
        grants["honest"] += len(lease.units)
        for unit in lease.units:  # delivered, unjudged: a proven node that dropped them would lose standing
            honest.upload_and_submit("r", unit.step, unit.batch_index, repr(unit).encode(), 1, 1)
        world.wait(16.0)
    assert grants["honest"] >= grants["sybils"] / 2, grants  # 55 grants to 10 before: standing is favoured


def test_an_upload_slot_declaring_the_largest_file_reserves_nothing_and_extends_nothing(make_world):
    largest = unit_file_cap(ContractSection())  # the run's file cap, from its contract's unit bounds
    world = make_world(storage_quota_bytes=2 * largest, lease_proven_files=0)
    hoarder, honest = world.node(), world.node()
    (unit,) = hoarder.lease_work("r", max_units=1).units
    hoarder.request_upload("r", 0, unit.batch_index, "ab" * 32, largest)  # ... never sent
    (recorded,) = world.admin.reads.units("r", node_id=hoarder.node_id)
    assert recorded.expires_at == unit.expires_at  # the lease was not extended by a promise
    data = b"x" * 4096
    (mine,) = honest.lease_work("r", max_units=1).units
    slot = honest.request_upload("r", 0, mine.batch_index, hashlib.sha256(data).hexdigest(), len(data))
    honest.upload(slot, data)  # the quota had room: the largest file declared is not that file held
    assert (
        f'swarmrl_coordinator_storage_bytes{{run="r"}} {float(len(data))}'
        in httpx.get(f"{world.url}/metrics").text
    )


def _put(
    world: ClockedCoordinator, identity: Identity, slot, data: bytes, chunk: int, seconds_per_chunk: float
):
    """PUT the file in chunks, moving the service's clock on between them as a transfer of that pace would (each
    chunk gets half a real second to reach the server before the clock moves)."""

    def paced():
        for start in range(0, len(data), chunk):
            if start:
                time.sleep(0.5)
                world.clock.advance(seconds_per_chunk)
            yield data[start : start + chunk]

    headers = sign_request(identity, "PUT", slot.upload_path, data, now=world.clock())
    return httpx.put(f"{world.url}{slot.upload_path}", content=paced(), headers=headers, timeout=60)


@pytest.mark.slow
def test_a_unit_lives_while_its_bytes_arrive_and_lapses_under_a_trickle(make_world):
    world = make_world(
        lease_proven_files=0,
        lease_initial_unit_s=10.0,
        lease_deadline_factor=1.0,
        lease_grace_s=0.0,
        clock_skew_s=2.0,
        upload_min_bytes_per_s=1000.0,
    )
    data = bytes(range(256)) * 80  # 20,480 bytes: 22.5 s at the slowest accepted rate, past the unit's 10 s
    sha = hashlib.sha256(data).hexdigest()
    for pace, expected in (
        (4.0, 200),
        (20.0, 409),
    ):  # 4,096 bytes per 4 s (fast enough), per 20 s (a trickle)
        identity = Identity.generate()
        node = world.client(identity)
        node.register()
        node.join("r", ContractSection())
        (unit,) = node.lease_work("r", max_units=1).units
        slot = node.request_upload("r", 0, unit.batch_index, sha, len(data))
        response = _put(world, identity, slot, data, chunk=4096, seconds_per_chunk=pace)
        assert response.status_code == expected, response.text
        if expected == 200:
            assert world.clock() > unit.expires_at  # it outlived its first deadline on arriving bytes alone
            node.submit("r", slot.slot_id, sha, 0, 1, 1)
            data = data[::-1]  # the next file differs
            sha = hashlib.sha256(data).hexdigest()
        else:
            assert response.json()["error"] == "lease_expired"


def test_refused_polls_stand_on_one_reading_of_the_steps_room(make_world):
    """A crowd of keys polling a full step costs each one a read of its own units and standing; the refusals
    share one count of the step's units (renewed every ROOM_FRESH_S), instead of three counts each."""
    world = make_world(lease_initial_unit_s=10.0, lease_target_s=100.0)
    proven_node(world)
    sybils = [world.node() for _ in range(20)]
    holding = [held(sybil) for sybil in sybils]  # the unproven pool fills; the rest are refused
    assert 0 in holding
    step_counts: list[str] = []

    def count_step_reads(conn, cursor, statement, *args) -> None:
        if "count(*)" in statement.lower() and "work_units.step =" in statement:
            step_counts.append(statement)

    engine = world.app.state.coordinator.sessions.kw["bind"]
    event.listen(engine, "before_cursor_execute", count_step_reads)
    try:
        assert [held(sybil) for sybil in sybils] == holding  # the clock stands: the same answers
    finally:
        event.remove(engine, "before_cursor_execute", count_step_reads)
    # At most one reading of the room (its two counts), three counts a refusal before.
    assert len(step_counts) <= 2, step_counts
    world.wait(ROOM_FRESH_S)
    before = len(step_counts)
    event.listen(engine, "before_cursor_execute", count_step_reads)
    try:
        held(sybils[holding.index(0)])
    finally:
        event.remove(engine, "before_cursor_execute", count_step_reads)
    assert len(step_counts) > before  # read afresh once the interval has passed


def test_a_node_refused_a_moment_ago_sees_a_raised_demand_at_once(make_world):
    world = make_world(
        default_step_units=1, lease_slack_units=0, lease_initial_unit_s=10.0, lease_target_s=100.0
    )
    honest = proven_node(world)  # its accepted file was the step's one unit
    assert held(honest) == 0  # the step has all it wants
    world.trainer.set_demand("r", 0, 3)
    assert held(honest) >= 1  # the same instant on the service's clock: the refusal's reading is not reused
