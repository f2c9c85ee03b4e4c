"""The loss on a real (tiny) causal LM: packed and padded batches give one gradient, and steps go uphill."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from trainer_testkit import ADVANTAGES, EXAMPLES, padded_batch, tiny_model

from swarmrl.configs.loss import LossConfig
from swarmrl.trainer.losses import policy_loss
from swarmrl.trainer.packing import block_causal_mask, pack_examples

torch.set_num_threads(1)


def target_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    log_probs = F.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    return log_probs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("normalisation", ["token", "sequence", "constant"])
def test_packed_and_padded_batches_give_the_same_parameter_gradient(normalisation: str) -> None:
    config = LossConfig(normalisation=normalisation, max_tokens=8)
    model = tiny_model()
    temperature = 0.7

    input_ids, attention, completion = padded_batch()
    logprobs = target_logprobs(
        model(input_ids=input_ids, attention_mask=attention).logits, input_ids, temperature
    )
    # π_old slightly off π_θ so the ratio is not identically 1
    old = logprobs.detach() + 0.05 * torch.randn(logprobs.shape, generator=torch.Generator().manual_seed(1))
    padded = policy_loss(logprobs, old, ADVANTAGES, completion, config=config)
    padded.loss.backward()
    padded_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    packed = pack_examples(EXAMPLES, capacity=9, pad_token_id=0)
    assert len(packed.rows) < len(EXAMPLES)
    logits = model(
        input_ids=packed.input_ids,
        position_ids=packed.position_ids,
        attention_mask=block_causal_mask(packed.sequence_ids),
    ).logits
    packed_logprobs = target_logprobs(logits, packed.input_ids, temperature)
    packed_old = torch.zeros_like(packed_logprobs)
    for i in range(len(EXAMPLES)):
        packed_old[(packed.target_sequence_ids == i) & packed.loss_mask] = old[i][completion[i]]
    result = policy_loss(
        packed_logprobs,
        packed_old,
        packed.per_target_token(ADVANTAGES),
        packed.loss_mask,
        config=config,
        sequence_ids=packed.target_sequence_ids,
    )
    result.loss.backward()
    torch.testing.assert_close(result.loss, padded.loss, atol=1e-6, rtol=1e-5)
    for name_param, expected in zip(model.named_parameters(), padded_grads, strict=True):
        torch.testing.assert_close(name_param[1].grad, expected, atol=1e-6, rtol=1e-4, msg=name_param[0])


def test_optimizer_steps_raise_good_completions_and_lower_bad_ones() -> None:
    model = tiny_model()
    input_ids, attention, completion = padded_batch()

    def sequence_logprobs() -> torch.Tensor:
        logprobs = target_logprobs(
            model(input_ids=input_ids, attention_mask=attention).logits, input_ids, 1.0
        )
        return torch.where(completion, logprobs, 0.0).sum(-1)

    with torch.no_grad():
        before = sequence_logprobs()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    with torch.no_grad():
        old = target_logprobs(model(input_ids=input_ids, attention_mask=attention).logits, input_ids, 1.0)
    for _ in range(3):
        logprobs = target_logprobs(
            model(input_ids=input_ids, attention_mask=attention).logits, input_ids, 1.0
        )
        optimizer.zero_grad()
        policy_loss(logprobs, old, ADVANTAGES, completion, config=LossConfig(max_tokens=8)).loss.backward()
        optimizer.step()
    with torch.no_grad():
        change = sequence_logprobs() - before
    assert torch.equal(change > 0, ADVANTAGES > 0), change
