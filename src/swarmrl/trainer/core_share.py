"""A local CPU run's trainer takes its workers' cores while they have nothing to generate.

A local run gives each worker process a core and the trainer one (`swarmrl.layout`). Workers generate only the
files the trainer asked for and then wait, so when training is the bottleneck their cores idle for part of every
step while the trainer's forward and backward run on its own thread(s). `CoreShare` raises the trainer's torch
threads to every core of the run while the workers hold every file asked of them, and drops back to the
trainer's own count as soon as they have work again: it looks before each decoder layer's forward and backward
pass (a few hundred milliseconds of work each at most on a CPU), so a new request from the trainer or a step a
worker starts is seen within a layer.

torch's intra-op thread count is per calling thread (OpenMP's), and on a CPU autograd runs backward on the
thread that called it: the hooks run on the trainer's own thread, so both passes follow the count they set.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from swarmrl.models.lm_types import CausalLM


class CoreShare:
    """`cores` threads while `workers_idle()`, else `own` (the trainer's own thread count)."""

    def __init__(
        self, workers_idle: Callable[[], bool], cores: int, own: int, recheck_s: float = 0.05
    ) -> None:
        self.own = own
        if cores < own:
            raise ValueError(f"cores ({cores}) must be at least the trainer's own threads ({self.own})")
        self.workers_idle = workers_idle
        self.cores = cores
        self.recheck_s = recheck_s
        self._checked = float("-inf")
        self._handles: list[RemovableHandle] = []

    def adjust(self) -> None:
        """Every core while the workers are idle, the trainer's own threads otherwise (looked up at most every
        `recheck_s`)."""
        now = time.monotonic()
        if now - self._checked < self.recheck_s:
            return
        self._checked = now
        self._set(self.cores if self.workers_idle() else self.own)

    def release(self) -> None:
        """Back to the trainer's own threads: it is about to read files or generate beside its workers."""
        self._checked = float("-inf")
        self._set(self.own)

    def attach(self, layers: nn.ModuleList) -> None:
        """Look before each layer's forward and, through its output's gradient, before its backward."""

        def before_forward(module: nn.Module, args) -> None:
            self.adjust()

        def after_forward(module: nn.Module, args, output) -> None:
            hidden = output[0] if isinstance(output, tuple) else output
            if isinstance(hidden, torch.Tensor) and hidden.requires_grad:
                hidden.register_hook(self._before_backward)

        for layer in layers:
            self._handles.append(layer.register_forward_pre_hook(before_forward))
            self._handles.append(layer.register_forward_hook(after_forward))

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.release()

    def _before_backward(self, grad: torch.Tensor) -> None:
        self.adjust()

    @staticmethod
    def _set(threads: int) -> None:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def decoder_layers(model: CausalLM) -> nn.ModuleList | None:
    """The transformer blocks of a transformers causal LM (its decoder's `layers`), if it has that layout."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    return layers if isinstance(layers, nn.ModuleList) else None
