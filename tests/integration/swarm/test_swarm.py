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

from swarmrl.coordinator.client import PublicReads
from swarmrl.launch.prepare import prepare_run
from swarmrl.launch.swarm import Swarm, restart_coordinator, snapshot, start_swarm, stop_swarm, supervise
from swarmrl.models.adapter import is_adapter_checkpoint
from swarmrl.shardcast.client import local_versions
from swarmrl.steps import checkpoint_dir

pytestmark = [pytest.mark.slow, pytest.mark.swarm, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("swarm")  # shared: the SFT start policy is built once and cached


def launch(
    root, name: str, steps: int, honest: int = 2, cheaters: int = 0, validators: int = 1, *overrides: str
) -> Swarm:
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
        *overrides,
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
    with PublicReads.at(swarm.coordinator_url) as client:
        return {s.id for s in client.submissions(swarm.config.run.id, status="accepted")}


def test_trains_on_accepted_work_only_and_bans_the_cheater(root):
    # Six steps: with work leases a cheater that starts last on a loaded machine can find the first steps'
    # units all taken by the honest workers; it must get work to be caught.
    swarm = launch(root, "honest-and-cheater", steps=6, honest=2, cheaters=1)
    try:
        supervise(swarm, quiet(), timeout_s=500, interval_s=1.0)  # returns once the run has drained
        state = snapshot(swarm)
        run_id = swarm.config.run.id
        with PublicReads.at(swarm.coordinator_url) as client:
            submissions = client.submissions(run_id)
            verdicts = {v.submission_id: v for v in client.verdicts(run_id)}
            balances = {b.node_id: b for b in client.ledger(run_id).balances}
    finally:
        stop_swarm(swarm)

    assert len(swarm.rundir.read_metrics()) == 6
    honest = [state.nodes[f"worker-{i}"] for i in range(2)]
    cheater = state.nodes["cheater-0"]
    # Leases spread the work, but which honest node gets how much depends on timing; none may be rejected.
    assert all(r.rejected == 0 for r in honest) and sum(r.accepted for r in honest) > 0, (
        honest,
        state.reject_checks,
    )
    assert cheater.banned and cheater.accepted == 0 and cheater.rejected >= 1
    assert set(state.reject_checks["cheater-0"]) <= {"toploc", "prefill"}, state.reject_checks
    assert all(
        verdicts[s.id].severity == "hard"
        for s in submissions
        if s.node_id == cheater.node_id and s.id in verdicts
    )
    # The ledger credits each honest node exactly the tokens of its accepted files (none for a node that found
    # every step's units leased: it has no balance); the cheater gets nothing.
    credited_in_all = 0
    for record in honest:
        accepted_tokens = sum(
            s.tokens for s in submissions if s.node_id == record.node_id and s.status == "accepted"
        )
        held = balances.get(record.node_id)
        credited = held.pending_tokens + held.unlocked_tokens if held is not None else 0
        assert credited == accepted_tokens, (record, credited, accepted_tokens)
        credited_in_all += credited
    assert credited_in_all > 0
    assert cheater.node_id not in balances or balances[cheater.node_id].pending_tokens == 0
    # The trainer read only accepted submissions, and never the cheater's.
    accepted = {s.id for s in submissions if s.status == "accepted"}
    trained = [p for p in (swarm.rundir.root / "accepted").rglob("*.parquet")]
    assert trained and {int(p.name.split("-")[0]) for p in trained} <= accepted
    assert not any(cheater.node_id[:16] in p.name for p in trained)


def test_lora_run_broadcasts_adapters_that_workers_and_validators_merge(root):
    # Seven steps: more than a worker (3) or a relay (5) keeps, so only pinning keeps the base step 0.
    steps = 7
    lora = ["trainer.lora.enabled=true", "trainer.lora.r=4", "contract.async_level=1"]
    swarm = launch(root, "lora", steps, 2, 0, 1, *lora)
    try:
        supervise(swarm, quiet(), timeout_s=550, interval_s=1.0)
        state = snapshot(swarm)
        with PublicReads.at(swarm.coordinator_url) as client:
            submissions = client.submissions(swarm.config.run.id)
    finally:
        stop_swarm(swarm)

    assert len(swarm.rundir.read_metrics()) == steps
    checkpoints = swarm.rundir.checkpoints
    assert all(is_adapter_checkpoint(checkpoint_dir(checkpoints, step)) for step in range(1, steps + 1))
    honest = [state.nodes[f"worker-{i}"] for i in range(2)]
    assert all(r.rejected == 0 for r in honest) and sum(r.accepted for r in honest) > 0, state.reject_checks
    # Work for step k >= 2 needs policy >= 1: accepted, it was generated and validated on merged adapters.
    assert any(s.status == "accepted" and s.step >= 2 for s in submissions)
    for name in ("worker-0", "validator", "relay-0"):
        directory = swarm.swarm_dir / name
        held = local_versions(directory / "checkpoints" if name != "relay-0" else directory)
        assert held[0] == 0 and held[-1] >= 4, (name, held)


def _wait_until(predicate, swarm: Swarm, what: str, timeout_s: float = 240.0):
    deadline = time.monotonic() + timeout_s
    while not (found := predicate()):
        swarm.check_alive()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


def test_worker_relay_validator_and_coordinator_faults(root):
    """Kill a worker mid-lease and a validator mid-judgement for good; restart the coordinator and the relay:
    the run finishes, the worker's unit expires (re-leased while its step still wants work) and nothing else of
    its is lost, the validator's file returns to the pool and gets exactly one verdict, no accepted submission
    is lost, and no honest file is rejected."""
    # Ten steps, and worker-0's first lease is the one cut short: on an idle machine the tiny run finishes a
    # step in under a second, and a run of six was over before the test saw worker-0 holding a unit after step 1.
    swarm = launch(root, "faults", steps=10, honest=2, validators=2)
    run_id = swarm.config.run.id
    client = PublicReads.at(swarm.coordinator_url)
    try:
        worker = swarm.identity("worker-0").node_id

        def held() -> list:
            return [u for u in client.units(run_id, node_id=worker) if u.status == "leased"]

        _wait_until(held, swarm, "worker-0 to hold a unit")
        swarm.kill("worker-0")
        lost = held()  # what it held when it died (a unit it had just submitted is not among them)
        assert lost
        delivered = {s.id for s in client.submissions(run_id, node_id=worker)}
        judge = swarm.identity("validator-0").node_id
        judged = _wait_until(
            lambda: next(
                (s for s in client.submissions(run_id, status="pending") if s.judge_key == judge), None
            ),
            swarm,
            "validator-0 to hold a file",
        )
        swarm.kill("validator-0")
        cut_short = client.submissions(run_id, status="pending", node_id=judged.node_id)
        cut_short = any(s.id == judged.id for s in cut_short)  # False: it posted just before dying
        before = accepted_ids(swarm)
        restart_coordinator(swarm)
        assert before <= accepted_ids(swarm)
        wait_for_step(swarm, 3)
        swarm.kill("relay-0")
        time.sleep(1.0)
        swarm.restart("relay-0")
        before = accepted_ids(swarm)
        supervise(swarm, quiet(), timeout_s=500, interval_s=1.0)
        state = snapshot(swarm)
        assert before <= accepted_ids(swarm)
        units = [u for step in {u.step for u in lost} for u in client.units(run_id, step=step)]
        verdicts = [v for v in client.verdicts(run_id) if v.submission_id == judged.id]
        submissions = {s.id: s for s in client.submissions(run_id)}
    finally:
        client.close()
        stop_swarm(swarm)
    assert len(swarm.rundir.read_metrics()) == 10
    assert state.run_status == "drained" and not [s for s in submissions.values() if s.status == "pending"]
    assert all(record.rejected == 0 for record in state.nodes.values()), state.reject_checks
    # The killed worker's units expired; a unit went to another node if its step still wanted work.
    for held_unit in lost:
        same = [u for u in units if (u.step, u.batch_index) == (held_unit.step, held_unit.batch_index)]
        assert [u.status for u in same if u.node_id == worker] == ["expired"]
        assert all(u.id > held_unit.id for u in same if u.node_id != worker)
    assert all(submissions[i].status != "pending" for i in delivered)  # everything it delivered was judged
    # The killed validator's file: exactly one verdict, by the validator still running if it was cut short.
    (verdict,) = verdicts
    if cut_short:
        assert verdict.validator_key == swarm.identity("validator-1").node_id


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
