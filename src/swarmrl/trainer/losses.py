"""Policy-gradient losses of the trainer, as pure functions of per-token logprobs.

Conventions shared by every function here:

- Tensors are [B, T]: B rows, T token positions. `mask` marks the positions scored by the loss (completion
  tokens); everything else may hold garbage and never reaches the loss or its gradient.
- `logprobs` / `old_logprobs` / `engine_logprobs` are log π(token | prefix) computed on the logits
  **divided by the sampling temperature** — the caller does that division, so the ratios compare the
  distributions the workers actually sampled from. `old_logprobs` is π_old recomputed by the trainer at the
  start of the policy step; `engine_logprobs` are the ones the inference engine reported, used only for the
  behaviour correction.
- `advantages` is [B] (one per row, broadcast over its tokens) or [B, T] (per token, e.g. for packed rows).
- A row is one sequence unless `sequence_ids` says otherwise (packed rows hold several sequences: pass
  `PackedBatch.target_sequence_ids`); sequence-level quantities (GRPO's per-sequence mean, GSPO's ratio) are
  taken over tokens that share a sequence id.

Symbols follow the papers: r = π_θ / π_old, A the advantage, ε the clip range, δ INTELLECT-2's ratio cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from swarmrl.configs.loss import (
    CISPOClip,
    GSPOClip,
    LossConfig,
    MaskedIS,
    NoCorrection,
    TruncatedIS,
    TwoSidedClip,
)


class LossInputError(ValueError):
    """The tensors handed to the loss do not fit together or a tensor the config needs is missing."""


@dataclass(frozen=True)
class LossOutput:
    loss: Tensor  # scalar to call .backward() on
    metrics: dict[str, Tensor]  # detached scalars; float(v) each when logging (one device sync per value)


@dataclass(frozen=True)
class TokenTerms:
    """The per-token loss ℓ_t of one objective, and which tokens its clipping acted on."""

    loss: Tensor  # [B, T], not yet masked or normalised
    ratio: Tensor  # [B, T] detached ratio the objective clipped (per-token r, or GSPO's sequence s_i)
    clipped_low: Tensor  # [B, T] bool
    clipped_high: Tensor  # [B, T] bool
    delta_capped: Tensor  # [B, T] bool, INTELLECT-2's δ mask (always False for the other objectives)


@dataclass(frozen=True)
class SequenceIndex:
    """Which sequence each token belongs to, for sums over sequences."""

    ids: Tensor | None  # [B, T] long, in [0, count); None: each row is one sequence
    count: int

    def spread(self, per_sequence: Tensor, like: Tensor) -> Tensor:
        """[count] → [B, T]: each token gets its sequence's value."""
        if self.ids is None:
            return per_sequence.unsqueeze(-1).expand_as(like)
        return per_sequence.gather(0, self.ids.reshape(-1)).view_as(like)


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
    mask = mask.bool()
    advantages = advantages.unsqueeze(-1).expand_as(logprobs) if advantages.dim() == 1 else advantages
    sequences = sequence_index(mask, sequence_ids)
    # log r_t, zero off the mask so padding garbage can never overflow into NaN gradients
    log_ratio = torch.where(mask, logprobs - old_logprobs, 0.0)

    objective = config.objective
    if isinstance(objective, TwoSidedClip):
        terms = two_sided_clip_terms(log_ratio, advantages, objective)
    elif isinstance(objective, GSPOClip):
        terms = gspo_terms(logprobs, log_ratio, advantages, mask, sequences, objective)
    elif isinstance(objective, CISPOClip):
        terms = cispo_terms(logprobs, log_ratio, advantages, mask, objective)
    else:
        raise LossInputError(f"unknown objective {objective!r}")

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
    metrics.update(_clip_metrics(terms, log_ratio, mask))
    if not isinstance(config.correction, NoCorrection):
        metrics["is_corrected_fraction"] = masked_mean(corrected.float(), mask)
        metrics["is_weight_mean"] = masked_mean(weight, mask)
    return LossOutput(loss=loss, metrics=metrics)


def two_sided_clip_terms(log_ratio: Tensor, advantages: Tensor, objective: TwoSidedClip) -> TokenTerms:
    """ℓ_t = max(−r̃·A, −clip(r̃, 1−ε_low, 1+ε_high)·A) with r̃ = min(r, δ) (INTELLECT-2, eq. 1)."""
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


def gspo_terms(
    logprobs: Tensor,
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    sequences: SequenceIndex,
    objective: GSPOClip,
) -> TokenTerms:
    """GSPO-token: ℓ_t = max(−s_t·A, −clip(s_t, 1−ε_low, 1+ε_high)·A), s_t = sg[s_i]·π_t / sg[π_t].

    s_i = exp(mean_t log r_t) is the length-normalised sequence ratio; s_t equals s_i in value, and with the
    per-sequence normalisation its gradient averaged over the sequence is exactly ∇s_i
    (arXiv 2507.18071 §4.3).
    """
    log_s = sequences.spread(segment_mean(log_ratio, mask, sequences), like=log_ratio)
    own_logprobs = torch.where(mask, logprobs, 0.0)
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


def cispo_terms(
    logprobs: Tensor, log_ratio: Tensor, advantages: Tensor, mask: Tensor, objective: CISPOClip
) -> TokenTerms:
    """CISPO: ℓ_t = −sg[clip(r_t, 1−ε_low, 1+ε_high)] · A · log π_t — every token keeps a gradient."""
    ratio = torch.exp(log_ratio.detach())
    weight = torch.clamp(ratio, 1.0 - objective.epsilon_low, 1.0 + objective.epsilon_high)
    loss = -weight * advantages * torch.where(mask, logprobs, 0.0)
    return TokenTerms(
        loss=loss,
        ratio=ratio,
        clipped_low=ratio < 1.0 - objective.epsilon_low,
        clipped_high=ratio > 1.0 + objective.epsilon_high,
        delta_capped=torch.zeros_like(mask),
    )


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
        if isinstance(correction, TruncatedIS):
            weight = torch.where(unusable, 0.0, torch.clamp(rho, max=correction.cap))
            return weight, mask & (unusable | (rho > correction.cap))
        if isinstance(correction, MaskedIS):
            inside = (rho >= correction.low) & (rho <= correction.high)  # False for NaN
            return inside.to(old_logprobs.dtype), mask & ~inside
    raise LossInputError(f"unknown behaviour correction {correction!r}")


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
    if config.normalisation == "token":
        num_tokens = total_tokens if total_tokens is not None else mask.sum().clamp(min=1)
        return masked.sum() / num_tokens
    if config.normalisation == "sequence":
        per_sequence = segment_sum(masked, sequences) / tokens_per_sequence.clamp(min=1)
        return per_sequence.sum() / num_sequences
    if config.normalisation == "constant":
        max_tokens = config.max_tokens if config.max_tokens is not None else per_token.shape[-1]
        return masked.sum() / (num_sequences * max_tokens)
    raise LossInputError(f"unknown normalisation {config.normalisation!r}")


def sequence_index(mask: Tensor, sequence_ids: Tensor | None) -> SequenceIndex:
    """Row index per token by default; otherwise the given ids (off-mask ids are ignored)."""
    if sequence_ids is None:
        return SequenceIndex(ids=None, count=mask.shape[0])
    ids = torch.where(mask, sequence_ids.long(), 0)
    if bool((ids < 0).any()):
        raise LossInputError("sequence_ids must be >= 0 on every masked token")
    return SequenceIndex(ids=ids, count=int(ids.max()) + 1 if ids.numel() else 1)


def segment_sum(per_token: Tensor, sequences: SequenceIndex) -> Tensor:
    """Σ over the tokens of each sequence: [B, T] → [count] (differentiable)."""
    if sequences.ids is None:
        return per_token.sum(-1)
    totals = torch.zeros(sequences.count, dtype=per_token.dtype, device=per_token.device)
    return totals.index_add(0, sequences.ids.reshape(-1), per_token.reshape(-1))


def segment_mean(per_token: Tensor, mask: Tensor, sequences: SequenceIndex) -> Tensor:
    """Mean over the masked tokens of each sequence: [B, T] → [count]; 0 for a sequence with no token."""
    sums = segment_sum(torch.where(mask, per_token, 0.0), sequences)
    counts = segment_sum(mask.to(per_token.dtype), sequences)
    return sums / counts.clamp(min=1)


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
