"""One reward entry point: the task reward (the run's own reward functions, or else the verifier registered for
the task's type), then the length term."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from swarmrl.configs.tasks import TasksConfig
from swarmrl.tasks.code_verifier import CodeVerifier
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.length_reward import length_shaped_reward
from swarmrl.tasks.math_verifier import MathVerifier
from swarmrl.tasks.reasoning_gym_source import ReasoningGymVerifier
from swarmrl.tasks.reward_functions import JudgeState, RewardFunctions
from swarmrl.tasks.task import Task


class Verifier(Protocol):
    """Scores one completion of one task in [0, 1]. Must be thread-safe; may hold process pools."""

    task_type: str

    def score(self, task: Task, completion: str) -> float: ...


@dataclass(frozen=True)
class RewardBreakdown:
    task_reward: float
    length_term: float  # total − task_reward: what the length target added (≤ 0)
    total: float
    # With reward functions: each one's reward (by metric name; None where it does not apply or failed), and
    # the functions that failed on this completion, with why.
    functions: dict[str, float | None] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RewardRequest:
    task: Task
    completion_text: str
    num_completion_tokens: int
    target_length: int | None = None
    completion_ids: tuple[int, ...] = ()  # the sampled tokens, for reward functions that read them
    state: JudgeState | None = None  # the reward functions' `trainer_state` (None: no policy step known)


VerifierFactory = Callable[[TasksConfig], Verifier]
Verifiers = Mapping[str, VerifierFactory]


def verifier_registry(extra: Verifiers | None = None) -> Verifiers:
    """Every task type a reward can be computed for, and how its verifier is built from the tasks config:
    read-only, so no import can change how a run is judged. `extra` adds or replaces types, for a program that
    builds its own `RewardComputer` (a run's nodes score with `VERIFIERS`, and your own rewards go in
    `tasks.reward_functions`, where the run pins them)."""
    return MappingProxyType(
        {
            "math": lambda config: MathVerifier(config.math, config.extraction),
            "code": lambda config: CodeVerifier(config.code, config.extraction),
            "reasoning_gym": lambda config: ReasoningGymVerifier(config.extraction),
            **(extra or {}),
        }
    )


VERIFIERS = verifier_registry()


def verifier_types() -> set[str]:
    """The task types a reward can be computed for."""
    return set(VERIFIERS)


class RewardComputer:
    """Holds one verifier per task type (and their pools), or the run's reward functions, for a config;
    thread-safe. `verifiers`: the registry to build them from (default `VERIFIERS`)."""

    def __init__(self, config: TasksConfig, verifiers: Verifiers | None = None) -> None:
        self.config = config
        self._factories = VERIFIERS if verifiers is None else verifiers
        self._verifiers: dict[str, Verifier] = {}
        self._lock = threading.Lock()
        # Imported (and checked against the run's pins) once: a node whose code differs refuses at once.
        self._functions = RewardFunctions(config) if config.reward_functions else None

    def verifier(self, task_type: str) -> Verifier:
        with self._lock:
            if task_type not in self._verifiers:
                if task_type not in self._factories:
                    raise TaskError(f"no verifier registered for task_type {task_type!r}")
                self._verifiers[task_type] = self._factories[task_type](self.config)
            return self._verifiers[task_type]

    def task_reward(self, task: Task, completion_text: str, completion_ids: Sequence[int] = ()) -> float:
        """The reward of one completion before the length term."""
        if self._functions is not None:
            return self._functions.score([task], [completion_text], [completion_ids]).totals[0]
        return float(self.verifier(task.task_type).score(task, completion_text))

    def compute(
        self,
        task: Task,
        completion_text: str,
        *,
        num_completion_tokens: int,
        target_length: int | None = None,
    ) -> RewardBreakdown:
        return self._shaped(
            RewardRequest(task, completion_text, num_completion_tokens, target_length),
            self.task_reward(task, completion_text),
        )

    @property
    def functions(self) -> RewardFunctions | None:
        """The run's reward functions (None: the task types' verifiers score)."""
        return self._functions

    def _shaped(
        self,
        request: RewardRequest,
        task_reward: float,
        functions: dict[str, float | None] | None = None,
        failed: dict[str, str] | None = None,
    ) -> RewardBreakdown:
        length = self.config.length
        total = length_shaped_reward(
            length.mode, task_reward, request.target_length, request.num_completion_tokens, length.alpha
        )
        return RewardBreakdown(task_reward, total - task_reward, total, functions or {}, failed or {})

    def compute_batch(
        self, requests: Sequence[RewardRequest], max_concurrency: int | None = None
    ) -> list[RewardBreakdown]:
        """Rewards in request order: reward functions called once over the batch, or the verifiers' sandbox
        runs and math-verify calls concurrently in their pools."""
        if self._functions is not None:
            scores = self._functions.score(
                [r.task for r in requests],
                [r.completion_text for r in requests],
                [r.completion_ids for r in requests],
                [r.state for r in requests],
            )
            failed = [
                {name: where[i] for name, where in scores.failures.items() if i in where}
                for i in range(len(requests))
            ]
            return [
                self._shaped(
                    r, total, {name: rewards[i] for name, rewards in scores.rewards.items()}, failed[i]
                )
                for i, (r, total) in enumerate(zip(requests, scores.totals, strict=True))
            ]
        workers = max_concurrency or max(self.config.math.num_workers, self.config.code.num_workers)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reward") as pool:
            return list(
                pool.map(lambda r: self._shaped(r, self.task_reward(r.task, r.completion_text)), requests)
            )

    def close(self) -> None:
        with self._lock:
            for verifier in self._verifiers.values():
                close = getattr(verifier, "close", None)
                if close is not None:
                    close()
            self._verifiers.clear()


_COMPUTERS: dict[str, RewardComputer] = {}
_COMPUTERS_LOCK = threading.Lock()


def reward_computer(config: TasksConfig) -> RewardComputer:
    """The one shared `RewardComputer` of a tasks config (its verifiers and process pools are built once)."""
    key = config.model_dump_json()
    with _COMPUTERS_LOCK:
        if key not in _COMPUTERS:
            _COMPUTERS[key] = RewardComputer(config)
        return _COMPUTERS[key]


def compute_reward(
    task: Task,
    completion_text: str,
    *,
    num_completion_tokens: int,
    target_length: int | None,
    config: TasksConfig,
) -> RewardBreakdown:
    """Reward of one completion (verifiers and pools are shared per config within the process)."""
    return reward_computer(config).compute(
        task, completion_text, num_completion_tokens=num_completion_tokens, target_length=target_length
    )


def compute_rewards(requests: Sequence[RewardRequest], *, config: TasksConfig) -> list[RewardBreakdown]:
    """Batch version of `compute_reward`."""
    return reward_computer(config).compute_batch(requests)
