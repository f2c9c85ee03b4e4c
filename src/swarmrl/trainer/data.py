"""Collect the rollouts of one training step, scored by a trusted scorer.

Where the files come from is a `RolloutSource`: the run directory of a local run (`RunDirSource`), or the
accepted submissions of a swarm (`swarmrl.trainer.swarm_source.AcceptedSubmissions`). Files are read with the untrusted-file checks, rows from a policy older than `step - async_level` are
refused (and said so), and zero-advantage groups are dropped until enough informative groups are in
(DAPO's dynamic sampling). With a `FileAudit` (a swarm trainer) every file also passes the trainer's own checks
before it trains: a file that fails them is refused and reported, so a file no validator judged still never
trains unchecked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from swarmrl.errors import UserError
from swarmrl.rollouts import (
    RolloutError,
    RolloutHeader,
    RolloutLimits,
    RolloutRow,
    ScoredRow,
    read_header,
    read_rollouts,
)
from swarmrl.rollouts.advantages import GroupVerdict, OnlineFilter
from swarmrl.rollouts.checks import CheckFailed
from swarmrl.trainer.reward_tally import RewardTally

log = logging.getLogger(__name__)

# rows → trusted scored rows; a FileAudit may hand it more per file (`scoring`: a pack unit's tasks and rewards)
Scorer = Callable[..., list[ScoredRow]]
WITHDRAWN = "withdrawn"  # a file that passed the trainer's checks but whose node's work was voided meanwhile


class NotEnoughRollouts(UserError):
    """No usable rollouts arrived for a step within the configured wait (workers down or too slow for
    `max_wait_seconds`, or tasks the policy always or never solves): the run ends saying which."""


@dataclass
class CollectStats:
    files: int = 0
    refused_files: int = 0
    stale_rows: int = 0
    groups_seen: int = 0
    groups_dropped: int = 0
    policy_lag: list[int] = field(default_factory=list)
    wait_seconds: float = 0.0
    sampled_reward_sum: float = 0.0  # over every row of every group offered, kept or dropped
    sampled_rows: int = 0
    # file name → "trained" (rows offered to the step) | "stale" | "refused": what the step did with each file
    outcomes: dict[str, str] = field(default_factory=dict)
    rows_used: dict[str, int] = field(default_factory=dict)
    groups_kept: dict[str, int] = field(default_factory=dict)  # file name → its informative groups trained on
    rewards: RewardTally = field(default_factory=RewardTally)  # per reward function, over every row offered

    @property
    def dropped_fraction(self) -> float:
        return self.groups_dropped / self.groups_seen if self.groups_seen else 0.0

    @property
    def sampled_reward(self) -> float:
        """Mean reward of the policy's samples before the online filter: what the policy really scores."""
        return self.sampled_reward_sum / self.sampled_rows if self.sampled_rows else 0.0


def group_rows(rows: list[ScoredRow], group_size: int) -> list[list[ScoredRow]]:
    """Rows of one file grouped by group id; a group of the wrong size is a malformed file."""
    groups: dict[int, list[ScoredRow]] = {}
    for row in rows:
        groups.setdefault(row.group_id, []).append(row)
    for group_id, members in groups.items():
        if len(members) != group_size:
            raise RolloutError(f"group {group_id} has {len(members)} completions, expected {group_size}")
        if len({(m.task_id, m.prompt_index) for m in members}) != 1:
            raise RolloutError(f"group {group_id} mixes prompts")
    return [groups[g] for g in sorted(groups)]


def expiring_first(paths: list[Path], limits: RolloutLimits) -> list[Path]:
    """Files whose policy leaves the async window soonest first (a file's policy step, from its header; given
    order among equals). A step takes files until it has enough groups and the rest wait for the next step,
    where a file of the oldest policy still allowed now would be too old: taking files in arrival order, a
    step could leave that one behind and train on a newer one that would still be in the window later. A
    file whose header cannot be read goes first; reading it in full names its problem."""

    def policy_step(path: Path) -> int:
        try:
            return read_header(path, limits).policy_step
        except RolloutError:
            return -1

    return sorted(paths, key=policy_step)


class RolloutSource(Protocol):
    def open_step(self, step: int) -> None:
        """The trainer starts collecting `step`: let producers know."""

    def new_files(self, step: int, seen: set[str], prompts_wanted: int) -> list[Path]:
        """Files for `step` whose names are not in `seen`, in a stable order; the step still wants about
        `prompts_wanted` prompts' groups (an estimate a source may use to size what it asks producers for)."""

    def wait_for_files(self, step: int, seconds: float) -> None:
        """Return once new files for `step` may be there (at once if the source can tell), after at most
        `seconds`."""

    def close_step(self, step: int, summary: dict[str, Any], next_prompts: int) -> None:
        """`step` has all the data it will use: producers move on; the next step is expected to want about
        `next_prompts` prompts."""

    def should_stop(self) -> bool: ...


class FileAudit(Protocol):
    """The trainer's own checks of each file beyond schema and policy age, and where their outcome goes (a swarm
    trainer checks origin, assignment and claims, and reports what it measured to the coordinator)."""

    def check(self, path: Path, header: RolloutHeader, rows: list[RolloutRow]) -> None:
        """Raise CheckFailed naming the first check the file fails."""

    def passed(self, path: Path, rows: list[RolloutRow]) -> bool:
        """The file passed every check (its rewards recomputed): report it; False if it may not be used after
        all (its node's work was voided meanwhile)."""

    def failed(self, path: Path, failure: CheckFailed) -> None:
        """The file failed `failure.check`: report it; it is never trained on."""

    def scoring(self, path: Path, rows: list[RolloutRow]) -> dict[str, Any]:
        """What the trusted scorer needs besides the rows for this file (a community pack's unit: its tasks and
        the pack verifier's rewards); empty for a file of the run's own tasks."""


class RolloutFeed:
    def __init__(
        self,
        source: RolloutSource,
        scorer: Scorer,
        *,
        async_level: int,
        group_size: int,
        limits: RolloutLimits,
        max_files: int,
        poll_seconds: float = 0.1,
        audit: FileAudit | None = None,
        reward_failure_share: float = 1.0,
    ) -> None:
        self.source = source
        self.scorer = scorer
        self.audit = audit
        self.async_level = async_level
        self.group_size = group_size
        self.limits = limits
        self.max_files = max_files
        self.poll_seconds = poll_seconds
        self.reward_failure_share = reward_failure_share

    def collect(
        self, step: int, num_groups: int, max_wait_seconds: float
    ) -> tuple[list[ScoredRow], CollectStats]:
        stats = CollectStats()
        accumulator: OnlineFilter[list[ScoredRow]] = OnlineFilter(num_groups)
        seen: set[str] = set()
        start = last_progress = time.monotonic()
        self.source.open_step(step)
        while not accumulator.full:
            new = self.source.new_files(step, seen, accumulator.prompts_to_fill())
            for path in expiring_first(new, self.limits):
                if len(seen) >= self.max_files:
                    raise NotEnoughRollouts(
                        f"step {step}: only {len(accumulator.groups)}/{num_groups} informative groups in "
                        f"{len(seen)} files ({accumulator.dropped} groups had equal rewards): the tasks are too "
                        "easy or too hard for this policy"
                    )
                seen.add(path.name)
                self._ingest(path, step, accumulator, stats)
                last_progress = time.monotonic()
                if accumulator.full:
                    break
            if accumulator.full:
                break
            if self.source.should_stop():
                raise NotEnoughRollouts(f"run stopped while step {step} was collecting")
            if time.monotonic() - last_progress > max_wait_seconds:
                raise NotEnoughRollouts(
                    f"step {step}: {len(accumulator.groups)}/{num_groups} informative groups after waiting "
                    f"{max_wait_seconds:.0f}s with no new rollout file"
                )
            self.source.wait_for_files(step, self.poll_seconds)
        stats.wait_seconds = time.monotonic() - start
        stats.groups_seen, stats.groups_dropped = accumulator.seen, accumulator.dropped
        self.source.close_step(
            step,
            {
                "files": stats.files,
                "groups": num_groups,
                "outcomes": stats.outcomes,
                "rows_used": stats.rows_used,
                "groups_kept": stats.groups_kept,
                "groups_seen": accumulator.seen,
                "groups_dropped": accumulator.dropped,
            },
            accumulator.prompts_for(num_groups),  # the next step, at this step's informative rate
        )
        return [row for group in accumulator.groups for row in group], stats

    def _ingest(
        self, path, step: int, accumulator: OnlineFilter[list[ScoredRow]], stats: CollectStats
    ) -> None:
        try:
            header, rows, groups = self._admit(path, step)
        except CheckFailed as failure:
            stats.refused_files += 1
            stats.outcomes[path.name] = "refused"
            log.warning("refusing %s: %s", path.name, failure)
            if self.audit is not None and failure.check != WITHDRAWN:
                self.audit.failed(path, failure)
            return
        if groups is None:
            stats.refused_files += 1
            stats.outcomes[path.name] = "stale"
            stats.stale_rows += len(rows)
            log.warning(
                "refusing %s: policy step %d is older than step %d - async_level %d",
                path.name,
                header.policy_step,
                step,
                self.async_level,
            )
            return
        stats.files += 1
        stats.outcomes[path.name] = "trained"
        stats.rows_used[path.name] = stats.groups_kept[path.name] = 0
        stats.policy_lag.extend([step - header.policy_step] * len(groups))
        for group in groups:
            if accumulator.full:
                break
            stats.sampled_reward_sum += sum(row.reward for row in group)
            stats.sampled_rows += len(group)
            stats.rows_used[path.name] += len(group)
            stats.rewards.add(group)
            if accumulator.add(group, [row.reward for row in group]) is GroupVerdict.KEPT:
                stats.groups_kept[path.name] += 1
        stats.rewards.check(step + 1, self.reward_failure_share)  # the policy step these rows train

    def _admit(
        self, path: Path, step: int
    ) -> tuple[RolloutHeader, list[RolloutRow], list[list[ScoredRow]] | None]:
        """The file read and checked, its groups scored by the trusted scorer (None: too old a policy for
        `step`, a soft refusal); raises CheckFailed for a file that must not train."""
        try:
            header, rows = read_rollouts(path, self.limits)
        except RolloutError as exc:
            raise CheckFailed("schema_and_signature", str(exc)) from exc
        if self.audit is not None:
            self.audit.check(path, header, rows)
        groups = None
        if header.policy_step >= step - self.async_level:
            try:
                scoring = self.audit.scoring(path, rows) if self.audit is not None else {}
                groups = group_rows(self.scorer(rows, **scoring), self.group_size)
            except RolloutError as exc:
                raise CheckFailed("rewards", str(exc)) from exc
        if self.audit is not None and not self.audit.passed(path, rows):
            raise CheckFailed(WITHDRAWN, "the coordinator voided this file's work meanwhile")
        return header, rows, groups
