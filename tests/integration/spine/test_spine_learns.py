"""A tiny asynchronous RL run (trainer + a worker sharing a run directory) raises the reward it is given."""

import statistics

import pytest
import torch

from swarmrl.launch.prepare import prepare_run
from swarmrl.rundir import RunDir
from swarmrl.tasks import reward as reward_module
from swarmrl.tasks.task import Task

from .spine_helpers import tiny_config, train_beside_a_worker


class LetterShare:
    """The share of the answer's characters that are the letter: learnable from scratch in a few policy steps,
    and graded, so groups keep differing. (A 0/1 "contains the letter" reward saturated within ten steps at this
    learning rate: nearly every group then had equal rewards and the trainer rightly gave up on the step.)"""

    def __init__(self, letter: str) -> None:
        self.letter = letter

    def score(self, task: Task, completion: str) -> float:
        return completion.count(self.letter) / max(len(completion), 1)


@pytest.mark.slow
def test_async_rl_raises_reward(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    stand_in = reward_module.verifier_registry({"reasoning_gym": lambda config: LetterShare("e")})
    monkeypatch.setattr(reward_module, "VERIFIERS", stand_in)
    monkeypatch.setattr(reward_module, "_COMPUTERS", {})
    config = tiny_config(
        tmp_path,
        "learn",
        "sft.steps=0",
        "trainer.steps=12",
        "trainer.lr=1e-2",
        "trainer.warmup_steps=0",
        "contract.async_level=1",
        "trainer.prompts_per_step=16",
        "contract.prompts_per_batch=8",
        "contract.group_size=8",
    )
    rundir = prepare_run(config)
    # The worker never scores anything, so it runs as its own process; only the trainer needs the verifier.
    assert train_beside_a_worker(rundir, tmp_path / "worker.log") == 12
    records = RunDir(rundir.root).read_metrics()
    # Everything the policy sampled, not only the groups kept for training.
    rewards = [r["sampled_reward"] for r in records]
    assert len(rewards) == 12
    # The async rule held: no batch came from a policy more than async_level steps old.
    assert max(r["policy_lag"] for r in records) <= 1
    assert statistics.mean(rewards[-3:]) > statistics.mean(rewards[:3]) + 0.2, rewards
