"""Fixed-size KV blocks with reference counts: allocate, share, copy-on-write, free.

A sequence's KV cache is a list of block ids (its block table); position p of the sequence lives in slot
`table[p // block_size] * block_size + p % block_size` of every per-slot pool (keys and values of each layer,
captured hidden states). Sharing a table (the G completions of one prompt) costs no memory: each block counts
its holders, and the first holder that writes into a shared block gets a private copy first (copy-on-write).
Pure bookkeeping — no tensors — so every rule here is unit-tested on CPU; the model runner performs the copies
this class asks for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class OutOfBlocksError(RuntimeError):
    """More blocks were asked for than are free; the scheduler checks capacity first, so this is a bug."""


@dataclass(frozen=True)
class BlockCopy:
    """Copy every slot of block `source` into block `target` (a copy-on-write the runner must perform)."""

    source: int
    target: int


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need at least one block of at least one slot, got {num_blocks} × {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._ref_counts = [0] * num_blocks
        # A stack: the most recently freed block is reused first, so the memory a run touches stays small
        # (CPU pools are allocated lazily by the OS).
        self._free = list(range(num_blocks - 1, -1, -1))
        self.highest_used = -1  # the highest block id ever handed out

    @property
    def num_free(self) -> int:
        return len(self._free)

    def ref_count(self, block: int) -> int:
        return self._ref_counts[block]

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks that hold `num_tokens` positions."""
        return -(-num_tokens // self.block_size)

    def slot(self, table: Sequence[int], position: int) -> int:
        return table[position // self.block_size] * self.block_size + position % self.block_size

    def allocate(self, num_tokens: int) -> list[int]:
        """A fresh table of exclusive blocks for positions [0, num_tokens)."""
        count = self.blocks_for(num_tokens)
        if count > len(self._free):
            raise OutOfBlocksError(f"{count} blocks asked for, {len(self._free)} free")
        table = [self._free.pop() for _ in range(count)]
        for block in table:
            self._ref_counts[block] = 1
        if table:
            self.highest_used = max(self.highest_used, *table)
        return table

    def share(self, table: Sequence[int]) -> list[int]:
        """A second table over the same blocks (one more holder each)."""
        for block in table:
            if self._ref_counts[block] < 1:
                raise ValueError(f"block {block} is not allocated and cannot be shared")
            self._ref_counts[block] += 1
        return list(table)

    def append_cost(self, table: Sequence[int], position: int) -> int:
        """Blocks that `prepare_write` would take for `position` (0 or 1)."""
        index = position // self.block_size
        if index == len(table):
            return 1
        return int(self._ref_counts[table[index]] > 1)

    def prepare_write(self, table: list[int], position: int) -> BlockCopy | None:
        """Make `position` writable by this table's holder alone, editing `table` in place.

        Positions are written in order, so `position` lies in the last block or starts a new one. A shared
        block is replaced by a private copy; the returned `BlockCopy` says which slots the runner must copy
        before anything is written there.
        """
        index = position // self.block_size
        if index > len(table) or index < len(table) - 1:
            raise ValueError(f"position {position} is not the next one of a {len(table)}-block table")
        if index == len(table):
            table.extend(self.allocate(1))
            return None
        block = table[index]
        if self._ref_counts[block] == 1:
            return None
        (private,) = self.allocate(1)
        self._ref_counts[block] -= 1
        table[index] = private
        return BlockCopy(source=block, target=private)

    def free(self, table: Sequence[int]) -> None:
        """Drop one holder of each block; blocks nobody holds return to the free stack."""
        for block in reversed(table):
            if self._ref_counts[block] < 1:
                raise ValueError(f"block {block} freed more often than it was allocated or shared")
            self._ref_counts[block] -= 1
            if self._ref_counts[block] == 0:
                self._free.append(block)
