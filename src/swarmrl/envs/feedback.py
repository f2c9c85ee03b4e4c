"""Guess with feedback: the model answers a puzzle, a wrong answer comes back as a turn, it tries again.

The feedback turn says how close the guess was when the verifier gives partial credit (reasoning-gym's
mini_sudoku scores the cells a grid gets right, for instance), so a later attempt can build on it.
The reward is the verifier's score of the last answer, discounted by `retry_discount` per earlier wrong
attempt, so solving at once is worth more than solving after hints.
"""

from __future__ import annotations

from swarmrl.envs.base import EnvStep
from swarmrl.envs.errors import EnvError
from swarmrl.envs.python_tool import Verifier
from swarmrl.tasks.task import Task

RETRY_MESSAGE = (
    "That answer is not correct. Check your reasoning and give your answer again in <answer></answer>."
)
PARTIAL_MESSAGE = (
    "That answer is not correct, but partly right (it scores {score:.2f} of 1). Check your reasoning and "
    "give your answer again in <answer></answer>."
)


def feedback_message(score: float) -> str:
    """The turn after a wrong answer: how close it was, where the verifier gives partial credit."""
    return PARTIAL_MESSAGE.format(score=score) if score > 0 else RETRY_MESSAGE


class FeedbackEnv:
    def __init__(self, verifier: Verifier, *, max_attempts: int = 3, retry_discount: float = 0.5) -> None:
        if max_attempts < 1 or not 0.0 <= retry_discount <= 1.0:
            raise EnvError("max_attempts must be >= 1 and retry_discount in [0, 1]")
        self.verifier = verifier
        self.max_attempts = max_attempts
        self.retry_discount = retry_discount
        self._task: Task | None = None
        self._attempts = 0
        self._done = True

    def reset(self, task: Task, seed: int) -> str:
        del seed
        self._task, self._attempts, self._done = task, 0, False
        return task.prompt

    def step(self, model_turn: str) -> EnvStep:
        if self._task is None or self._done:
            raise EnvError("step() on an environment that is not running: call reset() first")
        score = self.verifier.score(self._task, model_turn)
        reward = score * self.retry_discount**self._attempts
        self._attempts += 1
        if score >= 1.0 or self._attempts >= self.max_attempts:
            self._done = True
            return EnvStep(None, reward, True)
        return EnvStep(feedback_message(score), 0.0, False)
