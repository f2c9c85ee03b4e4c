"""Policy checkpoints (`step_k/`, an HF directory) and trainer state for exact resume after a kill.

The model directory is what workers load and shardcast broadcasts; the trainer state (optimizer,
scheduler, RNG) stays with the trainer. Both are written to a temporary name and renamed, and the state
file is written after the model directory, so a state file always has its checkpoint.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from swarmrl.errors import writing
from swarmrl.models import save_pretrained_atomic
from swarmrl.steps import checkpoint_dir, list_checkpoints


def save_checkpoint(
    root: Path,
    step: int,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    keep: int = 0,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """`state_dict` overrides the model's own tensors (the gathered full weights of a sharded model)."""
    path = save_pretrained_atomic(model, tokenizer, checkpoint_dir(root, step), state_dict=state_dict)
    prune_checkpoints(root, keep)
    return path


def prune_checkpoints(root: Path, keep: int, protect: int | None = None) -> None:
    """Delete all but the newest `keep` checkpoints (0 keeps all); never `protect` (a LoRA run's base)."""
    if keep:
        # step_0 stays: the tokenizer, the KL reference, a colocated engine's architecture and a LoRA run's
        # base are read from it.
        for old in [s for s in list_checkpoints(root)[:-keep] if s not in (0, protect)]:
            shutil.rmtree(checkpoint_dir(root, old), ignore_errors=True)


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save_trainer_state(
    state_root: Path, step: int, optimizer_state: dict[str, Any], scheduler: Any, extra: dict[str, Any]
) -> Path:
    path = state_root / f"step_{step}.pt"
    tmp = state_root / f".step_{step}.pt.{os.getpid()}.tmp"
    state = {
        "step": step,
        "optimizer": optimizer_state,
        "scheduler": scheduler.state_dict(),
        "rng": _rng_state(),
        "extra": extra,
    }
    try:
        with writing(path):
            state_root.mkdir(parents=True, exist_ok=True)
            torch.save(state, tmp)
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a half-written state only takes space
        raise
    for old in state_root.glob("step_*.pt"):
        if old != path:
            old.unlink(missing_ok=True)
    return path


def saved_trainer_steps(state_root: Path) -> list[int]:
    return sorted(int(p.stem.split("_")[1]) for p in state_root.glob("step_*.pt"))


def read_trainer_state(state_root: Path, step: int) -> dict[str, Any]:
    """The saved state of `step`; the caller restores the optimizer (possibly sharded) from it."""
    return torch.load(state_root / f"step_{step}.pt", weights_only=False)


def restore_scheduler_and_rng(state: dict[str, Any], scheduler: Any) -> None:
    scheduler.load_state_dict(state["scheduler"])
    _set_rng_state(state["rng"])
