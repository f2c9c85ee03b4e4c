"""One forward pass over prompt ‖ completion: what the validator checks and what the trainer's logπ_old needs.

Position t of a sequence produces token t + 1, so completion token i of a prompt of length P is scored by the
final hidden state at position P − 1 + i — the same state the engine captured when it sampled that token, and
the one TOPLOC commits to. Everything here is under the sampling distribution of `sampler` (logits / T,
renormalised over the top-p nucleus).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from swarmrl.inference.engine import HIDDEN_STATE_DTYPE
from swarmrl.inference.errors import InvalidRequestError
from swarmrl.inference.lm_parts import CausalLMParts, padded_position_ids, split_causal_lm
from swarmrl.inference.sampler import choice_margins, choose, int64_tensor, sampling_log_probs
from swarmrl.models.logprobs import DEFAULT_CHUNK_TOKENS, token_chunks


@dataclass
class PrefillResult:
    """Per-completion-token views of one (prompt, completion) pair; every tensor has len(completion) rows."""

    logprobs: torch.Tensor  # [C] float32 log π(token) under the sampling distribution
    token_probs: torch.Tensor  # [C] float32 π(token): a decode with a cheaper model shows up here
    entropy: torch.Tensor  # [C] float32 entropy of the sampling distribution
    hidden_states: torch.Tensor  # [C, H] bf16 final hidden states that produced each token (TOPLOC's input)
    eos_probs: (
        torch.Tensor | None
    )  # [C] float32 π(EOS) at each position (termination check); with eos_token_id
    replayed_ids: (
        torch.Tensor | None
    )  # [C] int64 what the seeded sampler picks from these logits; with a seed
    choice_margins: (
        torch.Tensor | None
    )  # [C] float64 claimed token's perturbed score − best other's; with a seed
    prompt_hidden_states: torch.Tensor | None  # [P, H] bf16 over the prompt positions; when asked


def completion_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float,
    top_p: float = 1.0,
    *,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log π(token_{t+1} | ≤ t), entropy or None), each [B, S−1] float32 and 0 where completion_mask is 0.

    `input_ids`/`attention_mask` [B, S] are padded on either side; `completion_mask` [B, S−1] marks the
    positions whose next token is a completion token. The LM head runs only on those positions, which keeps a
    large vocabulary affordable. Differentiable: the trainer calls it with and without gradients.
    """
    parts = split_causal_lm(model)
    hidden = _final_hidden(parts, input_ids, attention_mask)[:, :-1]
    selected = completion_mask.bool()
    log_probs = sampling_log_probs(parts.head(hidden[selected]), temperature, top_p)
    targets = input_ids[:, 1:][selected]
    chosen = torch.zeros(completion_mask.shape, dtype=torch.float32, device=hidden.device)
    chosen = chosen.masked_scatter(selected, log_probs.gather(-1, targets[:, None]).squeeze(-1))
    if not with_entropy:
        return chosen, None
    entropy = torch.zeros_like(chosen).masked_scatter(selected, _entropy(log_probs))
    return chosen, entropy


@torch.inference_mode()
def prefill(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    temperature: float,
    top_p: float = 1.0,
    seeds: Sequence[int] | None = None,
    eos_token_id: int | None = None,
    batch_size: int = 32,
    with_prompt_hidden_states: bool = False,
) -> list[PrefillResult]:
    """One `PrefillResult` per (prompt, completion) pair, computed `batch_size` pairs at a time (right-padded)."""
    if len(prompts) != len(completions) or (seeds is not None and len(seeds) != len(prompts)):
        raise InvalidRequestError(
            f"{len(prompts)} prompts, {len(completions)} completions, {len(seeds or [])} seeds: counts differ"
        )
    if batch_size < 1:
        raise InvalidRequestError(f"batch_size must be >= 1, got {batch_size}")
    if seeds is not None:
        int64_tensor(seeds, "seeds")  # rejects seeds a worker could not have used
    parts = split_causal_lm(model)
    results: list[PrefillResult] = []
    for start in range(0, len(prompts), batch_size):
        stop = start + batch_size
        results.extend(
            _prefill_batch(
                parts,
                prompts[start:stop],
                completions[start:stop],
                seeds[start:stop] if seeds is not None else None,
                temperature=temperature,
                top_p=top_p,
                eos_token_id=eos_token_id,
                with_prompt_hidden_states=with_prompt_hidden_states,
            )
        )
    return results


def _prefill_batch(
    parts: CausalLMParts,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    seeds: Sequence[int] | None,
    *,
    temperature: float,
    top_p: float,
    eos_token_id: int | None,
    with_prompt_hidden_states: bool,
) -> list[PrefillResult]:
    device = parts.head.weight.device
    prompt_lengths = [len(p) for p in prompts]
    completion_lengths = [len(c) for c in completions]
    _check_token_ids(prompts, completions, parts.vocab_size)
    width = max(p + c for p, c in zip(prompt_lengths, completion_lengths, strict=True))
    if parts.max_positions is not None and width > parts.max_positions:
        raise InvalidRequestError(
            f"a sequence of {width} tokens exceeds the model's {parts.max_positions} positions"
        )
    input_ids = torch.zeros((len(prompts), width), dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    scored = torch.zeros((len(prompts), width), dtype=torch.bool)  # positions that produce a completion token
    for row, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        p, c = len(prompt), len(completion)
        input_ids[row, : p + c] = torch.tensor([*prompt, *completion], dtype=torch.long)
        attention_mask[row, : p + c] = 1
        scored[row, p - 1 : p - 1 + c] = True
    hidden = _final_hidden(parts, input_ids.to(device), attention_mask.to(device))
    scored = scored.to(device)
    flat_hidden = hidden[scored]  # [N, H], rows in (pair, completion index) order
    targets = torch.tensor([t for c in completions for t in c], dtype=torch.long, device=device)
    replay = None  # (seed, position) of every completion token, when the sampler's choices are replayed
    if seeds is not None:
        replay = (
            torch.tensor([s for s, c in zip(seeds, completion_lengths, strict=True) for _ in range(c)]),
            torch.tensor([i for c in completion_lengths for i in range(c)], dtype=torch.int64),
        )
    # The head's [N, vocab] logits are made a chunk of tokens at a time (models/logprobs.py's budget).
    chunks = [
        _score_tokens(
            parts.head(flat_hidden[rows]),
            targets[rows],
            None if replay is None else (replay[0][rows], replay[1][rows]),
            temperature=temperature,
            top_p=top_p,
            eos_token_id=eos_token_id,
        )
        for rows in list(token_chunks(len(targets), DEFAULT_CHUNK_TOKENS)) or [slice(0, 0)]
    ]
    chosen = torch.cat([chunk[0] for chunk in chunks])
    entropy = torch.cat([chunk[1] for chunk in chunks])
    eos_probs, replayed, margins = (_cat_present([chunk[i] for chunk in chunks]) for i in (2, 3, 4))

    results = []
    offsets = [0]
    for c in completion_lengths:
        offsets.append(offsets[-1] + c)
    for row, (begin, end) in enumerate(zip(offsets, offsets[1:], strict=False)):
        results.append(
            PrefillResult(
                logprobs=chosen[begin:end].cpu(),
                token_probs=chosen[begin:end].exp().cpu(),
                entropy=entropy[begin:end].cpu(),
                hidden_states=flat_hidden[begin:end].to(HIDDEN_STATE_DTYPE).cpu(),
                eos_probs=eos_probs[begin:end].cpu() if eos_probs is not None else None,
                replayed_ids=replayed[begin:end].cpu() if replayed is not None else None,
                choice_margins=margins[begin:end].cpu() if margins is not None else None,
                prompt_hidden_states=(
                    hidden[row, : prompt_lengths[row]].to(HIDDEN_STATE_DTYPE).cpu()
                    if with_prompt_hidden_states
                    else None
                ),
            )
        )
    return results


def _cat_present(parts: list[torch.Tensor | None]) -> torch.Tensor | None:
    """The chunks' column concatenated, or None where the column was not computed (None in every chunk)."""
    present = [part for part in parts if part is not None]
    return torch.cat(present) if present else None


def _score_tokens(
    logits: torch.Tensor,
    targets: torch.Tensor,
    replay: tuple[torch.Tensor, torch.Tensor] | None,
    *,
    temperature: float,
    top_p: float,
    eos_token_id: int | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """(chosen logprob, entropy, π(EOS) or None, replayed id or None, margin or None) of a chunk of tokens;
    `replay`: the tokens' (seeds, positions), to replay the sampler's choices."""
    log_probs = sampling_log_probs(logits, temperature, top_p)
    chosen = log_probs.gather(-1, targets[:, None]).squeeze(-1)
    eos_probs = log_probs[:, eos_token_id].exp() if eos_token_id is not None else None
    replayed = margins = None
    if replay is not None:
        seeds, positions = replay
        replayed = choose(logits, seeds, positions, temperature, top_p)[0]
        margins = choice_margins(logits, targets, seeds, positions, temperature, top_p)
    return chosen, _entropy(log_probs), eos_probs, replayed, margins


def _final_hidden(
    parts: CausalLMParts, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    return parts.backbone(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=padded_position_ids(attention_mask),
        use_cache=False,
    ).last_hidden_state


def _entropy(log_probs: torch.Tensor) -> torch.Tensor:
    # Tokens outside the nucleus have probability 0 and log-probability −inf: they contribute 0, not NaN.
    return -(log_probs.exp() * log_probs.nan_to_num(neginf=0.0)).sum(-1)


def _check_token_ids(
    prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], vocab: int
) -> None:
    for index, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        if len(prompt) == 0:
            raise InvalidRequestError(f"pair {index}: empty prompt")
        ids = [*prompt, *completion]
        if min(ids) < 0 or max(ids) >= vocab:
            raise InvalidRequestError(f"pair {index}: token id outside the vocabulary [0, {vocab})")
