"""Issue 29, break 1: spot-check credit was whatever the worker claimed.

With `spot_check_fraction = 0.1`, 40 throwaway identities each leased one unit and submitted 300 random bytes
claiming `rows = tokens = 2**53`: 36 were accepted unchecked, each credited 2**53 tokens, and all 36 garbage
files were in the trainer's feed. Now credit is what a trusted node measured in the file, a fresh identity's
files are all judged (probation), claims outside the run's unit bounds are hard-rejected at submit, and a file
the draw skips is checked by the trainer before it trains, which hard-rejects a forgery.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from swarmrl.configs.contract import ContractSection
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.rollouts import RolloutLimits
from swarmrl.rundir import RunDir
from swarmrl.trainer.data import NotEnoughRollouts, RolloutFeed
from swarmrl.trainer.swarm_source import AcceptedSubmissions
from swarmrl_lab.coordinator_double import ClockedCoordinator, accept, leased_submit

HUGE = 2**53
BASE = dict(
    default_step_units=100,
    uploads_per_hour=10_000,
    requests_per_minute=100_000,
    lease_pool_ticket_bits=8,  # keys pay for pool units once the pool is contested: cheaply here (this file is
)  # about credit; what tickets cost an attacker is test_pool_tickets.py's)


@pytest.fixture
def make_world(clocked):
    return lambda **config: clocked(**{**BASE, **config})


def _earned(world: ClockedCoordinator, node_ids: set[str]) -> int:
    return sum(
        b.pending_tokens + b.unlocked_tokens
        for b in world.admin.reads.ledger("r").balances
        if b.node_id in node_ids
    )


def test_forty_throwaway_identities_claiming_2_53_tokens_earn_nothing_and_feed_nothing(make_world):
    """The issue's attack as it was played: fresh keys, random bytes, absurd claims, a 10% spot-check draw."""
    world = make_world(spot_check_fraction=0.1)
    sybils = [world.node() for _ in range(40)]
    files = [leased_submit(s, "r", os.urandom(300), rows=HUGE, tokens=HUGE) for s in sybils]
    assert all(f.checked and f.status == "pending" for f in files)  # probation: a fresh key is always judged
    assert world.trainer.training_feed("r", 0) == []
    world.wait(CoordinatorConfig().credit_unlock_window_s + 1)
    assert _earned(world, {s.node_id for s in sybils}) == 0


def test_claims_outside_the_units_bounds_are_hard_rejected_at_submit(make_world):
    world = make_world(spot_check_fraction=0.1)
    contract = ContractSection(prompts_per_batch=4, group_size=2, max_new_tokens=16)  # 8 rows of ≤ 16 tokens
    world.admin.create_run("bounded", world.trainer.node_id, contract)
    honest, liar, greedy = world.node(), world.node(), world.node()
    for node in (honest, liar, greedy):
        node.join("bounded", contract)
    assert leased_submit(honest, "bounded", b"eight rows", rows=8, tokens=8 * 16).status == "pending"
    for node, rows, tokens in ((liar, HUGE, HUGE), (greedy, 8, 8 * 16 + 1)):
        with pytest.raises(CoordinatorError) as refused:
            leased_submit(node, "bounded", os.urandom(300), rows=rows, tokens=tokens)
        assert (refused.value.status, refused.value.kind) == (422, "claims_out_of_bounds")
        assert world.admin.reads.node(node.node_id).banned  # one lie costs the key
    (verdict,) = [v for v in world.admin.reads.verdicts("bounded") if v.check == "claims"][:1]
    assert (verdict.validator_key, verdict.severity) == ("coordinator", "hard")


def test_credit_is_what_the_validator_measured_never_the_claim(make_world):
    world = make_world()
    node = world.node()
    submission = leased_submit(node, "r", b"a file", rows=HUGE, tokens=HUGE)
    with pytest.raises(CoordinatorError) as unmeasured:
        world.validator.post_verdict(submission.id, accept=True, check="all")
    assert (unmeasured.value.status, unmeasured.value.kind) == (422, "invalid_request")
    world.validator.post_verdict(submission.id, accept=True, check="all", rows=4, tokens=40)
    (balance,) = world.admin.reads.ledger("r").balances
    assert (balance.pending_tokens, balance.pending_samples) == (40, 4)


def test_a_proven_identity_that_turns_to_garbage_never_trains_and_loses_its_credit(make_world, tmp_path):
    """Past probation a skipped file goes to the trainer's feed unjudged: the trainer's own checks refuse the
    garbage before training, report it, and the node is hard-rejected (its probation credit wiped)."""
    world = make_world(spot_check_fraction=0.5, spot_check_probation_files=2)
    node = world.node()
    for i in range(2):
        accept(world.validator, leased_submit(node, "r", f"honest {i}".encode(), rows=2, tokens=20))
    # Each file on a step of its own: the feed offers a step's files in order, behind any still waiting for a
    # validator (which would catch the garbage itself).
    skipped = _skipped_file(world, node)
    assert skipped.status == "accepted"
    assert skipped.id in {s.id for s in world.trainer.training_feed("r", skipped.step)}
    assert _earned(world, {node.node_id}) == 40

    source = AcceptedSubmissions(
        world.trainer, "r", RunDir(tmp_path / "trainer"), world.contract.async_level, checks=lambda *_: None
    )
    feed = RolloutFeed(
        source,
        scorer=lambda rows: pytest.fail("garbage reached the scorer"),
        async_level=2,
        group_size=2,
        limits=RolloutLimits(),
        max_files=10,
        poll_seconds=0.05,
        audit=source,
    )
    with pytest.raises(NotEnoughRollouts, match="0/1 informative groups"):
        feed.collect(skipped.step, num_groups=1, max_wait_seconds=0.5)
    verdict = next(v for v in world.admin.reads.verdicts("r") if v.submission_id == skipped.id)
    assert (verdict.accepted, verdict.check, verdict.validator_key) == (
        False,
        "schema_and_signature",
        world.trainer.node_id,
    )
    assert world.admin.reads.node(node.node_id).banned
    (balance,) = world.admin.reads.ledger("r").balances
    assert (balance.pending_tokens, balance.wiped_tokens) == (0, 40)
    assert world.trainer.training_feed("r", skipped.step) == []


def _skipped_file(world: ClockedCoordinator, node):
    """Submit files, each on a step of its own, until the spot-check draw skips one (p = 1/2)."""
    for _ in range(40):
        world.trainer.publish_step("r", world.admin.reads.run_state("r").current_step + 1)
        submission = leased_submit(node, "r", os.urandom(300), rows=2, tokens=20)
        if not submission.checked:
            return submission
    raise AssertionError("40 files judged in a row at p = 1/2")


def test_a_skipped_file_no_step_read_is_judged_after_all(make_world):
    """Credit only for measured work: a skipped file the trainer never read (its step left the async window
    first) goes to the validators instead of staying in the feed unmeasured and uncredited."""
    world = make_world(spot_check_fraction=0.5, spot_check_probation_files=2)
    node = world.node()
    for i in range(2):
        accept(world.validator, leased_submit(node, "r", f"honest {i}".encode(), rows=2, tokens=20))
    skipped = _skipped_file(world, node)
    for step in range(skipped.step + 1, skipped.step + 4):  # async level 2: step + 3 leaves it behind
        world.trainer.publish_step("r", step)
    (requeued,) = [s for s in world.admin.reads.submissions("r") if s.id == skipped.id]
    assert (requeued.status, requeued.checked) == ("pending", True)
    while (lease := world.validator.lease_validation("r").submission) is not None and lease.id != skipped.id:
        world.validator.post_verdict(lease.id, accept=False, check="file_missing")  # older files: soft
    assert lease is not None and lease.id == skipped.id
    world.validator.post_verdict(skipped.id, accept=True, check="all", rows=2, tokens=20)
    assert _earned(world, {node.node_id}) == 60


def test_one_file_counts_once_whoever_submits_it_and_however_fast(make_world):
    """Replaying another node's file, filing one file under two units, and racing submits of one slot."""
    world = make_world(lease_proven_files=0)
    owner, thief = world.node(), world.node()
    data = b"one rollout file"
    leased_submit(owner, "r", data, rows=1, tokens=1)
    with pytest.raises(CoordinatorError) as replayed:
        leased_submit(thief, "r", data, rows=1, tokens=1)
    assert replayed.value.kind == "duplicate_submission"

    first, second = owner.lease_work("r", max_units=2).units
    twice = b"filed under two units"
    owner.upload_and_submit("r", 0, first.batch_index, twice, 1, 1)
    with pytest.raises(CoordinatorError) as refiled:
        owner.upload_and_submit("r", 0, second.batch_index, twice, 1, 1)
    assert refiled.value.kind == "duplicate_submission"

    racer = world.node()
    (unit,) = racer.lease_work("r", max_units=1).units
    raced = b"submitted eight times at once"
    sha = hashlib.sha256(raced).hexdigest()
    slot = racer.request_upload("r", 0, unit.batch_index, sha, len(raced))
    racer.upload(slot, raced)

    def submit(_):
        try:
            return racer.submit("r", slot.slot_id, sha, 0, 1, 1).id
        except CoordinatorError as exc:
            return exc.kind

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(submit, range(8)))
    assert sum(isinstance(a, int) for a in answers) == 1, answers
    assert len([s for s in world.admin.reads.submissions("r") if s.node_id == racer.node_id]) == 1
