"""The policy objectives: each one's per-token loss ℓ_t, all with one signature,
`terms(batch: TokenBatch, objective: <its config>) -> TokenTerms`, and `build_objective`, the one place a
`[loss.objective]` becomes the function the loss calls (a plugin's included).

Symbols follow the papers: r = π_θ / π_old, A the advantage, ε the clip range, δ INTELLECT-2's ratio cap.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import assert_never

import torch
from torch import Tensor

from swarmrl.configs.loss import CISPOClip, GSPOClip, Objective, PluginObjective, TwoSidedClip
from swarmrl.entrypoints import EntryError
from swarmrl.trainer.loss_plugin import WHAT, pinned_objective_function
from swarmrl.trainer.token_batch import TokenBatch, TokenTerms, segment_mean

# What the loss calls: the objective's config bound, one micro-batch in.
TokenObjective = Callable[[TokenBatch], TokenTerms]
_FLAGS = ("clipped_low", "clipped_high", "delta_capped")


def build_objective(objective: Objective) -> TokenObjective:
    """The terms function of `objective`; for a plugin, its pinned function with every result checked."""
    match objective:
        case TwoSidedClip():
            return functools.partial(two_sided_clip_terms, objective=objective)
        case GSPOClip():
            return functools.partial(gspo_terms, objective=objective)
        case CISPOClip():
            return functools.partial(cispo_terms, objective=objective)
        case PluginObjective():
            pinned_objective_function(objective)  # imported and checked against the run's pin now
            return functools.partial(plugin_terms, objective=objective)
        case _:
            assert_never(objective)


def two_sided_clip_terms(batch: TokenBatch, objective: TwoSidedClip) -> TokenTerms:
    """ℓ_t = max(−r̃·A, −clip(r̃, 1−ε_low, 1+ε_high)·A) with r̃ = min(r, δ) (INTELLECT-2, eq. 1)."""
    log_ratio, advantages = batch.log_ratio, batch.advantages
    # r̃ = min(r, δ), taken in log space: equal in value, but a huge r cannot become inf and its gradient
    # (0 · inf = NaN) cannot poison the step. Above δ r̃ is the constant δ, so those tokens get no gradient.
    capped_ratio = torch.exp(torch.clamp(log_ratio, max=math.log(objective.delta)))
    clipped_ratio = torch.clamp(capped_ratio, 1.0 - objective.epsilon_low, 1.0 + objective.epsilon_high)
    loss = torch.maximum(-capped_ratio * advantages, -clipped_ratio * advantages)
    with torch.no_grad():
        negative = advantages < 0
        return TokenTerms(
            loss=loss,
            ratio=torch.exp(log_ratio),
            clipped_low=negative & (capped_ratio < 1.0 - objective.epsilon_low),
            clipped_high=(advantages > 0) & (capped_ratio > 1.0 + objective.epsilon_high),
            delta_capped=negative & (log_ratio > math.log(objective.delta)),
        )


def gspo_terms(batch: TokenBatch, objective: GSPOClip) -> TokenTerms:
    """GSPO-token: ℓ_t = max(−s_t·A, −clip(s_t, 1−ε_low, 1+ε_high)·A), s_t = sg[s_i]·π_t / sg[π_t].

    s_i = exp(mean_t log r_t) is the length-normalised sequence ratio; s_t equals s_i in value, and with the
    per-sequence normalisation its gradient averaged over the sequence is exactly ∇s_i
    (arXiv 2507.18071 §4.3).
    """
    mask, advantages = batch.mask, batch.advantages
    log_s = batch.sequences.spread(segment_mean(batch.log_ratio, mask, batch.sequences), like=batch.log_ratio)
    own_logprobs = torch.where(mask, batch.logprobs, 0.0)
    token_ratio = torch.exp(log_s.detach() + own_logprobs - own_logprobs.detach())
    clipped_ratio = torch.clamp(token_ratio, 1.0 - objective.epsilon_low, 1.0 + objective.epsilon_high)
    loss = torch.maximum(-token_ratio * advantages, -clipped_ratio * advantages)
    with torch.no_grad():
        return TokenTerms(
            loss=loss,
            ratio=token_ratio.detach(),
            clipped_low=(advantages < 0) & (token_ratio < 1.0 - objective.epsilon_low),
            clipped_high=(advantages > 0) & (token_ratio > 1.0 + objective.epsilon_high),
            delta_capped=torch.zeros_like(mask),
        )


def cispo_terms(batch: TokenBatch, objective: CISPOClip) -> TokenTerms:
    """CISPO: ℓ_t = −sg[clip(r_t, 1−ε_low, 1+ε_high)] · A · log π_t — every token keeps a gradient."""
    ratio = torch.exp(batch.log_ratio.detach())
    weight = torch.clamp(ratio, 1.0 - objective.epsilon_low, 1.0 + objective.epsilon_high)
    loss = -weight * batch.advantages * torch.where(batch.mask, batch.logprobs, 0.0)
    return TokenTerms(
        loss=loss,
        ratio=ratio,
        clipped_low=ratio < 1.0 - objective.epsilon_low,
        clipped_high=ratio > 1.0 + objective.epsilon_high,
        delta_capped=torch.zeros_like(batch.mask),
    )


def plugin_terms(batch: TokenBatch, objective: PluginObjective) -> TokenTerms:
    """The plugin's own terms, refused by name unless they are TokenTerms of the batch's shape, with a loss
    that still depends on the policy (a detached loss would train nothing without a word)."""
    terms = pinned_objective_function(objective)(batch, objective)
    name = f"{WHAT} {objective.entry!r}"
    if not isinstance(terms, TokenTerms):
        raise EntryError(
            f"{name} returned {type(terms).__name__}, not swarmrl.trainer.token_batch.TokenTerms"
        )
    shape = tuple(batch.logprobs.shape)
    for field in dataclasses.fields(TokenTerms):
        value = getattr(terms, field.name)
        if not isinstance(value, Tensor) or tuple(value.shape) != shape:
            got = f"shape {tuple(value.shape)}" if isinstance(value, Tensor) else type(value).__name__
            raise EntryError(f"{name} returned {field.name} of {got}, not the batch's shape {shape}")
    if not terms.loss.is_floating_point():
        raise EntryError(f"{name} returned a loss of dtype {terms.loss.dtype}, not a floating point one")
    wrong = [flag for flag in _FLAGS if getattr(terms, flag).dtype != torch.bool]
    if wrong:
        raise EntryError(f"{name} returned {wrong[0]} of dtype {getattr(terms, wrong[0]).dtype}, not bool")
    if batch.logprobs.requires_grad and not terms.loss.requires_grad:
        raise EntryError(f"{name} returned a loss with no gradient: compute it from batch.logprobs")
    return terms
