"""Work leases, validation leases, the training feed and draining, over real HTTP with an injected clock."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from polling import wait_for
from prometheus_client.parser import text_string_to_metric_families

from swarmrl.configs.contract import ContractSection
from swarmrl.coordinator.api import MAX_LEASE_WAIT_S
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.server.routes import leases as lease_routes
from swarmrl.rundir import RunDir
from swarmrl.trainer.swarm_source import AcceptedSubmissions
from swarmrl_lab.coordinator_double import accept, leased_submit

# Nodes are proven from the start here: these tests are about leases as such (sybils: tests/adversarial), of
# the open step alone unless a test leases ahead.
BASE = dict(
    uploads_per_hour=10_000,
    requests_per_minute=100_000,
    lease_initial_unit_s=10.0,
    lease_grace_s=5.0,
    lease_proven_files=0,
    lease_ahead_steps=0,
)


@pytest.fixture
def make(clocked):
    return lambda **config: clocked(**{**BASE, **config})


def _held(world, notifier: str, count: int = 1) -> None:
    """Waits until `count` long polls sleep on the service's `notifier`: each looked, found nothing, and waits."""
    state = world.app.state.coordinator
    wait_for(
        lambda: getattr(state, notifier).waiting == count, 10, f"{count} requests held on {notifier}", 0.01
    )


def _answered(world, route: str) -> float:
    """How many requests to `route` (a template) the coordinator answered so far, hung up ones included."""
    labels = {"method": "POST", "route": route}
    count = world.app.state.coordinator.metrics.registry.get_sample_value(
        "swarmrl_coordinator_request_seconds_count", labels
    )
    return count or 0.0


def _kind(call) -> str:
    with pytest.raises(CoordinatorError) as info:
        call()
    return info.value.kind


# --- work leases ---------------------------------------------------------------------------------------------
def test_the_open_step_leases_demand_plus_slack_and_never_one_unit_twice(make):
    world = make(lease_slack_units=1, lease_max_units=1)
    world.trainer.set_demand("r", 0, 3)
    nodes = [world.node() for _ in range(8)]

    def ask(node):
        try:
            return [(u.step, u.batch_index) for u in node.lease_work("r").units]
        except CoordinatorError as exc:
            return exc.kind

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, nodes))
    units = [unit for answer in answers if isinstance(answer, list) for unit in answer]
    assert sorted(units) == [(0, 0), (0, 1), (0, 2), (0, 3)]  # demand 3 + slack 1, each index once
    assert sorted(a for a in answers if isinstance(a, str)) == ["step_full"] * 4
    work = world.admin.reads.step_work("r", 0)
    assert (work.demand, work.slack, work.leased, work.open_units) == (3, 1, 4, 0)
    world.trainer.set_demand("r", 0, 4)  # the trainer wants more: one more unit opens
    assert ask(world.node()) == [(0, 4)]


def test_once_the_open_step_is_out_nodes_lease_the_next_one_and_its_work_is_waiting_when_it_opens(make):
    world = make(default_step_units=1, lease_slack_units=0, lease_ahead_steps=1)
    first, second, third = world.node(), world.node(), world.node()
    assert [(u.step, u.batch_index) for u in first.lease_work("r").units] == [(0, 0)]
    assert _kind(lambda: second.lease_work("r")) == "step_full"  # holds no policy of the open step (0)
    ahead = second.lease_work("r", policy_step=0)
    assert [(u.step, u.batch_index) for u in ahead.units] == [(1, 0)]
    assert ahead.min_policy_step == 0  # step 1's file trains with a policy no older than 1 - async_level 2
    with pytest.raises(CoordinatorError) as refused:
        third.lease_work("r", policy_step=0)
    assert refused.value.kind == "step_full" and "step 1" in str(refused.value)
    early = second.upload_and_submit("r", 1, 0, b"generated ahead", 1, 1)  # step 1 is not open: still taken
    accept(world.validator, early)
    assert _kind(lambda: second.upload_and_submit("r", 2, 0, b"too far ahead", 1, 1)) == "future_step"
    assert [s.id for s in world.trainer.training_feed("r", 0)] == []  # no step trains a later step's work
    world.trainer.publish_step("r", 1, units=1)
    assert [s.id for s in world.trainer.training_feed("r", 1)] == [early.id]
    work = world.admin.reads.step_work("r", 1)
    assert (work.demand, work.leased + work.submitted + work.accepted, work.open_units) == (1, 1, 0)
    assert _kind(lambda: third.lease_work("r", policy_step=0)) == "step_full"  # policy 0 is not step 1's
    (next_ahead,) = third.lease_work("r", policy_step=1).units  # step 1 is served: its successor is next
    assert (next_ahead.step, next_ahead.batch_index) == (2, 0)


def test_a_step_leased_ahead_needs_fewer_units_by_what_the_open_step_leased_beyond_its_demand(make):
    """The open step's slack units are files it fills without: they train in the next step, so the next step's
    room ahead is that much smaller (else every step ahead is overfull, and a file generated ahead that
    carries over twice is refused as stale)."""
    world = make(default_step_units=1, lease_slack_units=1, lease_ahead_steps=1)
    assert [u.step for u in world.node().lease_work("r").units] == [0, 0]  # demand 1 + slack 1
    assert [u.step for u in world.node().lease_work("r", policy_step=0).units] == [1]  # 2 less the 1 carried
    assert _kind(lambda: world.node().lease_work("r", policy_step=0)) == "step_full"


def test_the_trainer_opening_a_step_counts_its_work_done_ahead_once(make, tmp_path):
    """Opening step 1, the trainer wants a step's worth of files less what earlier steps carry over (step 0's
    unit still in flight); the file already generated for step 1 is the coordinator's to count, not twice."""
    world = make(default_step_units=1, lease_slack_units=0, lease_ahead_steps=1)
    straggler, ahead = world.node(), world.node()
    straggler.lease_work("r")
    (unit,) = ahead.lease_work("r", policy_step=0).units
    accept(world.validator, ahead.upload_and_submit("r", 1, unit.batch_index, b"ahead", 1, 1))
    source = AcceptedSubmissions(
        world.trainer, "r", RunDir(tmp_path / "trainer"), world.contract.async_level, units_per_step=3
    )
    source.open_step(1)
    work = world.admin.reads.step_work("r", 1)
    assert (work.demand, work.open_units) == (2, 1)  # 3 - 1 in flight; 2 - the 1 already there


def test_the_trainer_opening_a_step_does_not_count_on_a_silent_nodes_units_of_the_step_before(make, tmp_path):
    """As the coordinator's room does not: a straggler that missed a heartbeat holds its unit of step 0 until
    it is found dead, but the demand for step 1 is not lowered by it."""
    world = make(default_step_units=1, lease_slack_units=0, lease_ahead_steps=1, lease_initial_unit_s=150.0)
    straggler, ahead = world.node(), world.node()
    straggler.lease_work("r")
    (unit,) = ahead.lease_work("r", policy_step=0).units
    accept(world.validator, ahead.upload_and_submit("r", 1, unit.batch_index, b"ahead", 1, 1))
    world.wait(13.0, ahead)  # the straggler misses a heartbeat of 10 s (+ 2 s grace)
    work = world.admin.reads.step_work("r", 0)
    assert (work.leased, work.silent) == (1, 1)
    source = AcceptedSubmissions(
        world.trainer, "r", RunDir(tmp_path / "trainer"), world.contract.async_level, units_per_step=3
    )
    source.open_step(1)
    work = world.admin.reads.step_work("r", 1)
    assert (work.demand, work.open_units) == (3, 2)  # nothing in flight is waited for; 1 already there


def test_no_step_is_leased_ahead_that_the_async_window_could_not_train(make):
    """With async_level 1 a unit of step k + 1 would need policy k, which the trainer has not written while it
    collects step k: nothing is leased ahead whatever `lease_ahead_steps` says."""
    world = make(default_step_units=1, lease_slack_units=0, lease_ahead_steps=3)
    tight = ContractSection(async_level=1)
    world.admin.create_run("tight", world.trainer.node_id, tight, bound_claims=False)
    first, second = world.node(), world.node()
    for node in (first, second):
        node.join("tight", tight)
    assert [u.step for u in first.lease_work("tight", policy_step=0).units] == [0]
    assert _kind(lambda: second.lease_work("tight", policy_step=0)) == "step_full"
    assert [u.step for u in second.lease_work("r", policy_step=0).units] == [0]
    assert [u.step for u in first.lease_work("r", policy_step=0).units] == [
        1
    ]  # async_level 2: one ahead, not 3
    assert _kind(lambda: world.node().lease_work("r", policy_step=0)) == "step_full"


def test_with_a_wider_window_a_node_one_policy_behind_leases_ahead_and_two_behind_does_not(make):
    """async_level 3: a file of step k + 1 generated with policy k - 1 trains two steps old at its own step and
    three (still inside the window) should it carry over, so a node that has not yet installed the open step's
    policy (a distant one, say) may lease ahead; with policy k - 2 it could go stale, so it may not."""
    world = make(default_step_units=1, lease_slack_units=0, lease_ahead_steps=1)
    wide = ContractSection(async_level=3)
    world.admin.create_run("wide", world.trainer.node_id, wide, bound_claims=False)
    nodes = [world.node() for _ in range(3)]
    for node in nodes:
        node.join("wide", wide)
    world.trainer.publish_step("wide", 1, units=1)
    world.trainer.publish_step("wide", 2, units=1)
    assert [u.step for u in nodes[0].lease_work("wide", policy_step=0).units] == [2]  # the open step: any
    assert _kind(lambda: nodes[1].lease_work("wide", policy_step=0)) == "step_full"  # 3 - 0 > 2
    ahead = nodes[1].lease_work("wide", policy_step=1)
    assert [u.step for u in ahead.units] == [3] and ahead.min_policy_step == 0


def test_a_node_waiting_for_room_is_answered_the_moment_the_trainer_opens_a_step_or_drains(make, monkeypatch):
    """A lease request may wait at the coordinator while every step is full (`wait_s`). The trainer opening a
    step answers it with that step's unit and draining with run_draining, at once: the periodic look again
    is put out of reach here, so only the wake-up answers before the wait ends."""
    monkeypatch.setattr(lease_routes, "LEASE_RECHECK_S", 60.0)
    world = make(default_step_units=1, lease_slack_units=0)
    world.node().lease_work("r")  # step 0's one unit
    waiting, late = world.node(), world.node()
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(waiting.lease_work, "r", wait_s=15.0)
        _held(world, "work_changed")
        assert not answer.done()  # held, not refused with step_full
        world.trainer.publish_step("r", 1, units=1)
        assert [(u.step, u.batch_index) for u in answer.result(timeout=10).units] == [(1, 0)]
        refusal = pool.submit(_kind, lambda: late.lease_work("r", wait_s=15.0))
        _held(world, "work_changed")
        assert not refusal.done()
        world.trainer.drain("r")
        assert refusal.result(timeout=10) == "run_draining"


def test_when_a_step_opens_its_units_go_first_to_the_waiting_node_that_returns_them_soonest(make):
    """Both wait for room; the slow node asked first. The step that opens has one unit: the node measured at
    1 s a unit takes it, not the one at 5 s (woken together, the slower one looks a moment later)."""
    world = make(default_step_units=2, lease_slack_units=0)
    fast, slow = world.node(), world.node()
    (fast_unit,) = fast.lease_work("r", max_units=1).units
    (slow_unit,) = slow.lease_work("r", max_units=1).units
    world.wait(1.0, fast, slow)
    fast_file = fast.upload_and_submit("r", 0, fast_unit.batch_index, b"fast", 1, 1)
    world.wait(4.0, fast, slow)
    slow_file = slow.upload_and_submit("r", 0, slow_unit.batch_index, b"slow", 1, 1)
    for file in (fast_file, slow_file):  # only accepted files measure a node's speed
        accept(world.validator, file)
    with ThreadPoolExecutor(2) as pool:
        slow_answer = pool.submit(_kind, lambda: slow.lease_work("r", wait_s=3.0))
        _held(world, "work_changed")
        fast_answer = pool.submit(fast.lease_work, "r", wait_s=15.0)
        _held(world, "work_changed", 2)
        world.trainer.publish_step("r", 1, units=1)
        assert [(u.step, u.batch_index) for u in fast_answer.result(timeout=10).units] == [(1, 0)]
        assert slow_answer.result(timeout=10) == "step_full"


def test_a_waiting_node_gets_a_lapsed_unit_and_every_wait_ends_in_time(make, monkeypatch):
    # No wake-up announces a lapse: a look again finds it.
    monkeypatch.setattr(lease_routes, "LEASE_RECHECK_S", 0.1)
    world = make(default_step_units=1, lease_slack_units=0)
    world.node().lease_work("r")
    waiting = world.node()
    started = time.monotonic()
    assert _kind(lambda: waiting.lease_work("r", wait_s=1.0)) == "step_full"
    assert time.monotonic() - started >= 1.0
    assert _kind(lambda: waiting.lease_work("r", wait_s=MAX_LEASE_WAIT_S + 1)) == "invalid_request"
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(waiting.lease_work, "r", wait_s=15.0)
        _held(world, "work_changed")
        world.wait(60.0, waiting)  # the holder's unit lapses (25 s deadline); a look again finds it free
        assert [(u.step, u.batch_index) for u in answer.result(timeout=10).units] == [(0, 0)]


def test_an_expired_unit_is_reissued_to_another_node(make):
    world = make(default_step_units=1, lease_slack_units=0)
    slow, other = world.node(), world.node()
    (unit,) = slow.lease_work("r").units
    assert _kind(lambda: other.lease_work("r")) == "step_full"
    world.wait(unit.expires_at - world.clock() + 1, slow, other)
    (again,) = other.lease_work("r").units
    assert again.batch_index == unit.batch_index and again.seed != unit.seed  # same unit, the new node's seed
    assert _kind(lambda: slow.upload_and_submit("r", 0, unit.batch_index, b"late", 1, 1)) == "not_leased"
    (slow_work,) = world.admin.reads.work("r", node_id=slow.node_id)
    assert (slow_work.leased, slow_work.expired) == (1, 1)


def test_a_dead_nodes_units_return_before_their_deadline(make):
    """A worker killed mid-lease: once it misses its heartbeats its unit goes to the next node; nothing else
    it did is lost."""
    world = make(
        default_step_units=2, lease_slack_units=0, lease_initial_unit_s=150.0, lease_max_deadline_s=500.0
    )
    killed, other = world.node(), world.node()
    (first,) = killed.lease_work("r", max_units=1).units
    world.wait(200.0, killed, other)  # it works slowly: its next deadline will be long
    done = killed.upload_and_submit("r", 0, first.batch_index, b"delivered before the crash", 1, 1)
    accept(world.validator, done)  # its speed is measured on its accepted files alone
    (held,) = killed.lease_work("r").units
    assert held.expires_at - world.clock() > 300
    assert _kind(lambda: other.lease_work("r")) == "step_full"
    world.wait(40.0, other)  # 3 missed heartbeats of 10 s (+ grace): dead
    (taken,) = other.lease_work("r").units
    assert taken.batch_index == held.batch_index
    assert [s.id for s in world.admin.reads.submissions("r")] == [done.id]
    assert world.admin.reads.submissions("r")[0].status == "accepted"


def test_a_silent_nodes_units_are_leased_over_before_it_is_dead_and_its_late_file_still_counts(make):
    """A worker that misses a heartbeat (killed, or cut off) holds its units until it is found dead, but its
    step stops counting on them: a node still beating leases a fresh unit in their place at once. Should the
    silent node come back and deliver, its file is taken (it carries over); once dead, its unit expires."""
    world = make(default_step_units=1, lease_slack_units=0, lease_initial_unit_s=150.0)
    silent, other = world.node(), world.node()
    (held,) = silent.lease_work("r").units
    world.wait(9.0, silent, other)
    assert _kind(lambda: other.lease_work("r")) == "step_full"  # it beats: its unit is counted on
    world.wait(13.0, other)  # one heartbeat of 10 s (+ 2 s grace) missed: unhealthy, not dead
    (cover,) = other.lease_work("r").units
    assert (cover.step, cover.batch_index) == (0, held.batch_index + 1)  # a fresh unit, not the silent one's
    late = silent.upload_and_submit("r", 0, held.batch_index, b"delivered after a gap", 1, 1)
    assert late.status == "pending"
    world.wait(9.0, silent, other)
    work = {w.node_id: w for w in world.admin.reads.work("r")}
    assert (work[silent.node_id].expired, work[other.node_id].leased) == (0, 1)


def test_a_silent_nodes_units_expire_when_it_is_dead(make):
    world = make(default_step_units=1, lease_slack_units=0, lease_initial_unit_s=150.0)
    silent, other = world.node(), world.node()
    silent.lease_work("r")
    world.wait(13.0, other)
    other.lease_work("r")  # in its place
    world.wait(30.0, other)  # 3 missed heartbeats: dead
    (silent_work,) = world.admin.reads.work("r", node_id=silent.node_id)
    assert (silent_work.leased, silent_work.expired) == (1, 1)


def test_a_node_that_hung_up_while_held_is_granted_nothing(make, monkeypatch):
    """A lease request held for room whose node hangs up (a worker killed mid-wait) is not granted the units
    the next step opens: they would wait for its death. The next node to ask gets them."""
    from swarmrl.identity import Identity

    monkeypatch.setattr(lease_routes, "LEASE_RECHECK_S", 60.0)  # only the step opening wakes it
    world = make(default_step_units=1, lease_slack_units=0)
    world.node().lease_work("r")  # step 0's one unit
    gone = world.client(Identity.generate(), timeout_s=0.5)
    gone.register()
    gone.join("r", ContractSection())
    with pytest.raises(CoordinatorError):  # its client gives up and closes the connection; the request waits
        gone.lease_work("r", wait_s=15.0)
    _held(world, "work_changed")
    answered = _answered(world, "/v1/runs/{run_id}/leases")
    world.trainer.publish_step("r", 1, units=1)
    # The held request looks again, finds its node gone, grants nothing.
    wait_for(
        lambda: _answered(world, "/v1/runs/{run_id}/leases") > answered, 10, "the held request's end", 0.01
    )
    assert [w.leased for w in world.admin.reads.work("r", node_id=gone.node_id)] == [0]  # a member, no unit
    assert [(u.step, u.batch_index) for u in world.node().lease_work("r").units] == [(1, 0)]


def test_a_validator_that_hung_up_while_held_leases_no_file(make, monkeypatch):
    from swarmrl.coordinator.client import ValidatorClient
    from swarmrl.identity import Identity

    monkeypatch.setattr(lease_routes, "LEASE_RECHECK_S", 60.0)
    world = make(default_step_units=10)
    gone = world.as_(ValidatorClient, Identity.generate(), timeout_s=0.5)
    world.admin.add_validator("r", gone.node_id)
    with pytest.raises(CoordinatorError):
        gone.lease_validation("r", wait_s=15.0)
    _held(world, "files_pending")
    answered = _answered(world, "/v1/runs/{run_id}/validation-leases")
    node = world.node()
    (unit,) = node.lease_work("r", max_units=1).units
    submitted = node.upload_and_submit("r", 0, unit.batch_index, b"judge me", 1, 1)
    route = "/v1/runs/{run_id}/validation-leases"
    wait_for(lambda: _answered(world, route) > answered, 10, "the held request's end", 0.01)
    assert world.validator.lease_validation("r").submission.id == submitted.id  # not held by the one gone


def test_lease_size_and_deadlines_follow_each_nodes_measured_speed(make):
    world = make(
        default_step_units=100,
        lease_initial_unit_s=30.0,
        lease_target_s=60.0,
        lease_max_units=4,
        lease_deadline_factor=2.0,
    )
    fast, slow = world.node(), world.node()
    first = fast.lease_work("r")
    assert len(first.units) == 2  # unmeasured: 60 s / 30 s
    (one,) = slow.lease_work("r", max_units=1).units
    for i, unit in enumerate(first.units):
        world.wait(2.0, slow)
        accept(world.validator, fast.upload_and_submit("r", 0, unit.batch_index, f"fast {i}".encode(), 1, 1))
    again = fast.lease_work("r")
    assert again.unit_seconds == pytest.approx(2.0) and len(again.units) == 4  # measured fast: a full lease
    world.wait(46.0, fast, slow)
    accept(world.validator, slow.upload_and_submit("r", 0, one.batch_index, b"slow", 1, 1))
    lease = slow.lease_work("r")
    assert lease.unit_seconds > 20.0 and len(lease.units) == 1  # a slow node gets one unit ...
    (unit,) = lease.units
    assert unit.expires_at - world.clock() == pytest.approx(
        2.0 * lease.unit_seconds + 5.0
    )  # ... and time for it


def test_a_node_behind_the_newest_policy_leases_only_what_it_returns_before_the_window_leaves_it(make):
    """Run 101 of the WAN demo: an asia worker two versions behind took two units of a step at once; the second
    reached the trainer two steps later, when its policy was out of the window, and was refused as stale."""
    world = make(default_step_units=100, lease_initial_unit_s=30.0, lease_target_s=60.0, lease_max_units=4)
    nodes = [world.node() for _ in range(4)]
    first = [node.lease_work("r", max_units=1).units[0] for node in nodes]
    world.wait(8.0, *nodes)  # each node returns a unit in 8 s
    for node, unit in zip(nodes, first, strict=True):
        data = f"measured {unit.batch_index}".encode()
        accept(world.validator, node.upload_and_submit("r", 0, unit.batch_index, data, 1, 1))
    for step in (1, 2, 3):  # a step every 10 s
        world.wait(10.0, *nodes)
        world.trainer.publish_step("r", step, units=100)
    # async_level 2: policy 3 may train two steps past step 3 (20 s: two units), policy 2 one (10 s: one), and
    # policy 1 only step 3 itself; a node that names no policy gets its lease by speed alone (60 s / 8 s, max 4).
    sizes = [
        len(node.lease_work("r", policy_step=p).units) for node, p in zip(nodes, (None, 3, 2, 1), strict=True)
    ]
    assert sizes == [4, 2, 1, 1]


def test_a_draining_run_leases_nothing_new_but_takes_and_judges_what_was_leased(make):
    world = make(default_step_units=10)
    node, late = world.node(), world.node()
    (unit,) = node.lease_work("r", max_units=1).units
    assert world.trainer.drain("r").status == "draining"
    assert _kind(lambda: late.lease_work("r")) == "run_draining"
    submission = node.upload_and_submit("r", 0, unit.batch_index, b"finished during the drain", 1, 1)
    assert world.admin.reads.run_state("r").status == "draining"
    accept(world.validator, submission)
    assert world.admin.reads.run_state("r").status == "drained"


# --- validation leases -----------------------------------------------------------------------------------------
def test_a_validator_waiting_for_a_file_gets_it_the_moment_it_is_submitted(make, monkeypatch):
    monkeypatch.setattr(
        lease_routes, "LEASE_RECHECK_S", 60.0
    )  # only the submission's wake-up answers in time
    world = make(default_step_units=10)
    node = world.node()
    started = time.monotonic()
    assert world.validator.lease_validation("r", wait_s=1.0).submission is None
    assert time.monotonic() - started >= 1.0  # nothing came: held the whole wait
    (unit,) = node.lease_work("r", max_units=1).units
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(world.validator.lease_validation, "r", wait_s=15.0)
        _held(world, "files_pending")
        assert not answer.done()
        submitted = node.upload_and_submit("r", 0, unit.batch_index, b"judge me", 1, 1)
        assert answer.result(timeout=10).submission.id == submitted.id


def test_validators_side_by_side_judge_every_file_exactly_once(make):
    world = make(default_step_units=100)
    nodes = [world.node() for _ in range(3)]
    submitted = {leased_submit(nodes[i % 3], "r", f"file {i}".encode()).id for i in range(30)}
    validators = [world.validator, world.added_validator(), world.added_validator()]

    def judge(validator) -> list[int]:
        judged = []
        while (lease := validator.lease_validation("r")).submission is not None:
            accept(validator, lease.submission)
            judged.append(lease.submission.id)
        return judged

    with ThreadPoolExecutor(3) as pool:
        judged = list(pool.map(judge, validators))
    every = [i for ids in judged for i in ids]
    assert sorted(every) == sorted(submitted)  # none skipped, none judged twice
    assert all(ids == sorted(ids) for ids in judged)  # each takes files in submission order
    verdicts = world.admin.reads.verdicts("r")
    assert sorted(v.submission_id for v in verdicts) == sorted(submitted)


def test_a_killed_validators_file_returns_to_the_pool_and_is_judged_once(make):
    world = make(default_step_units=10, validation_lease_s=60.0)
    node = world.node()
    first = leased_submit(node, "r", b"first")
    second = leased_submit(node, "r", b"second")
    killed, survivor = world.validator, world.added_validator()
    assert killed.lease_validation("r").submission.id == first.id
    assert survivor.lease_validation("r").submission.id == second.id
    assert _kind(lambda: accept(survivor, first)) == "lease_held"
    accept(survivor, second)
    world.wait(61.0, node)
    assert survivor.lease_validation("r").submission.id == first.id  # the lapsed lease returns
    accept(survivor, first)
    assert _kind(lambda: killed.post_verdict(first.id, accept=False, check="toploc")) == "already_decided"
    assert [v.validator_key for v in world.admin.reads.verdicts("r")] == [survivor.node_id] * 2


def test_accepted_files_reach_the_trainer_in_submission_order_per_step(make):
    world = make(default_step_units=10)
    node = world.node()
    files = [leased_submit(node, "r", f"file {i}".encode()) for i in range(3)]
    validators = [world.validator, world.added_validator(), world.added_validator()]
    leased = [v.lease_validation("r").submission.id for v in validators]
    assert leased == [f.id for f in files]
    accept(validators[2], files[2])
    accept(validators[1], files[1])
    assert world.trainer.accepted_submissions("r", 0) == []  # file 0 is still being judged
    assert world.trainer.training_feed("r", 0) == []
    accept(validators[0], files[0])
    assert [s.id for s in world.trainer.training_feed("r", 0)] == [f.id for f in files]


def test_a_trainer_waiting_on_the_feed_hears_of_a_file_the_moment_it_may_train_on_it(make):
    """A held feed request (`wait_s`) is answered by the verdict that lets files through, also when that
    verdict's file is older than the files it was waiting behind; with nothing decided it is held to the end."""
    world = make(default_step_units=10)
    node = world.node()
    files = [leased_submit(node, "r", f"file {i}".encode()) for i in range(2)]
    first, second = world.validator, world.added_validator()
    assert [first.lease_validation("r").submission.id, second.lease_validation("r").submission.id] == [
        f.id for f in files
    ]
    started = time.monotonic()
    assert world.trainer.training_feed("r", 0, wait_s=1.0) == []
    assert time.monotonic() - started >= 1.0
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(world.trainer.training_feed, "r", 0, wait_s=15.0)
        _held(world, "files_decided")
        accept(second, files[1])  # decided, but waits behind file 0: the held request looks and answers
        assert answer.result(timeout=10) == []
        answer = pool.submit(world.trainer.training_feed, "r", 0, after_id=files[1].id, wait_s=15.0)
        _held(world, "files_decided")
        assert not answer.done()
        accept(first, files[0])
        assert answer.result(timeout=10) == []  # within 10 s of a 15 s wait: its wake-up answered it
    assert [s.id for s in world.trainer.training_feed("r", 0)] == [f.id for f in files]


# --- the feed, what each step used, and the counts -----------------------------------------------------------
def test_each_step_reports_what_it_used_and_unused_work_carries_over(make):
    world = make(default_step_units=10)
    node = world.node()
    files = [leased_submit(node, "r", f"file {i}".encode(), rows=4, tokens=40) for i in range(3)]
    for f in files:
        accept(world.validator, f)
    receipt = world.trainer.report_outcomes("r", 0, trained=[(files[0].id, 4)], stale=[files[1].id])
    assert (receipt.recorded, receipt.ignored) == (2, [])
    world.trainer.publish_step("r", 1, units=2)
    # Step 1 gets what step 0 left; step 0 (a resumed trainer re-collecting it) still sees its own.
    assert [s.id for s in world.trainer.training_feed("r", 1)] == [files[2].id]
    assert [s.id for s in world.trainer.training_feed("r", 0)] == [f.id for f in files]
    assert world.trainer.report_outcomes("r", 1, trained=[(files[0].id, 4)]).ignored == [files[0].id]
    (work,) = world.admin.reads.work("r")
    assert (work.generated, work.judged, work.accepted, work.trained, work.trained_rows, work.stale) == (
        3,
        3,
        3,
        1,
        4,
        1,
    )
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(httpx.get(f"{world.url}/metrics").text)
        for sample in family.samples
    }
    mine = (("node", node.node_id), ("run", "r"))
    assert samples["swarmrl_coordinator_node_work", (("count", "trained"), *mine)] == 1
    assert samples["swarmrl_coordinator_node_credit_tokens", (*mine, ("status", "pending"))] == 120


def test_spot_check_mode_judges_a_fraction_after_probation_and_credits_only_measured_work(make):
    world = make(
        default_step_units=100,
        spot_check_fraction=0.5,
        spot_check_probation_files=4,
        hard_rejects_before_ban=3,
    )
    node = world.node()
    probation = [leased_submit(node, "r", f"probation {i}".encode(), tokens=10) for i in range(4)]
    assert all(f.checked and f.status == "pending" for f in probation)  # a fresh node: every file judged
    for submission in probation:
        accept(world.validator, submission)
    files = [leased_submit(node, "r", f"file {i}".encode(), tokens=10) for i in range(40)]
    unchecked = [f for f in files if not f.checked]
    checked = [f for f in files if f.checked]
    assert unchecked and checked  # 0.5 each: all on one side has probability 2**-39
    assert all(f.status == "accepted" for f in unchecked) and all(f.status == "pending" for f in checked)
    (balance,) = world.admin.reads.ledger("r").balances
    assert balance.pending_tokens == 40  # the probation files: a skipped file is not credited on its claim
    audit = world.trainer.audit_submission(
        "r", unchecked[0].id, accept=True, check="trainer", rows=1, tokens=9
    )
    assert (audit.accepted, audit.validator_key) == (True, world.trainer.node_id)
    (balance,) = world.admin.reads.ledger("r").balances
    assert balance.pending_tokens == 49  # what the trainer measured in the file
    world.validator.post_verdict(checked[0].id, accept=False, check="toploc")
    assert world.admin.reads.node(node.node_id).banned  # spot-checked: the first forgery bans
    (balance,) = world.admin.reads.ledger("r").balances
    assert (balance.pending_tokens, balance.wiped_tokens) == (0, 49)
    assert world.trainer.training_feed("r", 0) == []  # unmeasured files of a banned node are voided too
    assert (
        _kind(
            lambda: world.trainer.audit_submission(
                "r", unchecked[1].id, accept=True, check="t", rows=1, tokens=1
            )
        )
        == "voided"
    )


def test_a_unit_whose_step_left_the_async_window_expires(make):
    world = make(default_step_units=4)
    node = world.node()
    (unit,) = node.lease_work("r", max_units=1).units
    for step in (1, 2):
        world.trainer.publish_step("r", step, units=4)
    assert node.lease_work("r").units == [unit]  # step 0 is still inside the window of step 2
    world.trainer.publish_step("r", 3, units=4)
    (fresh,) = node.lease_work("r", max_units=1).units  # its file would be refused: the unit lapsed
    assert fresh.step == 3
    assert [u.status for u in world.admin.reads.units("r", step=0)] == ["expired"]
