"""The task model shared by every source and verifier."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from swarmrl.tasks.errors import TaskError

TASK_TYPES = ("math", "code", "reasoning_gym")


@dataclass(frozen=True)
class Task:
    """One prompt with everything needed to verify an answer to it.

    `verification_info` is JSON-able: ground truth(s) for math, test cases for code, the reasoning-gym entry
    (dataset name, config and index) for procedural tasks. `demonstration` is a reference answer used by the
    SFT warm-start; `solve_rate` is the offline pass rate under a base model (None until measured).
    `messages` is a chat-format prompt as a dataset gave it ([{role, content}, ...], ending on a user turn);
    `prompt` is then that last turn's text.
    """

    task_id: str
    prompt: str
    task_type: str
    verification_info: dict[str, Any] = field(default_factory=dict)
    solve_rate: float | None = None
    demonstration: str | None = None
    messages: tuple[dict[str, str], ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.task_id, str) or not self.task_id:
            raise TaskError("task_id must be a non-empty string")
        if not isinstance(self.prompt, str):
            raise TaskError(f"task {self.task_id}: prompt must be a string")
        if not isinstance(self.task_type, str) or not self.task_type:
            raise TaskError(f"task {self.task_id}: task_type must be a non-empty string")
        if not isinstance(self.verification_info, dict):
            raise TaskError(f"task {self.task_id}: verification_info must be a dict")
        if self.solve_rate is not None and not 0.0 <= self.solve_rate <= 1.0:
            raise TaskError(f"task {self.task_id}: solve_rate {self.solve_rate} outside [0, 1]")
        try:
            json.dumps(self.verification_info)
        except (TypeError, ValueError) as exc:
            raise TaskError(f"task {self.task_id}: verification_info is not JSON-able: {exc}") from exc
        if self.messages is not None:
            _check_messages(self.task_id, self.messages, self.prompt)

    def __hash__(self) -> int:
        # verification_info is a dict; identity, prompt and type are enough to spread tasks over buckets.
        return hash((self.task_id, self.prompt, self.task_type))

    def with_prompt(self, prompt: str) -> Task:
        """A copy with another prompt (e.g. a length-target suffix appended)."""
        return dataclasses.replace(self, prompt=prompt)

    def with_solve_rate(self, solve_rate: float) -> Task:
        return dataclasses.replace(self, solve_rate=solve_rate)


def _check_messages(task_id: str, messages: tuple[dict[str, str], ...], prompt: str) -> None:
    """A chat prompt: role/content string pairs, ending on the user turn whose text is the task's prompt."""
    if not messages:
        raise TaskError(f"task {task_id}: the prompt holds no messages")
    for message in messages:
        if (
            not isinstance(message, dict)
            or set(message) != {"role", "content"}
            or not all(isinstance(v, str) for v in message.values())
        ):
            raise TaskError(
                f"task {task_id}: a prompt message must be {{role, content}} strings, got {message!r}"
            )
    if messages[-1]["role"] != "user" or messages[-1]["content"] != prompt:
        raise TaskError(
            f"task {task_id}: a chat prompt must end on a user turn (its text is the task prompt)"
        )


@runtime_checkable
class TaskSource(Protocol):
    """A finite, indexable, deterministic collection of tasks: `source[i]` is the same task on every node."""

    @property
    def name(self) -> str: ...

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Task: ...


class ListTaskSource:
    """A task source over an in-memory list (loaded datasets, filtered or mixed sources)."""

    def __init__(self, name: str, tasks: list[Task]) -> None:
        self._name = name
        self._tasks = list(tasks)

    @property
    def name(self) -> str:
        return self._name

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, index: int) -> Task:
        if not -len(self._tasks) <= index < len(self._tasks):
            raise IndexError(f"task index {index} out of range for source {self._name!r} of {len(self)}")
        return self._tasks[index]
