"""Prefill: per-token scores of given completions, the trainer's padded-batch logprobs, and bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from inference_testkit import assert_bf16_close, prompts, tiny_model, tiny_tokenizer

from swarmrl.configs.model import TinyModelSpec
from swarmrl.inference import (
    InvalidRequestError,
    UnsupportedModelError,
    completion_logprobs,
)
from swarmrl.inference.prefill import prefill
from swarmrl.models import build_tiny_model

torch.set_num_threads(1)


def pairs(count: int, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    return prompts(count, seed), prompts(count, seed + 100, min_length=1, max_length=9)


def right_padded(prompt_list: list[list[int]], completion_list: list[list[int]]):
    width = max(len(p) + len(c) for p, c in zip(prompt_list, completion_list, strict=True))
    input_ids = torch.zeros((len(prompt_list), width), dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    completion_mask = torch.zeros((len(prompt_list), width - 1))
    for row, (p, c) in enumerate(zip(prompt_list, completion_list, strict=True)):
        input_ids[row, : len(p) + len(c)] = torch.tensor(p + c)
        attention_mask[row, : len(p) + len(c)] = 1
        completion_mask[row, len(p) - 1 : len(p) + len(c) - 1] = 1
    return input_ids, attention_mask, completion_mask


def test_prefill_scores_each_completion_token_from_the_full_model_logits() -> None:
    model = tiny_model()
    prompt_list, completion_list = pairs(5)
    eos = tiny_tokenizer().eos_token_id
    results = prefill(model, prompt_list, completion_list, temperature=0.7, eos_token_id=eos, batch_size=2)
    for prompt, completion, result in zip(prompt_list, completion_list, results, strict=True):
        with torch.no_grad():
            out = model(torch.tensor([prompt + completion]), output_hidden_states=True)
        start = len(prompt) - 1
        log_probs = F.log_softmax(out.logits[0, start : start + len(completion)] / 0.7, dim=-1)
        expected = log_probs.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)
        assert torch.allclose(result.logprobs, expected, atol=1e-5)
        assert torch.allclose(result.token_probs, expected.exp(), atol=1e-6)
        assert torch.allclose(result.eos_probs, log_probs[:, eos].exp(), atol=1e-6)
        assert torch.allclose(result.entropy, -(log_probs.exp() * log_probs).sum(-1), atol=1e-5)
        final_hidden = out.hidden_states[-1][0, start : start + len(completion)]
        assert_bf16_close(result.hidden_states, final_hidden.to(torch.bfloat16))
        assert (
            result.replayed_ids is None
            and result.choice_margins is None
            and result.prompt_hidden_states is None
        )


def test_prefill_results_do_not_depend_on_the_batch() -> None:
    prompt_list, completion_list = pairs(6, seed=1)
    together = prefill(tiny_model(), prompt_list, completion_list, temperature=1.0, seeds=list(range(6)))
    alone = [
        prefill(tiny_model(), [p], [c], temperature=1.0, seeds=[i])[0]
        for i, (p, c) in enumerate(zip(prompt_list, completion_list, strict=True))
    ]
    for a, b in zip(together, alone, strict=True):
        assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5)
        assert torch.equal(a.replayed_ids, b.replayed_ids)


def test_entropy_is_zero_for_a_one_token_nucleus_and_never_nan() -> None:
    prompt_list, completion_list = pairs(3, seed=2)
    results = prefill(tiny_model(), prompt_list, completion_list, temperature=1.0, top_p=1e-6)
    for result in results:
        assert torch.isfinite(result.entropy).all() and torch.allclose(
            result.entropy, torch.zeros_like(result.entropy)
        )


def test_an_empty_completion_gives_empty_results() -> None:
    result = prefill(tiny_model(), [[5, 6, 7]], [[]], temperature=1.0, seeds=[1])[0]
    assert (
        result.logprobs.shape == (0,)
        and result.hidden_states.shape == (0, 64)
        and result.replayed_ids.shape == (0,)
    )


def test_completion_logprobs_matches_the_full_softmax_and_carries_gradients() -> None:
    model = tiny_model()
    prompt_list, completion_list = pairs(4, seed=3)
    input_ids, attention_mask, completion_mask = right_padded(prompt_list, completion_list)
    logprobs, entropy = completion_logprobs(
        model, input_ids, attention_mask, completion_mask, 0.9, with_entropy=True
    )
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1] / 0.9
    full = F.log_softmax(logits, dim=-1)
    expected = full.gather(-1, input_ids[:, 1:, None]).squeeze(-1) * completion_mask
    assert torch.allclose(logprobs, expected, atol=1e-5)
    assert torch.allclose(entropy, -(full.exp() * full).sum(-1) * completion_mask, atol=1e-5)
    (logprobs.sum()).backward()
    assert (
        model.model.embed_tokens.weight.grad is not None
        and model.model.embed_tokens.weight.grad.abs().sum() > 0
    )
    model.zero_grad(set_to_none=True)
    prefilled = prefill(model, prompt_list, completion_list, temperature=0.9)
    for row, result in enumerate(prefilled):
        assert torch.allclose(logprobs[row][completion_mask[row].bool()], result.logprobs, atol=1e-5)


def test_completion_logprobs_accepts_left_padding() -> None:
    model = tiny_model()
    prompt_list, completion_list = pairs(3, seed=4)
    input_ids, attention_mask, completion_mask = right_padded(prompt_list, completion_list)
    lengths = attention_mask.sum(-1)
    width = input_ids.shape[1]
    left_ids, left_attention, left_completion = (
        torch.zeros_like(input_ids),
        torch.zeros_like(attention_mask),
        torch.zeros_like(completion_mask),
    )
    for row, length in enumerate(lengths.tolist()):
        left_ids[row, width - length :] = input_ids[row, :length]
        left_attention[row, width - length :] = 1
        left_completion[row, width - length :] = completion_mask[row, : length - 1]
    with torch.no_grad():
        right, _ = completion_logprobs(model, input_ids, attention_mask, completion_mask, 1.0)
        left, _ = completion_logprobs(model, left_ids, left_attention, left_completion, 1.0)
    assert torch.allclose(right[completion_mask.bool()], left[left_completion.bool()], atol=1e-5)


def test_prefill_rejects_malformed_input() -> None:
    model = tiny_model()
    with pytest.raises(InvalidRequestError, match="counts differ"):
        prefill(model, [[1, 2]], [[3], [4]], temperature=1.0)
    with pytest.raises(InvalidRequestError, match="counts differ"):
        prefill(model, [[1, 2]], [[3]], temperature=1.0, seeds=[1, 2])
    with pytest.raises(InvalidRequestError, match="empty prompt"):
        prefill(model, [[]], [[3]], temperature=1.0)
    with pytest.raises(InvalidRequestError, match="vocabulary"):
        prefill(model, [[1, 2]], [[10_000]], temperature=1.0)
    with pytest.raises(InvalidRequestError, match="int64"):
        prefill(model, [[1, 2]], [[3]], temperature=1.0, seeds=[1 << 64])
    with pytest.raises(InvalidRequestError, match="positions"):
        prefill(model, [[1] * 400], [[2] * 200], temperature=1.0)
    with pytest.raises(InvalidRequestError, match="temperature"):
        prefill(model, [[1, 2]], [[3]], temperature=-1.0)
    with pytest.raises(InvalidRequestError, match="batch_size"):
        prefill(model, [[1, 2]], [[3]], temperature=1.0, batch_size=0)


def test_models_that_transform_their_logits_are_refused() -> None:
    model = build_tiny_model(
        TinyModelSpec(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1), tiny_tokenizer()
    )
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(UnsupportedModelError, match="softcapping"):
        prefill(model, [[1, 2]], [[3]], temperature=1.0)


def test_eos_probability_under_top_p_is_renormalised() -> None:
    model = tiny_model()
    prompt_list, completion_list = pairs(2, seed=5)
    eos = tiny_tokenizer().eos_token_id
    for result in prefill(model, prompt_list, completion_list, temperature=1.0, top_p=0.5, eos_token_id=eos):
        assert ((result.eos_probs >= 0) & (result.eos_probs <= 1)).all()
        finite = torch.isfinite(result.logprobs)
        assert torch.all(result.token_probs[~finite] == 0)
        assert all(math.isfinite(v) for v in result.entropy.tolist())
