"""Kill the coordinator process mid-run (SIGKILL, no clean shutdown) and start it again on the same files."""

from hashlib import sha256

import pytest

from swarmrl.configs.contract import ContractSection
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.client import AdminClient, NodeClient, TrainerClient, ValidatorClient
from swarmrl.coordinator.seeds import task_seed
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl_lab.coordinator_double import accept, leased_submit, start_coordinator

ADMIN = "admin-secret"


@pytest.mark.slow
def test_accepted_work_leases_and_ledger_survive_a_crash(tmp_path):
    config = CoordinatorConfig(hard_rejects_before_ban=5, default_step_units=20)
    trainer, validator_key = Identity.generate(), Identity.generate()
    workers = [Identity.generate() for _ in range(3)]
    first = start_coordinator(tmp_path, config=config, admin_token=ADMIN)
    try:
        admin = AdminClient.at(first.url, admin_token=ADMIN, retry=NO_RETRY)
        run = admin.create_run("r", trainer.node_id, ContractSection(), bound_claims=False)
        admin.add_validator("r", validator_key.node_id)
        TrainerClient.at(first.url, trainer).publish_step("r", 0, "ab" * 32, "http://relay/0")
        validator = ValidatorClient.at(first.url, validator_key, retry=NO_RETRY)
        submissions = []
        for i, identity in enumerate(workers):
            worker = NodeClient.at(first.url, identity, retry=NO_RETRY)
            worker.register({"index": i})
            worker.join("r", ContractSection())
            worker.heartbeat("r", policy_step=0)
            submissions += [
                leased_submit(worker, "r", f"w{i}-{j}".encode() * 50, rows=2, tokens=100 + j)
                for j in range(2)
            ]
        accept(validator, submissions[0], rewards_summary={"mean": 1.0})
        accept(validator, submissions[1])
        # A hard rejection voids the node's other, still pending file (submissions[3]).
        validator.post_verdict(submissions[2].id, accept=False, check="toploc", reason="proof mismatch")
        accept(validator, submissions[4])
        judging = validator.lease_validation("r")  # a validator is mid-judgement of the last file
        assert judging.submission.id == submissions[5].id
        before_ledger = admin.reads.ledger("r")
        before_submissions = admin.reads.submissions("r")
        before_verdicts = admin.reads.verdicts("r")
        late = NodeClient.at(first.url, workers[2])
        held = late.lease_work("r", max_units=1)
        late_file = b"z" * 10
        slot = late.request_upload("r", 0, held.units[0].batch_index, sha256(late_file).hexdigest(), 10)
        seed_before = NodeClient.at(first.url, workers[0]).task_seed("r", 0, 0)
    finally:
        first.kill()  # SIGKILL

    second = start_coordinator(tmp_path, config=config, admin_token=ADMIN)
    try:
        admin = AdminClient.at(second.url, admin_token=ADMIN, retry=NO_RETRY)
        assert admin.reads.ledger("r") == before_ledger
        assert admin.reads.submissions("r") == before_submissions
        assert admin.reads.verdicts("r") == before_verdicts
        assert [s.status for s in before_submissions] == [
            "accepted",
            "accepted",
            "rejected",
            "voided",
            "accepted",
            "pending",
        ]
        state = admin.reads.run_state("r")
        assert (state.current_step, state.manifest_url) == (0, "http://relay/0")
        assert admin.reads.node(workers[1].node_id).hard_rejects == 1
        # The validation lease survived: the same validator gets the same file back; another one gets nothing.
        other = ValidatorClient.at(second.url, Identity.generate(), retry=NO_RETRY)
        admin.add_validator("r", other.node_id)
        assert other.lease_validation("r").submission is None
        validator = ValidatorClient.at(second.url, validator_key, retry=NO_RETRY)
        assert validator.lease_validation("r").submission.id == submissions[5].id
        assert validator.fetch_submission(judging.submission) == b"w2-1" * 50
        accept(validator, submissions[5])
        trainer_client = TrainerClient.at(second.url, trainer)
        assert len(trainer_client.accepted_submissions("r", 0)) == 4
        assert validator.task_seed("r", 0, 0, node_id=workers[0].node_id) == seed_before
        assert task_seed("r", workers[0].node_id, 0, 0, run.run_secret) == seed_before
        late = NodeClient.at(second.url, workers[2], retry=NO_RETRY)
        late.join(
            "r", ContractSection()
        )  # idempotent; keeps the test independent of how long the restart took
        # The work lease survived: the same unit and seed (its deadline was extended by the upload slot).
        (unit,) = late.lease_work("r").units
        assert (unit.step, unit.batch_index, unit.seed) == (0, held.units[0].batch_index, held.units[0].seed)
        assert unit.expires_at >= slot.expires_at
        late.upload(slot, late_file)  # a slot handed out before the crash is still honoured
        assert (
            late.submit("r", slot.slot_id, slot_sha := sha256(late_file).hexdigest(), 0, 1, 1).sha256
            == slot_sha
        )
    finally:
        second.kill()
