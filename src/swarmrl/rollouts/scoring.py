"""Trusted rewards and advantages for rollout rows, recomputed from the task and the tokens alone.

Nothing a worker claims about rewards is used: the completion is decoded, verified against the task,
shaped by the length target the seed implies, and turned into GRPO / Dr.GRPO advantages per group.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from swarmrl.configs.tasks import TasksConfig
from swarmrl.rollouts import RolloutError, RolloutRow, ScoredRow
from swarmrl.rollouts.advantages import grpo_advantages
from swarmrl.tasks.completion import completion_text
from swarmrl.tasks.reward import RewardBreakdown, RewardRequest, compute_rewards
from swarmrl.tasks.reward_functions import RunSchedule
from swarmrl.tasks.task import TaskSource

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def score_rows(
    rows: list[RolloutRow],
    *,
    tasks: TaskSource,
    tokenizer: PreTrainedTokenizerBase,
    tasks_config: TasksConfig,
    group_size: int,
    advantage: Literal["grpo", "dr_grpo"] = "grpo",
    env_rewards: Sequence[float | None] | None = None,
    schedule: RunSchedule | None = None,
) -> list[ScoredRow]:
    """Rows with trusted rewards; rows must come in whole groups of `group_size` (group ids contiguous).

    `schedule`: the run's length, which gives reward functions their `trainer_state` from each row's policy
    step (None: they get none).

    `env_rewards` (one per row, None for a single-turn row): the reward the validator's own replay of a
    multi-turn row's environment gave; such a row is not verified from its decoded text, which holds the
    environment's turns too, and gets no length term.
    """
    replayed = list(env_rewards) if env_rewards is not None else [None] * len(rows)
    if len(replayed) != len(rows):
        raise RolloutError(f"{len(replayed)} environment rewards for {len(rows)} rows")
    requests = []
    for i, row in enumerate(rows):
        if not 0 <= row.prompt_index < len(tasks):
            raise RolloutError(f"row {i}: prompt index {row.prompt_index} outside the task source")
        task = tasks[row.prompt_index]
        if task.task_id != row.task_id:
            raise RolloutError(
                f"row {i}: task id {row.task_id!r} is not task {row.prompt_index} ({task.task_id!r})"
            )
        if replayed[i] is not None:
            continue
        requests.append(
            RewardRequest(
                task,
                completion_text(tokenizer, row.completion_ids),
                len(row.completion_ids),
                row.target_length if row.target_length >= 0 else None,
                tuple(row.completion_ids),
                schedule.state(row.policy_step) if schedule is not None else None,
            )
        )
    computed = iter(compute_rewards(requests, config=tasks_config) if requests else [])
    rewards = [RewardBreakdown(env, 0.0, env) if env is not None else next(computed) for env in replayed]
    counts = Counter(row.group_id for row in rows)
    for group_id, count in counts.items():
        if count != group_size:
            raise RolloutError(f"group {group_id} has {count} completions, expected {group_size}")
    order = sorted(range(len(rows)), key=lambda i: rows[i].group_id)
    totals = [rewards[i].total for i in order]
    advantages = grpo_advantages(totals, group_size, kind=advantage).tolist()
    scored = []
    for position, i in enumerate(order):
        reward = rewards[i]
        scored.append(
            ScoredRow(
                **{f.name: getattr(rows[i], f.name) for f in dataclasses.fields(RolloutRow)},
                task_reward=reward.task_reward,
                length_term=reward.length_term,
                reward=reward.total,
                advantage=advantages[position],
                function_rewards=reward.functions,
                reward_failures=reward.failed,
            )
        )
    return scored
