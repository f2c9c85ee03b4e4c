"""The coordinator over real HTTP, on SQLite and on a real Postgres server."""

import hashlib
import itertools
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

import httpx
import pytest

from swarmrl.configs.contract import ContractSection
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import SubmissionInfo
from swarmrl.coordinator.client import AdminClient, NodeClient, TrainerClient, ValidatorClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.seeds import task_seed
from swarmrl.coordinator.signing import (
    NODE_HEADER,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    canonical_message,
)
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl.rollouts.assignment import batch_seed
from swarmrl_lab.coordinator_double import (
    POSTGRES_SKIP_REASON,
    accept,
    coordinator_backend,
    leased_submit,
    postgres_available,
)

ADMIN = "admin-secret"
CONFIG = CoordinatorConfig(
    upload_max_bytes=4096,
    uploads_per_hour=3,
    hard_rejects_before_ban=2,
    credit_unlock_window_s=3600.0,
    default_step_units=40,
    lease_proven_files=0,  # leases as such (unproven nodes: tests/adversarial/coordinator)
)
_run_ids = itertools.count()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def coordinator(request, tmp_path_factory):
    if request.param == "postgres" and not postgres_available():
        pytest.skip(POSTGRES_SKIP_REASON)
    with coordinator_backend(
        request.param, tmp_path_factory.mktemp(f"coord-{request.param}"), config=CONFIG, admin_token=ADMIN
    ) as process:
        yield process


class Swarm:
    """One fresh run with its trainer, validator and workers, all speaking to the coordinator."""

    def __init__(self, url: str, async_level: int = 2) -> None:
        self.url = url
        self.run_id = f"run-{next(_run_ids)}"
        self.contract = ContractSection(async_level=async_level)
        self.admin = AdminClient.at(url, admin_token=ADMIN, retry=NO_RETRY)
        self.trainer = TrainerClient.at(url, Identity.generate(), retry=NO_RETRY)
        self.validator = ValidatorClient.at(url, Identity.generate(), retry=NO_RETRY)
        self.run = self.admin.create_run(self.run_id, self.trainer.node_id, self.contract, bound_claims=False)
        self.admin.add_validator(self.run_id, self.validator.node_id)

    def worker(self) -> NodeClient:
        client = NodeClient.at(self.url, Identity.generate(), retry=NO_RETRY)
        client.register({"gpu": "none", "cpus": 2})
        client.join(self.run_id, self.contract)
        return client


def _refused(call, status, kind):
    with pytest.raises(CoordinatorError) as info:
        call()
    assert (info.value.status, info.value.kind) == (status, kind), info.value.detail
    return info.value


def test_one_step_end_to_end(coordinator):
    swarm = Swarm(coordinator.url)
    worker = swarm.worker()
    ack = worker.heartbeat(swarm.run_id, policy_step=0)
    assert (ack.current_step, ack.async_level, ack.min_policy_step) == (0, 2, 0)
    swarm.trainer.publish_step(swarm.run_id, 0, "ab" * 32, "http://relay/step_0/manifest.json")
    assert swarm.trainer.reads.run_state(swarm.run_id).manifest_sha256 == "ab" * 32

    unit = worker.lease_work(swarm.run_id, max_units=1).units[0]
    assert (unit.step, unit.batch_index) == (0, 0)
    assert unit.seed == task_seed(swarm.run_id, worker.node_id, 0, 0, swarm.run.run_secret)
    assert worker.task_seed(swarm.run_id, 0, 0) == unit.seed
    assert swarm.validator.task_seed(swarm.run_id, 0, 0, node_id=worker.node_id) == unit.seed

    data = b"PAR1 rollout bytes" * 10
    submission = worker.upload_and_submit(swarm.run_id, 0, unit.batch_index, data, rows=8, tokens=512)
    assert (submission.status, submission.rows, submission.tokens) == ("pending", 8, 512)
    pending = swarm.validator.pending_submissions(swarm.run_id)
    assert [p.id for p in pending] == [submission.id]
    assert swarm.validator.fetch_submission(pending[0]) == data
    verdict = accept(
        swarm.validator, submission, rewards_summary={"reward_mean": 0.25, "nonzero_advantage_rows": 6}
    )
    assert verdict.accepted and verdict.severity is None

    accepted = swarm.trainer.accepted_submissions(swarm.run_id, 0)
    assert [a.sha256 for a in accepted] == [hashlib.sha256(data).hexdigest()]
    assert swarm.trainer.fetch_submission(accepted[0]) == data
    (balance,) = worker.reads.ledger(swarm.run_id).balances
    assert (balance.pending_tokens, balance.pending_samples, balance.unlocked_tokens) == (512, 8, 0)
    (member,) = swarm.admin.reads.nodes(swarm.run_id)
    assert (member.health, member.heartbeats, member.policy_step) == ("healthy", 1, 0)
    assert swarm.admin.reads.verdicts(swarm.run_id)[0].rewards_summary["nonzero_advantage_rows"] == 6
    assert [s.step for s in swarm.admin.reads.steps(swarm.run_id)] == [0]
    metrics = httpx.get(f"{coordinator.url}/metrics").text
    assert 'swarmrl_coordinator_verdicts_total{outcome="accept"}' in metrics


def test_upload_cap_mismatch_and_duplicates(coordinator):
    swarm = Swarm(coordinator.url)
    worker = swarm.worker()
    _refused(lambda: worker.request_upload(swarm.run_id, 0, 0, "00" * 32, 4097), 413, "too_large")

    data = b"a" * 100
    sha = hashlib.sha256(data).hexdigest()
    _refused(lambda: worker.request_upload(swarm.run_id, 0, 0, sha, len(data)), 409, "not_leased")
    unit = worker.lease_work(swarm.run_id, max_units=1).units[0]
    slot = worker.request_upload(swarm.run_id, 0, unit.batch_index, sha, len(data))
    _refused(lambda: worker.submit(swarm.run_id, slot.slot_id, sha, 0, 1, 1), 409, "not_uploaded")
    _refused(lambda: worker.upload(slot, b"b" * 100), 422, "sha256_mismatch")
    _refused(lambda: worker.upload(slot, b"a" * 101), 413, "too_large")
    worker.upload(slot, data)
    _refused(lambda: worker.upload(slot, data), 409, "slot_used")
    _refused(lambda: worker.submit(swarm.run_id, slot.slot_id, "11" * 32, 0, 1, 1), 422, "sha256_mismatch")
    worker.submit(swarm.run_id, slot.slot_id, sha, 0, 1, 1)
    _refused(lambda: worker.submit(swarm.run_id, slot.slot_id, sha, 0, 1, 1), 409, "duplicate_submission")
    other = swarm.worker()
    _refused(lambda: other.upload(slot, data), 404, "unknown_slot")


def _file_request(
    identity, run_id, unit_step, batch_index, declared, size, *, rows=1, tokens=1, signed_sha=None
):
    """A one-request upload-and-submit's target and signed headers, built by hand so a test can make them lie:
    the query declares `declared` (sha256) and `size`; the signature covers `signed_sha` (default: declared)."""
    query = urlencode(
        {"step": unit_step, "batch_index": batch_index, "sha256": declared, "size_bytes": size}
        | {"rows": rows, "tokens": tokens}
    )
    target = f"/v1/uploads/runs/{run_id}/submissions?{query}"
    timestamp, nonce = f"{time.time():.6f}", secrets.token_hex(16)
    message = canonical_message("PUT", target, signed_sha or declared, timestamp, nonce)
    headers = {
        NODE_HEADER: identity.node_id,
        TIMESTAMP_HEADER: timestamp,
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: identity.sign_hex(message),
    }
    return target, headers


def test_a_file_uploaded_and_submitted_in_one_request_is_checked_like_the_slot_flow(coordinator):
    swarm = Swarm(coordinator.url)
    identity = Identity.generate()
    worker = NodeClient.at(coordinator.url, identity, retry=NO_RETRY)
    worker.register({})
    worker.join(swarm.run_id, swarm.contract)
    data = b"rollout file " * 20
    sha = hashlib.sha256(data).hexdigest()

    def put(body, target, headers):
        return httpx.put(coordinator.url + target, content=body, headers=headers, timeout=30)

    _refused(lambda: worker.upload_and_submit(swarm.run_id, 0, 0, data, 2, 20), 409, "not_leased")
    unit = worker.lease_work(swarm.run_id, max_units=1).units[0]
    # A signer declaring one file and sending another: refused once the bytes are in, nothing submitted.
    forged = b"x" * len(data)
    target, headers = _file_request(identity, swarm.run_id, 0, unit.batch_index, sha, len(data))
    answer = put(forged, target, headers)
    assert (answer.status_code, answer.json()["error"]) == (422, "sha256_mismatch")
    # A signature over the bytes sent but a query declaring other ones does not verify: refused unread.
    target, headers = _file_request(
        identity,
        swarm.run_id,
        0,
        unit.batch_index,
        sha,
        len(data),
        signed_sha=hashlib.sha256(forged).hexdigest(),
    )
    assert put(forged, target, headers).json()["error"] == "bad_signature"
    # The query is signed: claims changed in transit do not verify either.
    target, headers = _file_request(identity, swarm.run_id, 0, unit.batch_index, sha, len(data), rows=2)
    assert put(data, target.replace("rows=2", "rows=3"), headers).json()["error"] == "bad_signature"
    answer = put(data + b"!", *_file_request(identity, swarm.run_id, 0, unit.batch_index, sha, len(data)))
    assert (answer.status_code, answer.json()["error"]) == (413, "too_large")
    target, headers = _file_request(
        identity, swarm.run_id, 0, unit.batch_index, sha, len(data), rows=2, tokens=20
    )
    answer = put(data, target, headers)
    assert answer.status_code == 201, answer.text
    assert put(data, target, headers).json()["error"] == "replayed_nonce"
    submitted = SubmissionInfo.model_validate(answer.json())
    assert (submitted.node_id, submitted.step, submitted.batch_index) == (
        identity.node_id,
        0,
        unit.batch_index,
    )
    assert (submitted.sha256, submitted.rows, submitted.tokens, submitted.status) == (sha, 2, 20, "pending")
    assert swarm.validator.fetch_submission(submitted) == data
    _refused(
        lambda: worker.upload_and_submit(swarm.run_id, 0, unit.batch_index, data, 2, 20), 409, "not_leased"
    )
    assert [s.id for s in swarm.admin.reads.submissions(swarm.run_id)] == [submitted.id]
    answer = put(data, f"/v1/uploads/runs/{swarm.run_id}/submissions?step=0&batch_index=0&sha256={sha}", {})
    assert answer.status_code == 422  # rows, tokens and size missing: refused before anything else


def test_upload_slots_are_rate_limited_per_node(coordinator):
    swarm = Swarm(coordinator.url)
    worker, neighbour = swarm.worker(), swarm.worker()
    first, second = worker.lease_work(swarm.run_id, max_units=2).units
    for i, unit in enumerate([first, first, second]):  # CONFIG.uploads_per_hour = 3
        worker.request_upload(swarm.run_id, 0, unit.batch_index, f"{i:064x}", 10)
    _refused(
        lambda: worker.request_upload(swarm.run_id, 0, second.batch_index, "ff" * 32, 10),
        429,
        "upload_rate_limited",
    )
    unit = neighbour.lease_work(swarm.run_id, max_units=1).units[0]
    neighbour.request_upload(swarm.run_id, 0, unit.batch_index, "ff" * 32, 10)


def test_soft_reject_drops_only_that_submission(coordinator):
    swarm = Swarm(coordinator.url)
    worker = swarm.worker()
    good = leased_submit(worker, swarm.run_id, b"good", rows=2, tokens=20)
    bad = leased_submit(worker, swarm.run_id, b"late", rows=3, tokens=30)
    accept(swarm.validator, good)
    verdict = swarm.validator.post_verdict(bad.id, accept=False, check="termination", reason="no EOS")
    assert verdict.severity == "soft"
    _refused(lambda: accept(swarm.validator, bad), 409, "already_decided")
    (balance,) = worker.reads.ledger(swarm.run_id).balances
    assert (balance.pending_tokens, balance.wiped_tokens) == (20, 0)
    worker.heartbeat(swarm.run_id)
    assert [s.status for s in swarm.admin.reads.submissions(swarm.run_id)] == ["accepted", "rejected"]


def test_hard_rejects_wipe_eject_and_then_ban(coordinator):
    swarm = Swarm(coordinator.url)
    cheat, honest = swarm.worker(), swarm.worker()
    first = leased_submit(cheat, swarm.run_id, b"one", rows=4, tokens=40)
    honest_work = leased_submit(honest, swarm.run_id, b"honest", rows=1, tokens=10)
    forged = leased_submit(cheat, swarm.run_id, b"forged", rows=4, tokens=40)
    accept(swarm.validator, first)
    accept(swarm.validator, honest_work)
    assert swarm.validator.post_verdict(forged.id, accept=False, check="toploc").severity == "hard"

    ledger = {b.node_id: b for b in swarm.admin.reads.ledger(swarm.run_id).balances}
    assert (ledger[cheat.node_id].pending_tokens, ledger[cheat.node_id].wiped_tokens) == (0, 40)
    assert ledger[honest.node_id].pending_tokens == 10
    _refused(lambda: cheat.heartbeat(swarm.run_id), 409, "ejected")
    assert not swarm.admin.reads.node(cheat.node_id).banned

    cheat.join(
        swarm.run_id, swarm.contract
    )  # below the ban threshold a node may come back, with its credit gone ...
    # ... and its standing: a rejected file and no accepted one left (its accepted file was voided) lease nothing
    # more in this run (issue 57: every rejection counts, the grace is no larger than accepted work).
    _refused(lambda: cheat.lease_work(swarm.run_id), 403, "poor_standing")
    swarm.admin.ban(cheat.node_id, "a second forgery")
    _refused(lambda: cheat.join(swarm.run_id, swarm.contract), 403, "banned")
    swarm.admin.unban(cheat.node_id)
    cheat.join(swarm.run_id, swarm.contract)


def test_step_window_and_trainer_publication(coordinator):
    swarm = Swarm(coordinator.url, async_level=1)
    worker = swarm.worker()
    _refused(lambda: worker.request_upload(swarm.run_id, 1, 0, "00" * 32, 10), 409, "future_step")
    _refused(lambda: worker.task_seed(swarm.run_id, 1, 0), 409, "future_step")
    _refused(lambda: TrainerClient(worker.transport).publish_step(swarm.run_id, 1), 403, "not_trainer")
    for step in (1, 2):
        swarm.trainer.publish_step(swarm.run_id, step, f"{step:064x}")
    swarm.trainer.publish_step(swarm.run_id, 2, f"{2:064x}")  # idempotent re-publish
    _refused(lambda: swarm.trainer.publish_step(swarm.run_id, 2, "ee" * 32), 409, "step_published")
    _refused(lambda: swarm.trainer.publish_step(swarm.run_id, 1, "ee" * 32), 409, "step_published")
    _refused(lambda: swarm.trainer.publish_step(swarm.run_id, 0), 409, "step_behind")
    _refused(lambda: worker.request_upload(swarm.run_id, 0, 0, "00" * 32, 10), 409, "stale_step")
    _refused(lambda: worker.request_upload(swarm.run_id, 1, 0, "00" * 32, 10), 409, "not_leased")
    unit = worker.lease_work(swarm.run_id, max_units=1).units[0]
    assert unit.step == 2  # only the open step is leased
    worker.request_upload(swarm.run_id, 2, unit.batch_index, "00" * 32, 10)
    assert worker.heartbeat(swarm.run_id).min_policy_step == 1
    assert swarm.admin.reads.step(swarm.run_id, 1).manifest_sha256 == f"{1:064x}"
    assert swarm.admin.set_step(swarm.run_id, 5).current_step == 5


def test_roles_guard_files_seeds_and_verdicts(coordinator):
    swarm = Swarm(coordinator.url)
    worker, other = swarm.worker(), swarm.worker()
    submission = leased_submit(worker, swarm.run_id, b"mine", rows=1, tokens=1)
    _refused(lambda: other.fetch_submission(submission.id), 403, "not_privileged")
    _refused(
        lambda: accept(ValidatorClient(worker.transport), submission),
        403,
        "not_validator",
    )
    _refused(lambda: other.task_seed(swarm.run_id, 0, 0, node_id=worker.node_id), 403, "not_own_seed")
    _refused(
        lambda: TrainerClient(worker.transport).accepted_submissions(swarm.run_id, 0), 403, "not_privileged"
    )
    stranger = NodeClient.at(coordinator.url, Identity.generate(), retry=NO_RETRY)
    _refused(lambda: stranger.join(swarm.run_id, swarm.contract), 403, "not_registered")
    stranger.register()
    _refused(lambda: stranger.heartbeat(swarm.run_id), 403, "not_member")
    _refused(lambda: stranger.join("no-such-run", ContractSection()), 404, "unknown_run")
    worker.leave(swarm.run_id)
    _refused(lambda: worker.heartbeat(swarm.run_id), 403, "not_member")


def test_a_run_created_without_a_secret_uses_the_public_batch_seed(coordinator):
    admin = AdminClient.at(coordinator.url, admin_token=ADMIN, retry=NO_RETRY)
    run_id = f"public-{next(_run_ids)}"
    assert (
        admin.create_run(run_id, "ab" * 32, ContractSection(), run_secret="", bound_claims=False).run_secret
        == ""
    )
    worker = NodeClient.at(coordinator.url, Identity.generate(), retry=NO_RETRY)
    worker.register()
    worker.join(run_id, ContractSection())
    unit = worker.lease_work(run_id, max_units=1).units[0]
    assert unit.seed == batch_seed(run_id, worker.node_id, 0, unit.batch_index)


def test_concurrent_workers_lose_nothing(coordinator):
    swarm = Swarm(coordinator.url)
    workers = [swarm.worker() for _ in range(6)]

    def work(index: int) -> list[int]:
        worker = workers[index]
        ids = []
        for j in range(CONFIG.uploads_per_hour):
            worker.heartbeat(swarm.run_id)
            ids.append(
                leased_submit(worker, swarm.run_id, f"{index}-{j}".encode() * 20, rows=1, tokens=10).id
            )
        return ids

    with ThreadPoolExecutor(6) as pool:
        submitted = sorted(i for ids in pool.map(work, range(6)) for i in ids)
        pending = swarm.validator.pending_submissions(swarm.run_id)
        assert sorted(p.id for p in pending) == submitted
        list(pool.map(lambda s: accept(swarm.validator, s), pending))
    balances = swarm.admin.reads.ledger(swarm.run_id).balances
    assert sorted(b.node_id for b in balances) == sorted(w.node_id for w in workers)
    assert all(b.pending_tokens == 10 * CONFIG.uploads_per_hour for b in balances)
    assert len(swarm.trainer.accepted_submissions(swarm.run_id, 0)) == len(submitted)
