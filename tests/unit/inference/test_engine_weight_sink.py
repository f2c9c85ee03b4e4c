"""The engines as `WeightSink`s: a trainer in the same process streams a policy into the engine's own tensors.

An updated engine must generate exactly what an engine built fresh on the new weights generates (same tokens,
logprobs and hidden states, bit for bit on CPU), in the same storage, at the step it was handed; no prompt
state computed with the old weights may be reused; a bad or badly timed update is refused by name.
"""

from __future__ import annotations

import copy

import pytest
import torch
from inference_testkit import prompts, tiny_model, tiny_tokenizer

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.inference import GenerationRequest, PagedEngine, SamplingParams, TorchEngine, WeightLoadError
from swarmrl.inference.errors import EngineBusyError
from swarmrl.inference.paged.scheduler import PrefillItem
from swarmrl.models import load_model, model_skeleton, save_pretrained_atomic
from swarmrl.trainer.weight_sync import push_weights

torch.set_num_threads(1)

PARAMS = SamplingParams(max_new_tokens=12, temperature=1.0)


def grouped_requests(count: int = 4, group: int = 3) -> list[GenerationRequest]:
    """GRPO groups: each prompt asked `group` times, so the paged engine shares its prompt blocks."""
    return [
        GenerationRequest(p, seed=500 + 7 * i + g)
        for i, p in enumerate(prompts(count, 3))
        for g in range(group)
    ]


def perturbed(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A copy of `model` as a trainer would hold it a step later: every parameter moved a little."""
    other = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in other.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))
    return other


def make_engine(kind: str, model: torch.nn.Module) -> PagedEngine | TorchEngine:
    if kind == "paged":
        return PagedEngine(model, PagedEngineConfig(block_size=4))
    return TorchEngine(model)


def outputs(generations) -> list[tuple]:
    return [(g.completion_ids, g.logprobs, g.hidden_states, g.policy_step) for g in generations]


def assert_identical(a, b) -> None:
    for (ids_a, lp_a, hidden_a, _), (ids_b, lp_b, hidden_b, _) in zip(outputs(a), outputs(b), strict=True):
        assert ids_a == ids_b and lp_a == lp_b and torch.equal(hidden_a, hidden_b)


@pytest.mark.parametrize("kind", ["paged", "torch"])
@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_an_updated_engine_generates_what_a_fresh_engine_on_the_new_weights_generates(
    kind: str, arch: str
) -> None:
    start = tiny_model(arch)
    trainer_model = perturbed(start, seed=1)
    engine = make_engine(kind, copy.deepcopy(start))
    batch = grouped_requests()
    before = engine.generate(batch, PARAMS)  # the old policy's prompt blocks were built and shared here
    pointers = {name: p.data_ptr() for name, p in engine.model.named_parameters()}

    push_weights(trainer_model, engine, step=4)

    assert engine.policy_step == 4
    assert {name: p.data_ptr() for name, p in engine.model.named_parameters()} == pointers
    after = engine.generate(batch, PARAMS)
    fresh = make_engine(kind, copy.deepcopy(trainer_model)).generate(batch, PARAMS)
    assert_identical(fresh, after)
    assert all(g.policy_step == 4 for g in after)
    # The new policy really is different: reusing anything of the old one would have shown.
    assert [g.completion_ids for g in before] != [g.completion_ids for g in after]


def prompt_logits(engine: PagedEngine, prompt: list[int]) -> torch.Tensor:
    """Next-token logits after `prompt`, through the engine's own prefill into its pool."""
    blocks = -(-len(prompt) // engine.runner.block_size)
    engine.runner.pool.zero_through(blocks - 1)
    with torch.inference_mode():
        hidden = engine.runner.prefill([PrefillItem(prompt, list(range(blocks)))])
        return engine.runner.logits(hidden)


def test_the_logits_of_an_updated_paged_engine_are_those_of_a_fresh_one() -> None:
    start, trainer_model = tiny_model(), perturbed(tiny_model(), seed=2)
    engine = PagedEngine(copy.deepcopy(start), PagedEngineConfig(block_size=4))
    prompt = prompts(1, 5)[0]
    old = prompt_logits(engine, prompt)
    engine.update_weights(trainer_model.named_parameters(), step=1)
    fresh = PagedEngine(copy.deepcopy(trainer_model), PagedEngineConfig(block_size=4))
    new = prompt_logits(engine, prompt)
    assert torch.equal(new, prompt_logits(fresh, prompt))
    assert not torch.allclose(new, old, atol=1e-3)


def test_an_update_while_the_engine_generates_is_refused() -> None:
    engine = PagedEngine(copy.deepcopy(tiny_model()), PagedEngineConfig(block_size=4))
    trainer_model = perturbed(tiny_model(), seed=3)
    sample = engine.runner.sample
    refused: list[Exception] = []

    def sample_then_try_an_update(*args, **kwargs):
        try:
            engine.update_weights(trainer_model.named_parameters(), step=9)
        except EngineBusyError as exc:
            refused.append(exc)
        return sample(*args, **kwargs)

    engine.runner.sample = sample_then_try_an_update
    generations = engine.generate(grouped_requests(2, 2), PARAMS)
    assert refused and "while the engine is generating" in str(refused[0])
    assert engine.policy_step == 0 and all(g.policy_step == 0 for g in generations)
    engine.runner.sample = sample
    # Nothing of the refused update was copied: the engine still generates its own policy.
    expected = PagedEngine(copy.deepcopy(tiny_model()), PagedEngineConfig(block_size=4)).generate(
        grouped_requests(2, 2), PARAMS
    )
    assert_identical(expected, engine.generate(grouped_requests(2, 2), PARAMS))


def test_a_stream_that_does_not_fit_is_refused_and_the_engine_waits_for_a_whole_policy() -> None:
    start, trainer_model = tiny_model(), perturbed(tiny_model(), seed=4)
    engine = PagedEngine(copy.deepcopy(start), PagedEngineConfig(block_size=4))
    named = list(trainer_model.named_parameters())

    with pytest.raises(WeightLoadError, match="no weights for 1 parameters"):
        engine.update_weights(named[:-1], step=1)
    with pytest.raises(WeightLoadError, match="refusing to generate"):
        engine.generate(grouped_requests(1, 2), PARAMS)  # half of step 1 was copied over step 0
    wrong = [(name, t[:1]) if i == 2 else (name, t) for i, (name, t) in enumerate(named)]
    with pytest.raises(WeightLoadError, match="shape"):
        engine.update_weights(wrong, step=1)
    with pytest.raises(WeightLoadError, match="has no parameter 'extra'"):
        engine.update_weights([*named, ("extra", named[0][1])], step=1)
    with pytest.raises(WeightLoadError, match="sent twice"):
        engine.update_weights([named[0], *named], step=1)
    assert engine.policy_step == 0

    engine.update_weights(named, step=1)
    fresh = PagedEngine(copy.deepcopy(trainer_model), PagedEngineConfig(block_size=4))
    assert_identical(fresh.generate(grouped_requests(), PARAMS), engine.generate(grouped_requests(), PARAMS))


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "llama"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_skeleton_filled_by_the_trainer_is_the_model_the_checkpoint_loads(
    tmp_path, arch: str, dtype: str
) -> None:
    trainer_model = perturbed(tiny_model(arch), seed=5)
    save_pretrained_atomic(trainer_model, tiny_tokenizer(), tmp_path / "step_0")
    loaded = load_model(tmp_path / "step_0", dtype)
    skeleton = model_skeleton(tmp_path / "step_0", dtype)
    # The head is tied to the embedding as in the loaded model, so one pushed tensor fills both.
    assert skeleton.get_output_embeddings().weight is skeleton.get_input_embeddings().weight
    engine = PagedEngine(skeleton, PagedEngineConfig(block_size=4))
    push_weights(trainer_model, engine, step=0)  # fp32 master weights cast into the engine's dtype
    for (name, a), (other, b) in zip(loaded.named_buffers(), skeleton.named_buffers(), strict=True):
        assert name == other and a.dtype == b.dtype and torch.equal(a, b)
    expected = PagedEngine(loaded, PagedEngineConfig(block_size=4)).generate(grouped_requests(), PARAMS)
    assert_identical(expected, engine.generate(grouped_requests(), PARAMS))


def test_a_checkpoint_that_does_not_fit_is_refused_before_any_copy() -> None:
    engine = PagedEngine(copy.deepcopy(tiny_model()), PagedEngineConfig(block_size=4))
    state = perturbed(tiny_model(), seed=6).state_dict()
    wrong = {k: v[..., :1] if k.endswith("layers.1.mlp.down_proj.weight") else v for k, v in state.items()}
    with pytest.raises(WeightLoadError, match="down_proj.weight has shape"):
        engine.load_weights(wrong, policy_step=1)
    # Checked whole first, unlike a stream: the engine still serves policy 0, every tensor of it.
    assert engine.policy_step == 0
    expected = PagedEngine(copy.deepcopy(tiny_model()), PagedEngineConfig(block_size=4)).generate(
        grouped_requests(), PARAMS
    )
    assert_identical(expected, engine.generate(grouped_requests(), PARAMS))
