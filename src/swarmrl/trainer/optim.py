"""AdamW with linear warmup then a constant rate (the INTELLECT-2 schedule)."""

from __future__ import annotations

import torch
from torch.optim.lr_scheduler import LambdaLR


def build_optimizer(
    model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float], warmup_steps: int
) -> tuple[torch.optim.AdamW, LambdaLR]:
    decay, no_decay = [], []
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
    scheduler = LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / (warmup_steps + 1)))
    return optimizer, scheduler
