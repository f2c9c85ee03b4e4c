"""From an `EnvConfig` to environments, and the validator's replay of one rollout row."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import wait
from typing import TYPE_CHECKING, assert_never

from swarmrl.configs.envs import EnvConfig, FeedbackEnvConfig, PluginEnvConfig, PythonToolEnvConfig
from swarmrl.envs.base import Environment
from swarmrl.envs.codec import PromptTurnCodec
from swarmrl.envs.concurrency import submitted
from swarmrl.envs.engine_rollout import generate_env_batch
from swarmrl.envs.errors import EnvError, ReplayBudgetSpent, RowReplayFailed
from swarmrl.envs.feedback import FeedbackEnv
from swarmrl.envs.plugin import plugin_env
from swarmrl.envs.python_tool import PythonToolEnv, Verifier
from swarmrl.envs.replay import replay
from swarmrl.envs.trajectory import RolloutLimits, TurnCodec
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts import RolloutError, RolloutRow, ScoredRow
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.reward import reward_computer
from swarmrl.tasks.sandbox import SandboxLimits, sandbox_plan
from swarmrl.tasks.task import Task, TaskSource

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from swarmrl.configs import RunConfig
    from swarmrl.configs.tasks import TasksConfig
    from swarmrl.inference.engine import InferenceEngine, SamplingParams
    from swarmrl.models.prompting import PromptFormat
    from swarmrl.rollouts.assignment import AssignedPrompt, BatchSpec


class TaskVerifier:
    """The run's task reward of an answer: its reward functions, or the verifier of the task's own type (the
    tasks config's shared verifiers and pools)."""

    def __init__(self, config: TasksConfig) -> None:
        self._computer = reward_computer(config)

    def score(self, task: Task, completion: str) -> float:
        return self._computer.task_reward(task, completion)


def generate_config_env_batch(
    engine: InferenceEngine,
    spec: BatchSpec,
    prompts: list[AssignedPrompt],
    params: SamplingParams,
    config: RunConfig,
    fmt: PromptFormat,
) -> list[RolloutRow]:
    """The worker's batch for a run with an `[env]` section: its environment, codec and limits."""
    if config.env is None:
        raise EnvError("this run has no [env] section")
    env_config, verifier = config.env, TaskVerifier(config.tasks)
    # A model turn ends where the codec says an assistant answer ends, whatever the engine's own EOS is.
    stops = tuple(dict.fromkeys((*params.stop_token_ids, *fmt.stop_token_ids)))
    return generate_env_batch(
        engine,
        spec,
        prompts,
        dataclasses.replace(params, stop_token_ids=stops),
        lambda: build_env(env_config, verifier),
        PromptTurnCodec(fmt),
        rollout_limits(env_config),
        concurrency=env_config.max_concurrent_steps,
    )


def rollout_limits(config: EnvConfig) -> RolloutLimits:
    return RolloutLimits(config.max_turns, config.max_tokens, config.max_seconds)


def build_env(config: EnvConfig, verifier: Verifier) -> Environment:
    """A fresh environment of the configured kind (one per concurrent episode)."""
    match config:
        case PythonToolEnvConfig():
            return PythonToolEnv(
                verifier,
                sandbox_plan(config.sandbox),
                SandboxLimits.from_config(config.sandbox),
                max_tool_calls=config.max_tool_calls,
                max_output_chars=config.max_output_chars,
            )
        case FeedbackEnvConfig():
            return FeedbackEnv(
                verifier, max_attempts=config.max_attempts, retry_discount=config.retry_discount
            )
        case PluginEnvConfig():
            return plugin_env(config)
        case _:
            assert_never(config)


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


def replay_rows(
    replay_row: Callable[[RolloutRow], float],
    rows: list[RolloutRow],
    concurrency: int,
    *,
    seconds: float | None = None,
) -> list[float]:
    """Every row's replayed reward, `concurrency` replays at once; the first row (in order) whose replay fails
    raises `RowReplayFailed` naming it. With `seconds`, the first row not replayed by then raises
    `ReplayBudgetSpent`: rows not started are cancelled, the ones running finish first."""
    deadline = None if seconds is None else time.monotonic() + seconds
    rewards = []
    with submitted(replay_row, rows, concurrency) as replays:
        for i, replayed in enumerate(replays):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not wait([replayed], timeout=left).done:
                raise ReplayBudgetSpent(i, seconds or 0.0)
            try:
                rewards.append(replayed.result())
            except (EnvError, TaskError) as exc:
                raise RowReplayFailed(i, exc) from exc
    return rewards


def env_replay(
    config: RunConfig, tasks: TaskSource, tokenizer: PreTrainedTokenizerBase
) -> Callable[[RolloutRow], float] | None:
    """The validator's `env_replay` of a run: its `[env]` section replayed per row; None for a single-turn run."""
    if config.env is None:
        return None
    codec = PromptTurnCodec(prompt_format(tokenizer, config.prompt))
    verifier = TaskVerifier(config.tasks)
    build_env(config.env, verifier)  # a plugin missing here, or other than the run pinned, is refused now
    return row_replayer(config.env, tasks, codec, verifier)


def with_env_replay(
    score: Callable[..., list[ScoredRow]],
    config: RunConfig,
    tasks: TaskSource,
    tokenizer: PreTrainedTokenizerBase,
) -> Callable[[list[RolloutRow]], list[ScoredRow]]:
    """The trainer's trusted scorer for a run with an `[env]` section: every row's reward is the trainer's own
    replay of its environment (`score_rows(env_rewards=...)`); a row whose replay differs is refused by name."""
    env, replay_row = config.env, env_replay(config, tasks, tokenizer)
    if env is None or replay_row is None:
        raise EnvError("this run has no [env] section")

    def scored(rows: list[RolloutRow]) -> list[ScoredRow]:
        try:
            rewards = replay_rows(replay_row, rows, env.max_concurrent_steps)
        except RowReplayFailed as failed:  # a ReplayMismatch cause names the check that failed
            raise RolloutError(f"row {failed.row}: environment replay: {failed.cause}") from failed.cause
        return score(rows, env_rewards=rewards)

    return scored
