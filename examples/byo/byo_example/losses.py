"""A loss objective of your own: SAPO's soft gate (Gao et al. 2025, arXiv 2511.20347) in place of a hard clip.

    [loss.objective]
    kind = "plugin"
    entry = "byo_example.losses:soft_gate"   # or "soft_gate": the entry point pyproject.toml declares
    options = { tau_pos = 1.0, tau_neg = 1.05 }

ℓ_t = −f(r_t)·A with f(r) = (4/τ)·σ(τ(r − 1)), τ = tau_pos where A > 0 and tau_neg elsewhere. At r = 1 its
gradient is REINFORCE's (4·σ(0)·(1 − σ(0)) = 1); as r leaves 1 the gradient fades smoothly, faster for a
larger τ, where a clip would drop it to 0 at the band's edge. The run's behaviour correction, normalisation,
entropy and KL terms apply around it as around the built-in objectives.
"""

import torch

from swarmrl.configs.loss import PluginObjective
from swarmrl.trainer.token_batch import TokenBatch, TokenTerms

# log r above this is taken as this: σ'(τ(r − 1))·r is 0 there anyway, and exp(log r) cannot overflow into
# a 0 · inf = NaN gradient.
MAX_LOG_RATIO = 20.0


def soft_gate(batch: TokenBatch, objective: PluginObjective) -> TokenTerms:
    tau_pos = float(objective.options.get("tau_pos", 1.0))
    tau_neg = float(objective.options.get("tau_neg", 1.05))
    tau = torch.where(batch.advantages > 0, tau_pos, tau_neg).to(batch.logprobs.dtype)
    ratio = torch.exp(torch.clamp(batch.log_ratio, max=MAX_LOG_RATIO))
    gate = 4.0 / tau * torch.sigmoid(tau * (ratio - 1.0))
    nothing = torch.zeros_like(batch.mask)  # a soft gate clips no token
    return TokenTerms(
        loss=-gate * batch.advantages,
        ratio=ratio.detach(),
        clipped_low=nothing,
        clipped_high=nothing,
        delta_capped=nothing,
    )
