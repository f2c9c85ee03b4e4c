"""The maths of one DiLoCo outer step, written to read like the paper.

Δ_t   = θ_global − θ_local            (pseudo-gradient: points *against* the inner progress)
Δ̄_t   = mean over workers of Δ_t
m_t   = μ m_{t−1} + Δ̄_t               (m_0 = Δ̄_1, torch's SGD convention)
θ_global ← θ_global − η (Δ̄_t + μ m_t)  (Nesterov look-ahead)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pseudo_gradient(
    global_params: Sequence[torch.Tensor], local_params: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Δ = global − local, in fp32 on the global copy's device."""
    return [
        g - local.detach().to(device=g.device, dtype=torch.float32)
        for g, local in zip(global_params, local_params, strict=True)
    ]


def make_outer_optimizer(global_params: list[torch.Tensor], lr: float, momentum: float) -> torch.optim.SGD:
    """SGD with Nesterov momentum over the fp32 global copy (torch's update is the formula above; μ = 0: plain SGD)."""
    return torch.optim.SGD(global_params, lr=lr, momentum=momentum, nesterov=momentum > 0)


def split_into_fragments(numels: list[int], n_fragments: int) -> list[list[int]]:
    """Contiguous groups of parameter indices (module order, i.e. by layer) with balanced element counts.

    A parameter goes to the fragment its midpoint falls in along the cumulative element count; if that
    leaves a fragment empty (one huge tensor), fall back to equal parameter counts.
    """
    if not 1 <= n_fragments <= len(numels):
        raise ValueError(f"cannot split {len(numels)} parameters into {n_fragments} fragments")
    total = sum(numels)
    fragments: list[list[int]] = [[] for _ in range(n_fragments)]
    seen = 0
    for index, numel in enumerate(numels):
        midpoint = seen + numel / 2
        fragments[min(int(midpoint * n_fragments / total), n_fragments - 1)].append(index)
        seen += numel
    if all(fragments):
        return fragments
    bounds = [round(i * len(numels) / n_fragments) for i in range(n_fragments + 1)]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(n_fragments)]


def fragment_send_steps(n_fragments: int, inner_steps: int) -> list[int]:
    """Step within the window (1..H) after which fragment f starts its sync: staggered by H / F."""
    return [((f + 1) * inner_steps) // n_fragments for f in range(n_fragments)]
