"""Swap new policy weights into a live model: a state dict, or a checkpoint directory in `save_pretrained`
layout (one or more *.safetensors files) or a LoRA adapter checkpoint (merged onto its base's weights)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file

from swarmrl.inference.errors import WeightLoadError
from swarmrl.models.adapter import AdapterError, base_checkpoint, is_adapter_checkpoint, merge_into_state


def load_policy_weights(model: torch.nn.Module, source: Mapping[str, torch.Tensor] | str | Path) -> None:
    """Copy `source` into `model` in place; every tensor must be known and every parameter present."""
    state = read_checkpoint(Path(source)) if isinstance(source, str | Path) else dict(source)
    expected = set(model.state_dict())
    unknown = sorted(set(state) - expected)
    # Tied heads are saved once: the LM head may be absent when it is the input embedding.
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing = sorted(expected - set(state) - tied)
    if unknown or missing:
        raise WeightLoadError(f"weights do not fit the model: missing {missing[:5]}, unknown {unknown[:5]}")
    try:
        model.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise WeightLoadError(f"weights do not fit the model: {exc}") from exc


def read_checkpoint(directory: Path) -> dict[str, torch.Tensor]:
    """The policy weights of a checkpoint directory; an adapter checkpoint's are merged onto its base's
    stored tensors (so whoever loads them, in whatever dtype, merges the same numbers)."""
    if is_adapter_checkpoint(directory):
        try:
            return merge_into_state(_read_safetensors(base_checkpoint(directory)), directory)
        except AdapterError as exc:
            raise WeightLoadError(str(exc)) from exc
    return _read_safetensors(directory)


def _read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    files = sorted(directory.glob("*.safetensors")) if directory.is_dir() else []
    if not files:
        raise WeightLoadError(f"{directory}: no *.safetensors weights")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            state.update(load_file(file))
        except Exception as exc:  # safetensors raises its own SafetensorError besides OSError
            raise WeightLoadError(f"{file}: unreadable safetensors file: {exc}") from exc
    return state
