"""Shipped real-model shapes and the Qwen-sized tokenizer: published sizes, offline builds, end to end."""

from __future__ import annotations

import pytest
import torch

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.inference import PagedEngine, SamplingParams
from swarmrl.inference.engine import GenerationRequest
from swarmrl.inference.llama_layers import supports
from swarmrl.inference.prefill import prefill
from swarmrl.models import load_model, save_pretrained_atomic
from swarmrl.models.chat_tokenizer import SPECIAL_TOKENS
from swarmrl.models.shapes import SHAPES, build_shaped_model, parameter_count, shape_config

torch.set_num_threads(1)

# Billions of parameters, all and outside the embedding / LM head, as each model card rounds them.
PUBLISHED = {
    "qwen2.5-0.5b": ("0.49", "0.36"),
    "qwen2.5-1.5b": ("1.54", "1.31"),
    "qwen2.5-7b": ("7.61", "6.53"),
    "qwen3-0.6b": ("0.6", "0.44"),
    "qwen3-1.7b": ("1.7", "1.4"),
    "qwen3-8b": ("8.2", "6.95"),
    # QwQ-32B's card says 32.5 / 31.0, but the hub counts 32.8B stored parameters, and 32.8B less its two
    # 152064 × 5120 embedding matrices is 31.2B: the hub's figure is checked, the card's is not.
    "qwq-32b": ("32.8", None),
}
# Small enough for CPU tests; the vocabulary stays Qwen's.
CUT_DOWN = dict(
    num_hidden_layers=2,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)


def test_every_issue_shape_is_shipped() -> None:
    assert set(SHAPES) == set(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shapes_have_their_published_sizes_and_run_on_the_paged_engine(name: str, chat_tokenizer) -> None:
    total, non_embedding = parameter_count(name)
    card_total, card_non_embedding = PUBLISHED[name]

    def matches(count: int, card: str) -> bool:  # within one unit of the card's last digit (cards truncate)
        return abs(count / 1e9 - float(card)) <= 10.0 ** -len(card.split(".")[1])

    assert matches(total, card_total)
    assert card_non_embedding is None or matches(non_embedding, card_non_embedding)
    config = shape_config(name)
    with torch.device("meta"):
        from transformers import AutoModelForCausalLM

        assert supports(AutoModelForCausalLM.from_config(config))
    assert config.vocab_size >= len(chat_tokenizer)


def test_unknown_shapes_are_named() -> None:
    with pytest.raises(ValueError, match="qwen3-0.6b"):
        shape_config("qwen9-1t")


def test_the_tokenizer_has_qwens_size_special_ids_and_chat_template(chat_tokenizer) -> None:
    tokenizer = chat_tokenizer
    assert len(tokenizer) == 151_643 + len(SPECIAL_TOKENS) == 151_669
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>"]) == [
        151643,
        151644,
        151645,
        151667,
    ]
    assert tokenizer.eos_token_id == 151645 and tokenizer.pad_token_id == 151643
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2 = ?"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert (
        text
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2 + 2 = ?<|im_end|>\n<|im_start|>assistant\n"
    )
    sample = "Déjà vu — 日本語 🙂 def f(x):\n\treturn x**2  # 12345"
    ids = tokenizer(sample, add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == sample
    assert [tokenizer.decode([i]) for i in tokenizer("12345", add_special_tokens=False).input_ids] == list(
        "12345"
    )


@pytest.mark.slow
def test_a_real_vocabulary_model_generates_end_to_end_and_round_trips_a_checkpoint(
    tmp_path, chat_tokenizer
) -> None:
    tokenizer = chat_tokenizer
    model = build_shaped_model("qwen3-0.6b", dtype=torch.float32, **CUT_DOWN)
    assert model.config.vocab_size == 151936 and model.dtype == torch.float32
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Count to three."}], add_generation_prompt=True, tokenize=False
    )
    prompt = tokenizer(text, add_special_tokens=False).input_ids
    requests = [GenerationRequest(prompt, seed=s) for s in range(4)]
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    engine = PagedEngine(model, PagedEngineConfig(cpu_kv_cache_gib=0.01))
    generations = engine.generate(requests, params)
    assert engine.last_stats.prefilled_tokens == len(prompt)  # one prefill for the group of four
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

    save_pretrained_atomic(model, tokenizer, tmp_path / "step_0")
    reloaded = load_model(tmp_path / "step_0")
    assert [g.completion_ids for g in PagedEngine(reloaded).generate(requests, params)] == [
        g.completion_ids for g in generations
    ]
    other = build_shaped_model("qwen3-0.6b", dtype=torch.float32, seed=1, **CUT_DOWN)
    engine.load_weights(tmp_path / "step_0", policy_step=1)  # a save_pretrained directory, unchanged
    assert [g.completion_ids for g in engine.generate(requests, params)] == [
        g.completion_ids for g in generations
    ]
    engine.load_weights(other.state_dict(), policy_step=2)
    assert [g.completion_ids for g in engine.generate(requests, params)] != [
        g.completion_ids for g in generations
    ]
