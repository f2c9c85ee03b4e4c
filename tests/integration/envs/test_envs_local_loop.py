"""A run with an `[env]` section through the local spine: the worker's write_batch writes multi-turn rows, the
validator accepts them after its own replay, the trainer scores them by replaying their environment and trains."""

import pytest
import torch
from integration.spine.spine_helpers import pregenerate, tiny_config

from swarmrl.launch.prepare import prepare_run
from swarmrl.rollouts import read_rollouts
from swarmrl.rundir import RunDir
from swarmrl.trainer.role import trainer_role
from swarmrl.validator.rollout_checks import validate_file
from swarmrl.validator.service import local_context

STEPS = 2


def sorted_claims(rows):
    """The rows' claimed rewards in the order scoring returns them (grouped by group id)."""
    return [r.claimed_reward for r in sorted(rows, key=lambda r: r.group_id)]


@pytest.mark.slow
def test_the_trainer_trains_on_env_rows_it_replays(tmp_path):
    torch.set_num_threads(1)
    config = tiny_config(
        tmp_path,
        "tools",
        f"trainer.steps={STEPS}",
        "trainer.prompts_per_step=2",
        "trainer.max_wait_seconds=10",
        "trainer.optimizer_steps_per_policy_step=1",
        "contract.prompts_per_batch=4",
        "contract.async_level=4",
        "contract.max_new_tokens=16",
        'env={kind="python_tool",max_turns=2,max_tokens=16}',
    )
    prepare_run(config)
    pregenerate(config, STEPS, batches=2)
    rundir = RunDir(config.run.directory)
    files = sorted(rundir.rollouts(0).glob("*.parquet"))
    _, rows = read_rollouts(files[0])
    assert len(rows) == 16 and all(len(r.model_mask) == len(r.completion_ids) for r in rows)

    verdict = validate_file(files[0], 0, local_context(config.run.directory))
    assert verdict.accepted, verdict.reason
    assert "env_replay" in verdict.passed
    assert [r.reward for r in verdict.scored_rows] == pytest.approx(sorted_claims(rows))

    assert trainer_role(config.run.directory) == STEPS
    records = rundir.read_metrics()
    assert len(records) == STEPS
