"""Trusted rewards and advantages for rollout rows, recomputed from the task and the tokens alone.

Nothing a worker claims about rewards is used: the completion is decoded, verified against the task,
shaped by the length target the seed implies, and turned into GRPO / Dr.GRPO advantages per group.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Literal

from transformers import PreTrainedTokenizerBase

from swarmrl.rollouts import RolloutError, RolloutRow, ScoredRow
from swarmrl.tasks.config import TasksConfig
from swarmrl.tasks.reward import RewardRequest, compute_rewards
from swarmrl.tasks.task import TaskSource
from swarmrl.trainer.advantages import grpo_advantages


def completion_text(tokenizer: PreTrainedTokenizerBase, completion_ids: list[int]) -> str:
    """The answer text a verifier sees: special tokens dropped, and the space after the prompt's colon too."""
    return tokenizer.decode(completion_ids, skip_special_tokens=True).strip()


def score_rows(
    rows: list[RolloutRow],
    *,
    tasks: TaskSource,
    tokenizer: PreTrainedTokenizerBase,
    tasks_config: TasksConfig,
    group_size: int,
    advantage: Literal["grpo", "dr_grpo"] = "grpo",
) -> list[ScoredRow]:
    """Rows with trusted rewards; rows must come in whole groups of `group_size` (group ids contiguous)."""
    requests = []
    for i, row in enumerate(rows):
        if not 0 <= row.prompt_index < len(tasks):
            raise RolloutError(f"row {i}: prompt index {row.prompt_index} outside the task source")
        task = tasks[row.prompt_index]
        if task.task_id != row.task_id:
            raise RolloutError(
                f"row {i}: task id {row.task_id!r} is not task {row.prompt_index} ({task.task_id!r})"
            )
        requests.append(
            RewardRequest(
                task,
                completion_text(tokenizer, row.completion_ids),
                len(row.completion_ids),
                row.target_length if row.target_length >= 0 else None,
            )
        )
    rewards = compute_rewards(requests, config=tasks_config)
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
            )
        )
    return scored
