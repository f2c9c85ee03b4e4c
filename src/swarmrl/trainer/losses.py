"""The trainer's policy loss, as a pure function of per-token logprobs: the objective's per-token terms
(`objectives.py`, whose batch conventions `token_batch.py` states), weighted by the behaviour correction, and
normalised; then the entropy bonus and the KL term.

`engine_logprobs` are the logprobs the inference engine reported (on the same temperature-divided logits as
the others), used only for the behaviour correction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

import torch
from torch import Tensor

from swarmrl.configs.loss import LossConfig, MaskedIS, NoCorrection, TruncatedIS
from swarmrl.trainer.objectives import build_objective
from swarmrl.trainer.token_batch import (
    LossInputError,
    SequenceIndex,
    TokenTerms,
    segment_sum,
    token_batch,
)


@dataclass(frozen=True)
class LossOutput:
    loss: Tensor  # scalar to call .backward() on
    metrics: dict[str, Tensor]  # detached scalars; float(v) each when logging (one device sync per value)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    config: LossConfig,
    engine_logprobs: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
    sequence_ids: Tensor | None = None,
    total_sequences: int | None = None,
    total_tokens: int | None = None,
) -> LossOutput:
    """L = normalise(w_t · ℓ_t) − entropy_coef · normalise(H_t) + kl_coef · normalise(k3_t).

    ℓ_t is the objective's per-token loss, w_t the behaviour correction's stop-gradient weight. When one
    optimizer step accumulates gradients over several micro-batches, pass the whole step's `total_sequences`
    and `total_tokens` so the micro-batch losses add up to the loss of the whole batch.
    """
    _check_inputs(
        logprobs, old_logprobs, advantages, mask, engine_logprobs, ref_logprobs, entropy, sequence_ids
    )
    _check_config_inputs(config, engine_logprobs, ref_logprobs, entropy)
    batch = token_batch(logprobs, old_logprobs, advantages, mask, sequence_ids)
    mask, sequences = batch.mask, batch.sequences
    terms = build_objective(config.objective)(batch)
    weight, corrected = behaviour_weights(old_logprobs, engine_logprobs, mask, config)

    def normalise(per_token: Tensor) -> Tensor:
        return aggregate(
            per_token, mask, sequences, config, total_sequences=total_sequences, total_tokens=total_tokens
        )

    policy_term = normalise(weight * terms.loss)
    loss = policy_term
    metrics: dict[str, Tensor] = {"policy_loss": policy_term.detach()}
    if entropy is not None:
        entropy_term = normalise(entropy)
        loss = loss - config.entropy_coef * entropy_term
        metrics["entropy"] = entropy_term.detach()
    if ref_logprobs is not None:
        kl_term = normalise(k3_kl(logprobs, ref_logprobs, mask))
        loss = loss + config.kl_coef * kl_term
        metrics["kl_ref"] = kl_term.detach()
    metrics.update(_clip_metrics(terms, batch.log_ratio, mask))
    if not isinstance(config.correction, NoCorrection):
        metrics["is_corrected_fraction"] = masked_mean(corrected.float(), mask)
        metrics["is_weight_mean"] = masked_mean(weight, mask)
    return LossOutput(loss=loss, metrics=metrics)


def behaviour_weights(
    old_logprobs: Tensor, engine_logprobs: Tensor | None, mask: Tensor, config: LossConfig
) -> tuple[Tensor, Tensor]:
    """Stop-gradient weight w_t on ℓ_t for the gap π_old ≠ π_engine, and which tokens it truncated or masked.

    The importance weight is ρ_t = π_old / π_engine: the rollouts were sampled by the engine, the objective
    assumes π_old. TIS uses min(ρ_t, C); MIS keeps a token (w = 1) only while ρ_t ∈ [low, high], else w = 0
    — the token still counts in the normaliser, so MIS only removes gradient, never rescales the rest.
    Engine logprobs come from untrusted workers: both bound what a forged value can do to a token's weight.
    """
    correction = config.correction
    if isinstance(correction, NoCorrection):
        return torch.ones_like(old_logprobs), torch.zeros_like(mask)
    if engine_logprobs is None:
        raise LossInputError(f"the {correction.kind} correction needs engine_logprobs")
    with torch.no_grad():
        rho = torch.exp(torch.where(mask, old_logprobs - engine_logprobs, 0.0))
        # A NaN engine logprob says nothing about the sampler: its token gets no weight instead of a NaN loss.
        unusable = torch.isnan(rho)
        match correction:
            case TruncatedIS(cap=cap):
                weight = torch.where(unusable, 0.0, torch.clamp(rho, max=cap))
                return weight, mask & (unusable | (rho > cap))
            case MaskedIS(low=low, high=high):
                inside = (rho >= low) & (rho <= high)  # False for NaN
                return inside.to(old_logprobs.dtype), mask & ~inside
            case _:
                assert_never(correction)


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor) -> Tensor:
    """k3 estimator of KL(π_θ ‖ π_ref) per token: exp(Δ) − Δ − 1 with Δ = log π_ref − log π_θ (≥ 0)."""
    delta = torch.where(mask, ref_logprobs - logprobs, 0.0)
    return torch.exp(delta) - delta - 1.0


def aggregate(
    per_token: Tensor,
    mask: Tensor,
    sequences: SequenceIndex,
    config: LossConfig,
    *,
    total_sequences: int | None = None,
    total_tokens: int | None = None,
) -> Tensor:
    """Reduce [B, T] to a scalar with the configured normalisation; positions off the mask contribute nothing.

    A sequence counts only if it has at least one scored token, so appended padding rows change nothing.
    `total_sequences` / `total_tokens` replace this batch's counts (gradient accumulation, data parallelism).
    """
    masked = torch.where(mask, per_token, 0.0)
    tokens_per_sequence = segment_sum(mask.to(per_token.dtype), sequences)
    num_sequences = (
        total_sequences if total_sequences is not None else (tokens_per_sequence > 0).sum().clamp(min=1)
    )
    normalisation = config.normalisation
    match normalisation:
        case "token":
            num_tokens = total_tokens if total_tokens is not None else mask.sum().clamp(min=1)
            return masked.sum() / num_tokens
        case "sequence":
            per_sequence = segment_sum(masked, sequences) / tokens_per_sequence.clamp(min=1)
            return per_sequence.sum() / num_sequences
        case "constant":
            max_tokens = config.max_tokens if config.max_tokens is not None else per_token.shape[-1]
            return masked.sum() / (num_sequences * max_tokens)
        case _:
            assert_never(normalisation)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Detached mean of `values` over the masked positions (0 when nothing is masked in)."""
    with torch.no_grad():
        return torch.where(mask, values, 0.0).sum() / mask.sum().clamp(min=1)


def _clip_metrics(terms: TokenTerms, log_ratio: Tensor, mask: Tensor) -> dict[str, Tensor]:
    with torch.no_grad():
        count = mask.sum().clamp(min=1)
        log_r = log_ratio.detach()  # already 0 off the mask, where the k3 term below is 0 too
        return {
            "clip_low_fraction": (terms.clipped_low & mask).sum() / count,
            "clip_high_fraction": (terms.clipped_high & mask).sum() / count,
            "delta_capped_fraction": (terms.delta_capped & mask).sum() / count,
            "ratio_mean": torch.where(mask, terms.ratio, 0.0).sum() / count,
            # k3 estimate of KL(π_old ‖ π_θ) on tokens sampled from π_old: (r − 1) − log r ≥ 0
            "approx_kl": (torch.expm1(log_r) - log_r).sum() / count,
        }


def _check_inputs(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    engine_logprobs: Tensor | None,
    ref_logprobs: Tensor | None,
    entropy: Tensor | None,
    sequence_ids: Tensor | None,
) -> None:
    if logprobs.dim() != 2:
        raise LossInputError(f"logprobs must be [B, T], got shape {tuple(logprobs.shape)}")
    shape = logprobs.shape
    named = {
        "old_logprobs": old_logprobs,
        "mask": mask,
        "engine_logprobs": engine_logprobs,
        "ref_logprobs": ref_logprobs,
        "entropy": entropy,
        "sequence_ids": sequence_ids,
    }
    for name, tensor in named.items():
        if tensor is not None and tensor.shape != shape:
            raise LossInputError(f"{name} has shape {tuple(tensor.shape)}, logprobs {tuple(shape)}")
    if advantages.shape not in (shape, shape[:1]):
        raise LossInputError(
            f"advantages must be [B] or [B, T]; got {tuple(advantages.shape)} for {tuple(shape)}"
        )
    if sequence_ids is not None and advantages.dim() == 1:
        raise LossInputError("with sequence_ids (packed rows) advantages must be per token, [B, T]")


def _check_config_inputs(
    config: LossConfig, engine_logprobs: Tensor | None, ref_logprobs: Tensor | None, entropy: Tensor | None
) -> None:
    if not isinstance(config.correction, NoCorrection) and engine_logprobs is None:
        raise LossInputError(f"the {config.correction.kind} correction needs engine_logprobs")
    if config.kl_coef > 0 and ref_logprobs is None:
        raise LossInputError("kl_coef > 0 needs ref_logprobs")
    if config.entropy_coef > 0 and entropy is None:
        raise LossInputError("entropy_coef > 0 needs the per-token entropy")
