"""Issue 57, goal 5: the unproven pool's admission cannot be captured by free keys.

A hundred fresh keys, each holding a pool unit to its deadline before its one lapse refused it, kept an honest
newcomer waiting for minutes (a fair lottery among keys is won by whoever makes the most keys). Once a pool unit
lapsed or was rejected, each unit of the pool costs a proof-of-work ticket bound to the node, its next unit and
the period: keys without compute get no more of it, and a ticket buys one unit, for its own node, now.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from swarmrl.coordinator.api import POOL_TICKET_DOMAIN, PoolTicket
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.retry import Notices
from swarmrl.tickets import leading_zero_bits, ticket_hash
from swarmrl.worker.node import WorkerNode, WorkLog
from swarmrl_lab.coordinator_double import LEASE_TESTS, ClockedCoordinator, accept, leased_submit, refusal

BITS = 12  # cheap to solve here: these tests are about where a ticket may be spent, not what it costs
BASE = dict(
    LEASE_TESTS,
    lease_initial_unit_s=20.0,
    lease_grace_s=5.0,
    heartbeat_interval_s=600.0,  # the clock jumps far: nobody is found dead for skipping a beat
    lease_pool_ticket_bits=BITS,
    lease_pool_ticket_window_s=100.0,
)


@pytest.fixture
def make_world(clocked):
    return lambda **config: clocked(**{**BASE, **config})


def contested(world: ClockedCoordinator):
    """A world whose pool is contested: a proven node (4 s a unit), and a fresh key's junk rejected."""
    proven, key = world.node(), world.node()
    accept(world.validator, leased_submit(proven, "r", f"honest {proven.node_id}".encode()))
    junk = leased_submit(key, "r", f"junk {key.node_id}".encode())
    world.validator.post_verdict(junk.id, accept=False, check="async_window", reason="stale policy")
    return proven


def test_an_uncontested_pool_asks_no_ticket_and_a_proven_node_never_does(make_world):
    world = make_world()
    fresh = world.node()
    assert not fresh.pool_ticket_challenge("r").required
    assert len(fresh.lease_work("r").units) == 1  # nobody abused the pool: a fresh key pays nothing
    proven = contested(world)
    newcomer = world.node()
    assert newcomer.pool_ticket_challenge("r").required
    assert refusal(lambda: newcomer.lease_work("r")).kind == "pool_ticket_needed"
    assert not proven.pool_ticket_challenge("r").required
    assert proven.lease_work("r").units  # accepted work: no ticket, whatever the pool's state


def failing_nonce(bound: tuple[str, str, str]) -> str:
    return next(
        n for n in map(str, range(100)) if leading_zero_bits(ticket_hash(POOL_TICKET_DOMAIN, bound, n)) < BITS
    )


def test_a_ticket_buys_one_unit_for_its_own_node_in_its_period(make_world):
    world = make_world()
    proven = contested(world)
    newcomer, stranger = world.node(), world.node()
    refused = refusal(lambda: newcomer.lease_work("r"))
    assert (
        refused.kind == "pool_ticket_needed" and "no ticket" in refused.detail and "\n" not in refused.detail
    )
    asked = newcomer.pool_ticket_challenge("r")
    assert asked.bits == BITS
    wrong = PoolTicket(
        challenge=asked.challenge, nonce=failing_nonce(("r", newcomer.node_id, asked.challenge))
    )
    assert "leading zero bits" in refusal(lambda: newcomer.lease_work("r", pool_ticket=wrong)).detail
    ticket = newcomer.solve_pool_ticket("r")
    stolen = refusal(lambda: stranger.lease_work("r", pool_ticket=ticket))  # bound to the newcomer's key
    assert stolen.kind == "pool_ticket_needed" and "leading zero bits" in stolen.detail
    (unit,) = newcomer.lease_work("r", pool_ticket=ticket).units
    newcomer.upload_and_submit("r", unit.step, unit.batch_index, b"waits for its verdict", 1, 1)
    again = refusal(lambda: newcomer.lease_work("r", pool_ticket=ticket))  # still unproven: a second unit...
    assert "since been leased" in again.detail  # ... needs a second ticket
    late = stranger.solve_pool_ticket("r")
    world.wait(2 * 100.0, proven)  # two periods on: a ticket solved then is no good now
    contested(world)  # (abused again, so tickets are asked for)
    assert "no longer good" in refusal(lambda: stranger.lease_work("r", pool_ticket=late)).detail


def test_the_pool_is_free_again_a_window_after_its_last_abuse(make_world):
    world = make_world()
    proven = contested(world)
    assert refusal(lambda: world.node().lease_work("r")).kind == "pool_ticket_needed"
    world.wait(100.0 + 20.0 * 2 + 5.0 + 1.0, proven)  # past the window from the junk unit's deadline
    assert len(world.node().lease_work("r").units) == 1


def test_squatting_keys_without_compute_hold_the_pool_for_one_deadline_then_none(make_world):
    """Attack 5 with a hundred keys: they take the pool while it is free; once their units lapse, each pool unit
    needs a ticket, the keys that squatted are refused for good, and a newcomer that pays one ticket gets the
    next unit, whatever the number of keys."""
    world = make_world()
    proven = world.node()
    accept(world.validator, leased_submit(proven, "r", b"honest"))
    squatters = [world.node() for _ in range(100)]
    newcomer = world.node()
    holding = []
    for key in squatters:
        try:
            holding.extend(key.lease_work("r").units)
        except CoordinatorError as exc:
            assert exc.kind == "step_full", exc
    assert len(holding) == 2  # the pool: a quarter of 9 units
    world.wait(max(u.expires_at for u in holding) - world.clock() + 1.0, proven)
    kinds = {refusal(lambda k=k: k.lease_work("r")).kind for k in squatters}
    assert kinds == {"pool_ticket_needed", "poor_standing"}  # the two that squatted are out for good
    assert len(newcomer.lease_work("r", pool_ticket=newcomer.solve_pool_ticket("r")).units) == 1


def worker_node(world: ClockedCoordinator, tmp_path) -> WorkerNode:
    """A worker's lease step (`WorkerNode.lease`) against the real service: what lease() reads is real (client,
    log book, notices), the rest is not used."""
    return WorkerNode(
        config=None,  # type: ignore[arg-type]
        options=SimpleNamespace(run_id="r", poll_seconds=0.01, stop=threading.Event()),  # type: ignore[arg-type]
        identity=None,  # type: ignore[arg-type]
        client=world.node(),
        async_level=2,
        heartbeat=None,  # type: ignore[arg-type]
        policy=SimpleNamespace(newest=lambda: None),  # type: ignore[arg-type]
        tasks=None,  # type: ignore[arg-type]
        params=None,  # type: ignore[arg-type]
        log_book=WorkLog(tmp_path / "work.json"),
        notices=Notices(),
    )


def test_a_worker_asked_for_a_ticket_solves_it_and_leases_with_it(make_world, tmp_path):
    world = make_world()
    contested(world)
    worker = worker_node(world, tmp_path)
    assert worker.lease() is None and worker.pool_ticket is not None  # refused, then solved
    lease = worker.lease()
    assert lease is not None and len(lease.units) == 1 and worker.pool_ticket is None
    assert worker.log_book.counts["pool_tickets_solved"] == 1


def test_a_starting_worker_solves_its_ticket_while_its_policy_loads(make_world, tmp_path):
    world = make_world()
    contested(world)
    worker = worker_node(world, tmp_path)
    worker.solve_pool_ticket_ahead()  # beside load_first, in run_node
    assert worker.ticket_ahead is not None
    worker.ticket_ahead.join(timeout=30.0)
    lease = worker.lease()  # no refusal: its first ask carries the ticket
    assert lease is not None and len(lease.units) == 1
    assert worker.log_book.counts["pool_tickets_solved"] == 1
    idle = worker_node(make_world(), tmp_path / "idle")
    idle.solve_pool_ticket_ahead()  # an uncontested pool: nothing solved
    assert idle.ticket_ahead is None and idle.pool_ticket is None
    assert idle.log_book.counts["pool_tickets_solved"] == 0
