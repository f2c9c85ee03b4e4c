"""Multi-digit multiplication tasks: what a tiny model cannot do in its head but can with a Python tool.

Deterministic from (seed, index) like every task source, so every node builds the same task.
"""

from __future__ import annotations

import random

from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.task import Task


class ArithmeticSource:
    def __init__(self, seed: int, size: int, digits: int = 4, name: str = "arithmetic") -> None:
        if size < 1 or digits < 1:
            raise TaskError("arithmetic source: size and digits must be >= 1")
        self.seed, self.size, self.digits, self._name = seed, size, digits, name

    @property
    def name(self) -> str:
        return self._name

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Task:
        if not 0 <= index < self.size:
            raise IndexError(index)
        draw = random.Random(f"{self.seed}:{index}")
        low, high = 10 ** (self.digits - 1), 10**self.digits - 1
        a, b = draw.randint(low, high), draw.randint(low, high)
        return Task(
            task_id=f"{self._name}/{self.seed}/{index}",
            prompt=f"What is {a} * {b}?",
            task_type="math",
            verification_info={"ground_truth": str(a * b)},
            demonstration=f"```python\nprint({a} * {b})\n```",
        )
