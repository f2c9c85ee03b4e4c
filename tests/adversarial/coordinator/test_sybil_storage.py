"""Issue 57, attack 1: disk fill with rejected files.

21 throwaway keys, each banned at once, filled a 2 GiB quota with 100 MiB uploads: a submitted file was never
deleted, rejected, voided or banned, and every honest upload after that got `507 storage_quota`. Now a file is
no larger than the run's unit can make it, a rejected or voided file holds no room from its verdict on and the
janitor deletes its bytes, and unproven nodes' files share a bounded part of the quota however many keys they
are. Keys acting through HTTP for a realistic number; a thousand more written straight into the database.
"""

from __future__ import annotations

import hashlib

import httpx
import pytest

from swarmrl.configs.contract import ContractSection
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.rules.janitor import PURGE_EVERY_S
from swarmrl.coordinator.rules.storage_room import unit_file_cap
from swarmrl_lab import crowd
from swarmrl_lab.coordinator_double import ClockedCoordinator, accept, leased_submit

FILE = 4096
BASE = dict(
    uploads_per_hour=10_000,
    requests_per_minute=100_000,
    default_step_units=8,
    lease_ahead_steps=0,
    hard_rejects_before_ban=1,
    spot_check_fraction=1.0,
    lease_pool_ticket_bits=8,  # keys pay for pool units once the pool is contested: cheaply here (this file is
)  # about room; what tickets cost an attacker is test_pool_tickets.py's)


@pytest.fixture
def make_world(clocked):
    return lambda **config: clocked(**{**BASE, **config})


def storage_bytes(world: ClockedCoordinator) -> int:
    metrics = httpx.get(f"{world.url}/metrics").text
    (line,) = [x for x in metrics.splitlines() if x.startswith('swarmrl_coordinator_storage_bytes{run="r"}')]
    return int(float(line.split()[-1]))


def files_on_disk(world: ClockedCoordinator) -> int:
    return sum(p.stat().st_size for p in world.storage.rglob("*.parquet"))


def proven_node(world: ClockedCoordinator):
    node = world.node()
    accept(world.validator, leased_submit(node, "r", f"proof of {node.node_id}".encode()))
    return node


def test_a_file_larger_than_the_runs_unit_can_make_is_refused_naming_the_rule(make_world):
    world = make_world()
    node = world.node()
    (unit,) = node.lease_work("r", max_units=1).units
    cap = unit_file_cap(ContractSection())
    with pytest.raises(CoordinatorError) as refused:
        node.request_upload("r", 0, unit.batch_index, "ab" * 32, cap + 1)
    assert (refused.value.status, refused.value.kind) == (413, "too_large")
    assert "contract's unit bounds" in refused.value.detail and "\n" not in refused.value.detail
    node.request_upload("r", 0, unit.batch_index, "ab" * 32, cap)  # the largest honest file: a slot


def test_throwaway_keys_banned_at_once_hold_no_room_and_their_bytes_are_deleted(make_world):
    """Through HTTP: keys lease, upload junk and are banned at its hard rejection, one after another."""
    world = make_world(storage_quota_bytes=16 * FILE, storage_unproven_fraction=0.25)
    honest = proven_node(world)
    honest_bytes = storage_bytes(world)
    for i in range(6):  # 6 × 4 KiB of junk: past the unproven nodes' 4 × 4 KiB of room
        key = world.node()
        junk = leased_submit(key, "r", bytes([i]) * FILE)
        world.validator.post_verdict(junk.id, accept=False, check="upload_hash", reason="forged")
    assert storage_bytes(world) == honest_bytes  # released at each verdict: no room held ...
    assert files_on_disk(world) == honest_bytes  # ... and its bytes deleted right after it
    newcomer = world.node()
    leased_submit(newcomer, "r", b"a newcomer's honest file")  # never refused for the junk's room
    leased_submit(honest, "r", b"an honest node's next file")
    world.wait(PURGE_EVERY_S + 1, honest)
    assert files_on_disk(world) == storage_bytes(world)  # the junk deleted: what remains is what is counted
    metrics = httpx.get(f"{world.url}/metrics").text
    assert "swarmrl_coordinator_released_uploads_purged_total 6.0" in metrics


@pytest.mark.slow  # a thousand keys' files written and deleted
def test_a_thousand_banned_keys_files_release_their_bytes_and_honest_uploads_go_on(make_world):
    world = make_world(storage_quota_bytes=500 * FILE)
    state, now = world.app.state.coordinator, world.clock()
    honest = proven_node(world)
    banned = crowd.ground_ids(1000, prefix="ab")
    crowd.add_members(state, "r", banned, now=now)
    junk = crowd.add_files(state, "r", banned, size=FILE, status="voided", now=now)
    crowd.ban(state, banned, now=now)
    assert junk == 2 * 500 * FILE  # twice the quota on disk
    honest_bytes = storage_bytes(world)
    assert honest_bytes < 2 * FILE
    leased_submit(honest, "r", b"honest work after the attack")
    leased_submit(world.node(), "r", b"a newcomer's first file")
    world.wait(PURGE_EVERY_S + 1, honest)
    assert files_on_disk(world) == storage_bytes(world) < 4 * FILE  # back to the honest files alone


@pytest.mark.slow  # a thousand keys
def test_any_number_of_unproven_keys_fill_only_their_share_of_the_quota(make_world):
    world = make_world(storage_quota_bytes=1000 * FILE, storage_unproven_fraction=0.1)
    state, now = world.app.state.coordinator, world.clock()
    honest = proven_node(world)
    squatters = crowd.ground_ids(1000, prefix="cd")
    crowd.add_members(state, "r", squatters, now=now)
    crowd.add_files(state, "r", squatters[:100], size=FILE, status="pending", now=now)  # their whole share
    newcomer = world.node()
    with pytest.raises(CoordinatorError) as refused:
        leased_submit(newcomer, "r", b"x" * FILE)
    assert refused.value.kind == "storage_quota" and "storage_unproven_fraction" in refused.value.detail
    for i in range(5):  # the proven node's room is all there
        leased_submit(honest, "r", hashlib.sha256(str(i).encode()).digest() * (FILE // 32))
