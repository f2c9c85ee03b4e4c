"""Hand new policy weights to an inference engine in the same process, in place — no checkpoint round-trip.

For one GPU shared by the engine and the trainer: after each policy step the trainer calls `push_weights`,
which streams its parameters (gathered one tensor at a time when FSDP-sharded, so the full model never sits
in memory twice) to a `WeightSink`. `InPlaceCopy` is the sink for an engine that holds a transformers model:
each tensor is copied into the engine's existing storage (cast to its dtype), so the engine's KV cache,
CUDA graphs and pointers stay valid. The engines themselves are sinks too (`swarmrl.inference.live_weights`:
they also refuse an update mid-generation and record the step they serve); a colocated run
(`trainer.colocate`) pushes every policy into its engine this way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from torch import Tensor, nn

from swarmrl.inference.weights import copy_weights_in_place


class WeightSyncError(ValueError):
    """The engine's model does not have the trainer's parameters (names or shapes differ)."""


class WeightSink(Protocol):
    def update_weights(self, weights: Iterable[tuple[str, Tensor]], step: int) -> None:
        """Take the weights of policy `step`, one named tensor at a time."""


def full_parameters(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """(name, full tensor) per parameter; a sharded (DTensor) parameter is gathered just for its turn."""
    for name, param in model.named_parameters():
        data = param.detach()
        yield name, data.full_tensor() if hasattr(data, "full_tensor") else data


def push_weights(model: nn.Module, sink: WeightSink, step: int) -> None:
    """Every rank must call it when the model is sharded (the gathers are collectives)."""
    sink.update_weights(full_parameters(model), step)


class InPlaceCopy:
    """A `WeightSink` that copies into a live model's parameters without reallocating them.

    Names and shapes are checked against the trainer's model once, here, so an update never stops half-way.
    """

    def __init__(self, target: nn.Module, like: nn.Module) -> None:
        self.target = target
        params = dict(target.named_parameters())
        source = {name: tuple(p.shape) for name, p in like.named_parameters()}
        for name, shape in source.items():
            if name not in params:
                raise WeightSyncError(f"the engine's model has no parameter {name!r}")
            if tuple(params[name].shape) != shape:
                raise WeightSyncError(
                    f"{name}: the trainer's shape {shape} != the engine's {tuple(params[name].shape)}"
                )
        missing = sorted(set(params) - set(source))
        if missing:
            raise WeightSyncError(
                f"the trainer has no weights for {len(missing)} engine parameters: {missing[0]!r}"
            )
        self.step: int | None = None

    def update_weights(self, weights: Iterable[tuple[str, Tensor]], step: int) -> None:
        copy_weights_in_place(self.target, weights)
        self.step = step
