"""The paged engine as a `WeightSink` on CUDA: a trainer's fp32 model on the same GPU streams each policy into
the engine's bf16 tensors, and the CUDA graphs captured before the update replay with the new weights.

Run by `make test-gpu` on a machine with a CUDA device; skipped elsewhere.
"""

from __future__ import annotations

import copy

import pytest
import torch
from inference_testkit import prompts, tiny_model

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.inference import GenerationRequest, PagedEngine, SamplingParams
from swarmrl.trainer.weight_sync import push_weights

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

PARAMS = SamplingParams(max_new_tokens=24, temperature=1.0)


def requests() -> list[GenerationRequest]:
    return [
        GenerationRequest(p, seed=300 + 11 * i + g) for i, p in enumerate(prompts(8, 4)) for g in range(3)
    ]


def cuda_engine(model: torch.nn.Module) -> PagedEngine:
    """Equal pools (fixed kv_blocks) let the engines share compiled kernels."""
    return PagedEngine(model, PagedEngineConfig(max_num_seqs=16, kv_blocks=512))


def test_a_pushed_policy_replays_through_the_captured_graphs_as_a_fresh_engine_generates() -> None:
    trainer_model = copy.deepcopy(tiny_model()).cuda()  # fp32 master weights, as the trainer holds them
    engine = cuda_engine(copy.deepcopy(tiny_model()).to("cuda", torch.bfloat16))
    assert engine.runner._graphs, "the engine should decode from CUDA graphs"
    graphs = dict(engine.runner._graphs)
    pointers = {name: p.data_ptr() for name, p in engine.model.named_parameters()}
    before = engine.generate(requests(), PARAMS)

    with torch.no_grad():  # one optimizer step's worth of change
        for param in trainer_model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    push_weights(trainer_model, engine, step=7)

    assert engine.policy_step == 7 and engine.runner._graphs == graphs
    assert {name: p.data_ptr() for name, p in engine.model.named_parameters()} == pointers
    after = engine.generate(requests(), PARAMS)
    fresh = cuda_engine(copy.deepcopy(trainer_model).to(torch.bfloat16)).generate(requests(), PARAMS)
    assert [g.completion_ids for g in after] == [g.completion_ids for g in fresh]
    for a, b in zip(after, fresh, strict=True):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)
        assert a.policy_step == 7
    assert [g.completion_ids for g in after] != [g.completion_ids for g in before]
