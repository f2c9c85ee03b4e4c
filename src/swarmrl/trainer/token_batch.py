"""What every policy objective reads and returns: one `TokenBatch` in, its `TokenTerms` out.

- Tensors are [B, T]: B rows, T token positions. `mask` marks the positions scored by the loss (completion
  tokens); everything else may hold garbage and never reaches the loss or its gradient.
- `logprobs` / `old_logprobs` are log π(token | prefix) computed on the logits **divided by the sampling
  temperature**, so the ratios compare the distributions the workers actually sampled from. `old_logprobs` is
  π_old, recomputed by the trainer at the start of the policy step.
- A row is one sequence unless `sequence_ids` says otherwise (packed rows hold several sequences: pass
  `PackedBatch.target_sequence_ids`); sequence-level quantities (GRPO's per-sequence mean, GSPO's ratio) are
  taken over tokens that share a sequence id (`segment_sum`, `segment_mean`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


class LossInputError(ValueError):
    """The tensors handed to the loss do not fit together or a tensor the config needs is missing."""


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


@dataclass(frozen=True)
class TokenBatch:
    """One micro-batch as every objective reads it, [B, T] each, aligned token for token."""

    logprobs: Tensor  # log π_θ, the policy being trained (carries the gradient)
    old_logprobs: Tensor  # log π_old, the policy the step started from (no gradient)
    log_ratio: Tensor  # log r = log π_θ − log π_old on the mask, 0 off it (padding can never overflow)
    advantages: Tensor  # A of each token (a row's advantage repeated over its tokens)
    mask: Tensor  # bool: the tokens the loss scores
    sequences: SequenceIndex


@dataclass(frozen=True)
class TokenTerms:
    """The per-token loss ℓ_t of one objective, and which tokens its clipping acted on."""

    loss: Tensor  # [B, T], not yet masked or normalised
    ratio: Tensor  # [B, T] detached ratio the objective clipped (per-token r, or GSPO's sequence s_i)
    clipped_low: Tensor  # [B, T] bool
    clipped_high: Tensor  # [B, T] bool
    delta_capped: Tensor  # [B, T] bool, INTELLECT-2's δ mask (always False for the other objectives)


def token_batch(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    sequence_ids: Tensor | None = None,
) -> TokenBatch:
    """The batch an objective reads; `advantages` may be [B] (one per row) or [B, T] (per token)."""
    mask = mask.bool()
    return TokenBatch(
        logprobs=logprobs,
        old_logprobs=old_logprobs,
        log_ratio=torch.where(mask, logprobs - old_logprobs, 0.0),
        advantages=advantages.unsqueeze(-1).expand_as(logprobs) if advantages.dim() == 1 else advantages,
        mask=mask,
        sequences=sequence_index(mask, sequence_ids),
    )


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
