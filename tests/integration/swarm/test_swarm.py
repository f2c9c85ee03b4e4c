"""The swarm as separate processes on 127.0.0.1: coordinator, trainer + origin, relay, validator, workers.

Each test runs a tiny model for a few steps; the faults are real (SIGKILL by PID) and every process is
stopped by PID at the end.
"""

from __future__ import annotations

import io
import time

import pytest
from integration.spine.spine_helpers import tiny_config
from rich.console import Console

from swarmrl.coordinator.client import CoordinatorClient
from swarmrl.launch.prepare import prepare_run
from swarmrl.launch.swarm import Swarm, restart_coordinator, snapshot, start_swarm, stop_swarm, supervise

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("swarm")  # shared: the SFT start policy is built once and cached


def launch(root, name: str, steps: int, honest: int = 2, cheaters: int = 0, validators: int = 1) -> Swarm:
    config = tiny_config(
        root,
        name,
        f"trainer.steps={steps}",
        "trainer.max_wait_seconds=120",
        f"swarm.honest_workers={honest}",
        f"swarm.cheating_workers={cheaters}",
        f"swarm.validators={validators}",
        "swarm.poll_seconds=0.2",
        "coordinator.heartbeat_interval_s=2.0",
        "coordinator.dead_after_missed=10",
        "coordinator.unhealthy_after_missed=3",
        "coordinator.lease_initial_unit_s=3.0",
        "coordinator.lease_target_s=6.0",
        "coordinator.lease_grace_s=10.0",
        "coordinator.validation_lease_s=20.0",
    )
    return start_swarm(config, prepare_run(config))


def quiet() -> Console:
    return Console(file=io.StringIO(), width=160)


def wait_for_step(swarm: Swarm, step: int, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(swarm.rundir.read_metrics()) < step:
        swarm.check_alive()
        assert swarm.roles["trainer"].popen.poll() is None, swarm.roles["trainer"].tail()
        assert time.monotonic() < deadline, f"trainer did not reach step {step}"
        time.sleep(0.2)


def accepted_ids(swarm: Swarm) -> set[int]:
    with CoordinatorClient(swarm.coordinator_url) as client:
        return {s.id for s in client.submissions(swarm.config.run.id, status="accepted")}


def test_trains_on_accepted_work_only_and_bans_the_cheater(root):
    swarm = launch(root, "honest-and-cheater", steps=4, honest=2, cheaters=1)
    try:
        supervise(swarm, quiet(), timeout_s=500, interval_s=1.0)
        swarm.kill("validator")  # verdicts stop landing: the reads below see one state
        state = snapshot(swarm)
        run_id = swarm.config.run.id
        with CoordinatorClient(swarm.coordinator_url) as client:
            submissions = client.submissions(run_id)
            verdicts = {v.submission_id: v for v in client.verdicts(run_id)}
            balances = {b.node_id: b for b in client.ledger(run_id).balances}
    finally:
        stop_swarm(swarm)

    assert len(swarm.rundir.read_metrics()) == 4
    honest = [state.nodes[f"worker-{i}"] for i in range(2)]
    cheater = state.nodes["cheater-0"]
    assert all(r.rejected == 0 and r.accepted > 0 for r in honest)
    assert cheater.banned and cheater.accepted == 0 and cheater.rejected >= 1
    assert set(state.reject_checks["cheater-0"]) <= {"toploc", "prefill"}, state.reject_checks
    assert all(
        verdicts[s.id].severity == "hard"
        for s in submissions
        if s.node_id == cheater.node_id and s.id in verdicts
    )
    # The ledger credits each honest node exactly the tokens of its accepted files; the cheater gets nothing.
    for record in honest:
        accepted_tokens = sum(
            s.tokens for s in submissions if s.node_id == record.node_id and s.status == "accepted"
        )
        assert (
            balances[record.node_id].pending_tokens + balances[record.node_id].unlocked_tokens
            == accepted_tokens
            > 0
        )
    assert cheater.node_id not in balances or balances[cheater.node_id].pending_tokens == 0
    # The trainer read only accepted submissions, and never the cheater's.
    accepted = {s.id for s in submissions if s.status == "accepted"}
    trained = [p for p in (swarm.rundir.root / "accepted").rglob("*.parquet")]
    assert trained and {int(p.name.split("-")[0]) for p in trained} <= accepted
    assert not any(cheater.node_id[:16] in p.name for p in trained)


def test_worker_relay_validator_and_coordinator_faults(root):
    """Kill a worker for good; kill and restart the relay, the validator and the coordinator: the run finishes,
    no accepted submission is lost, and no honest file is rejected (a restarted validator re-posts, never re-judges)."""
    swarm = launch(root, "faults", steps=6, honest=2)
    try:
        wait_for_step(swarm, 1)
        swarm.kill("worker-0")
        before = accepted_ids(swarm)
        restart_coordinator(swarm)
        assert before <= accepted_ids(swarm)
        wait_for_step(swarm, 2)
        swarm.kill("relay-0")
        time.sleep(1.0)
        swarm.restart("relay-0")
        swarm.kill("validator")
        swarm.restart("validator")
        wait_for_step(swarm, 3)
        before = accepted_ids(swarm)
        supervise(swarm, quiet(), timeout_s=500, interval_s=1.0)
        state = snapshot(swarm)
        assert before <= accepted_ids(swarm)
    finally:
        stop_swarm(swarm)
    assert len(swarm.rundir.read_metrics()) == 6
    assert all(record.rejected == 0 for record in state.nodes.values()), state.reject_checks


def test_trainer_killed_mid_run_resumes_from_its_last_checkpoint(root):
    swarm = launch(root, "trainer-fault", steps=5, honest=2)
    try:
        wait_for_step(swarm, 2)
        swarm.kill("trainer")
        swarm.restart("trainer")
        supervise(swarm, quiet(), timeout_s=500, interval_s=1.0)
        state = snapshot(swarm)
    finally:
        stop_swarm(swarm)
    steps = [m["step"] for m in swarm.rundir.read_metrics()]
    assert steps[-1] == 5 and "resumed at step" in swarm.roles["trainer"].log_path.read_text()
    assert all(record.rejected == 0 for record in state.nodes.values()), state.reject_checks
