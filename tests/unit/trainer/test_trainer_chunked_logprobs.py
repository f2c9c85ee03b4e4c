"""Chunked head + log-softmax (models/logprobs.py) against the plain path it replaces."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from trainer_testkit import tiny_model

from swarmrl.models.logprobs import LogprobInputError, split_lm, token_logprobs
from swarmrl.trainer.sft import sft_batch, sft_loss

torch.set_num_threads(1)


def plain(hidden, head, targets, temperature):
    """Today's path: the whole [N, V] float32 log-softmax."""
    log_probs = F.log_softmax(head(hidden).float() / temperature, dim=-1)
    chosen = log_probs.gather(-1, targets[:, None]).squeeze(-1)
    return chosen, -(log_probs.exp() * log_probs).sum(-1)


def problem(n=37, hidden_size=16, vocab=50, bias=True, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(hidden_size, vocab, bias=bias, dtype=dtype)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator, dtype=dtype))
        if bias:
            head.bias.copy_(torch.randn(vocab, generator=generator, dtype=dtype))
    hidden = torch.randn(n, hidden_size, generator=generator, dtype=dtype).requires_grad_(True)
    targets = torch.randint(0, vocab, (n,), generator=generator)
    return head, hidden, targets


@pytest.mark.parametrize("chunk_tokens", [1, 5, 37, 1000])
@pytest.mark.parametrize("bias", [False, True])
def test_values_and_gradients_match_the_plain_path(chunk_tokens: int, bias: bool) -> None:
    head, hidden, targets = problem(bias=bias)
    coefficients = torch.randn(2, hidden.shape[0], generator=torch.Generator().manual_seed(3))

    expected_lp, expected_h = plain(hidden, head, targets, 0.7)
    (coefficients[0] * expected_lp + coefficients[1] * expected_h).sum().backward()
    expected_grads = [hidden.grad.clone(), head.weight.grad.clone()] + (
        [head.bias.grad.clone()] if bias else []
    )
    hidden.grad = None
    head.zero_grad()

    scores = token_logprobs(hidden, head, targets, 0.7, with_entropy=True, chunk_tokens=chunk_tokens)
    # Forward runs the plain path's own operations on fewer rows: equal up to the matmul's fp32 rounding.
    torch.testing.assert_close(scores.logprobs, expected_lp.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(scores.entropy, expected_h.detach(), rtol=1e-6, atol=1e-6)
    (coefficients[0] * scores.logprobs + coefficients[1] * scores.entropy).sum().backward()
    grads = [hidden.grad, head.weight.grad] + ([head.bias.grad] if bias else [])
    for got, expected in zip(grads, expected_grads, strict=True):
        # A weight gradient is summed chunk by chunk instead of in one matmul: its fp32 rounding is relative
        # to the size of the summed terms, not of an entry that happens to be near zero.
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6 * float(expected.abs().max()))


def test_gradients_pass_gradcheck_in_float64() -> None:
    head, hidden, targets = problem(n=7, hidden_size=4, vocab=9, dtype=torch.float64)

    def scores(hidden, weight, bias):
        as_head = SimpleNamespace(weight=weight, bias=bias, in_features=weight.shape[1])
        out = token_logprobs(hidden, as_head, targets, 1.3, with_entropy=True, chunk_tokens=3)
        return out.logprobs, out.entropy

    inputs = (hidden.detach().requires_grad_(True),) + tuple(
        p.detach().clone().requires_grad_(True) for p in (head.weight, head.bias)
    )
    assert torch.autograd.gradcheck(scores, inputs)


def test_logprobs_alone_give_the_same_gradient_with_or_without_entropy() -> None:
    head, hidden, targets = problem()
    token_logprobs(hidden, head, targets, with_entropy=False, chunk_tokens=4).logprobs.sum().backward()
    without = hidden.grad.clone()
    hidden.grad = None
    token_logprobs(hidden, head, targets, with_entropy=True, chunk_tokens=4).logprobs.sum().backward()
    torch.testing.assert_close(hidden.grad, without, rtol=0, atol=1e-7)
    assert token_logprobs(hidden, head, targets).entropy is None


def test_autocast_runs_the_head_in_bf16_like_the_plain_path() -> None:
    head, hidden, targets = problem(n=20, hidden_size=32, vocab=64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected_lp, _ = plain(hidden, head, targets, 1.0)
        expected_lp.sum().backward()
        expected_grad = head.weight.grad.clone()
        head.zero_grad()
        scores = token_logprobs(hidden, head, targets, chunk_tokens=6)
    assert scores.logprobs.dtype == torch.float32
    torch.testing.assert_close(scores.logprobs, expected_lp.detach(), rtol=1e-6, atol=1e-6)
    scores.logprobs.sum().backward()
    assert head.weight.grad.dtype == torch.float32  # fp32 master weight keeps an fp32 gradient
    torch.testing.assert_close(head.weight.grad, expected_grad, rtol=2e-2, atol=2e-2)


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any aten op produces (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, tuple | list) else [out]:
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


def test_no_tensor_of_tokens_times_vocab_exists_in_forward_or_backward() -> None:
    n, hidden_size, vocab, chunk = 64, 4, 500, 8
    head, hidden, targets = problem(n=n, hidden_size=hidden_size, vocab=vocab, bias=False)
    with LargestTensor() as plain_mode:
        lp, h = plain(hidden, head, targets, 1.0)
        (lp + h).sum().backward()
    with LargestTensor() as chunked_mode:
        scores = token_logprobs(hidden, head, targets, with_entropy=True, chunk_tokens=chunk)
        (scores.logprobs + scores.entropy).sum().backward()
    assert plain_mode.largest >= n * vocab
    assert chunked_mode.largest <= max(chunk * vocab, vocab * hidden_size)


def test_bad_inputs_are_named() -> None:
    head, hidden, targets = problem()
    with pytest.raises(LogprobInputError, match="targets"):
        token_logprobs(hidden, head, targets[:-1])
    with pytest.raises(LogprobInputError, match="hidden size"):
        token_logprobs(hidden[:, :-1], head, targets)
    with pytest.raises(LogprobInputError, match="temperature"):
        token_logprobs(hidden, head, targets, 0.0)
    with pytest.raises(LogprobInputError, match="chunk_tokens"):
        token_logprobs(hidden, head, targets, chunk_tokens=0)


def test_split_lm_refuses_a_model_that_rescales_its_logits() -> None:
    model = tiny_model()
    backbone, head = split_lm(model)
    assert head is model.lm_head and backbone is model.model
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(LogprobInputError, match="final_logit_softcapping"):
        split_lm(model)


def test_sft_loss_matches_transformers_labels_loss_and_its_gradient() -> None:
    examples = [([3, 4, 5], [6, 7, 8, 9]), ([10, 11], [12]), ([13], [14, 15, 16])]
    input_ids, mask, labels = sft_batch(examples, pad_token_id=0)
    expected_model, model = tiny_model("sdpa"), tiny_model("sdpa")
    expected = expected_model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
    expected.backward()
    got = sft_loss(model, input_ids, mask, labels, chunk_tokens=3)
    got.backward()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    for (name, param), reference in zip(model.named_parameters(), expected_model.parameters(), strict=True):
        torch.testing.assert_close(param.grad, reference.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_validator_prefill_gives_the_same_scores_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    prefill_module = importlib.import_module("swarmrl.inference.prefill")  # the package exports the function

    model = tiny_model("sdpa").eval()
    prompts = [[3, 4, 5], [10, 11], [13]]
    completions = [[6, 7, 8, 9], [12], [14, 15, 16, 17, 18]]

    def run(chunk_tokens: int):
        monkeypatch.setattr(prefill_module, "DEFAULT_CHUNK_TOKENS", chunk_tokens)
        return prefill_module.prefill(
            model, prompts, completions, temperature=0.8, top_p=0.9, seeds=[1, 2, 3], eos_token_id=2
        )

    whole, chunked = run(10_000), run(3)
    for a, b in zip(whole, chunked, strict=True):
        for field in ("logprobs", "token_probs", "entropy", "eos_probs", "choice_margins"):
            torch.testing.assert_close(getattr(b, field), getattr(a, field), rtol=1e-5, atol=1e-6)
        assert torch.equal(a.replayed_ids, b.replayed_ids)
        assert torch.equal(a.hidden_states, b.hidden_states)
