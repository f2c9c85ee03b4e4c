"""The paged engine's CUDA paths: compiled FlexAttention, CUDA graphs per bucket, the compiled sampler, memory
sizing and device-side TOPLOC — each against the eager CUDA path, the CPU engines and the CPU validator.

Run by `make test-gpu` on a machine with a CUDA device; skipped elsewhere.
"""

from __future__ import annotations

import copy
import gc

import pytest
import torch
from inference_testkit import assert_bf16_close, prompts, tiny_model

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.inference import GenerationRequest, InferenceError, PagedEngine, SamplingParams, TorchEngine
from swarmrl.inference.prefill import prefill
from swarmrl.inference.sampler import choose
from swarmrl.models.shapes import build_shaped_model
from swarmrl.toploc import build_proofs_batch, verify_proofs_batch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

PARAMS = SamplingParams(max_new_tokens=24, temperature=1.0)


def requests(count: int = 12, seed: int = 0, group: int = 2) -> list[GenerationRequest]:
    return [
        GenerationRequest(p, seed=1000 + 17 * i + g)
        for i, p in enumerate(prompts(count, seed))
        for g in range(group)
    ]


def cuda_engine(model: torch.nn.Module | None = None, **config: object) -> PagedEngine:
    """A small engine; equal pools (fixed kv_blocks) let every engine of the file share compiled kernels."""
    model = model if model is not None else copy.deepcopy(tiny_model()).cuda()
    return PagedEngine(model, PagedEngineConfig(**{"max_num_seqs": 16, "kv_blocks": 512, **config}))


def assert_same(expected, got, atol: float = 1e-4) -> None:
    for a, b in zip(expected, got, strict=True):
        assert a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=atol, rtol=0)
        assert_bf16_close(a.hidden_states.cpu(), b.hidden_states.cpu())


def test_graphs_flex_and_gather_on_cuda_generate_what_the_cpu_engine_generates() -> None:
    batch = requests()
    expected = TorchEngine(tiny_model()).generate(batch, PARAMS)
    graphs = cuda_engine()
    assert graphs.runner.attention_kind == "flex" and graphs.runner._graphs
    for engine in (
        graphs,
        cuda_engine(cuda_graphs=False),
        cuda_engine(attention="gather", cuda_graphs=False),
    ):
        assert_same(expected, engine.generate(batch, PARAMS))
    # Rows refilled into smaller and larger buckets as others stop.
    assert_same(expected, cuda_engine(max_num_seqs=5).generate(batch, PARAMS))


def test_two_engines_in_one_process_each_read_their_own_pool() -> None:
    batch = requests(6, seed=1)
    expected = TorchEngine(tiny_model()).generate(batch, PARAMS)
    first, second = cuda_engine(), cuda_engine()
    assert_same(expected, second.generate(batch, PARAMS))
    assert_same(expected, first.generate(batch, PARAMS))


def test_replayed_graphs_see_new_weights() -> None:
    engine = cuda_engine()
    batch = requests(4, seed=2)
    before = [g.completion_ids for g in engine.generate(batch, PARAMS)]
    other = type(tiny_model())(tiny_model().config)
    engine.load_weights({k: v.cuda() for k, v in other.state_dict().items()}, policy_step=1)
    expected = [g.completion_ids for g in TorchEngine(other.eval()).generate(batch, PARAMS)]
    assert expected != before
    assert [g.completion_ids for g in engine.generate(batch, PARAMS)] == expected


def test_the_compiled_sampler_picks_what_the_eager_sampler_picks() -> None:
    generator = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(64, 151936, device="cuda", generator=generator).to(torch.bfloat16)
    seeds = torch.arange(64, device="cuda") * 7919
    positions = torch.arange(64, device="cuda") % 5
    compiled = torch.compile(choose, dynamic=True)
    for temperature, top_p in ((1.0, 1.0), (0.7, 1.0), (1.0, 0.9), (0.0, 1.0)):
        tokens, logprobs = choose(logits, seeds, positions, temperature, top_p)
        fused_tokens, fused_logprobs = compiled(logits, seeds, positions, temperature, top_p)
        assert torch.equal(tokens, fused_tokens)
        assert torch.allclose(logprobs, fused_logprobs, atol=1e-5, rtol=0)


def test_the_kv_pool_follows_gpu_memory_fraction() -> None:
    def blocks(fraction: float) -> int:
        engine = cuda_engine(kv_blocks=None, gpu_memory_fraction=fraction, cuda_graphs=False)
        count = engine.runner.pool.num_blocks
        del engine
        gc.collect()
        torch.cuda.empty_cache()
        return count

    small, large = blocks(0.2), blocks(0.4)
    free, total = torch.cuda.mem_get_info()
    block_bytes = cuda_engine(cuda_graphs=False).runner.pool.shape.bytes_per_slot() * 128
    # Twice the grant: about 0.2 of the device more for the pool (less only by what else was allocated).
    assert large - small == pytest.approx(0.2 * total / block_bytes, rel=0.05)
    with pytest.raises(InferenceError, match="gpu_memory_fraction"):
        cuda_engine(kv_blocks=None, gpu_memory_fraction=max(1e-3, (total - free) / total / 2))


def test_a_bf16_qwen3_shape_on_cuda_verifies_on_the_cpu_validator_and_proves_on_device() -> None:
    model = build_shaped_model(
        "qwen3-0.6b", device="cuda", num_hidden_layers=4, hidden_size=256, intermediate_size=768, head_dim=64
    )
    engine = cuda_engine(model, hidden_states_device="engine", max_num_seqs=32)
    batch = [GenerationRequest([151644, *p, 151645], seed=s) for s, p in enumerate(prompts(16, 3))]
    generations = engine.generate(batch, SamplingParams(max_new_tokens=64, temperature=1.0))
    assert all(g.hidden_states.is_cuda for g in generations)
    proofs = build_proofs_batch([g.hidden_states for g in generations])
    assert proofs == build_proofs_batch([g.hidden_states.cpu() for g in generations])
    cpu_model = copy.deepcopy(model).cpu()
    results = prefill(
        cpu_model,
        [g.prompt_ids for g in generations],
        [g.completion_ids for g in generations],
        temperature=1.0,
        seeds=[g.seed for g in generations],
        batch_size=4,
    )
    reports = verify_proofs_batch(proofs, [r.hidden_states for r in results])
    assert all(report.ok for report in reports)
    margins = torch.cat([r.choice_margins for r in results])
    assert (margins >= -0.05).all() and (margins < 0).float().mean() < 0.01  # bf16 logits, two devices
