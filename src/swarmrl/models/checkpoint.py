"""A policy checkpoint's weights read from disk and checked against a model before anything is copied: a
directory in `save_pretrained` layout (one or more *.safetensors files) or a LoRA adapter checkpoint (merged
onto its base's stored weights)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file

from swarmrl.models.adapter import AdapterError, base_checkpoint, is_adapter_checkpoint, merge_into_state


class WeightLoadError(ValueError):
    """New policy weights are missing tensors, carry unknown ones, or do not fit the model's shapes."""


def policy_state(
    model: torch.nn.Module, source: Mapping[str, torch.Tensor] | str | Path
) -> dict[str, torch.Tensor]:
    """`source` read and checked against `model`: every tensor known and of its shape, every parameter
    present. Nothing is copied yet, so a bad source leaves the model's weights whole."""
    state = read_checkpoint(Path(source)) if isinstance(source, str | Path) else dict(source)
    expected = model.state_dict()
    unknown = sorted(set(state) - set(expected))
    # Tied heads are saved once: the LM head may be absent when it is the input embedding.
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing = sorted(set(expected) - set(state) - tied)
    if unknown or missing:
        raise WeightLoadError(f"weights do not fit the model: missing {missing[:5]}, unknown {unknown[:5]}")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise WeightLoadError(
                f"weights do not fit the model: {name} has shape {tuple(tensor.shape)}, "
                f"the model's is {tuple(expected[name].shape)}"
            )
    return state


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
