"""plan_step: a policy step's rows → minibatches → packed micro-batches → data-parallel ranks."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trainer_testkit import grouped_examples, random_examples, scored_rows

from swarmrl.trainer.batch import plan_step
from swarmrl.trainer.packing import PackingError


def placed(rows, step) -> dict[int, tuple[list[int], list[float], float]]:
    """Per step row: (its tokens as laid out, its engine logprobs and advantage on its targets)."""
    found = {}
    for minibatch in step.minibatches:
        for micro in minibatch.micro_batches:
            for local, row in enumerate(micro.row_indices):
                branch = micro.branch_ids == local
                unit = micro.document_ids[branch][0]
                prefix = (micro.document_ids == unit) & (micro.branch_ids == -1)
                tokens = micro.input_ids[prefix].tolist() + micro.input_ids[branch].tolist()
                on_targets = micro.loss_mask & (micro.sequence_ids == local)
                advantages = set(micro.advantages[on_targets].tolist())
                assert len(advantages) == 1
                found[row] = (tokens, micro.engine_logprobs[on_targets].tolist(), advantages.pop())
    return found


@settings(max_examples=30, deadline=None)
@given(
    count=st.integers(1, 30),
    minibatches=st.integers(1, 4),
    micro_batch_tokens=st.integers(12, 80),
    world=st.integers(1, 3),
)
def test_every_row_lands_once_on_one_rank_with_its_own_values(count, minibatches, micro_batch_tokens, world):
    rows = scored_rows(random_examples(count, seed=count), advantages=[float(i) for i in range(count)])
    plans = [
        plan_step(
            rows,
            pad_token_id=0,
            minibatches=minibatches,
            micro_batch_tokens=micro_batch_tokens,
            rank=rank,
            world=world,
        )
        for rank in range(world)
    ]
    seen: dict[int, tuple] = {}
    for plan in plans:
        found = placed(rows, plan)
        assert not set(found) & set(seen)
        seen.update(found)
    assert sorted(seen) == list(range(count))
    for i, row in enumerate(rows):
        tokens, engine, advantage = seen[i]
        assert tokens == row.prompt_ids + row.completion_ids
        assert engine == pytest.approx(row.logprobs)
        assert advantage == row.advantage
    # FSDP needs every rank to run the same passes; every rank knows the global counts.
    for index in range(len(plans[0].minibatches)):
        shares = [plan.minibatches[index] for plan in plans]
        assert len({len(share.micro_batches) for share in shares}) == 1
        assert len({(share.total_tokens, share.total_sequences) for share in shares}) == 1
    assert sum(mb.total_tokens for mb in plans[0].minibatches) == sum(len(r.completion_ids) for r in rows)
    for plan in plans:
        for minibatch in plan.minibatches:
            for micro in minibatch.micro_batches:
                assert micro.input_ids.shape[1] == plan.pack_length
                assert micro.input_ids.numel() <= max(micro_batch_tokens, plan.pack_length)


@settings(max_examples=20, deadline=None)
@given(prompts=st.integers(1, 6), group=st.integers(1, 8), micro_batch_tokens=st.integers(12, 200))
def test_a_group_shares_its_prompt_once_per_row_and_every_row_keeps_its_values(
    prompts, group, micro_batch_tokens
):
    examples = grouped_examples(prompts, group, seed=prompts * 10 + group)
    rows = scored_rows(examples, advantages=[float(i) for i in range(len(examples))])
    step = plan_step(rows, pad_token_id=0, minibatches=1, micro_batch_tokens=micro_batch_tokens)
    found = placed(rows, step)
    for i, row in enumerate(rows):
        assert found[i] == (row.prompt_ids + row.completion_ids, pytest.approx(row.logprobs), row.advantage)
    laid_out = sum(m.real_tokens for m in step.minibatches[0].micro_batches)
    alone = sum(len(r.prompt_ids) + len(r.completion_ids) for r in rows)
    assert laid_out <= alone
    if group > 1 and micro_batch_tokens >= 4 * max(len(r.prompt_ids) + len(r.completion_ids) for r in rows):
        assert laid_out < alone  # a whole group fits a row: its prompt is laid out fewer times


def test_minibatches_are_contiguous_and_even() -> None:
    rows = scored_rows(random_examples(10))
    step = plan_step(rows, pad_token_id=0, minibatches=3, micro_batch_tokens=4096)
    assert [sorted(mb.micro_batches[0].row_indices) for mb in step.minibatches] == [
        [0, 1, 2],
        [3, 4, 5, 6],
        [7, 8, 9],
    ]


def test_a_rank_without_work_gets_a_padding_micro_batch_that_scores_nothing() -> None:
    rows = scored_rows(random_examples(2))
    step = plan_step(rows, pad_token_id=0, minibatches=1, micro_batch_tokens=4096, rank=1, world=2)
    (micro,) = step.minibatches[0].micro_batches
    assert micro.row_indices == () and not micro.loss_mask.any() and (micro.document_ids == -1).all()


def test_default_rows_are_twice_the_longest_sequence() -> None:
    rows = scored_rows(random_examples(6))
    longest = max(len(r.prompt_ids) + len(r.completion_ids) for r in rows)
    assert plan_step(rows, pad_token_id=0, minibatches=1, micro_batch_tokens=4096).pack_length == 2 * longest
    assert plan_step(rows, pad_token_id=0, minibatches=1, micro_batch_tokens=longest).pack_length == longest


def test_default_rows_hold_a_whole_group_when_it_is_longer() -> None:
    rows = scored_rows([([1, 2, 3, 4, 5], [6, 7])] * 8)  # one prompt, 8 completions: 4 + 8 * 3 = 28 tokens
    step = plan_step(rows, pad_token_id=0, minibatches=1, micro_batch_tokens=4096)
    assert step.pack_length == 28 and step.packed_rows == 1
    assert plan_step(rows, pad_token_id=0, minibatches=1, micro_batch_tokens=20).pack_length == 20


def test_bad_steps_are_refused_by_name() -> None:
    rows = scored_rows(random_examples(3))
    with pytest.raises(PackingError, match="at least one row"):
        plan_step([], pad_token_id=0, minibatches=1, micro_batch_tokens=64)
    with pytest.raises(PackingError, match="longer than pack_length 4"):
        plan_step(rows, pad_token_id=0, minibatches=1, micro_batch_tokens=64, pack_length=4)
    mixed = [rows[0], dataclasses.replace(rows[1], temperature=1.0)]
    with pytest.raises(PackingError, match="mixes sampling temperatures"):
        plan_step(mixed, pad_token_id=0, minibatches=1, micro_batch_tokens=64)
    with pytest.raises(PackingError, match="rank 2"):
        plan_step(rows, pad_token_id=0, minibatches=1, micro_batch_tokens=64, rank=2, world=2)


def test_padding_fraction_counts_the_empty_slots() -> None:
    rows = scored_rows([([1, 2], [3, 4]), ([5], [6, 7, 8])])  # 4 tokens each
    step = plan_step(rows, pad_token_id=0, minibatches=1, micro_batch_tokens=10, pack_length=10)
    assert step.packed_rows == 1
    assert step.padding_fraction == pytest.approx(0.2)
    assert torch.equal(
        step.minibatches[0].micro_batches[0].position_ids[0, :8], torch.tensor([0, 1, 2, 3] * 2)
    )
