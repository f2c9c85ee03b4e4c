"""Each reward function's figures over the completions a step read, as TRL logs them (`rewards/<name>/mean`,
`rewards/<name>/std`, plus `rewards/<name>/failed`: the share it could not score), and the stop when one fails
on too many of them: a function that cannot run must end the run saying so, not score 0 in silence."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from swarmrl.errors import UserError
from swarmrl.rollouts import ScoredRow
from swarmrl.tasks.reward_functions import METRIC_PREFIX


class RewardFunctionFailing(UserError):
    """A reward function failed on more of a step's completions than `tasks.reward_failure_share` allows."""


def mean_and_std(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean and the sample standard deviation (Bessel's correction, as TRL's nanstd; None below 2 values)."""
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


@dataclass
class RewardTally:
    """What the run's reward functions gave the completions of one step (kept and filtered alike)."""

    completions: int = 0
    applied: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    first_failure: dict[str, str] = field(default_factory=dict)

    def add(self, rows: Sequence[ScoredRow]) -> None:
        for row in rows:
            if not row.function_rewards:
                continue  # no reward functions, or a row an environment scored
            self.completions += 1
            for name, reward in row.function_rewards.items():
                values = self.applied.setdefault(name, [])
                if reward is not None:
                    values.append(reward)
            for name, why in row.reward_failures.items():
                self.failures[name] = self.failures.get(name, 0) + 1
                self.first_failure.setdefault(name, why)

    def metrics(self) -> dict[str, float]:
        figures: dict[str, float] = {}
        for name, values in self.applied.items():
            if values:
                mean, std = mean_and_std(values)
                figures[f"{METRIC_PREFIX}{name}/mean"] = mean
                if std is not None:
                    figures[f"{METRIC_PREFIX}{name}/std"] = std
            figures[f"{METRIC_PREFIX}{name}/failed"] = self.failures.get(name, 0) / max(1, self.completions)
        return figures

    def check(self, step: int, share_limit: float) -> None:
        """RewardFunctionFailing naming the function that failed on more than `share_limit` of the completions
        so far, with its first failure; `step` is the policy step they are to train (as the console counts)."""
        for name, failed in self.failures.items():
            if failed > share_limit * self.completions:
                raise RewardFunctionFailing(
                    f"step {step}: reward function {name} failed on {failed} of {self.completions} completions "
                    f"(more than tasks.reward_failure_share = {share_limit:g}); first: {self.first_failure[name]}"
                )
