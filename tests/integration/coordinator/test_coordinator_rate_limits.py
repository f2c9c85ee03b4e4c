"""Rate limits a lone honest node never hits with the defaults, and that say when to come back when they bite."""

from __future__ import annotations

import pytest

from swarmrl.coordinator.errors import CoordinatorError
from swarmrl_lab.coordinator_double import leased_submit

UNITS = 8


@pytest.mark.slow
def test_one_node_does_a_whole_runs_work_with_the_default_limits(clocked):
    # 20 steps of 8 units in ten minutes: 160 uploads, more than the old fixed 120 an hour, at which a
    # one-worker swarm stalled at step 2 of the demo.
    world = clocked()
    node = world.node()
    for step in range(20):
        if step:
            world.trainer.publish_step("r", step, units=UNITS)
        for _ in range(UNITS):
            submitted = leased_submit(node, "r", f"step {step} file".encode() + bytes(8 * _))
            assert submitted.step == step
        world.wait(30.0, node)  # a step every 30 s; the request bucket refills meanwhile
    (work,) = world.admin.reads.work("r")
    assert work.generated == 20 * UNITS


def test_a_node_may_not_open_more_slots_for_a_step_than_its_demand_needs(clocked):
    world = clocked(default_step_units=2, lease_slack_units=0)
    node = world.node()
    units = node.lease_work("r", max_units=2).units
    for unit in units:
        for attempt in range(3):
            node.request_upload("r", 0, unit.batch_index, f"{unit.batch_index}{attempt}".rjust(64, "0"), 10)
    with pytest.raises(CoordinatorError) as refused:
        node.request_upload("r", 0, units[0].batch_index, "ff" * 32, 10)
    assert (refused.value.status, refused.value.kind) == (409, "unit_slots_used")


def test_an_hourly_cap_set_by_the_operator_says_when_to_come_back(clocked):
    world = clocked(uploads_per_hour=2)
    node = world.node()
    leased_submit(node, "r", b"first")
    world.wait(600.0, node)
    leased_submit(node, "r", b"second")
    with pytest.raises(CoordinatorError) as refused:
        leased_submit(node, "r", b"third")
    assert (refused.value.status, refused.value.kind) == (429, "upload_rate_limited")
    # The first slot leaves the rolling hour 3000 s from now: that is when a slot frees up.
    assert 2990 <= refused.value.retry_after_s <= 3001
