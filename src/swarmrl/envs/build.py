"""From an `EnvConfig` to environments, and the validator's replay of one rollout row."""

from __future__ import annotations

from collections.abc import Callable

from swarmrl.envs.base import Environment
from swarmrl.envs.config import EnvConfig
from swarmrl.envs.feedback import FeedbackEnv
from swarmrl.envs.python_tool import PythonToolEnv, Verifier
from swarmrl.envs.replay import replay
from swarmrl.envs.trajectory import RolloutLimits, TurnCodec
from swarmrl.rollouts import RolloutRow
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.sandbox import SandboxLimits, sandbox_plan
from swarmrl.tasks.task import TaskSource


def rollout_limits(config: EnvConfig) -> RolloutLimits:
    return RolloutLimits(config.max_turns, config.max_tokens, config.max_seconds)


def build_env(config: EnvConfig, verifier: Verifier) -> Environment:
    """A fresh environment (one per concurrent episode)."""
    if config.kind == "python_tool":
        return PythonToolEnv(
            verifier,
            sandbox_plan(config.sandbox),
            SandboxLimits.from_config(config.sandbox),
            max_tool_calls=config.max_tool_calls,
            max_output_chars=config.max_output_chars,
        )
    return FeedbackEnv(verifier, max_attempts=config.max_attempts, retry_discount=config.retry_discount)


def row_replayer(
    config: EnvConfig, tasks: TaskSource, codec: TurnCodec, verifier: Verifier
) -> Callable[[RolloutRow], float]:
    """The validator's `env_replay`: the trusted reward of a row, replayed from the coordinator's task and seed."""
    limits = rollout_limits(config)

    def replay_row(row: RolloutRow) -> float:
        if not 0 <= row.prompt_index < len(tasks):
            raise TaskError(f"prompt index {row.prompt_index} outside the task source")
        task = tasks[row.prompt_index]
        result = replay(
            build_env(config, verifier),
            task,
            row.sample_seed,
            row.prompt_ids,
            row.completion_ids,
            row.model_mask,
            row.logprobs,
            codec,
            limits,
        )
        return result.reward

    return replay_row
