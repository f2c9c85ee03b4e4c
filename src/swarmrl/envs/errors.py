"""Errors of the environment layer: bad settings, and a rollout whose replay does not match."""

from __future__ import annotations


class EnvError(ValueError):
    """An environment was misused or misconfigured (a step after done, a limit that is not positive)."""


class ReplayMismatch(EnvError):
    """A worker's multi-turn rollout differs from the validator's replay; `check` names what differed."""

    def __init__(self, check: str, detail: str) -> None:
        super().__init__(f"{check}: {detail}")
        self.check = check
        self.detail = detail


class RowReplayFailed(EnvError):
    """Row `row` of a batch failed its replay; `cause` is why (a ReplayMismatch names the check)."""

    def __init__(self, row: int, cause: Exception) -> None:
        super().__init__(f"row {row}: {cause}")
        self.row = row
        self.cause = cause


class ReplayBudgetSpent(EnvError):
    """The replay of a batch ran out of its time before row `row` finished (a validator's per-file budget)."""

    def __init__(self, row: int, seconds: float) -> None:
        super().__init__(f"row {row} still replaying after {seconds:.1f} s")
        self.row = row
        self.seconds = seconds
