"""Held-out accuracy of a policy: sample each held-out task with fixed seeds and verify the answers.

With k = `eval.samples_per_task` completions per task, a result reports avg@k (the mean accuracy over all
completions) and pass@k (the share of tasks solved by at least one of them), as prime-rl's evals do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from swarmrl.configs import RunConfig
from swarmrl.configs.tasks import TasksConfig
from swarmrl.eval_metrics import EvalResult
from swarmrl.inference.engine import GenerationRequest, InferenceEngine, SamplingParams
from swarmrl.inference.factory import build_engine
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.prompting import PromptFormat, prompt_format
from swarmrl.rollouts.assignment import sample_seed
from swarmrl.tasks.completion import completion_text
from swarmrl.tasks.registry import heldout_sources
from swarmrl.tasks.reward import RewardRequest, compute_rewards
from swarmrl.tasks.task import Task

_EVAL_SEED = 0x5EED


class EvalSetupError(ValueError):
    """The run has nothing to evaluate on: no reasoning-gym source, so no held-out split."""


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
        ids = prompts.ids(task.prompt, task.messages)
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
    k = samples_per_task
    solved = [r.task_reward >= 1.0 for r in rewards]
    n = len(rewards)
    return EvalResult.from_counts(
        [sum(solved[i * k : (i + 1) * k]) for i in range(len(tasks))],
        k,
        mean_reward=sum(r.total for r in rewards) / n,
        mean_completion_tokens=sum(len(g.completion_ids) for g in generations) / n,
    )


def heldout_tasks(config: TasksConfig, num_tasks: int) -> list[Task]:
    """The first `num_tasks` tasks of the first generated source's held-out split: the same tasks on every
    call, and never a training task (the split draws from its own seeds)."""
    sources = heldout_sources(config)
    if not sources:
        raise EvalSetupError("held-out evaluation needs a reasoning-gym or arithmetic source")
    return [sources[0][i] for i in range(min(num_tasks, len(sources[0])))]


@dataclass
class HeldOutEval:
    """An engine serving one policy and the held-out tasks it is scored on; `run` evaluates whatever weights
    the engine holds, so one instance serves a run's successive policies (`engine.load_weights`)."""

    engine: InferenceEngine
    prompts: PromptFormat
    tasks: list[Task]
    config: RunConfig

    @classmethod
    def from_checkpoint(cls, config: RunConfig, path: Path, step: int, num_tasks: int) -> HeldOutEval:
        prompts = prompt_format(load_tokenizer(path), config.prompt)
        engine = build_engine(
            config.engine,
            load_model(path, config.model.dtype),
            eos_token_id=prompts.stop_token_ids,
            policy_step=step,
        )
        return cls(engine, prompts, heldout_tasks(config.tasks, num_tasks), config)

    def run(self) -> EvalResult:
        return evaluate(
            self.engine,
            self.tasks,
            prompts=self.prompts,
            tasks_config=self.config.tasks,
            params=SamplingParams(
                max_new_tokens=self.config.contract.max_new_tokens,
                temperature=self.config.eval.temperature,
                top_p=self.config.contract.top_p,
            ),
            samples_per_task=self.config.eval.samples_per_task,
        )
