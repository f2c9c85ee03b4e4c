"""What a server may ask of the seeded sampler beyond temperature and top-p: penalties, top-k, min-p, a
token mask (a grammar's), and the most likely alternatives of each choice.

Rollouts never use any of it: workers and validators sample and replay with `sampler.choose` alone. A served
request that asks for none of it is sampled by `choose` too (same tokens, same logprobs); one that does gets
the same seeded Gumbel-max over a processed distribution, in this order:

    logits → repetition penalty (prompt and completion tokens) → presence and frequency penalties (completion
    tokens) → / T → token mask → top-k → top-p → min-p → log-softmax

Each step that removes tokens sets them to −inf, so the reported logprobs, alternatives included, are those of
the distribution the token was drawn from (vLLM's "processed" logprobs, as rollouts report them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from swarmrl.inference.sampler import nucleus_mask, perturbed_scores, scaled_logits

NO_TOKEN = float("-inf")


@dataclass(frozen=True)
class LogitsProcessing:
    """Penalties and cut-offs as vLLM names them; the defaults change nothing."""

    top_k: int = 0  # keep the k most likely tokens; 0: all
    min_p: float = 0.0  # drop tokens less likely than min_p × the most likely one's probability
    repetition_penalty: float = 1.0  # > 1 discourages every token already in the prompt or the completion
    presence_penalty: float = 0.0  # subtracted from a token's logit once it appears in the completion
    frequency_penalty: float = 0.0  # subtracted once per appearance in the completion

    def __post_init__(self) -> None:
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: off), got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must lie in [0, 1], got {self.min_p}")
        if not self.repetition_penalty > 0.0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

    @property
    def penalised(self) -> bool:
        return self.repetition_penalty != 1.0 or bool(self.presence_penalty) or bool(self.frequency_penalty)

    @property
    def is_identity(self) -> bool:
        return not (self.top_k or self.min_p or self.penalised)


@dataclass(frozen=True)
class History:
    """The tokens a row's penalties look at."""

    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]


def token_counts(rows: Sequence[Sequence[int]], vocab_size: int, device: torch.device) -> torch.Tensor:
    """[B, V] float32: how often each token occurs in each row."""
    counts = torch.zeros(len(rows), vocab_size, dtype=torch.float32, device=device)
    for row, ids in enumerate(rows):
        if ids:
            index = torch.as_tensor(list(ids), dtype=torch.int64, device=device)
            counts[row].index_add_(0, index, torch.ones(len(ids), device=device))
    return counts


def penalised_logits(
    logits: torch.Tensor, histories: Sequence[History], processing: LogitsProcessing
) -> torch.Tensor:
    """float32 logits with the repetition penalty (a seen token's positive logit divided by it, a negative one
    multiplied, as HF and vLLM do) and the presence and frequency penalties (OpenAI's formula) applied."""
    out = logits.float().clone()
    vocab, device = out.shape[-1], out.device
    if processing.repetition_penalty != 1.0:
        seen = token_counts([[*h.prompt_ids, *h.completion_ids] for h in histories], vocab, device) > 0
        penalty = processing.repetition_penalty
        out = torch.where(seen, torch.where(out > 0, out / penalty, out * penalty), out)
    if processing.presence_penalty or processing.frequency_penalty:
        counts = token_counts([h.completion_ids for h in histories], vocab, device)
        out -= processing.frequency_penalty * counts + processing.presence_penalty * (counts > 0).float()
    return out


def top_k_mask(scaled: torch.Tensor, k: int) -> torch.Tensor:
    """True for each row's k highest scores (ties at the k-th score all kept); everything for k = 0."""
    if k <= 0 or k >= scaled.shape[-1]:
        return torch.ones_like(scaled, dtype=torch.bool)
    kth = scaled.topk(k, dim=-1).values[:, -1:]
    return scaled >= kth


def min_p_mask(scaled: torch.Tensor, min_p: float) -> torch.Tensor:
    """True where a token's probability is at least min_p × the row's highest."""
    if min_p <= 0.0:
        return torch.ones_like(scaled, dtype=torch.bool)
    log_ratio = scaled - scaled.max(dim=-1, keepdim=True).values
    return log_ratio >= torch.log(torch.tensor(min_p, device=scaled.device))


def processed_log_probs(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    processing: LogitsProcessing,
    histories: Sequence[History],
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """[B, V] float32 log-probabilities of the processed sampling distribution (module docstring's order);
    `allowed` [B, V] bool is a token mask (a grammar's), True where a token may come next."""
    logits = penalised_logits(logits, histories, processing) if processing.penalised else logits
    scaled = scaled_logits(logits, temperature)
    if allowed is not None:
        scaled = scaled.masked_fill(~allowed, NO_TOKEN)
    if processing.top_k:
        scaled = scaled.masked_fill(~top_k_mask(scaled, processing.top_k), NO_TOKEN)
    if top_p < 1.0:
        scaled = scaled.masked_fill(~nucleus_mask(scaled, top_p), NO_TOKEN)
    if processing.min_p:
        scaled = scaled.masked_fill(~min_p_mask(scaled, processing.min_p), NO_TOKEN)
    return torch.log_softmax(scaled, dim=-1)


def choose_processed(
    log_probs: torch.Tensor,
    seeds: Sequence[int],
    positions: Sequence[int],
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [B], their logprobs [B]) drawn from `processed_log_probs` with the rollouts' seeded noise;
    greedy (the most likely processed token) at T = 0."""
    scores = log_probs if temperature == 0.0 else perturbed_scores(log_probs, seeds, positions)
    tokens = scores.max(dim=-1).indices
    return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)


def top_alternatives(log_probs: torch.Tensor, k: int) -> list[list[tuple[int, float]]]:
    """Each row's k most likely (token, logprob) pairs, most likely first (equal ones by token id)."""
    if k <= 0:
        return [[] for _ in range(log_probs.shape[0])]
    ordered, order = torch.sort(log_probs, dim=-1, descending=True, stable=True)
    values, ids = ordered[:, :k].double().cpu().tolist(), order[:, :k].cpu().tolist()
    return [
        list(zip(row_ids, row_values, strict=True)) for row_ids, row_values in zip(ids, values, strict=True)
    ]
