"""DiLoCo / Streaming DiLoCo around any inner optimizer.

Every worker runs the inner optimizer on its own data. The parameters are split into F fragments; fragment
f starts a sync after local step `send_step_f` of every H-step window (F = 1 is plain DiLoCo, synced after
step H). A sync computes the pseudo-gradient against the fp32 global copy (kept on CPU), averages it across
workers through the communicator and codec on a background thread, and `overlap_steps` inner steps later
applies the outer Nesterov step to the global copy and copies it back into the model (local progress made
on that fragment during the overlap is replaced, as in torchft's Streaming DiLoCo with alpha = 0).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from swarmrl.diloco.codecs import Codec
from swarmrl.diloco.communicators.base import Communicator
from swarmrl.diloco.errors import DiLoCoStateError
from swarmrl.diloco.outer import (
    fragment_send_steps,
    make_outer_optimizer,
    pseudo_gradient,
    split_into_fragments,
)
from swarmrl.diloco.reduce import all_reduce_mean_encoded


@dataclass(frozen=True)
class SyncRecord:
    """One fragment sync as seen by this worker."""

    fragment: int
    sent_at_step: int
    wire_bytes: int
    seconds: float
    committed: bool


@dataclass
class _Fragment:
    params: list[torch.nn.Parameter]
    global_params: list[torch.Tensor]
    outer: torch.optim.SGD
    send_step: int


@dataclass
class _PendingSync:
    future: Future[tuple[torch.Tensor, bool]]
    apply_at_step: int


class DiLoCo:
    """Wraps `inner_optimizer`; call `step()` where you would call `inner_optimizer.step()`."""

    def __init__(
        self,
        model: torch.nn.Module,
        inner_optimizer: torch.optim.Optimizer,
        communicator: Communicator,
        codec: Codec,
        *,
        inner_steps: int,
        outer_lr: float = 0.7,
        outer_momentum: float = 0.9,
        n_fragments: int = 1,
        overlap_steps: int = 0,
    ) -> None:
        if inner_steps < 1 or not 0 <= overlap_steps < inner_steps:
            raise ValueError(
                f"need inner_steps >= 1 and 0 <= overlap_steps < inner_steps, got {inner_steps}, "
                f"{overlap_steps}"
            )
        self.model = model
        self.inner_optimizer = inner_optimizer
        self.communicator = communicator
        self.codec = codec
        self.inner_steps = inner_steps
        self.overlap_steps = overlap_steps
        params = [p for p in model.parameters() if p.requires_grad]
        groups = split_into_fragments([p.numel() for p in params], n_fragments)
        send_steps = fragment_send_steps(len(groups), inner_steps)
        self.fragments: list[_Fragment] = []
        for indices, send_step in zip(groups, send_steps, strict=True):
            frag_params = [params[i] for i in indices]
            global_params = [p.detach().to(device="cpu", dtype=torch.float32).clone() for p in frag_params]
            self.fragments.append(
                _Fragment(
                    frag_params,
                    global_params,
                    make_outer_optimizer(global_params, outer_lr, outer_momentum),
                    send_step,
                )
            )
        self.local_step = 0
        self.sync_log: list[SyncRecord] = []
        self.seconds_waiting = 0.0
        self._pending: dict[int, _PendingSync] = {}
        # One thread keeps collectives in the same order on every worker.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="diloco-sync")

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner_optimizer.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        """One inner step, then whatever fragment syncs are due after it."""
        self.inner_optimizer.step()
        self.local_step += 1
        started = time.perf_counter()
        for index in sorted(self._pending):
            if self._pending[index].apply_at_step <= self.local_step:
                self._apply(index)
        position = self.local_step % self.inner_steps or self.inner_steps
        for index, fragment in enumerate(self.fragments):
            if fragment.send_step == position:
                self._send(index)
                if self.overlap_steps == 0:
                    self._apply(index)
        self.seconds_waiting += time.perf_counter() - started

    def finish(self) -> None:
        """Wait for and apply every in-flight sync (end of training, before a checkpoint)."""
        started = time.perf_counter()
        for index in sorted(self._pending):
            self._apply(index)
        self.seconds_waiting += time.perf_counter() - started

    def close(self) -> None:
        self.finish()
        self._executor.shutdown(wait=True)

    @property
    def bytes_sent(self) -> int:
        return sum(record.wire_bytes for record in self.sync_log)

    @property
    def peak_bytes_per_sync(self) -> int:
        return max((record.wire_bytes for record in self.sync_log), default=0)

    def _send(self, index: int) -> None:
        fragment = self.fragments[index]
        delta = pseudo_gradient(fragment.global_params, fragment.params)
        flat = torch.cat([d.reshape(-1) for d in delta])
        future = self._executor.submit(self._reduce, index, flat, self.local_step)
        self._pending[index] = _PendingSync(future, self.local_step + self.overlap_steps)

    def _reduce(self, index: int, flat: torch.Tensor, sent_at_step: int) -> tuple[torch.Tensor, bool]:
        bytes_before = self.communicator.stats.bytes_sent
        started = time.perf_counter()
        self.communicator.begin_round()
        mean = all_reduce_mean_encoded(flat, self.codec, self.communicator)
        committed = self.communicator.end_round()
        self.sync_log.append(
            SyncRecord(
                index,
                sent_at_step,
                self.communicator.stats.bytes_sent - bytes_before,
                time.perf_counter() - started,
                committed,
            )
        )
        return mean, committed

    def _apply(self, index: int) -> None:
        pending = self._pending.pop(index)
        mean, committed = pending.future.result()
        fragment = self.fragments[index]
        if committed:
            offset = 0
            for global_param in fragment.global_params:
                global_param.grad = mean[offset : offset + global_param.numel()].view_as(global_param)
                offset += global_param.numel()
            fragment.outer.step()
            fragment.outer.zero_grad(set_to_none=True)
        # A failed round is discarded: every worker falls back to the last agreed global weights.
        with torch.no_grad():
            for param, global_param in zip(fragment.params, fragment.global_params, strict=True):
                param.copy_(global_param.to(device=param.device, dtype=param.dtype))

    def state_dict(self) -> dict[str, Any]:
        """Inner + outer state for checkpoints; the model's own weights are saved by the caller."""
        if self._pending:
            raise DiLoCoStateError(
                f"{len(self._pending)} fragment sync(s) in flight at step {self.local_step}; call finish() first"
            )
        return self.snapshot_for_peer()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self._pending:
            raise DiLoCoStateError("cannot load state while fragment syncs are in flight")
        self.restore_from_peer(state)

    def snapshot_for_peer(self) -> dict[str, Any]:
        """State a joining worker needs, taken mid-round (elastic healing runs inside a sync round).

        Everything in it is consistent at a round boundary: the global copy and outer state only change in
        `_apply`, which cannot run while the round that asks for the snapshot is still open.
        """
        return {
            "local_step": self.local_step,
            "inner_optimizer": self.inner_optimizer.state_dict(),
            "fragments": [
                {
                    "global_params": [g.clone() for g in f.global_params],
                    "outer_optimizer": f.outer.state_dict(),
                }
                for f in self.fragments
            ],
        }

    def restore_from_peer(self, state: dict[str, Any]) -> None:
        """Adopt a peer's snapshot; the model picks up the global weights when the current round applies."""
        fragments = state.get("fragments")
        if not isinstance(fragments, list) or len(fragments) != len(self.fragments):
            raise DiLoCoStateError(
                f"checkpoint has {len(fragments) if isinstance(fragments, list) else 'no'} fragments, "
                f"this run has {len(self.fragments)}"
            )
        for number, (fragment, saved) in enumerate(zip(self.fragments, fragments, strict=True)):
            saved_params = saved["global_params"]
            shapes = [tuple(t.shape) for t in saved_params]
            expected = [tuple(t.shape) for t in fragment.global_params]
            if shapes != expected:
                raise DiLoCoStateError(
                    f"fragment {number}: checkpoint shapes {shapes} != model shapes {expected}"
                )
            for global_param, saved_param in zip(fragment.global_params, saved_params, strict=True):
                global_param.copy_(saved_param)
            fragment.outer.load_state_dict(saved["outer_optimizer"])
        self.inner_optimizer.load_state_dict(state["inner_optimizer"])
        self.local_step = int(state["local_step"])
