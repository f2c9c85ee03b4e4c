"""The seeded sampler: hash bits, exact replay, the distribution it samples, top-p and temperature."""

from __future__ import annotations

import math

import pytest
import torch

from swarmrl.inference import InvalidRequestError, choice_margins, gumbel_noise, logprobs_of, sample_tokens
from swarmrl.inference.sampler import mix64, noise_bits, nucleus_mask, sampling_log_probs

torch.set_num_threads(1)

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def reference_mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def reference_bits(seed: int, position: int, token: int) -> int:
    """The documented derivation with Python's unbounded ints, reduced mod 2^64."""
    domain = int.from_bytes(b"swrl-gbl", "big")
    key = reference_mix64((reference_mix64((seed & M64) ^ domain) + position * GAMMA) & M64)
    return reference_mix64((key + (token + 1) * GAMMA) & M64)


def to_signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def test_mix64_matches_splitmix64_reference_outputs() -> None:
    # splitmix64 seeded with 1234567: the first two outputs of the published reference generator.
    states = torch.tensor([to_signed((1234567 + GAMMA) & M64), to_signed((1234567 + 2 * GAMMA) & M64)])
    outputs = [value & M64 for value in mix64(states).tolist()]
    assert outputs == [6457827717110365317, 3203168211198807973]


@pytest.mark.parametrize("seed", [0, 1, 12345, -7, (1 << 63) - 1, -(1 << 63)])
def test_noise_bits_match_the_python_reference(seed: int) -> None:
    bits = noise_bits([seed, seed], [0, 31], 5)
    for row, position in enumerate([0, 31]):
        for token in range(5):
            assert bits[row, token].item() & M64 == reference_bits(seed, position, token)


def test_noise_of_a_row_does_not_depend_on_the_rest_of_the_batch() -> None:
    seeds, positions = [3, 99, -5, 2**40], [0, 7, 7, 123]
    together = gumbel_noise(seeds, positions, 300)
    for row in range(4):
        alone = gumbel_noise([seeds[row]], [positions[row]], 300)
        assert torch.equal(alone[0], together[row])
    torch.set_num_threads(2)
    try:
        assert torch.equal(gumbel_noise(seeds, positions, 300), together)
    finally:
        torch.set_num_threads(1)


def test_gumbel_noise_has_the_standard_gumbel_moments() -> None:
    noise = gumbel_noise(torch.arange(2000), torch.zeros(2000, dtype=torch.int64), 50)
    euler_gamma = 0.5772156649
    assert noise.mean().item() == pytest.approx(euler_gamma, abs=0.01)
    assert noise.var().item() == pytest.approx(math.pi**2 / 6, rel=0.02)


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_gumbel_max_samples_the_softmax_distribution() -> None:
    logits = torch.tensor([[1.0, 0.5, 0.0, -0.5, -1.0, 2.0]])
    draws = 20000
    for temperature in (1.0, 0.7):
        tokens = sample_tokens(
            logits.expand(draws, -1), torch.arange(draws), torch.full((draws,), 3), temperature
        )
        counts = torch.bincount(tokens, minlength=6).double()
        probs = torch.softmax(logits[0].double() / temperature, dim=-1)
        # 5 degrees of freedom: the 0.1% critical value is 20.5.
        assert chi_square(counts, probs) < 20.5


def test_top_p_keeps_only_the_nucleus_and_renormalises() -> None:
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    assert nucleus_mask(logits, 0.7).tolist() == [[True, True, False, False]]
    assert nucleus_mask(logits, 0.8001).tolist() == [[True, True, True, False]]
    assert nucleus_mask(logits, 0.01).tolist() == [[True, False, False, False]]
    draws = 20000
    tokens = sample_tokens(
        logits.expand(draws, -1), torch.arange(draws), torch.zeros(draws, dtype=torch.long), 1.0, 0.7
    )
    counts = torch.bincount(tokens, minlength=4).double()
    assert counts[2:].sum() == 0
    assert chi_square(counts[:2], torch.tensor([0.625, 0.375], dtype=torch.float64)) < 10.8  # 1 dof, 0.1%
    logprobs = logprobs_of(logits.expand(4, -1), torch.arange(4), 1.0, 0.7)
    assert logprobs[0].item() == pytest.approx(math.log(0.625), abs=1e-6)
    assert logprobs[1].item() == pytest.approx(math.log(0.375), abs=1e-6)
    assert logprobs[2].item() == float("-inf") and logprobs[3].item() == float("-inf")


def test_logprobs_are_those_of_the_temperature_scaled_distribution() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    logprobs = logprobs_of(logits.expand(3, -1), torch.arange(3), 0.5)
    normaliser = math.log(math.exp(4.0) + math.exp(2.0) + 1.0)
    assert logprobs.tolist() == pytest.approx([4.0 - normaliser, 2.0 - normaliser, -normaliser], abs=1e-6)


def test_temperature_zero_is_greedy_and_reports_temperature_one_logprobs() -> None:
    logits = torch.randn(16, 40, generator=torch.Generator().manual_seed(0))
    tokens = sample_tokens(logits, torch.arange(16), torch.zeros(16, dtype=torch.long), 0.0)
    assert torch.equal(tokens, logits.argmax(-1))
    assert torch.allclose(logprobs_of(logits, tokens, 0.0), torch.log_softmax(logits, -1).max(-1).values)


def test_choice_margins_are_non_negative_exactly_for_the_replayed_choice() -> None:
    logits = torch.randn(64, 30, generator=torch.Generator().manual_seed(1))
    seeds, positions = torch.arange(64) * 7919, torch.arange(64) % 5
    tokens = sample_tokens(logits, seeds, positions, 0.9, 0.95)
    assert (choice_margins(logits, tokens, seeds, positions, 0.9, 0.95) >= 0).all()
    other = (tokens + 1) % 30
    assert (choice_margins(logits, other, seeds, positions, 0.9, 0.95) < 0).all()


def test_different_seeds_and_positions_give_different_choices() -> None:
    logits = torch.zeros(1000, 100)
    by_seed = sample_tokens(logits, torch.arange(1000), torch.zeros(1000, dtype=torch.long), 1.0)
    by_position = sample_tokens(logits, torch.zeros(1000, dtype=torch.long), torch.arange(1000), 1.0)
    assert by_seed.unique().numel() > 90 and by_position.unique().numel() > 90


@pytest.mark.parametrize(
    ("temperature", "top_p"), [(-0.1, 1.0), (float("nan"), 1.0), (float("inf"), 1.0), (1.0, 0.0), (1.0, 1.5)]
)
def test_invalid_sampling_parameters_are_rejected(temperature: float, top_p: float) -> None:
    with pytest.raises(InvalidRequestError):
        sampling_log_probs(torch.zeros(1, 4), temperature, top_p)


def test_seeds_outside_int64_and_mismatched_shapes_are_rejected() -> None:
    with pytest.raises(InvalidRequestError, match="int64"):
        gumbel_noise([1 << 64], [0], 4)
    with pytest.raises(InvalidRequestError, match="seeds"):
        gumbel_noise([1, 2], [0], 4)
