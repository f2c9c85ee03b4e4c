"""The numbers of a held-out evaluation and how they appear in metrics.jsonl (no model code: readers of a
run's metrics, such as the report, import this without torch).

An eval record is its own metrics line, `{"step": s, "time": t, "eval/avg@k": .., "eval/pass@k": .., ...}`
with k the number itself (`eval/avg@4`), next to the trainer's per-step lines.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EVAL_PREFIX = "eval/"


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task from n samples of which c are correct (Chen et al. 2021):
    1 - C(n-c, k) / C(n, k), the chance that k samples drawn from the n without replacement hold a correct one."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n} c={c} k={k}")
    if n - c < k:  # every draw of k includes a correct sample (and C(n-c, k) would be 0 anyway)
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def avg_at_k(correct: Sequence[int], k: int) -> float:
    """Mean accuracy over k samples per task, averaged over tasks (`correct[i]` of task i's k are right)."""
    if not correct or k < 1 or any(not 0 <= c <= k for c in correct):
        raise ValueError(f"avg@k needs at least one task and 0 <= correct <= k={k}, got {list(correct)}")
    return sum(correct) / (k * len(correct))


@dataclass(frozen=True)
class EvalResult:
    accuracy: float  # avg@k: share of completions whose task reward is 1
    pass_at_k: float  # mean over tasks of pass@k
    samples_per_task: int  # k
    mean_reward: float
    completions: int
    mean_completion_tokens: float

    @classmethod
    def from_counts(
        cls, correct: Sequence[int], k: int, *, mean_reward: float, mean_completion_tokens: float
    ) -> EvalResult:
        """The result of len(correct) tasks sampled k times each, `correct[i]` of task i's samples right."""
        return cls(
            accuracy=avg_at_k(correct, k),
            pass_at_k=sum(pass_at_k(k, c, k) for c in correct) / len(correct),
            samples_per_task=k,
            mean_reward=mean_reward,
            completions=k * len(correct),
            mean_completion_tokens=mean_completion_tokens,
        )


def eval_record(step: int, result: EvalResult, seconds: float) -> dict[str, Any]:
    """The metrics line of an eval of policy `step`."""
    k = result.samples_per_task
    return {
        "step": step,
        "time": time.time(),
        f"{EVAL_PREFIX}avg@{k}": result.accuracy,
        f"{EVAL_PREFIX}pass@{k}": result.pass_at_k,
        f"{EVAL_PREFIX}mean_reward": result.mean_reward,
        f"{EVAL_PREFIX}completion_tokens": result.mean_completion_tokens,
        f"{EVAL_PREFIX}completions": float(result.completions),
        f"{EVAL_PREFIX}seconds": seconds,
    }


def is_eval_record(record: Mapping[str, Any]) -> bool:
    return any(key.startswith(EVAL_PREFIX) for key in record)


def at_k_scores(record: dict[str, Any]) -> dict[str, float]:
    """An eval record's avg@k and pass@k by name (`{"avg@4": .., "pass@4": ..}`); empty for a step record."""
    return {
        key.removeprefix(EVAL_PREFIX): float(value)
        for key, value in record.items()
        if key.startswith(EVAL_PREFIX) and "@" in key
    }
