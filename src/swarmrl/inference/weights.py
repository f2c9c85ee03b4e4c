"""Copy a stream of named tensors from a trainer in the same process into a live model's own storage."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from swarmrl.models.checkpoint import WeightLoadError


@torch.no_grad()
def copy_weights_in_place(model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Copy a stream of (parameter name, tensor) into `model`'s own parameter storage, cast to its dtype.

    The storage never changes, so whatever was built over it (CUDA graphs, a KV pool sized around it) stays
    valid. Every parameter must arrive exactly once (a tied head arrives as the embedding it is). The stream
    is checked as it is consumed, so a bad stream raises part-way: the caller must treat the model as torn.
    """
    params = dict(model.named_parameters())
    seen: set[str] = set()
    for name, tensor in weights:
        target = params.get(name)
        if target is None:
            raise WeightLoadError(f"the model has no parameter {name!r}")
        if name in seen:
            raise WeightLoadError(f"{name!r} was sent twice")
        if tuple(tensor.shape) != tuple(target.shape):
            raise WeightLoadError(f"{name}: shape {tuple(tensor.shape)} != the model's {tuple(target.shape)}")
        target.copy_(tensor)
        seen.add(name)
    missing = sorted(set(params) - seen)
    if missing:
        raise WeightLoadError(f"no weights for {len(missing)} parameters, e.g. {missing[0]!r}")
