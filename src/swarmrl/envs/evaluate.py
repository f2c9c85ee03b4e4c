"""Held-out accuracy of a policy in an environment: the share of episodes that end fully solved."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from swarmrl.configs.envs import EnvConfig
from swarmrl.envs.build import build_env, rollout_limits
from swarmrl.envs.engine_rollout import engine_generator
from swarmrl.envs.python_tool import Verifier
from swarmrl.envs.trajectory import TurnCodec, run_episodes
from swarmrl.inference.engine import InferenceEngine, SamplingParams
from swarmrl.tasks.task import Task


@dataclass(frozen=True)
class EnvAccuracy:
    accuracy: float
    mean_reward: float
    mean_model_turns: float
    mean_model_tokens: float
    episodes: int
    solved: tuple[bool, ...]  # per episode, in the order of the tasks given


def env_accuracy(
    engine: InferenceEngine,
    codec: TurnCodec,
    config: EnvConfig,
    verifier: Verifier,
    tasks: Sequence[Task],
    params: SamplingParams,
    seed: int = 0,
) -> EnvAccuracy:
    """Run one episode per task (all rows batched per turn); solved = reward 1."""
    seeds = [seed * 1_000_003 + i for i in range(len(tasks))]
    envs = [build_env(config, verifier) for _ in tasks]
    trajectories = run_episodes(
        envs,
        list(tasks),
        seeds,
        engine_generator(engine, params, seeds),
        codec,
        rollout_limits(config),
        concurrency=config.max_concurrent_steps,
    )
    count = len(trajectories)
    return EnvAccuracy(
        accuracy=sum(t.reward >= 1.0 for t in trajectories) / count,
        mean_reward=sum(t.reward for t in trajectories) / count,
        mean_model_turns=sum(t.model_turns for t in trajectories) / count,
        mean_model_tokens=sum(sum(t.completion_mask) for t in trajectories) / count,
        episodes=count,
        solved=tuple(t.reward >= 1.0 for t in trajectories),
    )
