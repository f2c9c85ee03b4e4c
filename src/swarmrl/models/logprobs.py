"""Per-token log-probabilities and entropies of a causal LM's head, without the [tokens, vocab] tensor.

At real scale the LM head is where memory goes: 32k scored tokens × a 152k vocabulary is 19 GB of fp32
log-probabilities, and the plain path (`log_softmax(head(hidden).float() / T)`) keeps that tensor — and its
gradient — alive through the backward pass. `token_logprobs` instead runs head → log-softmax → gather (and
the entropy) over chunks of `chunk_tokens` tokens inside one custom autograd function: forward keeps only
[tokens] results, backward recomputes each chunk's logits and turns them straight into the gradients of the
hidden states and the head weight. Peak extra memory is a few [chunk_tokens, vocab] buffers in either pass.

Each chunk runs exactly the plain path's operations on its rows (division by T, `log_softmax`, gather,
−Σ p·log p), so forward values are the plain path's; gradients differ only by fp32 summation order.

Splitting the vocabulary as well (an online log-sum-exp over vocab blocks) pays only when even a few hundred
tokens × vocab exceed memory — above ~1M entries at a 1 GiB budget — so chunks run over tokens only.

Used by the trainer's losses, SFT and the validator's prefill; imports nothing from any role.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from swarmrl.models.lm_types import CausalLM

DEFAULT_CHUNK_TOKENS = 1024  # × a 152k vocab: 0.6 GB per fp32 [chunk, vocab] buffer

# Config attributes of HF models whose logits are not lm_head(hidden) alone (Gemma 2/3, Cohere, Granite):
# computing their logprobs from the head would silently score a different distribution.
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


class LogprobInputError(ValueError):
    """Inputs of the chunked logprob computation that do not fit together, or a model it cannot split."""


@dataclass(frozen=True)
class TokenScores:
    logprobs: Tensor  # [N] float32 log π(target | prefix) under logits / T
    entropy: Tensor | None  # [N] float32 entropy of softmax(logits / T); when asked


def token_chunks(num_tokens: int, chunk_tokens: int) -> Iterator[slice]:
    """Consecutive slices of at most `chunk_tokens` rows covering [0, num_tokens)."""
    if chunk_tokens < 1:
        raise LogprobInputError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    for start in range(0, num_tokens, chunk_tokens):
        yield slice(start, min(start + chunk_tokens, num_tokens))


def split_lm(model: CausalLM) -> tuple[nn.Module, nn.Linear]:
    """(backbone: ids → final hidden state after the last norm, head: a plain linear projection to logits)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        raise LogprobInputError(f"{type(model).__name__} is not a decoder-only HF causal LM")
    for name in LOGIT_TRANSFORMS:
        value = getattr(config, name, None)
        if value not in (None, 1, 1.0):
            raise LogprobInputError(f"{type(model).__name__} transforms its logits ({name}={value})")
    head, backbone = model.get_output_embeddings(), model.get_decoder()
    if not isinstance(head, nn.Linear) or backbone is None or backbone is model:
        raise LogprobInputError(f"{type(model).__name__} has no separable decoder and linear LM head")
    return backbone, head


def token_logprobs(
    hidden: Tensor,
    head: nn.Linear,
    targets: Tensor,
    temperature: float = 1.0,
    *,
    with_entropy: bool = False,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> TokenScores:
    """log softmax(head(hidden) / T)[target] for each of N rows (and the entropy), chunked; differentiable.

    `hidden` [N, H] are the final hidden states whose next tokens are `targets` [N]. Under autocast the head
    runs in the autocast dtype, as `head(hidden)` would.
    """
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise LogprobInputError(
            f"hidden must be [N, H] and targets [N]; got {tuple(hidden.shape)} and {tuple(targets.shape)}"
        )
    if hidden.shape[1] != head.in_features:
        raise LogprobInputError(f"hidden size {hidden.shape[1]} != the head's {head.in_features}")
    if not temperature > 0:
        raise LogprobInputError(f"temperature must be > 0, got {temperature}")
    if chunk_tokens < 1:
        raise LogprobInputError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    device_type = hidden.device.type
    compute_dtype = (
        torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else head.weight.dtype
    )
    logprobs, entropy = _ChunkedTokenLogprobs.apply(
        hidden,
        head.weight,
        head.bias,
        targets.long(),
        float(temperature),
        with_entropy,
        chunk_tokens,
        compute_dtype,
    )
    return TokenScores(logprobs, entropy if with_entropy else None)


def _chunk_log_probs(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, temperature: float, dtype: torch.dtype
) -> Tensor:
    """The plain path on a few rows: log_softmax(head(hidden).float() / T), [n, V] float32 (float64 stays)."""
    logits = F.linear(hidden.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype))
    return F.log_softmax(logits.to(_score_dtype(dtype)) / temperature, dim=-1)


def _score_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def _entropy(log_probs: Tensor) -> Tensor:
    return -(log_probs.exp() * log_probs).sum(-1)


class _ChunkedTokenLogprobs(torch.autograd.Function):
    """Head + log-softmax + gather (+ entropy) over token chunks, recomputing each chunk in backward.

    With z = logits / T, p = softmax(z) and ℓ_t = log p_target:
      ∂ℓ/∂z = onehot(target) − p,   ∂H/∂z = −p ⊙ (log p + H),   ∂/∂logits = (∂/∂z) / T,
    then the linear head's backward per chunk: ∂hidden = g @ W, ∂W += gᵀ @ hidden, ∂b += Σ g.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, with_entropy, chunk_tokens, dtype):
        logprobs = torch.empty(targets.shape, dtype=_score_dtype(dtype), device=hidden.device)
        entropy = torch.zeros_like(logprobs)
        with torch.autocast(hidden.device.type, enabled=False):
            for rows in token_chunks(targets.shape[0], chunk_tokens):
                log_probs = _chunk_log_probs(hidden[rows], weight, bias, temperature, dtype)
                logprobs[rows] = log_probs.gather(-1, targets[rows, None]).squeeze(-1)
                if with_entropy:
                    entropy[rows] = _entropy(log_probs)
                del log_probs
        ctx.save_for_backward(hidden, weight, bias, targets, entropy)
        ctx.options = (temperature, with_entropy, chunk_tokens, dtype)
        if not with_entropy:
            ctx.mark_non_differentiable(entropy)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy):
        hidden, weight, bias, targets, entropy = ctx.saved_tensors
        temperature, with_entropy, chunk_tokens, dtype = ctx.options
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.zeros_like(hidden) if need_hidden else None
        # fp32 accumulators over chunks: the sum of chunk products is never rounded to bf16 on the way
        accumulate = _score_dtype(dtype)
        grad_weight = (
            torch.zeros(weight.shape, dtype=accumulate, device=weight.device) if need_weight else None
        )
        grad_bias = (
            torch.zeros(bias.shape, dtype=accumulate, device=bias.device)
            if need_bias and bias is not None
            else None
        )
        use_entropy = with_entropy and grad_entropy is not None
        compute_weight = weight.to(dtype)
        with torch.autocast(hidden.device.type, enabled=False):
            for rows in token_chunks(targets.shape[0], chunk_tokens):
                log_probs = _chunk_log_probs(hidden[rows], weight, bias, temperature, dtype)
                probs = log_probs.exp()
                g_lp = grad_logprobs[rows].to(accumulate).unsqueeze(-1) if grad_logprobs is not None else None
                if use_entropy:
                    g_h = grad_entropy[rows].to(accumulate).unsqueeze(-1)
                    # −p ⊙ (log p + H) · g_H, built in the log_probs buffer to save a [n, V] allocation
                    grad_z = log_probs.add_(entropy[rows].unsqueeze(-1)).mul_(probs).mul_(-g_h)
                    if g_lp is not None:
                        grad_z.sub_(probs.mul_(g_lp))
                elif g_lp is not None:
                    grad_z = probs.mul_(-g_lp)
                else:
                    grad_z = probs.zero_()
                if g_lp is not None:
                    grad_z.scatter_add_(-1, targets[rows, None], g_lp)
                grad_logits = grad_z.div_(temperature).to(dtype)
                del log_probs, probs, grad_z
                if grad_hidden is not None:
                    grad_hidden[rows] = (grad_logits @ compute_weight).to(hidden.dtype)
                if grad_weight is not None:
                    grad_weight += grad_logits.t() @ hidden[rows].to(dtype)
                if grad_bias is not None:
                    grad_bias += grad_logits.sum(0)
        return (
            grad_hidden,
            grad_weight.to(weight.dtype) if grad_weight is not None else None,
            grad_bias.to(bias.dtype) if grad_bias is not None else None,
            None,
            None,
            None,
            None,
            None,
        )
