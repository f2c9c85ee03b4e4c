"""Reward functions from your own modules, called the way TRL's GRPOTrainer calls its `reward_funcs`.

Each function is called once per batch of completions with keyword arguments: `prompts` (the task's prompt as
its dataset gave it: a string, or the chat messages), `completions` (the decoded text, or for a chat prompt
`[{"role": "assistant", "content": text}]`), `completion_ids` (the sampled token ids, stop token included),
`trainer_state` (`JudgeState`: what of TRL's TrainerState every judge computes alike), `log_metric` and
`log_extra` (TRL's logging hooks), and every other column of the dataset as a list with one value per
completion (None where a row lacks it). It returns one reward per completion, or None where it does not apply
(NaN counts as None). An `async def` function is awaited, as TRL awaits it. The task reward is the weighted sum
over the functions that apply, 0 when none does: TRL's `nansum(rewards * weights)`.

Only trusted nodes call them (trainer and validators); a worker's file is judged on every node with the same
inputs, so a function must be deterministic. A call that raises, or returns something that is not one reward
per completion, is retried one completion at a time; a completion whose own call still fails gets None from
that function and counts as a failure of it (`Scores.failures`): the trainer stops the run when a function
fails on more than `tasks.reward_failure_share` of a step's completions. Failures are logged once per function
and batch, not once per completion.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import inspect
import logging
import math
import numbers
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmrl.configs.run import RunConfig
from swarmrl.configs.tasks import TasksConfig
from swarmrl.entrypoints import EntryError, LoadedEntry, check_pin, load_entry
from swarmrl.tasks.task import Task

log = logging.getLogger(__name__)

WHAT = "reward function"
# TRL's hooks: `log_metric(name, value)` and `log_extra(column, values)`; they shape no reward.
HOOKS = ("log_metric", "log_extra")
# Keyword arguments every call carries; a dataset column may not take one of these names.
CALL_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state", *HOOKS)
RESERVED_COLUMNS = frozenset({"prompt", "completion", *CALL_ARGUMENTS})
# TRL's own metric names: rewards/<name>/mean and rewards/<name>/std (and ours: rewards/<name>/failed).
METRIC_PREFIX = "rewards/"


class RewardFunctionError(EntryError):
    """A reward function cannot score this run's completions: refused by name, in one line."""


@dataclass(frozen=True)
class JudgeState:
    """`trainer_state`: the fields of TRL's `TrainerState` that every judge of a completion computes alike
    from the signed rollout and the run config. Any other field (log_history, best_metric, total_flos, ...)
    moves with one trainer's history, which a validator does not have: reading it raises, naming it."""

    global_step: (
        int  # the policy step that generated the completion: TRL's optimizer steps done at generation
    )
    max_steps: int  # trainer.steps
    epoch: (
        float  # global_step × trainer.prompts_per_step ÷ tasks in the run's source (TRL's epoch, unfiltered)
    )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"trainer_state.{name} is not passed: swarmrl passes global_step, max_steps and epoch, which every "
            "validator computes alike; the rest of TRL's TrainerState is one trainer's history"
        )


@dataclass(frozen=True)
class RunSchedule:
    """How long the run is: turns a completion's policy step into its `JudgeState`."""

    max_steps: int
    prompts_per_step: int
    num_tasks: int

    @classmethod
    def of(cls, config: RunConfig, num_tasks: int) -> RunSchedule:
        return cls(config.trainer.steps, config.trainer.prompts_per_step, num_tasks)

    def state(self, policy_step: int) -> JudgeState:
        epoch = policy_step * self.prompts_per_step / max(1, self.num_tasks)
        return JudgeState(policy_step, self.max_steps, epoch)


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


def metric_names(entries: Sequence[str]) -> list[str]:
    """The name each function's metrics go under: its attribute (`mod:correct` → `correct`), the whole entry
    where two share one; characters a metric name may not hold become `_`."""
    short = [entry.partition(":")[2].rsplit(".", 1)[-1] for entry in entries]
    names = [s if short.count(s) == 1 else entry for s, entry in zip(short, entries, strict=True)]
    return [re.sub(r"[^A-Za-z0-9_.@:-]", "_", name)[:48] for name in names]


@dataclass(frozen=True)
class Function:
    entry: str
    name: str  # in metrics: rewards/<name>/mean
    call: Callable[..., Any]
    weight: float


@dataclass
class Scores:
    """What the functions gave a batch: per function (by metric name) each completion's reward (None: does
    not apply, or failed), the completions it failed on with why, and the weighted totals."""

    totals: list[float]
    rewards: dict[str, list[float | None]] = field(default_factory=dict)
    failures: dict[str, dict[int, str]] = field(default_factory=dict)


class _Hooks:
    """TRL's `log_metric` / `log_extra` for one call: what a function logs is kept at debug level."""

    def __init__(self, name: str) -> None:
        self.name = name

    def log_metric(self, metric: str, value: float) -> None:
        log.debug("%s %s logged %s = %s", WHAT, self.name, metric, value)

    def log_extra(self, column: str, values: list) -> None:
        log.debug("%s %s logged column %s (%d values)", WHAT, self.name, column, len(values))


class RewardFunctions:
    """The run's reward functions, each checked against the source hash its config pinned; thread-safe (calls
    run one at a time, since user code need not be)."""

    def __init__(self, config: TasksConfig) -> None:
        functions = loaded_reward_functions(config)
        for function in functions:
            check_pin(function, config.reward_function_hashes.get(function.entry), WHAT)
        names = metric_names([f.entry for f in functions])
        self.functions = [
            Function(f.entry, name, f.value, weight)  # type: ignore[arg-type]
            for f, name, weight in zip(functions, names, config.weights, strict=True)
        ]
        self._lock = threading.Lock()

    def score(
        self,
        tasks: Sequence[Task],
        texts: Sequence[str],
        completion_ids: Sequence[Sequence[int]],
        states: Sequence[JudgeState | None] | None = None,
    ) -> Scores:
        """Each function's reward of each completion, and the totals Σ weight · reward over those that apply.
        `states`: each completion's `trainer_state` (None where no policy step is known)."""
        states = list(states) if states is not None else [None] * len(tasks)
        scores = Scores([0.0] * len(tasks))
        with self._lock:
            for function in self.functions:
                rewards, failed = self._rewards(function, tasks, texts, completion_ids, states)
                scores.rewards[function.name], scores.failures[function.name] = rewards, failed
                for i, reward in enumerate(rewards):
                    if reward is not None:
                        scores.totals[i] += function.weight * reward
        return scores

    def _rewards(
        self,
        function: Function,
        tasks: Sequence[Task],
        texts: Sequence[str],
        completion_ids: Sequence[Sequence[int]],
        states: list[JudgeState | None],
    ) -> tuple[list[float | None], dict[int, str]]:
        """(rewards, {index of a completion it failed on: why}): one call per run of completions that share a
        policy step, a failed call retried one completion at a time."""
        rewards: list[float | None] = []
        failed: dict[int, str] = {}
        for start, end in _same_state_runs(states):
            part = slice(start, end)
            arguments = trl_arguments(tasks[part], texts[part], completion_ids[part], states[start])
            try:
                rewards += call_function(function, arguments, end - start)
                continue
            except Exception as exc:  # noqa: BLE001 — user code: fall back to one completion per call
                log.debug("%s %s failed on a batch of %d (%s)", WHAT, function.entry, end - start, exc)
            for i in range(start, end):
                one = trl_arguments(tasks[i : i + 1], texts[i : i + 1], completion_ids[i : i + 1], states[i])
                try:
                    rewards += call_function(function, one, 1)
                except Exception as exc:  # noqa: BLE001
                    failed[i] = f"{describe_error(exc)} (task {tasks[i].task_id})"
                    rewards.append(None)
        if failed:
            log.warning(
                "%s %s failed on %d of %d completions (they get None from it); first: %s",
                WHAT,
                function.entry,
                len(failed),
                len(tasks),
                next(iter(failed.values())),
            )
        return rewards, failed


def _same_state_runs(states: Sequence[JudgeState | None]) -> list[tuple[int, int]]:
    """[start, end) of each run of consecutive completions with the same state (one call each)."""
    runs: list[tuple[int, int]] = []
    for i, state in enumerate(states):
        if runs and states[runs[-1][0]] == state:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def describe_error(exc: BaseException) -> str:
    """`Type: message` on one line, at most 300 characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 300 else text[:299] + "…"


def trl_arguments(
    tasks: Sequence[Task],
    texts: Sequence[str],
    completion_ids: Sequence[Sequence[int]],
    state: JudgeState | None = None,
) -> dict[str, Any]:
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
        "trainer_state": state if state is not None else NO_STATE,
        **{name: [copy.deepcopy(t.verification_info.get(name)) for t in tasks] for name in columns},
    }


class _NoState:
    """`trainer_state` where no policy step is known (held-out evaluation): reading it raises, saying so."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"trainer_state.{name}: no policy step is known where this completion is scored")


NO_STATE = _NoState()


def call_function(function: Function, arguments: dict[str, Any], count: int) -> list[float | None]:
    """One call of `function` (awaited if it is a coroutine function) and its rewards, checked; raises
    TypeError or ValueError naming what it returned when that is not `count` rewards."""
    hooks = _Hooks(function.name)
    values = function.call(**arguments, log_metric=hooks.log_metric, log_extra=hooks.log_extra)
    if inspect.isawaitable(values):
        values = awaited(values)
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise TypeError(f"returned {type(values).__name__}, not a list of {count} rewards")
    if len(values) != count:
        raise ValueError(f"returned {len(values)} rewards for {count} completions")
    return [_reward(value) for value in values]


def awaited(awaitable: Any) -> Any:
    """The result of an awaitable, run on an event loop of its own (a thread's, when this one runs a loop)."""

    async def wait() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="reward-await") as pool:
        return pool.submit(asyncio.run, wait()).result()


def _reward(value: object) -> float | None:
    if value is None:
        return None
    if not isinstance(value, numbers.Real):
        raise TypeError(f"returned {value!r} ({type(value).__name__}), not a number or None")
    reward = float(value)
    if math.isnan(reward):
        return None
    if math.isinf(reward):
        raise ValueError(f"returned {reward}, not a finite number")
    return reward
