"""The torch engine: reproducible seeded generation, agreement with prefill, stopping, weights, bad input."""

from __future__ import annotations

import copy

import pytest
import torch
from config_unions import member_id, sample_of, union_members
from inference_testkit import assert_bf16_close, prompts, tiny_model, tiny_tokenizer

from swarmrl.configs.engine import EngineConfig, PagedEngineConfig, TorchEngineConfig
from swarmrl.configs.model import TinyModelSpec
from swarmrl.inference import (
    GenerationRequest,
    InferenceEngine,
    InvalidRequestError,
    SamplingParams,
    TorchEngine,
    WeightLoadError,
    build_engine,
)
from swarmrl.inference.lean_decode import LeanDecoder
from swarmrl.inference.paged.engine import PagedEngine
from swarmrl.inference.prefill import prefill
from swarmrl.models import build_tiny_model, save_pretrained_atomic

torch.set_num_threads(1)

PARAMS = SamplingParams(max_new_tokens=16, temperature=1.0)


def requests(count: int = 8, seed: int = 0) -> list[GenerationRequest]:
    return [GenerationRequest(p, seed=1000 + 17 * i) for i, p in enumerate(prompts(count, seed))]


def engine(arch: str = "qwen2", **config: object) -> TorchEngine:
    return TorchEngine(tiny_model(arch), TorchEngineConfig(**config))


def ids(generations) -> list[list[int]]:
    return [g.completion_ids for g in generations]


@pytest.mark.parametrize("kind", union_members(EngineConfig), ids=member_id)
def test_the_factory_builds_every_engine_kind_and_each_satisfies_the_protocol(kind) -> None:
    engine_class = sample_of({TorchEngineConfig: TorchEngine, PagedEngineConfig: PagedEngine}, kind)
    built = build_engine(kind(), tiny_model(), policy_step=3)
    assert isinstance(built, InferenceEngine) and type(built) is engine_class and built.policy_step == 3


def test_completions_are_a_function_of_the_seed_alone() -> None:
    batch = requests()
    reference = ids(engine().generate(batch, PARAMS))
    assert len({tuple(c) for c in reference}) == len(reference)  # the seeds really differ
    alone = [engine().generate([request], PARAMS)[0].completion_ids for request in batch]
    assert alone == reference
    reversed_order = ids(engine().generate(batch[::-1], PARAMS))[::-1]
    assert reversed_order == reference
    in_pairs = ids(engine(max_batch_size=3).generate(batch, PARAMS))
    assert in_pairs == reference
    torch.set_num_threads(2)
    try:
        assert ids(engine().generate(batch, PARAMS)) == reference
    finally:
        torch.set_num_threads(1)
    reseeded = [GenerationRequest(r.prompt_ids, r.seed + 1) for r in batch]
    assert ids(engine().generate(reseeded, PARAMS)) != reference


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "llama"])
@pytest.mark.parametrize(("top_p", "decode_path"), [(1.0, "lean"), (0.9, "lean"), (1.0, "hf"), (0.9, "hf")])
def test_kv_cache_generation_agrees_with_one_full_prefill(arch: str, top_p: float, decode_path: str) -> None:
    params = SamplingParams(max_new_tokens=20, temperature=0.8, top_p=top_p)
    generations = engine(arch, decode_path=decode_path).generate(requests(), params)
    results = prefill(
        tiny_model(arch),
        [g.prompt_ids for g in generations],
        [g.completion_ids for g in generations],
        temperature=0.8,
        top_p=top_p,
        seeds=[g.seed for g in generations],
        eos_token_id=tiny_tokenizer().eos_token_id,
        batch_size=5,
    )
    for generation, result in zip(generations, results, strict=True):
        logprobs = torch.tensor(generation.logprobs)
        assert torch.isfinite(logprobs).all()
        assert torch.allclose(logprobs, result.logprobs, atol=1e-4, rtol=0)
        assert generation.hidden_states.dtype == torch.bfloat16
        assert generation.hidden_states.shape == (len(generation.completion_ids), 64)
        assert_bf16_close(generation.hidden_states, result.hidden_states)
        assert result.replayed_ids.tolist() == generation.completion_ids
        assert (result.choice_margins >= 0).all()


def test_left_padding_changes_nothing_against_unbatched_generation() -> None:
    batch = requests(6, seed=3)
    together = engine().generate(batch, PARAMS)
    for request, batched in zip(batch, together, strict=True):
        single = engine().generate([request], PARAMS)[0]
        assert single.completion_ids == batched.completion_ids
        assert torch.allclose(
            torch.tensor(single.logprobs), torch.tensor(batched.logprobs), atol=1e-4, rtol=0
        )
        assert_bf16_close(single.hidden_states, batched.hidden_states)


def test_stop_tokens_end_a_sequence_with_eos_and_max_length_with_length() -> None:
    request = requests(1, seed=5)[0]
    free = engine().generate([request], PARAMS)[0]
    assert free.finish_reason == "length" and len(free.completion_ids) == PARAMS.max_new_tokens
    stop = free.completion_ids[4]
    first = free.completion_ids.index(stop)
    stopped = engine().generate([request], SamplingParams(max_new_tokens=16, stop_token_ids=(stop,)))[0]
    assert stopped.finish_reason == "eos"
    assert stopped.completion_ids == free.completion_ids[: first + 1]
    assert stopped.logprobs == free.logprobs[: first + 1]
    assert stopped.hidden_states.shape[0] == first + 1
    as_model_eos = TorchEngine(tiny_model(), eos_token_id=stop).generate([request], PARAMS)[0]
    assert as_model_eos.completion_ids == stopped.completion_ids and as_model_eos.finish_reason == "eos"
    several_eos = TorchEngine(tiny_model(), eos_token_id=[0, stop]).generate([request], PARAMS)[0]
    assert several_eos.completion_ids == stopped.completion_ids


@pytest.mark.parametrize("eos", [[], -1, 10_000, "2"])
def test_an_engine_without_a_usable_eos_token_is_refused(eos: object) -> None:
    with pytest.raises(InvalidRequestError, match="EOS"):
        TorchEngine(tiny_model(), eos_token_id=eos)


def test_rows_that_stop_early_leave_the_others_unchanged() -> None:
    batch = requests(8, seed=6)
    free = engine().generate(batch, PARAMS)
    stop = free[0].completion_ids[1]
    params = SamplingParams(max_new_tokens=16, stop_token_ids=(stop,))
    stopped = engine().generate(batch, params)
    assert stopped[0].finish_reason == "eos"
    for before, after in zip(free, stopped, strict=True):
        cut = (
            before.completion_ids.index(stop) + 1
            if stop in before.completion_ids
            else len(before.completion_ids)
        )
        assert after.completion_ids == before.completion_ids[:cut]
        assert after.finish_reason == ("eos" if stop in before.completion_ids else "length")


def test_greedy_generation_follows_the_argmax() -> None:
    request = requests(1, seed=7)[0]
    greedy = engine().generate([request], SamplingParams(max_new_tokens=8, temperature=0.0))[0]
    logits = tiny_model()(torch.tensor([request.prompt_ids + greedy.completion_ids])).logits[0]
    start = len(request.prompt_ids) - 1
    assert logits[start : start + 8].argmax(-1).tolist() == greedy.completion_ids


def test_prompt_hidden_states_match_the_prefill_over_the_prompt() -> None:
    batch = requests(4, seed=8)
    generations = engine(capture_prompt_hidden_states=True).generate(batch, PARAMS)
    results = prefill(
        tiny_model(),
        [g.prompt_ids for g in generations],
        [g.completion_ids for g in generations],
        temperature=1.0,
        with_prompt_hidden_states=True,
    )
    for generation, result in zip(generations, results, strict=True):
        assert generation.prompt_hidden_states.shape == (len(generation.prompt_ids), 64)
        assert_bf16_close(generation.prompt_hidden_states, result.prompt_hidden_states)
        assert torch.equal(generation.prompt_hidden_states[-1], generation.hidden_states[0])


def test_load_weights_from_a_state_dict_and_a_checkpoint_directory(tmp_path) -> None:
    tokenizer = tiny_tokenizer()
    spec = TinyModelSpec(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
    live = TorchEngine(build_tiny_model(spec, tokenizer))
    batch = requests(4, seed=9)
    before = ids(live.generate(batch, PARAMS))
    other = build_tiny_model(spec.model_copy(update={"seed": 1}), tokenizer)
    expected = ids(TorchEngine(other).generate(batch, PARAMS))
    assert expected != before

    live.load_weights(other.state_dict(), policy_step=1)
    assert live.policy_step == 1 and ids(live.generate(batch, PARAMS)) == expected

    save_pretrained_atomic(build_tiny_model(spec, tokenizer), tokenizer, tmp_path / "step_2")
    live.load_weights(tmp_path / "step_2", policy_step=2)
    assert live.policy_step == 2 and ids(live.generate(batch, PARAMS)) == before


def test_weights_that_do_not_fit_are_rejected(tmp_path) -> None:
    live = TorchEngine(build_tiny_model(TinyModelSpec(hidden_size=64, num_layers=2), tiny_tokenizer()))
    state = live.model.state_dict()
    with pytest.raises(WeightLoadError, match="missing"):
        live.load_weights({k: v for k, v in state.items() if "layers.1." not in k}, policy_step=1)
    with pytest.raises(WeightLoadError, match="unknown"):
        live.load_weights({**state, "extra.weight": torch.zeros(1)}, policy_step=1)
    with pytest.raises(WeightLoadError):
        live.load_weights(
            {k: v[..., :1] if k.endswith("q_proj.weight") else v for k, v in state.items()}, policy_step=1
        )
    with pytest.raises(WeightLoadError, match="no \\*.safetensors"):
        live.load_weights(tmp_path, policy_step=1)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(WeightLoadError, match="unreadable"):
        live.load_weights(tmp_path, policy_step=1)
    assert live.policy_step == 0


@pytest.mark.parametrize(
    ("request_", "params"),
    [
        (GenerationRequest([], seed=0), PARAMS),
        (GenerationRequest([1, 10_000], seed=0), PARAMS),
        (GenerationRequest([1, -1], seed=0), PARAMS),
        (GenerationRequest([1, 2], seed=1 << 63), PARAMS),
        (GenerationRequest([1] * 500, seed=0), SamplingParams(max_new_tokens=100)),
        (GenerationRequest([1, 2], seed=0), SamplingParams(max_new_tokens=4, stop_token_ids=(99_999,))),
    ],
)
def test_requests_the_engine_cannot_honour_are_rejected(
    request_: GenerationRequest, params: SamplingParams
) -> None:
    with pytest.raises(InvalidRequestError):
        engine().generate([request_], params)


def test_a_long_prefix_fits_when_its_own_token_limit_does() -> None:
    """A multi-turn row's later turn: a long prefix with a budget cut to fit the model is served; the model's
    positions bound the request's own limit, not the sampling params' (which would refuse it)."""
    live = engine()
    positions = live.model.config.max_position_embeddings
    prefix = [1] * (positions - 4)
    params = SamplingParams(max_new_tokens=16)
    (generation,) = live.generate([GenerationRequest(prefix, seed=0, max_new_tokens=4)], params)
    assert 1 <= len(generation.completion_ids) <= 4
    with pytest.raises(InvalidRequestError, match="positions"):
        live.generate([GenerationRequest(prefix, seed=0, max_new_tokens=5)], params)


def test_invalid_sampling_params_are_rejected_at_construction() -> None:
    with pytest.raises(InvalidRequestError):
        SamplingParams(max_new_tokens=0)
    with pytest.raises(InvalidRequestError):
        SamplingParams(max_new_tokens=4, top_p=0.0)


def test_very_different_prompt_lengths_batch_without_leaking_padding() -> None:
    short, long = [7], prompts(1, seed=11, min_length=40, max_length=40)[0]
    batch = [GenerationRequest(short, seed=1), GenerationRequest(long, seed=2)]
    together = engine().generate(batch, PARAMS)
    for request, batched in zip(batch, together, strict=True):
        single = engine().generate([request], PARAMS)[0]
        assert torch.isfinite(batched.hidden_states.float()).all()
        assert single.completion_ids == batched.completion_ids
        assert_bf16_close(single.hidden_states, batched.hidden_states)


def test_a_bfloat16_model_generates_what_its_prefill_replays() -> None:
    model = copy.deepcopy(tiny_model()).to(torch.bfloat16)
    generations = TorchEngine(model).generate(requests(8, seed=12), PARAMS)
    results = prefill(
        model,
        [g.prompt_ids for g in generations],
        [g.completion_ids for g in generations],
        temperature=1.0,
        seeds=[g.seed for g in generations],
    )
    for generation, result in zip(generations, results, strict=True):
        assert result.replayed_ids.tolist() == generation.completion_ids
        # bf16 arithmetic: decode and prefill round differently, so logprobs agree to ~1e-3, not 1e-4.
        assert torch.allclose(torch.tensor(generation.logprobs), result.logprobs, atol=2e-2, rtol=0)
    assert all(g.policy_step == 0 for g in generations)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "llama"])
def test_lean_and_hf_decoding_produce_the_same_generations(arch: str) -> None:
    batch = requests(8, seed=13)
    lean = engine(arch, decode_path="lean").generate(batch, PARAMS)
    hf = engine(arch, decode_path="hf").generate(batch, PARAMS)
    assert LeanDecoder.supports(tiny_model(arch))
    for a, b in zip(lean, hf, strict=True):
        assert a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)
        assert_bf16_close(a.hidden_states, b.hidden_states)


def test_the_lean_path_declines_models_it_does_not_reproduce() -> None:
    model = build_tiny_model(
        TinyModelSpec(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1), tiny_tokenizer()
    )
    model.config.use_sliding_window = True
    assert not LeanDecoder.supports(model)
    model.config.use_sliding_window = False
    model.config.hidden_act = "gelu"
    assert not LeanDecoder.supports(model)


def test_replay_exposes_completions_not_sampled_from_the_claimed_seed() -> None:
    batch = requests(8, seed=14)
    honest = engine().generate(batch, PARAMS)
    forged = engine().generate([GenerationRequest(r.prompt_ids, r.seed + 1) for r in batch], PARAMS)
    claimed_seeds = [r.seed for r in batch]
    for generations, expect_match in ((honest, True), (forged, False)):
        results = prefill(
            tiny_model(),
            [g.prompt_ids for g in generations],
            [g.completion_ids for g in generations],
            temperature=1.0,
            seeds=claimed_seeds,
        )
        margins = torch.cat([r.choice_margins for r in results])
        replay_rate = float((margins >= 0).double().mean())
        assert replay_rate == 1.0 if expect_match else replay_rate < 0.2


def test_models_outside_the_lean_path_generate_through_hf_forward() -> None:
    settings = tiny_model().config.to_dict()
    settings.update(use_sliding_window=True, sliding_window=6, layer_types=["sliding_attention"] * 2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = type(tiny_model())(type(tiny_model().config)(**settings)).eval()
    assert not LeanDecoder.supports(model)
    generations = TorchEngine(model).generate(requests(4, seed=15), PARAMS)
    results = prefill(
        model,
        [g.prompt_ids for g in generations],
        [g.completion_ids for g in generations],
        temperature=1.0,
        seeds=[g.seed for g in generations],
    )
    for generation, result in zip(generations, results, strict=True):
        assert result.replayed_ids.tolist() == generation.completion_ids
        assert torch.allclose(torch.tensor(generation.logprobs), result.logprobs, atol=1e-4, rtol=0)
        assert_bf16_close(generation.hidden_states, result.hidden_states)
