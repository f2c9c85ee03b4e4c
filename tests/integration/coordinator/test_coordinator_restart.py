"""Kill the coordinator process mid-run (SIGKILL, no clean shutdown) and start it again on the same files."""

from hashlib import sha256

from swarmrl.coordinator.client import CoordinatorClient
from swarmrl.coordinator.config import CoordinatorConfig
from swarmrl.coordinator.seeds import task_seed
from swarmrl.coordinator.testing import start_coordinator
from swarmrl.identity import Identity

ADMIN = "admin-secret"


def test_accepted_work_and_ledger_survive_a_crash(tmp_path):
    config = CoordinatorConfig(hard_rejects_before_ban=5)
    trainer, validator_key = Identity.generate(), Identity.generate()
    workers = [Identity.generate() for _ in range(3)]
    first = start_coordinator(tmp_path, config=config, admin_token=ADMIN)
    try:
        admin = CoordinatorClient(first.url, admin_token=ADMIN, max_retries=0)
        run = admin.create_run("r", trainer.node_id)
        admin.add_validator("r", validator_key.node_id)
        CoordinatorClient(first.url, trainer).publish_step("r", 0, "ab" * 32, "http://relay/0")
        validator = CoordinatorClient(first.url, validator_key, max_retries=0)
        submissions = []
        for i, identity in enumerate(workers):
            worker = CoordinatorClient(first.url, identity, max_retries=0)
            worker.register({"index": i})
            worker.join("r")
            worker.heartbeat("r", policy_step=0)
            submissions += [
                worker.upload_and_submit("r", 0, f"w{i}-{j}".encode() * 50, rows=2, tokens=100 + j)
                for j in range(2)
            ]
        validator.post_verdict(submissions[0].id, accept=True, check="all", rewards_summary={"mean": 1.0})
        validator.post_verdict(submissions[1].id, accept=True, check="all")
        validator.post_verdict(submissions[2].id, accept=False, check="toploc", reason="proof mismatch")
        validator.post_verdict(submissions[4].id, accept=True, check="all")
        before_ledger = admin.ledger("r")
        before_submissions = admin.submissions("r")
        before_verdicts = admin.verdicts("r")
        late_file = b"z" * 10
        slot = CoordinatorClient(first.url, workers[2]).request_upload(
            "r", 0, sha256(late_file).hexdigest(), 10
        )
        seed_before = CoordinatorClient(first.url, workers[0]).task_seed("r", 0, 0)
    finally:
        first.kill()  # SIGKILL

    second = start_coordinator(tmp_path, config=config, admin_token=ADMIN)
    try:
        admin = CoordinatorClient(second.url, admin_token=ADMIN, max_retries=0)
        assert admin.ledger("r") == before_ledger
        assert admin.submissions("r") == before_submissions
        assert admin.verdicts("r") == before_verdicts
        assert [s.status for s in before_submissions] == [
            "accepted",
            "accepted",
            "rejected",
            "pending",
            "accepted",
            "pending",
        ]
        state = admin.run_state("r")
        assert (state.current_step, state.manifest_url) == (0, "http://relay/0")
        assert admin.node(workers[1].node_id).hard_rejects == 1
        validator = CoordinatorClient(second.url, validator_key, max_retries=0)
        pending = validator.pending_submissions("r")
        assert [p.id for p in pending] == [submissions[3].id, submissions[5].id]
        assert validator.fetch_submission(pending[0]) == b"w1-1" * 50
        validator.post_verdict(pending[0].id, accept=True, check="all")
        trainer_client = CoordinatorClient(second.url, trainer)
        assert len(trainer_client.accepted_submissions("r", 0)) == 4
        assert validator.task_seed("r", 0, 0, node_id=workers[0].node_id) == seed_before
        assert task_seed("r", workers[0].node_id, 0, 0, run.run_secret) == seed_before
        late = CoordinatorClient(second.url, workers[2], max_retries=0)
        late.join("r")  # idempotent; keeps the test independent of how long the restart took
        late.upload(slot, late_file)  # a slot handed out before the crash is still honoured
        assert (
            late.submit("r", slot.slot_id, slot_sha := sha256(late_file).hexdigest(), 0, 1, 1).sha256
            == slot_sha
        )
    finally:
        second.kill()
