"""The inner optimizer of the trainer and of DiLoCo replicas: AdamW with linear warmup, then a constant rate
(the INTELLECT-2 schedule) or a cosine decay."""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR


def lr_multiplier(step: int, warmup_steps: int, decay_steps: int | None, min_ratio: float) -> float:
    """Factor on the base rate before optimizer step `step + 1`: linear warmup over `warmup_steps`, then
    constant (`decay_steps` None) or a cosine from 1 down to `min_ratio` reached at step `decay_steps`."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if decay_steps is None:
        return 1.0
    span = max(decay_steps - warmup_steps, 1)
    progress = min((step - warmup_steps) / span, 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(
    model: torch.nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    warmup_steps: int,
    decay_steps: int | None = None,
    min_lr_ratio: float = 0.1,
) -> tuple[torch.optim.AdamW, LambdaLR]:
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        # Norm gains and biases are not shrunk towards zero (standard practice for transformers).
        (no_decay if param.ndim < 2 or "norm" in name else decay).append(param)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=betas,
    )
    scheduler = LambdaLR(optimizer, lambda step: lr_multiplier(step, warmup_steps, decay_steps, min_lr_ratio))
    return optimizer, scheduler
