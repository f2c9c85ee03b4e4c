"""A pack's verifier on the run's own rollouts: how a trusted node (a validator judging a file, the trainer
scoring it again) scores the completions of a pack's unit.

The verifier runs exactly as at admission (`judging`): in the code sandbox, one session per file, under the
same pace and budgets, its replies read on this side. What it cannot score (it raised, timed out, answered out
of form) scores 0 for training and is counted against the pack, never against the worker: a pack's verifier
failing is the pack's fault. A completion it finds not applicable (None) scores 0 as well, as a reward
function that applies to no row gives 0 (`tasks.reward`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from swarmrl.configs.tasks import TasksConfig
from swarmrl.tasks.packs.judging import CodeTestsJudge, Failure, Item, Judge, Outcome, RewardFunctionJudge
from swarmrl.tasks.packs.pack import TaskPack
from swarmrl.tasks.sandbox import sandbox_plan

RowScores = list[tuple[int, list[float | None]]]  # (pack row, one score per completion; None: failed)


@dataclass(frozen=True)
class JudgedFile:
    """One judge's scores of a file's pack completions, in the file's row order."""

    rows: list[int]  # the pack row of each completion
    outcomes: list[Outcome]

    @property
    def rewards(self) -> list[float]:
        return [outcome if isinstance(outcome, float) else 0.0 for outcome in self.outcomes]

    @property
    def failures(self) -> int:
        return sum(isinstance(outcome, Failure) for outcome in self.outcomes)

    def by_row(self) -> RowScores:
        """Scores grouped by pack row, rows in first-seen order (what the coordinator is told)."""
        grouped: dict[int, list[float | None]] = {}
        for row, outcome in zip(self.rows, self.outcomes, strict=True):
            score = None if isinstance(outcome, Failure) else (outcome if outcome is not None else 0.0)
            grouped.setdefault(row, []).append(score)
        return list(grouped.items())


def judge_file(
    pack: TaskPack, rows: Sequence[int], completions: Sequence[str], tasks: TasksConfig
) -> JudgedFile:
    """The pack's verdict on each completion (`completions[i]` answers pack row `rows[i]`), in one session."""
    items = [Item(row, completion, "rollout") for row, completion in zip(rows, completions, strict=True)]
    plan = sandbox_plan(tasks.code)
    budget = tasks.community.admission.verifier
    judge: Judge = (
        CodeTestsJudge(pack, tasks.code, tasks.extraction, plan)
        if pack.manifest.verifier.kind == "code_tests"
        else RewardFunctionJudge(pack, budget, plan)
    )
    result = judge.run_pass(items, range(len(items)), time.monotonic() + budget.pass_seconds)
    return JudgedFile(list(rows), list(result.outcomes))
