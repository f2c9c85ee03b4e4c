"""Group-relative advantages and DAPO's online filter of uninformative groups.

Rewards come in groups of G completions of one prompt, laid out group after group: a flat [N·G] tensor or
[N, G]. Advantages are returned in the layout they came in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Generic, Literal, TypeVar

import torch
from torch import Tensor

AdvantageKind = Literal["grpo", "dr_grpo"]


class AdvantageError(ValueError):
    """Rewards that cannot be split into groups of the given size, or that are not finite numbers."""


def grpo_advantages(
    rewards: Tensor | Sequence[float], group_size: int, *, kind: AdvantageKind = "grpo", eps: float = 1e-6
) -> Tensor:
    """GRPO: Â_i = (r_i − mean(r)) / (std(r) + eps); Dr.GRPO: Â_i = r_i − mean(r); both within each group.

    std is the population standard deviation (divide by G, not G − 1): the group is the whole set being
    standardised, not a sample of a wider one, so rewards {1, 0, 0, 1} get Â = ±0.5 / (0.5 + eps) ≈ ±1.
    A group whose rewards are all equal gets Â = 0 exactly.
    """
    grouped = _as_groups(rewards, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if kind == "grpo":
        advantages = centred / (grouped.std(dim=1, unbiased=False, keepdim=True) + eps)
    elif kind == "dr_grpo":
        advantages = centred
    else:
        raise AdvantageError(f"unknown advantage kind {kind!r}")
    # Equal rewards can leave rounding noise in the mean; such a group carries no signal at all.
    advantages = torch.where(informative_groups(grouped, group_size).unsqueeze(-1), advantages, 0.0)
    return advantages.reshape(_shape_of(rewards))


def informative_groups(rewards: Tensor | Sequence[float], group_size: int) -> Tensor:
    """[N] bool: True for groups whose rewards are not all equal (the only ones with non-zero advantage)."""
    grouped = _as_groups(rewards, group_size)
    return grouped.amax(dim=1) > grouped.amin(dim=1)


class GroupVerdict(StrEnum):
    KEPT = "kept"
    UNINFORMATIVE = "uninformative"  # all rewards equal: zero advantage, dropped
    OVERFLOW = "overflow"  # the filter was already full: not stored, not counted as seen


GroupT = TypeVar("GroupT")


class OnlineFilter(Generic[GroupT]):
    """DAPO dynamic sampling: keep groups with differing rewards until `target_groups` of them are in.

    Pure bookkeeping: the caller decides where groups come from and what a group is (`GroupT`).
    """

    def __init__(self, target_groups: int) -> None:
        if target_groups < 1:
            raise AdvantageError(f"target_groups must be >= 1, got {target_groups}")
        self.target_groups = target_groups
        self.groups: list[GroupT] = []
        self.seen = 0
        self.dropped = 0
        self.overflow = 0

    @property
    def full(self) -> bool:
        return len(self.groups) >= self.target_groups

    @property
    def dropped_fraction(self) -> float:
        """Share of the groups offered before the filter filled that were dropped as uninformative."""
        return self.dropped / self.seen if self.seen else 0.0

    def prompts_for(self, groups: int) -> int:
        """Prompts to sample for `groups` informative groups, at the informative rate seen so far."""
        return prompts_for_groups(groups, self.seen, self.seen - self.dropped)

    def prompts_to_fill(self) -> int:
        """Prompts to sample for the groups still missing."""
        return self.prompts_for(self.target_groups - len(self.groups))

    def add(self, group: GroupT, rewards: Sequence[float]) -> GroupVerdict:
        values = [float(r) for r in rewards]
        if not values:
            raise AdvantageError("a group has no rewards")
        if not all(math.isfinite(v) for v in values):
            raise AdvantageError(f"a group has a non-finite reward: {values}")
        if self.full:
            self.overflow += 1
            return GroupVerdict.OVERFLOW
        self.seen += 1
        if max(values) == min(values):
            self.dropped += 1
            return GroupVerdict.UNINFORMATIVE
        self.groups.append(group)
        return GroupVerdict.KEPT


# Below this informative rate a request is sized as if it were this one: a policy whose groups all agree is
# given more prompts round by round (until the trainer's max_files_per_step gives up), not all at once.
MIN_INFORMATIVE_RATE = 0.25


def prompts_for_groups(groups: int, seen: int, informative: int) -> int:
    """Prompts to sample for `groups` more informative groups when `informative` of the `seen` groups sampled
    so far had differing rewards; `groups` itself when nothing was seen yet (every group assumed informative).

    The rate is estimated as (informative + 1) / (seen + 2), so a step where every group counted still leaves
    room for one that does not; the answer n is the smallest whose expected informative count, less one
    binomial standard deviation, reaches `groups`: n·p − √(n·p·(1 − p)) ≥ groups. Asking for the mean alone
    would leave the trainer waiting on a top-up generation about every other step; asking for whole files
    generates groups no step trains on.
    """
    if groups <= 0:
        return 0
    if seen <= 0:
        return groups
    rate = max((informative + 1) / (seen + 2), MIN_INFORMATIVE_RATE)
    # n·p − √(n·p·q) = g is a quadratic in x = √n: p·x² − √(p·q)·x − g = 0.
    spread = math.sqrt(rate * (1 - rate))
    root = (spread + math.sqrt(spread * spread + 4 * rate * groups)) / (2 * rate)
    return max(groups, math.ceil(root * root - 1e-9))


def _as_groups(rewards: Tensor | Sequence[float], group_size: int) -> Tensor:
    if group_size < 1:
        raise AdvantageError(f"group_size must be >= 1, got {group_size}")
    values = rewards if isinstance(rewards, Tensor) else torch.tensor(list(rewards), dtype=torch.float32)
    if not values.is_floating_point():
        values = values.float()
    if values.dim() == 2:
        if values.shape[1] != group_size:
            raise AdvantageError(f"rewards have groups of {values.shape[1]}, expected {group_size}")
    elif values.dim() == 1:
        if values.numel() % group_size:
            raise AdvantageError(f"{values.numel()} rewards do not split into groups of {group_size}")
        values = values.view(-1, group_size)
    else:
        raise AdvantageError(f"rewards must be [N*G] or [N, G], got shape {tuple(values.shape)}")
    if not bool(torch.isfinite(values).all()):
        raise AdvantageError("rewards hold NaN or infinity")
    return values


def _shape_of(rewards: Tensor | Sequence[float]) -> tuple[int, ...]:
    return tuple(rewards.shape) if isinstance(rewards, Tensor) else (len(rewards),)
