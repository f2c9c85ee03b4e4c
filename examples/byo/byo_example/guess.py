"""Guess the number: a multi-turn environment from your own package (`[env] kind = "plugin"`).

The model guesses; a wrong guess comes back as "higher" or "lower". Everything is a function of the task, the
seed and the model's turns, so validators replay every episode and get the same turns and reward.
"""

from __future__ import annotations

import re

from swarmrl.envs.base import EnvStep
from swarmrl.tasks.task import Task


class GuessTheNumber:
    def __init__(self, max_guesses: int = 3) -> None:
        self.max_guesses = max_guesses
        self._secret: int | None = None
        self._guesses = 0

    def reset(self, task: Task, seed: int) -> str:
        # The secret is the row's `answer` column (a prompts dataset hands every column to the task).
        self._secret, self._guesses = int(task.verification_info["answer"]), 0
        return task.prompt

    def step(self, model_turn: str) -> EnvStep:
        if self._secret is None:
            raise RuntimeError("step() before reset()")
        self._guesses += 1
        numbers = re.findall(r"-?\d+", model_turn)
        guess = int(numbers[-1]) if numbers else None
        if guess == self._secret:
            return EnvStep(None, 1.0 / self._guesses, True)
        if self._guesses >= self.max_guesses:
            return EnvStep(None, 0.0, True)
        hint = "No number there." if guess is None else ("Higher." if guess < self._secret else "Lower.")
        return EnvStep(f"{hint} Guess again.", 0.0, False)
