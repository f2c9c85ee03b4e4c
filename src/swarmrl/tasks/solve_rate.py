"""Offline difficulty filter support: the solve rate of a task under k sampled completions (SPEC §3)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.reward import RewardComputer, RewardRequest
from swarmrl.tasks.task import Task


def solve_rate(
    task: Task, completions: Sequence[str], computer: RewardComputer, solved_at: float = 1.0
) -> float:
    """Fraction of `completions` whose task reward reaches `solved_at` (1.0: fully correct)."""
    if not completions:
        raise TaskError(f"task {task.task_id}: no completions to measure a solve rate from")
    rewards = computer.compute_batch([RewardRequest(task, c, 0) for c in completions])
    return sum(r.task_reward >= solved_at for r in rewards) / len(completions)


def annotate_solve_rates(
    tasks: Iterable[Task], generate: Callable[[Task, int], list[str]], k: int, computer: RewardComputer
) -> list[Task]:
    """Each task with `solve_rate` set from k completions drawn by `generate(task, k)` (e.g. a base model)."""
    if k < 1:
        raise TaskError("k must be at least 1")
    return [task.with_solve_rate(solve_rate(task, generate(task, k), computer)) for task in tasks]
