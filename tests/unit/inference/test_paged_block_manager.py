"""The block manager: allocation, sharing, copy-on-write and freeing keep every reference count exact."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmrl.inference.paged.block_manager import BlockCopy, BlockManager, OutOfBlocksError


def test_a_fresh_table_covers_its_positions_with_exclusive_blocks() -> None:
    manager = BlockManager(num_blocks=8, block_size=4)
    table = manager.allocate(9)  # positions 0..8: three blocks, the last holding one position
    assert table == [0, 1, 2] and manager.num_free == 5
    assert [manager.slot(table, p) for p in (0, 3, 4, 8)] == [0, 3, 4, 8]
    assert all(manager.ref_count(b) == 1 for b in table)
    assert manager.allocate(0) == []


def test_slots_follow_the_table_not_the_block_order() -> None:
    manager = BlockManager(num_blocks=8, block_size=4)
    first, second = manager.allocate(4), manager.allocate(4)
    manager.free(first)
    table = second + manager.allocate(4)  # reuses block 0 after block 1
    assert table == [1, 0]
    assert [manager.slot(table, p) for p in (0, 3, 4, 7)] == [4, 7, 0, 3]


def test_a_write_past_the_last_block_takes_a_new_block() -> None:
    manager = BlockManager(num_blocks=4, block_size=4)
    table = manager.allocate(4)
    assert manager.append_cost(table, 4) == 1
    assert manager.prepare_write(table, 4) is None and len(table) == 2
    assert manager.append_cost(table, 5) == 0 and manager.prepare_write(table, 5) is None
    assert len(table) == 2 and manager.num_free == 2


def test_shared_blocks_are_copied_before_the_first_write() -> None:
    manager = BlockManager(num_blocks=8, block_size=4)
    prompt = manager.allocate(6)  # blocks 0 (full) and 1 (positions 4, 5)
    siblings = [manager.share(prompt) for _ in range(3)]
    manager.free(prompt)  # the group lets go; the siblings keep the blocks alive
    assert manager.ref_count(0) == 3 and manager.ref_count(1) == 3

    copies = [manager.prepare_write(table, 6) for table in siblings]
    # Two siblings copy the shared partial block; the last holder writes into it in place.
    assert copies[0] == BlockCopy(source=1, target=2) and copies[1] == BlockCopy(source=1, target=3)
    assert copies[2] is None
    assert [t[1] for t in siblings] == [2, 3, 1]
    assert manager.ref_count(0) == 3 and all(manager.ref_count(b) == 1 for b in (1, 2, 3))
    for table in siblings:
        manager.free(table)
    assert manager.num_free == 8


def test_a_new_block_is_never_copied_even_when_the_prompt_fills_its_blocks() -> None:
    manager = BlockManager(num_blocks=8, block_size=4)
    prompt = manager.allocate(8)
    sibling = manager.share(prompt)
    assert manager.append_cost(sibling, 8) == 1
    assert manager.prepare_write(sibling, 8) is None
    assert sibling[:2] == prompt and manager.ref_count(sibling[2]) == 1


def test_asking_for_more_blocks_than_are_free_fails_without_side_effects() -> None:
    manager = BlockManager(num_blocks=2, block_size=4)
    with pytest.raises(OutOfBlocksError):
        manager.allocate(9)
    assert manager.num_free == 2
    table = manager.allocate(8)
    shared = manager.share(table)
    with pytest.raises(OutOfBlocksError):
        manager.prepare_write(shared, 7)  # needs a private copy, none free
    assert shared == table and manager.ref_count(table[1]) == 2


@pytest.mark.parametrize("position", [0, 3, 9])
def test_writes_out_of_order_are_refused(position: int) -> None:
    manager = BlockManager(num_blocks=8, block_size=4)
    table = manager.allocate(13)  # four blocks: a write belongs in block 3 or a new block 4
    with pytest.raises(ValueError, match="not the next"):
        manager.prepare_write(table, position)


def test_double_frees_and_sharing_freed_blocks_are_refused() -> None:
    manager = BlockManager(num_blocks=4, block_size=4)
    table = manager.allocate(4)
    manager.free(table)
    with pytest.raises(ValueError, match="freed more often"):
        manager.free(table)
    with pytest.raises(ValueError, match="not allocated"):
        manager.share(table)
    with pytest.raises(ValueError):
        BlockManager(num_blocks=0, block_size=4)


# One operation of a random workload: (kind, which table, how many tokens).
_operations = st.lists(
    st.tuples(st.sampled_from(["allocate", "share", "write", "free"]), st.integers(0, 30), st.integers(0, 9)),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(_operations)
def test_reference_counts_always_equal_the_holders(operations) -> None:
    manager = BlockManager(num_blocks=12, block_size=3)
    tables: list[list[int]] = []
    lengths: list[int] = []  # positions written so far per table
    for kind, pick, tokens in operations:
        try:
            if kind == "allocate":
                table = manager.allocate(tokens)
                tables.append(table)
                lengths.append(tokens)
            elif tables and kind == "share":
                i = pick % len(tables)
                tables.append(manager.share(tables[i]))
                lengths.append(lengths[i])
            elif tables and kind == "write":
                i = pick % len(tables)
                copy = manager.prepare_write(tables[i], lengths[i])
                block = tables[i][lengths[i] // 3]
                assert manager.ref_count(block) == 1  # nobody else sees this write
                assert copy is None or copy.target == block
                lengths[i] += 1
            elif tables and kind == "free":
                i = pick % len(tables)
                manager.free(tables.pop(i))
                lengths.pop(i)
        except OutOfBlocksError:
            pass
        holders = Counter(block for table in tables for block in table)
        for block in range(manager.num_blocks):
            assert manager.ref_count(block) == holders.get(block, 0)
        assert manager.num_free == manager.num_blocks - len(holders)
        for table, length in zip(tables, lengths, strict=True):
            assert len(table) >= manager.blocks_for(length) and len(set(table)) == len(table)
