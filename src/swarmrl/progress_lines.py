"""Progress as plain lines, for output that is not a terminal (nohup, CI, a scheduler, `| tee`): a live table or
bar would print nothing there until it ends. One line per event (a policy step), and while something runs
between events (SFT steps, an eval, a wait for rollouts) its latest state every `interval` seconds, so no more
than that passes without a line. The trainer's log holds the same per-step line (`step_line`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from swarmrl.eval_metrics import is_eval_record

REWARDS_PREFIX = "rewards/"  # reward functions' figures: rewards/<name>/mean, /std, /failed
State = str | Callable[[], str]


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `2h07m`."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def eta(done: int, total: int, elapsed: float) -> str:
    """Time left at the pace so far, or `-` before any pace is known."""
    if done <= 0 or elapsed <= 0 or total <= done:
        return "-" if total > done else "0s"
    return duration(elapsed / done * (total - done))


def function_means(record: Mapping[str, Any]) -> dict[str, float]:
    """Reward function name → its mean reward in a step's record (`rewards/<name>/mean`)."""
    return {
        key[len(REWARDS_PREFIX) : -len("/mean")]: float(value)
        for key, value in record.items()
        if key.startswith(REWARDS_PREFIX) and key.endswith("/mean")
    }


def samples_per_second(record: Mapping[str, Any]) -> float | None:
    seconds = record.get("wait_seconds", 0.0) + record.get("train_seconds", 0.0)
    return record["samples"] / seconds if seconds > 0 and "samples" in record else None


def step_line(record: Mapping[str, Any], total_steps: int, seconds_per_step: float | None) -> str:
    """`step 3/10 · reward 0.531 · sampled 0.480 · loss +0.0123 · 12.3 samples/s · ETA 1m20s · correct 0.53`."""
    step = int(record["step"])
    parts = [
        f"step {step}/{total_steps}",
        f"reward {record.get('reward', math.nan):.3f}",
        f"sampled {record.get('sampled_reward', math.nan):.3f}",
        f"loss {record.get('loss', math.nan):+.4f}",
    ]
    rate = samples_per_second(record)
    parts.append(f"{rate:.1f} samples/s" if rate is not None else "- samples/s")
    left = (total_steps - step) * seconds_per_step if seconds_per_step is not None else None
    parts.append(f"ETA {duration(left)}" if left is not None else "ETA -")
    parts += [f"{name} {mean:.3f}" for name, mean in function_means(record).items()]
    return " · ".join(parts)


def seconds_per_step(records: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean wall-clock seconds between the training steps of `records` (None before two of them)."""
    trained = [r for r in records if not is_eval_record(r) and "time" in r]
    if len(trained) < 2:
        return None
    return (trained[-1]["time"] - trained[0]["time"]) / (trained[-1]["step"] - trained[0]["step"] or 1)


class ProgressLines:
    """Prints `note`d lines as they come and, from a background thread, the latest `state` whenever
    `interval` seconds passed without a line. `enabled=False` (a terminal, where live views show progress)
    makes every call a no-op."""

    def __init__(self, write: Callable[[str], None], *, interval: float = 5.0, enabled: bool = True) -> None:
        self._write, self.interval, self.enabled = write, interval, enabled
        self._state: State | None = None
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ProgressLines:
        if self.enabled:
            self._thread = threading.Thread(target=self._tick, name="progress-lines", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 1)

    def note(self, line: str) -> None:
        if self.enabled:
            with self._lock:
                self._emit(line)

    def state(self, state: State | None) -> None:
        """What is going on now (a string, or a function giving it when it is printed)."""
        with self._lock:
            self._state = state

    def _emit(self, line: str) -> None:
        self._write(line)
        self._last = time.monotonic()

    def _tick(self) -> None:
        while not self._stop.wait(min(1.0, self.interval / 2)):
            with self._lock:
                if self._state is None or time.monotonic() - self._last < self.interval:
                    continue
                self._emit(self._state() if callable(self._state) else self._state)
