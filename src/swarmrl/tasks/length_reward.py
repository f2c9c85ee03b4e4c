"""Length-target rewards (SPEC §3): pure functions of the task reward r, target T and length L."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from swarmrl.tasks.errors import TaskError


def exact_length_reward(task_reward: float, target: int, length: int, alpha: float = 0.0003) -> float:
    """INTELLECT-2's reward: r − α|T − L|."""
    return task_reward - alpha * abs(target - length)


def max_length_reward(task_reward: float, target: int, length: int, alpha: float = 0.0003) -> float:
    """r · clip(α(T − L) + 0.5, 0, 1): full credit well under the target, none well over it."""
    return task_reward * min(1.0, max(0.0, alpha * (target - length) + 0.5))


def clip_length_reward(task_reward: float, target: int, length: int) -> float:
    """r if L ≤ T else 0."""
    return task_reward if length <= target else 0.0


def length_shaped_reward(
    mode: str, task_reward: float, target: int | None, length: int, alpha: float
) -> float:
    """Dispatch on mode; with mode 'none' or no target the task reward passes through unchanged."""
    if mode == "none" or target is None or target < 0:
        return task_reward
    if length < 0:
        raise TaskError(f"completion length must be non-negative, got {length}")
    if mode == "exact":
        return exact_length_reward(task_reward, target, length, alpha)
    if mode == "max":
        return max_length_reward(task_reward, target, length, alpha)
    if mode == "clip":
        return clip_length_reward(task_reward, target, length)
    raise TaskError(f"unknown length reward mode {mode!r}")


def sample_target_length(targets: Sequence[int], seed: int, *keys: int | str) -> int:
    """A target drawn uniformly from `targets`, a pure function of (seed, keys) so every node agrees."""
    if not targets:
        raise TaskError("target length list is empty")
    material = "/".join(str(part) for part in (seed, *keys)).encode()
    draw = int.from_bytes(hashlib.sha256(material).digest()[:8], "big")
    return int(targets[draw % len(targets)])


def add_length_instruction(prompt: str, target: int, suffix: str = "Think for {target} tokens.") -> str:
    """The prompt with the length instruction appended on its own line."""
    return f"{prompt.rstrip()}\n{suffix.format(target=target)}"
