"""The seeded sampler compiled by torch.compile picks what the eager sampler picks (the CUDA engine compiles
it; inductor's CPU backend shares its graph lowering, so a lowering that breaks the noise shows up here)."""

from __future__ import annotations

import shutil

import pytest
import torch

from swarmrl.inference.sampler import choose, gumbel_noise

torch.set_num_threads(1)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("g++") is None, reason="inductor's CPU backend needs a C++ compiler"),
]


def test_compiled_noise_and_choices_equal_the_eager_ones() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(8, 5000, generator=generator).to(torch.bfloat16)
    seeds = torch.arange(8) * 7919 - (1 << 62)
    positions = torch.arange(8) % 3
    noise = torch.compile(gumbel_noise, dynamic=True)(seeds, positions, 5000)
    # Bits are exact; the float64 logs may differ in the last ulp.
    assert torch.allclose(noise, gumbel_noise(seeds, positions, 5000), atol=1e-13, rtol=0)
    compiled = torch.compile(choose, dynamic=True)
    for temperature, top_p in ((1.0, 1.0), (0.7, 1.0), (1.0, 0.9), (0.0, 1.0)):
        tokens, logprobs = choose(logits, seeds, positions, temperature, top_p)
        fused_tokens, fused_logprobs = compiled(logits, seeds, positions, temperature, top_p)
        assert torch.equal(tokens, fused_tokens)
        assert torch.allclose(logprobs, fused_logprobs, atol=1e-5, rtol=0)
