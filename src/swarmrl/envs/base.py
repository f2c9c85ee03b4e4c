"""The environment interface: reset(task, seed) gives the first user turn; step(model turn) answers it.

An environment sees text only. Tokens are the trajectory's business (`trajectory`), so one environment
serves any tokenizer and prompt format, and the validator can replay it from the model's turns alone.
Environments must be deterministic given (task, seed, model turns): the validator recomputes every
environment turn and rejects a rollout whose recorded turns differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from swarmrl.tasks.task import Task


@dataclass(frozen=True)
class EnvStep:
    """What the environment answers to one model turn.

    `message` is the next user/tool turn (None when done), `reward` the reward so far in [0, 1], `done`
    whether the episode ended (solved, gave up, or out of attempts).
    """

    message: str | None
    reward: float
    done: bool


@runtime_checkable
class Environment(Protocol):
    """One episode at a time: `reset` starts it, `step` answers each model turn until done."""

    def reset(self, task: Task, seed: int) -> str:
        """Start an episode on `task`; returns the first user turn (the question the model sees)."""
        ...

    def step(self, model_turn: str) -> EnvStep:
        """Answer one model turn (its text, stop token excluded)."""
        ...
