"""Held-out accuracy of a policy: sample each held-out task with fixed seeds and verify the answers."""

from __future__ import annotations

from dataclasses import dataclass

from swarmrl.inference.engine import GenerationRequest, InferenceEngine, SamplingParams
from swarmrl.models.prompting import PromptFormat
from swarmrl.rollouts.assignment import sample_seed
from swarmrl.tasks.config import TasksConfig
from swarmrl.tasks.reward import RewardRequest, compute_rewards
from swarmrl.tasks.task import Task
from swarmrl.validator.scoring import completion_text

_EVAL_SEED = 0x5EED


@dataclass(frozen=True)
class EvalResult:
    accuracy: float  # share of completions whose task reward is 1
    mean_reward: float
    completions: int
    mean_completion_tokens: float


def evaluate(
    engine: InferenceEngine,
    tasks: list[Task],
    *,
    prompts: PromptFormat,
    tasks_config: TasksConfig,
    params: SamplingParams,
    samples_per_task: int = 1,
) -> EvalResult:
    requests, reward_tasks = [], []
    for slot, task in enumerate(tasks):
        ids = prompts.ids(task.prompt)
        for sample in range(samples_per_task):
            requests.append(GenerationRequest(ids, sample_seed(_EVAL_SEED, slot, sample)))
            reward_tasks.append(task)
    generations = engine.generate(requests, params)
    rewards = compute_rewards(
        [
            RewardRequest(task, completion_text(prompts.tokenizer, g.completion_ids), len(g.completion_ids))
            for task, g in zip(reward_tasks, generations, strict=True)
        ],
        config=tasks_config,
    )
    n = len(rewards)
    return EvalResult(
        accuracy=sum(r.task_reward >= 1.0 for r in rewards) / n,
        mean_reward=sum(r.total for r in rewards) / n,
        completions=n,
        mean_completion_tokens=sum(len(g.completion_ids) for g in generations) / n,
    )
