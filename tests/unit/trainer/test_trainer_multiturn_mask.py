"""Multi-turn rows: environment tokens are packed as context and never scored by the loss."""

from __future__ import annotations

import dataclasses

import torch
from trainer_testkit import scored_rows

from swarmrl.trainer.batch import plan_step

# prompt 3 tokens; completion: model 2, environment 3, model 2
EXAMPLE = ([1, 2, 3], [10, 11, 20, 21, 22, 12, 13])
MASK = [1, 1, 0, 0, 0, 1, 1]


def plan(rows):
    return plan_step(rows, pad_token_id=0, minibatches=1, micro_batch_tokens=64)


def test_only_model_tokens_are_loss_targets_and_counted():
    single, multi = scored_rows([EXAMPLE, EXAMPLE], advantages=[1.0, 2.0])
    multi = dataclasses.replace(multi, completion_mask=MASK)
    step = plan([single, multi])
    (micro,) = step.minibatches[0].micro_batches
    targets = {}
    for local in (0, 1):
        row = micro.row_indices[local]
        scored = micro.loss_mask & (micro.sequence_ids == local)
        targets[row] = micro.input_ids[:, 1:][scored].tolist()
        assert set(micro.advantages[scored].tolist()) == {[1.0, 2.0][row]}
    assert targets[0] == EXAMPLE[1]
    assert targets[1] == [10, 11, 12, 13]
    # Engine logprobs on the scored targets are the model tokens' own, in order.
    scored = micro.loss_mask & (micro.sequence_ids == micro.row_indices.index(1))
    expected = [lp for lp, bit in zip(multi.logprobs, MASK, strict=True) if bit]
    assert torch.allclose(micro.engine_logprobs[scored], torch.tensor(expected))
    assert float(micro.advantages[~micro.loss_mask].abs().sum()) == 0.0
    assert step.minibatches[0].total_tokens == 7 + 4


def test_single_turn_rows_plan_exactly_as_before():
    rows = scored_rows([EXAMPLE])
    with_empty_mask = [dataclasses.replace(rows[0], completion_mask=[])]
    a, b = plan(rows).minibatches[0].micro_batches[0], plan(with_empty_mask).minibatches[0].micro_batches[0]
    for field in dataclasses.fields(a):
        left, right = getattr(a, field.name), getattr(b, field.name)
        assert torch.equal(left, right) if isinstance(left, torch.Tensor) else left == right
