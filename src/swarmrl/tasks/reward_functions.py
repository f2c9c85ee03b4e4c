"""Reward functions from your own modules, called the way TRL's GRPOTrainer calls its `reward_funcs`.

Each function is called once per batch of completions with keyword arguments: `prompts` (the task's prompt as
its dataset gave it: a string, or the chat messages), `completions` (the decoded text, or for a chat prompt
`[{"role": "assistant", "content": text}]`), `completion_ids` (the sampled token ids, stop token included) and
every other column of the dataset as a list with one value per completion (None where a row lacks it). It
returns one reward per completion, or None where it does not apply (NaN counts as None). The task reward is
the weighted sum over the functions that apply, 0 when none does: TRL's `nansum(rewards * weights)`.

TRL's `trainer_state` is not passed: work is judged by validators that train nothing, and a reward that moved
with training progress could not be recomputed by them.

Only trusted nodes call them (trainer and validators); a worker's file is judged on every node with the same
inputs, so a function must be deterministic. A call that raises, or returns something that is not one reward
per completion, is retried one completion at a time; a completion whose own call still fails gets None from
that function (logged), so no completion can crash a validator or the trainer.
"""

from __future__ import annotations

import copy
import logging
import math
import numbers
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from swarmrl.configs.tasks import TasksConfig
from swarmrl.entrypoints import EntryError, LoadedEntry, check_pin, load_entry
from swarmrl.tasks.task import Task

log = logging.getLogger(__name__)

WHAT = "reward function"
# Keyword arguments every call carries; a dataset column may not take one of these names.
RESERVED_COLUMNS = frozenset({"prompt", "prompts", "completion", "completions", "completion_ids"})


def loaded_reward_functions(config: TasksConfig) -> list[LoadedEntry]:
    """Import every configured reward function; EntryError naming the first that is missing or not callable."""
    loaded = []
    for entry in config.reward_functions:
        function = load_entry(entry, WHAT)
        if not callable(function.value):
            raise EntryError(f"{WHAT} {entry!r} is not callable")
        loaded.append(function)
    return loaded


def pin_reward_functions(config: TasksConfig) -> dict[str, str]:
    """The source hash of every reward function, as a run records it; a hash the config already records must
    match the code here (a prepared run's config handed on is checked, not re-pinned)."""
    pins = {}
    for function in loaded_reward_functions(config):
        recorded = config.reward_function_hashes.get(function.entry)
        if recorded is not None:
            check_pin(function, recorded, WHAT)
        pins[function.entry] = function.source_hash
    return pins


@dataclass(frozen=True)
class _Function:
    entry: str
    call: Callable[..., Any]
    weight: float


class RewardFunctions:
    """The run's reward functions, each checked against the source hash its config pinned; thread-safe (calls
    run one at a time, since user code need not be)."""

    def __init__(self, config: TasksConfig) -> None:
        functions = loaded_reward_functions(config)
        for function in functions:
            check_pin(function, config.reward_function_hashes.get(function.entry), WHAT)
        self._functions = [
            _Function(f.entry, f.value, weight)  # type: ignore[arg-type]
            for f, weight in zip(functions, config.weights, strict=True)
        ]
        self._lock = threading.Lock()

    def score(
        self, tasks: Sequence[Task], texts: Sequence[str], completion_ids: Sequence[Sequence[int]]
    ) -> list[float]:
        """The task reward of each completion: Σ weight · reward over the functions that apply to it."""
        totals = [0.0] * len(tasks)
        with self._lock:
            for function in self._functions:
                for i, reward in enumerate(self._rewards(function, tasks, texts, completion_ids)):
                    if reward is not None:
                        totals[i] += function.weight * reward
        return totals

    def _rewards(
        self,
        function: _Function,
        tasks: Sequence[Task],
        texts: Sequence[str],
        completion_ids: Sequence[Sequence[int]],
    ) -> list[float | None]:
        try:
            return _call(function, trl_arguments(tasks, texts, completion_ids), len(tasks))
        except Exception as exc:  # noqa: BLE001 — user code: fall back to one completion per call
            log.warning(
                "%s %s failed on a batch of %d (%s); scoring one at a time",
                WHAT,
                function.entry,
                len(tasks),
                exc,
            )
        rewards: list[float | None] = []
        for i in range(len(tasks)):
            try:
                rewards += _call(
                    function, trl_arguments(tasks[i : i + 1], texts[i : i + 1], completion_ids[i : i + 1]), 1
                )
            except Exception as exc:  # noqa: BLE001
                log.warning(
                    "%s %s failed on task %s: %s; it does not apply there",
                    WHAT,
                    function.entry,
                    tasks[i].task_id,
                    exc,
                )
                rewards.append(None)
        return rewards


def trl_arguments(
    tasks: Sequence[Task], texts: Sequence[str], completion_ids: Sequence[Sequence[int]]
) -> dict[str, list[Any]]:
    """The keyword arguments of one call, as TRL builds them (copies: a function may change what it gets)."""
    columns: dict[str, None] = {}
    for task in tasks:
        columns.update(dict.fromkeys(name for name in task.verification_info if name not in RESERVED_COLUMNS))
    return {
        "prompts": [copy.deepcopy(list(t.messages)) if t.messages is not None else t.prompt for t in tasks],
        "completions": [
            [{"role": "assistant", "content": text}] if task.messages is not None else text
            for task, text in zip(tasks, texts, strict=True)
        ],
        "completion_ids": [list(ids) for ids in completion_ids],
        **{name: [copy.deepcopy(t.verification_info.get(name)) for t in tasks] for name in columns},
    }


def _call(function: _Function, arguments: dict[str, list[Any]], count: int) -> list[float | None]:
    values = function.call(**arguments)
    if isinstance(values, str | bytes) or not isinstance(values, Sequence) or len(values) != count:
        raise TypeError(f"returned {type(values).__name__}, not a list of {count} rewards")
    return [_reward(value) for value in values]


def _reward(value: object) -> float | None:
    if value is None:
        return None
    if not isinstance(value, numbers.Real):
        raise TypeError(f"returned {value!r}, not a number or None")
    reward = float(value)
    if math.isnan(reward):
        return None
    if math.isinf(reward):
        raise ValueError(f"returned {reward}, not a finite number")
    return reward
