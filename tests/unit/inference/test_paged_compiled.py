"""What the CUDA engine compiles, compiled on inductor's CPU backend: the seeded sampler picks what the eager
sampler picks, and compiled FlexAttention over the paged pool generates what the padded engine generates.

The CPU backend shares dynamo's capture and inductor's lowering with the CUDA one (not its kernels), so a
lowering that changes the noise or a mask that reads the wrong pool shows up here without a GPU.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from inference_testkit import tiny_model
from test_paged_engine import assert_same, requests

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.inference import PagedEngine, SamplingParams, TorchEngine
from swarmrl.inference.paged import model_runner
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


def test_compiled_flex_attention_in_the_engine_generates_what_the_padded_engine_generates(
    monkeypatch,
) -> None:
    monkeypatch.setattr(model_runner, "_eager_flex", model_runner._compiled_flex)
    batch = requests(5, seed=1, group=3)
    params = SamplingParams(max_new_tokens=12, temperature=0.8)
    expected = TorchEngine(tiny_model()).generate(batch, params)
    config = PagedEngineConfig(attention="flex", block_size=16, max_num_seqs=16, cpu_kv_cache_gib=2e-3)
    first, second = PagedEngine(tiny_model(), config), PagedEngine(tiny_model(), config)
    assert first.runner.attention._flex is model_runner._compiled["flex"]
    assert_same(expected, first.generate(batch, params))
    assert_same(expected, second.generate(batch, params))  # its own pool, not the first engine's
    assert_same(expected, first.generate(batch, params))
