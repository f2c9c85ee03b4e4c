"""Build task sources from config, mix them by weight (deterministically by seed), filter by solve rate."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import assert_never

from swarmrl.configs.tasks import (
    ArithmeticSourceConfig,
    DatasetSourceConfig,
    PromptsSourceConfig,
    ReasoningGymSourceConfig,
    SourceConfig,
    TasksConfig,
)
from swarmrl.tasks.arithmetic import ArithmeticSource
from swarmrl.tasks.dataset_source import dataset_source
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.prompts_source import prompts_source
from swarmrl.tasks.reasoning_gym_source import ReasoningGymSource
from swarmrl.tasks.task import ListTaskSource, Task, TaskSource


class MixedTaskSource:
    """Weighted interleaving of several sources; position i maps to the same task on every node.

    A seeded draw picks the source of each position with probability proportional to its weight; each source
    is walked through a seeded permutation of its own indices and restarts (reshuffled) when exhausted.
    """

    def __init__(
        self,
        sources: Sequence[TaskSource],
        weights: Sequence[float],
        seed: int,
        length: int | None = None,
        name: str = "mixed",
    ) -> None:
        if not sources or len(sources) != len(weights):
            raise TaskError("a mix needs at least one source and one weight per source")
        if any(w <= 0 for w in weights) or any(len(s) == 0 for s in sources):
            raise TaskError("mix weights must be positive and sources non-empty")
        self._name = name
        self._sources = list(sources)
        total = length if length is not None else sum(len(s) for s in sources)
        rng = random.Random(seed)
        choices = rng.choices(range(len(sources)), weights=weights, k=total)
        orders: list[list[int]] = [[] for _ in sources]
        cursors = [0] * len(sources)
        self._plan: list[tuple[int, int]] = []
        for source_index in choices:
            if cursors[source_index] == len(orders[source_index]):
                orders[source_index] = random.Random(f"{seed}/{source_index}/{len(self._plan)}").sample(
                    range(len(sources[source_index])), len(sources[source_index])
                )
                cursors[source_index] = 0
            self._plan.append((source_index, orders[source_index][cursors[source_index]]))
            cursors[source_index] += 1

    @property
    def name(self) -> str:
        return self._name

    def __len__(self) -> int:
        return len(self._plan)

    def __getitem__(self, index: int) -> Task:
        if not 0 <= index < len(self._plan):
            raise IndexError(f"task index {index} out of range for {self._name} ({len(self)} tasks)")
        source_index, inner = self._plan[index]
        return self._sources[source_index][inner]


def build_source(config: SourceConfig, cache: Path | None = None) -> TaskSource:
    """`cache`: a directory where sources that are slow to draw keep what they drew (`ReasoningGymSource`)."""
    match config:
        case ReasoningGymSourceConfig():
            return ReasoningGymSource(config, cache)
        case ArithmeticSourceConfig():
            return _arithmetic(config, config.seed, config.size)
        case PromptsSourceConfig():
            return prompts_source(config)
        case DatasetSourceConfig():
            return dataset_source(config)
        case _:
            assert_never(config)


def _arithmetic(config: ArithmeticSourceConfig, seed: int, size: int) -> TaskSource:
    return ArithmeticSource(seed, size, config.digits, config.name)


def filter_by_solve_rate(
    source: TaskSource, low: float = 0.1, high: float = 0.8, keep_unmeasured: bool = False
) -> ListTaskSource:
    """Tasks whose solve_rate lies in [low, high] (INTELLECT-2: [0.1, 0.8]); unmeasured ones optionally."""
    if not 0.0 <= low <= high <= 1.0:
        raise TaskError(f"solve-rate band [{low}, {high}] is not inside [0, 1]")
    kept = [
        task
        for task in (source[i] for i in range(len(source)))
        if (task.solve_rate is None and keep_unmeasured)
        or (task.solve_rate is not None and low <= task.solve_rate <= high)
    ]
    return ListTaskSource(f"{source.name}[{low},{high}]", kept)


def build_tasks(config: TasksConfig, cache: Path | None = None) -> TaskSource:
    """The run's task source: every configured source, band-filtered if asked, mixed by weight."""
    sources: list[TaskSource] = [build_source(c, cache) for c in config.sources]
    if config.solve_rate_band is not None:
        kept: list[TaskSource] = [filter_by_solve_rate(s, *config.solve_rate_band) for s in sources]
        for source_config, source, band in zip(config.sources, sources, kept, strict=True):
            if len(band) == 0:
                raise TaskError(_empty_band_reason(source_config, source, config.solve_rate_band))
        sources = kept
    if len(sources) == 1:
        return sources[0]
    return MixedTaskSource(sources, [c.weight for c in config.sources], config.mix_seed)


def _empty_band_reason(config: SourceConfig, source: TaskSource, band: tuple[float, float]) -> str:
    if any(source[i].solve_rate is not None for i in range(len(source))):
        return f"the solve-rate band {list(band)} removed every task of source {source.name!r}"
    if isinstance(config, DatasetSourceConfig):
        return (
            f"source {source.name!r} has no solve rates: none of its rows holds any of the fields "
            f"{config.solve_rate_fields}; name the dataset's column in solve_rate_fields"
        )
    return (
        f"source {source.name!r} has no solve rates (reasoning-gym tasks carry none): measure them with "
        "`swarmrl filter` and load the written file as a dataset source"
    )


def heldout_sources(config: TasksConfig) -> list[TaskSource]:
    """The held-out split of every generated (reasoning-gym or arithmetic) source of the run (for evaluation)."""
    held: list[TaskSource] = []
    for c in config.sources:
        if isinstance(c, ReasoningGymSourceConfig):
            held.append(ReasoningGymSource(c.model_copy(update={"split": "eval"})))
        elif isinstance(c, ArithmeticSourceConfig):
            held.append(_arithmetic(c, c.eval_seed, c.eval_size))
    return held
