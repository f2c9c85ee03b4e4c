"""How an engine changes policy: from a checkpoint or state dict (`load_weights`), or from a trainer in the
same process, streamed in place (`update_weights`, the `WeightSink` of `swarmrl.trainer.weight_sync`).

Both copy into the model's existing parameter storage, so CUDA graphs captured over it stay valid. No KV
state outlives a `generate` call (prompt blocks are shared only within one call), so nothing computed with
old weights can be reused with new ones, provided weights never change *during* a call: an update while
the engine generates is refused. A checkpoint or state dict is checked whole before anything is copied; a
stream can only be checked as it arrives, so after a stream fails the engine refuses to generate until a
whole policy has been loaded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import torch

from swarmrl.inference.errors import EngineBusyError
from swarmrl.inference.weights import copy_weights_in_place
from swarmrl.models.checkpoint import WeightLoadError, policy_state


class LiveWeights:
    """Mixin of the engines; they call `_init_live_weights` and run `generate` inside `_generating()`."""

    model: torch.nn.Module
    policy_step: int

    def _init_live_weights(self) -> None:
        self._busy = threading.Lock()
        self._torn: str | None = None  # why the weights are not one policy's, after a failed update

    def load_weights(self, source: Mapping[str, torch.Tensor] | str | Path, *, policy_step: int) -> None:
        state = policy_state(self.model, source)
        with self._changing(policy_step):
            self.model.load_state_dict(state, strict=False)  # in place; `policy_state` checked every name

    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], step: int) -> None:
        with self._changing(step):
            copy_weights_in_place(self.model, weights)

    @contextmanager
    def _changing(self, step: int) -> Iterator[None]:
        if not self._busy.acquire(blocking=False):
            raise EngineBusyError(f"policy step {step} arrived while the engine is generating")
        try:
            self._torn = f"the update to policy step {step} failed and may have copied only part of it"
            yield
            self._torn = None
            self.policy_step = step
        finally:
            self._busy.release()

    @contextmanager
    def _generating(self) -> Iterator[None]:
        if not self._busy.acquire(blocking=False):
            raise EngineBusyError("the engine is already busy (generating or changing weights)")
        try:
            if self._torn is not None:
                raise WeightLoadError(f"refusing to generate: {self._torn}; load a whole policy first")
            yield
        finally:
            self._busy.release()
