"""Seeded Gumbel-max sampling: every token choice is a pure function of (seed, position, logits).

Token t of a completion sampled with seed s is

    argmax_v  logits[v] / T + g(s, t, v)      over the top-p nucleus (−inf elsewhere),

where g is Gumbel noise drawn from a counter-based hash instead of a stateful generator. A validator that
knows (s, t) recomputes g bit for bit and replays the choice from its own prefill logits, whatever the batch
size, the order of requests or the thread count on either side. Gumbel-max samples exactly from
softmax(logits / T) restricted to the nucleus, so the logprob the engine reports is that of this sampling
distribution: log-softmax of logits / T with tokens outside the nucleus removed and the rest renormalised.

The noise, exactly (all arithmetic mod 2^64, mix = splitmix64's finaliser):
    key  = mix(mix(seed XOR "swrl-gbl") + position · γ)          γ = 0x9E3779B97F4A7C15
    bits = mix(key + (token + 1) · γ)                              (splitmix64 output token+1 seeded at key)
    u    = ((bits >>> 11) + 0.5) · 2^-53,   g = −log(−log u)        (float64)
`position` is the index of the token within the completion (0 for the first generated token), so the prompt's
length and padding do not enter. A reimplementation (another engine, a GPU kernel) reproduces the bits exactly;
its float64 log may differ in the last ulp, which changes a choice only at a near-exact tie, far below the
logit differences between two machines' forward passes — hence `choice_margins` for checking.

Temperature 0 is greedy decoding (argmax of the logits, no noise). Its sampling distribution is a point
mass, which carries no information for RL, so for T = 0 the reported logprobs are those at T = 1.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from swarmrl.inference.errors import InvalidRequestError

_UINT64 = 1 << 64


def _as_int64(value: int) -> int:
    """The int64 whose two's-complement bits equal the uint64 `value`; torch has no uint64 arithmetic."""
    return value - _UINT64 if value >= 1 << 63 else value


# splitmix64 (Steele, Lea & Flood 2014): increment and finaliser multipliers.
_GAMMA = _as_int64(0x9E3779B97F4A7C15)
_MIX_1 = _as_int64(0xBF58476D1CE4E5B9)
_MIX_2 = _as_int64(0x94D049BB133111EB)
# Separates this noise from any other stream derived from the same sample seed.
_NOISE_DOMAIN = _as_int64(int.from_bytes(b"swrl-gbl", "big"))
_MANTISSA_BITS = 53


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical (unsigned) right shift of int64 bit patterns; torch's `>>` on int64 is arithmetic."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors; int64 products wrap, so the bits equal the uint64 reference."""
    x = x ^ _shift_right(x, 30)
    x *= _MIX_1  # in place from here on: this runs on [batch, vocab] every decoding step
    x ^= _shift_right(x, 27)
    x *= _MIX_2
    x ^= _shift_right(x, 31)
    return x


def int64_tensor(values: torch.Tensor | Sequence[int], name: str) -> torch.Tensor:
    try:
        tensor = torch.as_tensor(values, dtype=torch.int64)
    except (OverflowError, RuntimeError, TypeError, ValueError) as exc:
        raise InvalidRequestError(f"{name} must be integers in the int64 range: {exc}") from exc
    if tensor.dim() != 1:
        raise InvalidRequestError(f"{name} must be one-dimensional, got shape {tuple(tensor.shape)}")
    return tensor


def uniform_from_bits(bits: torch.Tensor) -> torch.Tensor:
    """Top 53 bits → float64 in the open interval (0, 1): the midpoint of one of 2^53 equal cells."""
    return _shift_right(bits, 64 - _MANTISSA_BITS).to(torch.float64).add_(0.5).mul_(2.0**-_MANTISSA_BITS)


def noise_bits(
    seeds: torch.Tensor | Sequence[int], positions: torch.Tensor | Sequence[int], vocab_size: int
) -> torch.Tensor:
    """[B, V] int64 hashes: token v's is output v + 1 of a splitmix64 stream keyed by (seed, position)."""
    seeds = int64_tensor(seeds, "seeds")
    positions = int64_tensor(positions, "positions")
    if seeds.shape != positions.shape:
        raise InvalidRequestError(f"{seeds.numel()} seeds for {positions.numel()} positions")
    stream_key = mix64(mix64(seeds ^ _NOISE_DOMAIN) + positions * _GAMMA)
    return mix64(stream_key[:, None] + _counters(vocab_size, seeds.device)[None, :])


def _counters(vocab_size: int, device: torch.device) -> torch.Tensor:
    """[V] (token + 1) · γ mod 2^64, computed eagerly once per vocabulary and device.

    Kept out of compiled graphs: inductor has folded arange × constant into index arithmetic, which does not
    wrap mod 2^64 (different noise, different tokens). `torch.compiler.disable` would do it, but applying it
    imports torch._dynamo, seconds of a worker's start-up; so the eager path, where nothing compiles, never
    reaches it, and torch's lazy form of it imports dynamo only when a graph is being traced.
    """
    if torch.compiler.is_compiling():
        return _counters_outside_graphs(vocab_size, device)
    return _counter_table(vocab_size, device)


@functools.lru_cache(maxsize=8)
def _counter_table(vocab_size: int, device: torch.device) -> torch.Tensor:
    return torch.arange(1, vocab_size + 1, dtype=torch.int64, device=device) * _GAMMA


_counters_outside_graphs = torch._disable_dynamo(_counter_table)


def gumbel_noise(
    seeds: torch.Tensor | Sequence[int], positions: torch.Tensor | Sequence[int], vocab_size: int
) -> torch.Tensor:
    """[B, V] float64 standard Gumbel noise, a pure function of (seed, position, token id) per element."""
    uniform = uniform_from_bits(noise_bits(seeds, positions, vocab_size))
    return uniform.log_().neg_().log_().neg_()


def check_sampling_params(temperature: float, top_p: float) -> None:
    if not temperature >= 0.0 or temperature == float("inf"):
        raise InvalidRequestError(f"temperature must be finite and >= 0, got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise InvalidRequestError(f"top_p must lie in (0, 1], got {top_p}")


def scaled_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """float32 logits / T (T = 0 reads as 1, see the module docstring)."""
    return logits.float() / (temperature if temperature > 0.0 else 1.0)


def nucleus_mask(scaled: torch.Tensor, top_p: float) -> torch.Tensor:
    """True inside the top-p nucleus: tokens, most probable first, whose probability mass before them is < p.

    The most probable token is always inside. Equal probabilities are ordered by token id (stable sort), so
    the nucleus is a function of the logits alone.
    """
    if top_p >= 1.0:
        return torch.ones_like(scaled, dtype=torch.bool)
    probs = torch.softmax(scaled, dim=-1)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    return torch.zeros_like(scaled, dtype=torch.bool).scatter(-1, order, mass_before < top_p)


def sampling_log_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """[N, V] float32 log-probabilities of the sampling distribution; −inf outside the nucleus."""
    check_sampling_params(temperature, top_p)
    scaled = scaled_logits(logits, temperature)
    if top_p < 1.0:
        scaled = scaled.masked_fill(~nucleus_mask(scaled, top_p), float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def logprobs_of(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float, top_p: float = 1.0
) -> torch.Tensor:
    """[N] float32 log-probability of `tokens` under the sampling distribution of `logits` [N, V]."""
    return sampling_log_probs(logits, temperature, top_p).gather(-1, tokens[:, None]).squeeze(-1)


def perturbed_scores(
    log_probs: torch.Tensor, seeds: torch.Tensor | Sequence[int], positions: torch.Tensor | Sequence[int]
) -> torch.Tensor:
    """[B, V] float64 log p + Gumbel noise; its argmax is the seeded choice.

    Log-probabilities of the sampling distribution differ from logits / T by a per-row constant (and are −inf
    outside the nucleus), so the argmax equals that of logits / T + g over the nucleus.
    """
    device = log_probs.device
    seeds, positions = (
        int64_tensor(seeds, "seeds").to(device),
        int64_tensor(positions, "positions").to(device),
    )
    return log_probs.to(torch.float64) + gumbel_noise(seeds, positions, log_probs.shape[-1])


def _first_argmax(scores: torch.Tensor) -> torch.Tensor:
    # `max` over a dimension returns the first maximal index, as `argmax` does, in about a third of the time.
    return scores.max(dim=-1).indices


def choose(
    logits: torch.Tensor,
    seeds: torch.Tensor | Sequence[int],
    positions: torch.Tensor | Sequence[int],
    temperature: float,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids [B], their logprobs [B]) for one decoding step; the engine's hot path."""
    log_probs = sampling_log_probs(logits, temperature, top_p)
    if temperature == 0.0:
        tokens = _first_argmax(logits)
    else:
        tokens = _first_argmax(perturbed_scores(log_probs, seeds, positions))
    return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)


def sample_tokens(
    logits: torch.Tensor,
    seeds: torch.Tensor | Sequence[int],
    positions: torch.Tensor | Sequence[int],
    temperature: float,
    top_p: float = 1.0,
) -> torch.Tensor:
    """[B] token ids: seeded Gumbel-max over the nucleus of logits [B, V] / T; argmax for T = 0."""
    return choose(logits, seeds, positions, temperature, top_p)[0]


def choice_margins(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    seeds: torch.Tensor | Sequence[int],
    positions: torch.Tensor | Sequence[int],
    temperature: float,
    top_p: float = 1.0,
) -> torch.Tensor:
    """[B] float64: the claimed token's perturbed score minus the best other token's.

    ≥ 0 where replaying the seeded sampler on these logits picks the claimed token. A validator whose logits
    differ slightly from the worker's (other hardware, other kernels) accepts small negative margins and
    rejects large ones; −inf means the token lies outside the nucleus.
    """
    log_probs = sampling_log_probs(logits, temperature, top_p)
    if temperature == 0.0:
        scores = logits.to(torch.float64)
    else:
        scores = perturbed_scores(log_probs, seeds, positions)
    claimed = scores.gather(-1, tokens[:, None]).squeeze(-1)
    best_other = scores.scatter(-1, tokens[:, None], float("-inf")).max(dim=-1).values
    return claimed - best_other
