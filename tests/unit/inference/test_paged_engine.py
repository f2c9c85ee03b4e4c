"""The paged engine against today's padded engine and the validator's prefill, on CPU.

Same tokens, logprobs within 1e-4 and bf16 hidden states within rounding of the padded engine (the tolerances
of its own tests), whatever the batch, the refill order, the sharing of prompts, the block size or the decode
attention; replayed exactly by the validator's prefill.
"""

from __future__ import annotations

import copy

import pytest
import torch
from inference_testkit import assert_bf16_close, prompts, tiny_model, tiny_tokenizer

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.configs.model import TinyModelSpec
from swarmrl.inference import (
    GenerationRequest,
    InferenceEngine,
    InvalidRequestError,
    PagedEngine,
    SamplingParams,
    TorchEngine,
    WeightLoadError,
    build_engine,
)
from swarmrl.inference.prefill import prefill
from swarmrl.models import build_tiny_model, save_pretrained_atomic

torch.set_num_threads(1)

PARAMS = SamplingParams(max_new_tokens=16, temperature=1.0)


def requests(count: int = 8, seed: int = 0, group: int = 1) -> list[GenerationRequest]:
    """`count` prompts, each asked `group` times with different seeds (a GRPO group)."""
    return [
        GenerationRequest(p, seed=1000 + 17 * i + g)
        for i, p in enumerate(prompts(count, seed))
        for g in range(group)
    ]


def paged(arch: str = "qwen2", **config: object) -> PagedEngine:
    if config.get("attention") == "flex":
        # FlexAttention's unfused CPU path scores every slot of the pool: keep the pool small (~400 blocks).
        config.setdefault("cpu_kv_cache_gib", 1e-3)
    return PagedEngine(tiny_model(arch), PagedEngineConfig(**{"block_size": 4, **config}))


def assert_same(expected, got, atol: float = 1e-4) -> None:
    assert len(expected) == len(got)
    for a, b in zip(expected, got, strict=True):
        assert a.completion_ids == b.completion_ids and a.finish_reason == b.finish_reason
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=atol, rtol=0)
        assert_bf16_close(a.hidden_states, b.hidden_states)
        assert b.seed == a.seed and b.prompt_ids == a.prompt_ids


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "llama"])
@pytest.mark.parametrize("attention", ["gather", "flex"])
@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_the_paged_engine_generates_what_the_padded_engine_generates(
    arch: str, attention: str, top_p: float
) -> None:
    batch = requests(6, seed=1, group=3)
    params = SamplingParams(max_new_tokens=20, temperature=0.8, top_p=top_p)
    expected = TorchEngine(tiny_model(arch)).generate(batch, params)
    assert_same(expected, paged(arch, attention=attention).generate(batch, params))


def test_batch_refill_order_block_size_and_sharing_change_nothing() -> None:
    batch = requests(5, seed=2, group=3)
    reference = paged().generate(batch, PARAMS)
    assert len({tuple(g.completion_ids) for g in reference}) == len(reference)  # the seeds really differ
    variants = [
        paged(max_num_seqs=2),  # rows refilled as others finish
        paged(max_num_batched_tokens=8),  # one prompt per prefill step
        paged(share_prompts=False),
        paged(block_size=16),
        paged(block_size=1),
    ]
    for engine in variants:
        assert_same(reference, engine.generate(batch, PARAMS))
    alone = [paged().generate([r], PARAMS)[0] for r in batch]
    assert_same(reference, alone)
    reversed_order = paged().generate(batch[::-1], PARAMS)[::-1]
    assert_same(reference, reversed_order)


def test_a_group_prefills_its_prompt_once_and_copies_only_the_shared_partial_block() -> None:
    batch = requests(3, seed=3, group=4)
    engine = paged(block_size=4)
    engine.generate(batch, PARAMS)
    distinct = {tuple(r.prompt_ids) for r in batch}
    assert engine.last_stats.prefilled_tokens == sum(len(p) for p in distinct)
    partial = sum(len(p) % 4 != 0 for p in distinct)
    assert engine.last_stats.block_copies == 3 * partial  # all members but the last copy the partial block
    unshared = paged(share_prompts=False)
    unshared.generate(batch, PARAMS)
    assert unshared.last_stats.prefilled_tokens == sum(len(r.prompt_ids) for r in batch)


def test_preempted_sequences_are_recomputed_and_still_replay() -> None:
    batch = requests(6, seed=4, group=2)
    params = SamplingParams(max_new_tokens=24, temperature=1.0)
    # Room for about three sequences at full length: the others wait or are preempted and recomputed.
    block_bytes = tiny_model().config.num_hidden_layers * 2 * 2 * 16 * 4 * 4 + 64 * 2 * 4
    tight = paged(cpu_kv_cache_gib=40 * block_bytes / 2**30)
    got = tight.generate(batch, params)
    assert tight.last_stats.preemptions > 0
    assert_same(TorchEngine(tiny_model()).generate(batch, params), got)


def test_every_completion_replays_under_the_validators_prefill() -> None:
    params = SamplingParams(max_new_tokens=20, temperature=0.8, top_p=0.9)
    generations = paged(max_num_seqs=3).generate(requests(6, seed=5, group=2), params)
    results = prefill(
        tiny_model(),
        [g.prompt_ids for g in generations],
        [g.completion_ids for g in generations],
        temperature=0.8,
        top_p=0.9,
        seeds=[g.seed for g in generations],
        eos_token_id=tiny_tokenizer().eos_token_id,
        batch_size=5,
    )
    for generation, result in zip(generations, results, strict=True):
        assert result.replayed_ids.tolist() == generation.completion_ids
        assert (result.choice_margins >= 0).all()
        assert torch.allclose(torch.tensor(generation.logprobs), result.logprobs, atol=1e-4, rtol=0)
        assert_bf16_close(generation.hidden_states, result.hidden_states)


def test_stop_tokens_end_rows_early_and_leave_the_others_unchanged() -> None:
    batch = requests(8, seed=6)
    free = paged().generate(batch, PARAMS)
    stop = free[0].completion_ids[1]
    stopped = paged(max_num_seqs=3).generate(batch, SamplingParams(max_new_tokens=16, stop_token_ids=(stop,)))
    assert stopped[0].finish_reason == "eos"
    for before, after in zip(free, stopped, strict=True):
        cut = (
            before.completion_ids.index(stop) + 1
            if stop in before.completion_ids
            else len(before.completion_ids)
        )
        assert after.completion_ids == before.completion_ids[:cut]
        assert torch.allclose(
            torch.tensor(after.logprobs), torch.tensor(before.logprobs[:cut]), atol=1e-4, rtol=0
        )
        assert after.hidden_states.shape[0] == cut
    as_eos = PagedEngine(tiny_model(), PagedEngineConfig(block_size=4), eos_token_id=[stop])
    assert [g.completion_ids for g in as_eos.generate(batch, PARAMS)] == [g.completion_ids for g in stopped]


def test_one_token_completions_and_greedy_decoding() -> None:
    batch = requests(4, seed=7, group=2)
    one = paged().generate(batch, SamplingParams(max_new_tokens=1))
    assert all(len(g.completion_ids) == 1 and g.hidden_states.shape == (1, 64) for g in one)
    greedy = paged().generate(batch[:1], SamplingParams(max_new_tokens=8, temperature=0.0))[0]
    logits = tiny_model()(torch.tensor([batch[0].prompt_ids + greedy.completion_ids])).logits[0]
    start = len(batch[0].prompt_ids) - 1
    assert logits[start : start + 8].argmax(-1).tolist() == greedy.completion_ids


def test_prompt_hidden_states_match_the_prefill_over_the_prompt() -> None:
    generations = paged(capture_prompt_hidden_states=True).generate(requests(4, seed=8, group=2), PARAMS)
    results = prefill(
        tiny_model(),
        [g.prompt_ids for g in generations],
        [g.completion_ids for g in generations],
        temperature=1.0,
        with_prompt_hidden_states=True,
    )
    for generation, result in zip(generations, results, strict=True):
        assert_bf16_close(generation.prompt_hidden_states, result.prompt_hidden_states)
        assert torch.equal(generation.prompt_hidden_states[-1], generation.hidden_states[0])


def test_load_weights_from_a_state_dict_and_a_save_pretrained_directory(tmp_path) -> None:
    tokenizer = tiny_tokenizer()
    spec = TinyModelSpec(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
    live = PagedEngine(build_tiny_model(spec, tokenizer), PagedEngineConfig(block_size=4))
    batch = requests(4, seed=9)
    before = [g.completion_ids for g in live.generate(batch, PARAMS)]
    other = build_tiny_model(spec.model_copy(update={"seed": 1}), tokenizer)
    expected = [g.completion_ids for g in TorchEngine(other).generate(batch, PARAMS)]
    assert expected != before
    live.load_weights(other.state_dict(), policy_step=1)
    assert live.policy_step == 1 and [g.completion_ids for g in live.generate(batch, PARAMS)] == expected
    save_pretrained_atomic(build_tiny_model(spec, tokenizer), tokenizer, tmp_path / "step_2")
    live.load_weights(tmp_path / "step_2", policy_step=2)
    generations = live.generate(batch, PARAMS)
    assert [g.completion_ids for g in generations] == before and generations[0].policy_step == 2
    with pytest.raises(WeightLoadError, match="no \\*.safetensors"):
        live.load_weights(tmp_path, policy_step=3)


def test_a_bfloat16_model_generates_what_its_prefill_replays() -> None:
    model = copy.deepcopy(tiny_model()).to(torch.bfloat16)
    generations = PagedEngine(model, PagedEngineConfig(block_size=4)).generate(
        requests(8, seed=12, group=2), PARAMS
    )
    results = prefill(
        model,
        [g.prompt_ids for g in generations],
        [g.completion_ids for g in generations],
        temperature=1.0,
        seeds=[g.seed for g in generations],
    )
    # bf16 arithmetic: decode and prefill round differently, so logprobs agree to ~2e-3 and a near-tie of the
    # seeded choice may flip (seen: one token at margin −0.0012; the padded engine lands on the other side).
    margins = torch.cat([r.choice_margins for r in results])
    assert (margins >= -0.01).all() and (margins < 0).float().mean() < 0.01
    for generation, result in zip(generations, results, strict=True):
        assert torch.allclose(torch.tensor(generation.logprobs), result.logprobs, atol=2e-2, rtol=0)


@pytest.mark.parametrize(
    ("request_", "params"),
    [
        (GenerationRequest([], seed=0), PARAMS),
        (GenerationRequest([1, 10_000], seed=0), PARAMS),
        (GenerationRequest([1, -1], seed=0), PARAMS),
        (GenerationRequest(["input_ids", 2], seed=0), PARAMS),
        (GenerationRequest([1.0, 2], seed=0), PARAMS),
        (GenerationRequest([1, 2], seed=1 << 63), PARAMS),
        (GenerationRequest([1] * 500, seed=0), SamplingParams(max_new_tokens=100)),
        (GenerationRequest([1, 2], seed=0), SamplingParams(max_new_tokens=4, stop_token_ids=(99_999,))),
    ],
)
def test_requests_the_engine_cannot_honour_are_rejected(
    request_: GenerationRequest, params: SamplingParams
) -> None:
    with pytest.raises(InvalidRequestError):
        paged().generate([request_], params)


def test_a_request_larger_than_the_granted_cache_is_refused_up_front() -> None:
    assert paged(kv_blocks=7).runner.pool.num_blocks == 7
    engine = paged(cpu_kv_cache_gib=2e-6)  # a handful of 4-slot blocks
    with pytest.raises(InvalidRequestError, match="KV blocks"):
        engine.generate([GenerationRequest(list(range(3, 40)), seed=0)], PARAMS)


def test_the_factory_builds_the_paged_engine_and_falls_back_for_other_architectures() -> None:
    built = build_engine(PagedEngineConfig(), tiny_model(), policy_step=3)
    assert isinstance(built, PagedEngine) and isinstance(built, InferenceEngine) and built.policy_step == 3
    settings = tiny_model().config.to_dict()
    settings.update(use_sliding_window=True, sliding_window=6, layer_types=["sliding_attention"] * 2)
    model = type(tiny_model())(type(tiny_model().config)(**settings)).eval()
    assert isinstance(build_engine(PagedEngineConfig(), model), TorchEngine)


def test_per_request_lengths_and_ignored_eos_in_both_engines() -> None:
    base = requests(4, seed=13, group=2)
    batch = [GenerationRequest(r.prompt_ids, r.seed, max_new_tokens=2 + i) for i, r in enumerate(base)]
    free = paged().generate(base, PARAMS)
    eos = free[0].completion_ids[1]
    params = SamplingParams(max_new_tokens=16, ignore_eos=True)
    for engine in (
        PagedEngine(tiny_model(), PagedEngineConfig(block_size=4), eos_token_id=eos),
        TorchEngine(tiny_model(), eos_token_id=eos),
    ):
        got = engine.generate(batch, params)
        assert [len(g.completion_ids) for g in got] == [2 + i for i in range(len(batch))]
        assert all(g.finish_reason == "length" for g in got)
        assert [g.completion_ids for g in got] == [f.completion_ids[: 2 + i] for i, f in enumerate(free)]
        stopped = engine.generate(batch, SamplingParams(max_new_tokens=16))
        assert stopped[0].completion_ids == free[0].completion_ids[:2] and stopped[0].finish_reason == "eos"
    with pytest.raises(InvalidRequestError, match="max_new_tokens"):
        paged().generate([GenerationRequest([5, 6], 0, max_new_tokens=17)], PARAMS)
