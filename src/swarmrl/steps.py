"""How step k is named on disk: policy checkpoints (`<root>/step_k/`), rollout directories and shardcast
versions all use `step_k`. Torch-free, so every role (relays, the validator, workers) reads the same names
without importing the trainer."""

from __future__ import annotations

import re
from pathlib import Path

BASE_STEP = 0  # the prepared start checkpoint: the only one that carries full weights in a LoRA run
# 18 digits: a version parsed from a directory name (or a relay's listing) always fits an int64.
_STEP_DIR = re.compile(r"^step_(\d{1,18})$")


def step_dir_name(step: int) -> str:
    return f"step_{step}"


def parse_step_dir_name(name: str) -> int | None:
    """The step a `step_k` name stands for; None for anything else (temporary names included)."""
    match = _STEP_DIR.match(name)
    return int(match.group(1)) if match else None


def checkpoint_dir(root: Path, step: int) -> Path:
    return root / step_dir_name(step)


def list_checkpoints(root: Path) -> list[int]:
    """Steps with a complete checkpoint directory, ascending (temporary names never match)."""
    if not root.is_dir():
        return []
    steps = []
    for entry in root.iterdir():
        step = parse_step_dir_name(entry.name)
        if step is not None and (entry / "config.json").is_file():
            steps.append(step)
    return sorted(steps)


def latest_checkpoint(root: Path) -> int | None:
    steps = list_checkpoints(root)
    return steps[-1] if steps else None
