"""train_step on a tiny model against the same step written out by hand with a separate π_old pass."""

from __future__ import annotations

import copy

import pytest
import torch
from trainer_testkit import ADVANTAGES, padded_batch, tiny_model

from swarmrl.config import RunConfig
from swarmrl.trainer.batch import TrainBatch, token_logprobs
from swarmrl.trainer.losses import policy_loss
from swarmrl.trainer.optim import build_optimizer
from swarmrl.trainer.train import train_step

torch.set_num_threads(1)


def _batch() -> TrainBatch:
    input_ids, attention, completion = padded_batch()
    engine = torch.where(completion, torch.full(completion.shape, -1.0), 0.0)
    return TrainBatch(input_ids, attention, completion, ADVANTAGES.clone(), engine, temperature=0.7)


@pytest.mark.parametrize("minibatches", [1, 2])
def test_train_step_matches_a_separate_pi_old_pass(minibatches: int) -> None:
    config = RunConfig.model_validate({"trainer": {"optimizer_steps_per_policy_step": minibatches}})
    batch = _batch()
    model, reference = tiny_model(), tiny_model()
    optimizer, scheduler = build_optimizer(model, 1e-2, 0.0, (0.9, 0.95), warmup_steps=0)
    ref_optimizer, ref_scheduler = build_optimizer(reference, 1e-2, 0.0, (0.9, 0.95), warmup_steps=0)
    before = copy.deepcopy(reference.state_dict())

    train_step(model, optimizer, scheduler, batch, config)

    with torch.no_grad():
        old_logprobs, _ = token_logprobs(reference.eval(), batch)
    reference.train()
    for index in torch.arange(len(batch)).chunk(minibatches):
        minibatch = batch.select(index)
        logprobs, _ = token_logprobs(reference, minibatch)
        out = policy_loss(
            logprobs,
            old_logprobs[index],
            minibatch.advantages,
            minibatch.completion_mask,
            config=config.loss,
            engine_logprobs=minibatch.engine_logprobs,
        )
        ref_optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), config.trainer.max_grad_norm)
        ref_optimizer.step()
        ref_scheduler.step()

    changed = False
    for name, param in model.state_dict().items():
        torch.testing.assert_close(param, reference.state_dict()[name], rtol=0, atol=1e-6)
        changed |= not torch.equal(param, before[name])
    assert changed
