"""The scheduler: refill order, shared group prefill, token budget, copy-on-write and preemption."""

from __future__ import annotations

import pytest

from swarmrl.inference.errors import InferenceError
from swarmrl.inference.paged.block_manager import BlockCopy, BlockManager
from swarmrl.inference.paged.scheduler import DecodeStep, PrefillStep, Scheduler
from swarmrl.inference.paged.sequence import PromptGroup, Sequence, SequenceState


def groups(*specs: tuple[int, int]) -> tuple[list[PromptGroup], list[Sequence]]:
    """(prompt length, members) per group; sequences are numbered in request order."""
    made, sequences = [], []
    for prompt_length, members in specs:
        group = PromptGroup(prompt_ids=list(range(1, prompt_length + 1)))
        for _ in range(members):
            sequence = Sequence(len(sequences), group.prompt_ids, seed=len(sequences), group=group)
            group.pending.append(sequence)
            sequences.append(sequence)
        made.append(group)
    return made, sequences


def scheduler(
    num_blocks: int = 64, block_size: int = 4, max_num_seqs: int = 8, tokens: int = 64
) -> Scheduler:
    return Scheduler(BlockManager(num_blocks, block_size), max_num_seqs, tokens)


def sample(step: PrefillStep | DecodeStep) -> None:
    """What the engine does after a step: every sampled sequence gains one token."""
    sampled = (
        step.starts + [item.sequence for item in step.items if item.sequence is not None]
        if isinstance(step, PrefillStep)
        else step.sequences
    )
    for sequence in sampled:
        sequence.completion_ids.append(7)


def run(sched: Scheduler, new_tokens: int, max_steps: int = 500) -> list[PrefillStep | DecodeStep]:
    """Drive the scheduler until every sequence has `new_tokens` tokens; returns the steps taken."""
    steps = []
    for _ in range(max_steps):
        if not sched.has_work:
            return steps
        step = sched.schedule()
        steps.append(step)
        sample(step)
        for sequence in list(sched.running):
            if len(sequence.completion_ids) == new_tokens:
                sched.finish(sequence, "length")
    raise AssertionError("the scheduler did not finish")


def test_a_finished_row_is_refilled_at_once_in_request_order() -> None:
    sched = scheduler(max_num_seqs=2)
    made, sequences = groups((3, 1), (3, 1), (3, 1), (3, 1))
    sched.add(made)
    first = sched.schedule()
    assert isinstance(first, PrefillStep) and first.starts == sequences[:2]
    sample(first)
    sched.finish(sequences[0], "eos")  # row 0 ends after one token
    refill = sched.schedule()
    assert isinstance(refill, PrefillStep) and refill.starts == [sequences[2]]
    sample(refill)
    decode = sched.schedule()
    assert isinstance(decode, DecodeStep) and decode.sequences == [sequences[1], sequences[2]]
    assert sched.blocks.num_free == 64 - 2  # one 3-token prompt block per running sequence


def test_a_group_prefills_once_and_copies_the_shared_partial_block_on_first_write() -> None:
    sched = scheduler(block_size=4)
    made, sequences = groups((6, 4))
    sched.add(made)
    prefill = sched.schedule()
    assert isinstance(prefill, PrefillStep)
    assert len(prefill.items) == 1 and prefill.items[0].group is made[0]
    assert prefill.items[0].token_ids == made[0].prompt_ids and prefill.starts == sequences
    shared = prefill.items[0].table
    assert all(s.table == shared for s in sequences) and made[0].table is None  # members hold the blocks
    assert sched.blocks.ref_count(shared[1]) == 4
    sample(prefill)
    decode = sched.schedule()
    assert isinstance(decode, DecodeStep)
    # Position 6 lies in the shared block 1: three members copy it, the last writes in place.
    assert decode.copies == [BlockCopy(shared[1], s.table[1]) for s in sequences[:3]]
    assert sequences[3].table == shared and sched.blocks.ref_count(shared[0]) == 4
    assert sched.stats.prefilled_tokens == 6 and sched.stats.block_copies == 3


def test_members_that_do_not_fit_start_later_from_the_cached_prompt() -> None:
    sched = scheduler(max_num_seqs=2)
    made, sequences = groups((5, 4))
    sched.add(made)
    first = sched.schedule()
    assert isinstance(first, PrefillStep) and first.starts == sequences[:2] and len(first.items) == 1
    assert made[0].table is not None and list(made[0].pending) == sequences[2:]
    sample(first)
    sched.finish(sequences[1], "eos")
    later = sched.schedule()
    assert isinstance(later, PrefillStep) and later.items == [] and later.starts == [sequences[2]]
    assert sequences[2].table == first.items[0].table
    steps = run(sched, new_tokens=3)
    assert all(s.state is SequenceState.FINISHED for s in sequences)
    assert sched.stats.prefilled_tokens == 5 and len(steps) > 0
    assert sched.blocks.num_free == 64


def test_the_token_budget_splits_prefills_but_always_admits_one_prompt() -> None:
    sched = scheduler(tokens=15)
    made, sequences = groups((10, 1), (10, 1), (40, 1))
    sched.add(made)
    steps = [sched.schedule() for _ in range(3)]
    assert [[i.token_ids for i in s.items] for s in steps] == [
        [made[0].prompt_ids],
        [made[1].prompt_ids],
        [made[2].prompt_ids],
    ]


def test_sequences_that_outgrow_the_pool_are_preempted_and_recomputed() -> None:
    # 6 blocks of 2 slots; three 2-token prompts fill 3 blocks, and every 2 new tokens need one block more.
    sched = scheduler(num_blocks=6, block_size=2)
    made, sequences = groups((2, 1), (2, 1), (2, 1))
    sched.add(made)
    steps = run(sched, new_tokens=6)
    assert sched.stats.preemptions > 0
    recomputes = [
        item for step in steps if isinstance(step, PrefillStep) for item in step.items if item.sequence
    ]
    assert recomputes, "a preempted sequence is prefilled again"
    for item in recomputes:
        # It is rerun over prompt and completion so far, and samples its next token from the last position.
        assert len(item.token_ids) > 2 and item.token_ids[:2] == item.sequence.prompt_ids
    assert all(len(s.completion_ids) == 6 and s.state is SequenceState.FINISHED for s in sequences)
    assert sched.blocks.num_free == 6


def test_cached_prompts_are_evicted_when_nothing_else_can_run() -> None:
    # Two members of a 3-member group run; the second is preempted as they grow. When the first finishes,
    # the group's cached prompt (held for its third member) is all that stands in the preempted one's way.
    sched = scheduler(num_blocks=5, block_size=4, max_num_seqs=2)
    made, sequences = groups((8, 3))
    sched.add(made)
    steps = run(sched, new_tokens=6)
    assert sched.stats.preemptions == 1
    group_prefills = [
        item for step in steps if isinstance(step, PrefillStep) for item in step.items if item.group
    ]
    assert len(group_prefills) == 2, "the evicted prompt is prefilled again for its last member"
    assert all(s.state is SequenceState.FINISHED for s in sequences)
    assert sched.blocks.num_free == 5


def test_a_request_larger_than_the_pool_is_refused() -> None:
    sched = scheduler(num_blocks=2, block_size=4)
    made, _ = groups((12, 1))
    sched.add(made)
    with pytest.raises(InferenceError, match="nothing fits"):
        sched.schedule()
