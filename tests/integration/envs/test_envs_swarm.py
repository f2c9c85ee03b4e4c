"""A run with an `[env]` section as a swarm of processes on 127.0.0.1: workers lease units and play the
environment, the validator replays every row in its own environment before it accepts it, the trainer trains
on accepted rows only, and a worker that runs half the model is still caught by the proofs over the model's
tokens. The tiny swarm policy (spell words backward) answers without calling the tool; tool turns through
the engine, the validator's replay and the sandbox are covered in tests/unit/envs and tests/adversarial/envs."""

import pytest
from integration.swarm.test_swarm import launch, quiet

from swarmrl.coordinator.client import PublicReads
from swarmrl.launch.swarm import snapshot, stop_swarm, supervise
from swarmrl.rollouts import read_rollouts

pytestmark = [pytest.mark.slow, pytest.mark.swarm, pytest.mark.timeout(600)]

STEPS = 3


def test_an_env_run_trains_on_replayed_work_and_bans_the_cheater(tmp_path):
    swarm = launch(
        tmp_path,
        "env-swarm",
        STEPS,
        1,
        1,
        1,
        'env={kind="python_tool",max_turns=2,max_tokens=8}',
    )
    try:
        supervise(swarm, quiet(), timeout_s=500, interval_s=1.0)
        state = snapshot(swarm)
        with PublicReads.at(swarm.coordinator_url) as client:
            accepted = client.submissions(swarm.config.run.id, status="accepted")
    finally:
        stop_swarm(swarm)

    assert len(swarm.rundir.read_metrics()) == STEPS
    honest, cheater = state.nodes["worker-0"], state.nodes["cheater-0"]
    assert honest.rejected == 0 and honest.accepted > 0, state.reject_checks
    assert cheater.banned and cheater.accepted == 0
    assert set(state.reject_checks["cheater-0"]) <= {"toploc", "prefill"}, state.reject_checks
    # What the trainer read is multi-turn work: every row carries its model-token mask.
    trained = sorted((swarm.rundir.root / "accepted").rglob("*.parquet"))
    assert trained and {int(p.name.split("-")[0]) for p in trained} <= {s.id for s in accepted}
    rows = [row for path in trained for row in read_rollouts(path)[1]]
    assert rows and all(len(r.completion_mask) == len(r.completion_ids) > 0 for r in rows)
