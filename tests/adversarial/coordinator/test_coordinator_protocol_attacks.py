"""Issue 20's protocol attacks, as a hostile node plays them against the real service (HTTP on 127.0.0.1).

Each test here failed on the coordinator before work leases: a banned node's pending file was still accepted,
credited and fed to the trainer (20.2); ledger totals stopped at the list page (20.3); uploads never submitted
stayed on disk forever with no quota (20.4); a signed upload trickled past its signature's skew was accepted
(20.5); any node could fetch the seed of any batch index, so it could generate many batches and submit the ones
it liked (20.6).
"""

from __future__ import annotations

import hashlib
import time

import httpx
import pytest

from swarmrl.configs.contract import ContractSection
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.rules.janitor import PURGE_EVERY_S
from swarmrl.coordinator.signing import sign_request
from swarmrl.identity import Identity
from swarmrl_lab.coordinator_double import accept, leased_submit

# Proven from the start: these attacks are about what a node with standing can do (sybils: test_sybil_*.py).
BASE = dict(default_step_units=50, uploads_per_hour=1000, requests_per_minute=100_000, lease_proven_files=0)


@pytest.fixture
def make_world(clocked):
    return lambda **config: clocked(**{**BASE, **config})


def _refused(call, status: int, kind: str) -> CoordinatorError:
    with pytest.raises(CoordinatorError) as info:
        call()
    assert (info.value.status, info.value.kind) == (status, kind), info.value.detail
    return info.value


# --- 20.2: bans void pending and unpaid work -----------------------------------------------------------------
def test_a_hard_rejection_voids_the_nodes_pending_and_unpaid_work(make_world):
    world = make_world(hard_rejects_before_ban=1)
    cheat, honest = world.node(), world.node()
    waiting = leased_submit(cheat, "r", b"pending, judged after the ban", rows=4, tokens=40)
    unpaid = leased_submit(cheat, "r", b"accepted, credit still locked", rows=4, tokens=40)
    forged = leased_submit(cheat, "r", b"forged", rows=4, tokens=40)
    fair = leased_submit(honest, "r", b"honest work", rows=2, tokens=20)
    accept(world.validator, unpaid)
    accept(world.validator, fair)
    world.validator.post_verdict(forged.id, accept=False, check="toploc")
    assert world.admin.reads.node(cheat.node_id).banned

    _refused(lambda: accept(world.validator, waiting), 409, "voided")
    statuses = {s.id: s.status for s in world.admin.reads.submissions("r")}
    assert statuses == {waiting.id: "voided", unpaid.id: "voided", forged.id: "rejected", fair.id: "accepted"}
    balances = {b.node_id: b for b in world.admin.reads.ledger("r").balances}
    assert (balances[cheat.node_id].pending_tokens, balances[cheat.node_id].wiped_tokens) == (0, 40)
    assert balances[honest.node_id].pending_tokens == 20
    assert [s.id for s in world.trainer.accepted_submissions("r", 0)] == [fair.id]
    assert [s.id for s in world.trainer.training_feed("r", 0)] == [fair.id]
    assert world.validator.lease_validation("r").submission is None  # nothing of the cheat's is left to judge


def test_an_admin_ban_voids_pending_and_unpaid_work_in_every_run(make_world):
    world = make_world()
    world.admin.create_run("other", world.trainer.node_id, ContractSection(), bound_claims=False)
    world.admin.add_validator("other", world.validator.node_id)
    node = world.node()
    node.join("other", ContractSection())
    elsewhere = leased_submit(node, "other", b"pending in another run")
    unpaid = leased_submit(node, "r", b"accepted, unpaid", tokens=7)
    accept(world.validator, unpaid)
    world.admin.ban(node.node_id, "sybil")
    _refused(lambda: accept(world.validator, elsewhere), 409, "voided")
    assert world.admin.reads.submissions("r")[0].status == "voided"
    assert world.admin.reads.ledger("r").balances[0].wiped_tokens == 7
    assert world.trainer.training_feed("r", 0) == []


# --- 20.3: ledger totals over everything -----------------------------------------------------------------------
def test_ledger_totals_count_every_entry_past_the_page_limit(make_world):
    world = make_world(list_limit=10)
    node = world.node()
    for i in range(25):
        submission = leased_submit(node, "r", f"file {i}".encode(), rows=1, tokens=3)
        accept(world.validator, submission)
    view = world.admin.reads.ledger("r")
    assert len(view.entries) == 10  # the list is paged ...
    (balance,) = view.balances
    assert (balance.pending_tokens, balance.pending_samples) == (75, 25)  # ... the totals are not
    assert len(world.admin.reads.ledger("r", after_id=view.entries[-1].id).entries) == 10
    (work,) = world.admin.reads.work("r")
    assert (work.generated, work.accepted, work.judged) == (25, 25, 25)


# --- 20.4: orphan uploads expire, are deleted, and count against a quota ---------------------------------------
def test_orphan_uploads_are_deleted_when_their_slot_expires_and_a_run_has_a_quota(make_world):
    # Proven nodes' files have 3 × 4096 bytes of room: the quota less the share unproven nodes' files hold.
    world = make_world(
        storage_quota_bytes=4 * 4096,
        storage_unproven_fraction=0.25,
        upload_slot_ttl_s=60.0,
        lease_target_s=1000.0,
        lease_max_deadline_s=1000.0,
    )
    node = world.node()
    units = node.lease_work("r").units
    assert len(units) == 4
    for i, unit in enumerate(units[:3]):
        blob = bytes([i]) * 4096
        slot = node.request_upload("r", 0, unit.batch_index, hashlib.sha256(blob).hexdigest(), len(blob))
        node.upload(slot, blob)  # ... and never submitted
    assert len(list(world.storage.rglob("*.parquet"))) == 3
    _refused(lambda: node.request_upload("r", 0, units[3].batch_index, "ab" * 32, 1), 507, "storage_quota")
    metrics = httpx.get(f"{world.url}/metrics").text
    assert 'swarmrl_coordinator_storage_bytes{run="r"} 12288.0' in metrics

    world.wait(max(60.0, PURGE_EVERY_S) + 1, node)  # the slots lapse; the next sweep deletes their bytes
    assert not [p for p in world.storage.rglob("*.parquet")]
    metrics = httpx.get(f"{world.url}/metrics").text
    assert "swarmrl_coordinator_orphan_uploads_purged_total 3.0" in metrics
    assert "swarmrl_coordinator_orphan_bytes_purged_total 12288.0" in metrics
    assert 'swarmrl_coordinator_storage_bytes{run="r"} 0.0' in metrics
    leased_submit(node, "r", b"room again")


# --- 20.5 (the slot's part): an upload ends by its deadline ------------------------------------------------------
@pytest.mark.slow
def test_a_signed_upload_trickled_past_its_deadline_is_refused(make_world):
    world = make_world(clock_skew_s=1.5, upload_min_bytes_per_s=1e9)
    identity = Identity.generate()
    node = world.client(identity)
    node.register()
    node.join("r", ContractSection())
    data = b"x" * 300
    unit = node.lease_work("r", max_units=1).units[0]
    slot = node.request_upload("r", 0, unit.batch_index, hashlib.sha256(data).hexdigest(), len(data))

    def trickle():
        for i in range(3):
            yield data[i * 100 : (i + 1) * 100]
            time.sleep(1.0)

    headers = sign_request(identity, "PUT", slot.upload_path, data, now=world.clock())
    started = time.monotonic()
    response = httpx.put(f"{world.url}{slot.upload_path}", content=trickle(), headers=headers, timeout=30)
    assert (response.status_code, response.json()["error"]) == (408, "upload_deadline"), response.text
    assert time.monotonic() - started < 5.0
    _refused(lambda: node.submit("r", slot.slot_id, slot_sha(data), 0, 1, 1), 409, "not_uploaded")
    node.upload(slot, data)  # sent at a normal pace, the same file still goes through


def slot_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- 20.6: no seed without a lease; dropping leased units costs standing ---------------------------------------
def test_a_node_gets_no_seed_for_a_unit_it_was_not_leased(make_world):
    world = make_world()
    node, other = world.node(), world.node()
    for batch in (0, 5, 2**31 - 1):
        _refused(lambda b=batch: node.task_seed("r", 0, b), 403, "not_leased")
    unit = other.lease_work("r", max_units=1).units[0]
    _refused(lambda: node.task_seed("r", 0, unit.batch_index), 403, "not_leased")  # someone else's unit
    assert other.task_seed("r", 0, unit.batch_index) == unit.seed
    _refused(lambda: node.request_upload("r", 0, unit.batch_index, "ab" * 32, 10), 409, "not_leased")


def test_generating_many_units_and_submitting_the_best_few_loses_standing(make_world):
    world = make_world(
        default_step_units=30,
        lease_initial_unit_s=10.0,
        lease_target_s=40.0,
        lease_max_units=4,
        lease_grace_s=0.0,
        standing_drop_grace=4,
        standing_max_drop_fraction=0.5,
    )
    """The issue's attack: generate 24 batches, submit the 3 with the lowest reward. With leases a node learns
    at most one lease of seeds at a time; every unit it does not deliver expires, and past the grace its
    leases shrink and stop long before it has 24 to choose from."""
    node = world.node()
    seeds: list[int] = []
    with pytest.raises(CoordinatorError) as stopped:
        while len(seeds) < 24:
            lease = node.lease_work("r")
            seeds += [unit.seed for unit in lease.units]
            best = lease.units[0]
            node.upload_and_submit("r", best.step, best.batch_index, f"best of {len(seeds)}".encode(), 1, 1)
            world.wait(max(u.expires_at for u in lease.units) - world.clock() + 1, node)
    assert (stopped.value.status, stopped.value.kind) == (403, "poor_standing")
    assert len(seeds) < 24
    (work,) = world.admin.reads.work("r")
    # Nothing of its was accepted (its files wait for a validator): its grace is none (issue 57).
    assert work.expired >= 3 and work.generated * 2 < work.leased
