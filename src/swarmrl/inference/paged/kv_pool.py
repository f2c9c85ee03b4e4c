"""The per-slot memory of the paged engine: keys and values of every layer, and captured hidden states.

Slot s belongs to block s // block_size. Keys and values are stored heads-major, one [Hkv, slots, D] tensor per layer,
which is the layout FlexAttention reads ([1, Hkv, slots, D] per layer) and the one the decode gather slices.
One extra block past the manager's blocks is scratch: rows that pad a CUDA-graph batch write there.
The hidden-state pool holds the bf16 final hidden state of every position (what TOPLOC commits to), so a
finished sequence's states are read back through its block table and shared prompt positions are stored once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from swarmrl.inference.engine import HIDDEN_STATE_DTYPE
from swarmrl.inference.paged.block_manager import BlockCopy


@dataclass(frozen=True)
class PoolShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    dtype: torch.dtype  # of keys and values: the model's

    def bytes_per_slot(self) -> int:
        kv = 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype.itemsize
        return kv + self.hidden_size * HIDDEN_STATE_DTYPE.itemsize


class KVPool:
    def __init__(
        self,
        shape: PoolShape,
        num_blocks: int,
        block_size: int,
        device: torch.device,
        *,
        zero_all: bool = False,
    ) -> None:
        self.shape, self.num_blocks, self.block_size = shape, num_blocks, block_size
        slots = (num_blocks + 1) * block_size
        kv = (shape.num_kv_heads, slots, shape.head_dim)
        # One allocation per layer and tensor: attention kernels get unaliased inputs without storage offsets
        # (a compiled FlexAttention reused across pools misread offset views of one big tensor).
        self.keys = [torch.empty(kv, dtype=shape.dtype, device=device) for _ in range(shape.num_layers)]
        self.values = [torch.empty(kv, dtype=shape.dtype, device=device) for _ in range(shape.num_layers)]
        self.hidden = torch.empty((slots, shape.hidden_size), dtype=HIDDEN_STATE_DTYPE, device=device)
        # Attention reads masked slots too (a partial block's tail, the scratch block; FlexAttention's unfused
        # path every slot) and multiplies them by a zero weight, which is NaN where the memory holds a NaN
        # pattern. Blocks are zeroed before first use: all at once (`zero_all`), or lazily, so a CPU pool only
        # commits the memory a run reaches.
        self._zeroed_blocks = num_blocks if zero_all else 0
        self._zero_slots(0 if zero_all else self.null_slot, slots)

    def zero_through(self, block: int) -> None:
        """Make sure blocks [0, block] hold no uninitialised memory (blocks are handed out lowest first)."""
        if block >= self._zeroed_blocks:
            self._zero_slots(self._zeroed_blocks * self.block_size, (block + 1) * self.block_size)
            self._zeroed_blocks = block + 1

    def _zero_slots(self, start: int, stop: int) -> None:
        for cache in (*self.keys, *self.values):
            cache[:, start:stop].zero_()
        self.hidden[start:stop].zero_()

    @property
    def null_block(self) -> int:
        return self.num_blocks

    @property
    def null_slot(self) -> int:
        return self.num_blocks * self.block_size

    def write(self, layer: int, slots: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Store keys and values [T, Hkv, D] of one layer at `slots` [T]."""
        self.keys[layer].index_copy_(1, slots, keys.transpose(0, 1))
        self.values[layer].index_copy_(1, slots, values.transpose(0, 1))

    def write_hidden(self, slots: torch.Tensor, hidden: torch.Tensor) -> None:
        self.hidden.index_copy_(0, slots, hidden.to(HIDDEN_STATE_DTYPE))

    def copy_blocks(self, copies: Sequence[BlockCopy]) -> None:
        """Copy-on-write: every slot of each source block into its target, in every pool."""
        if not copies:
            return
        offsets = torch.arange(self.block_size)
        source = (torch.tensor([c.source for c in copies])[:, None] * self.block_size + offsets).flatten()
        target = (torch.tensor([c.target for c in copies])[:, None] * self.block_size + offsets).flatten()
        source, target = source.to(self.hidden.device), target.to(self.hidden.device)
        for cache in (*self.keys, *self.values):
            cache.index_copy_(1, target, cache.index_select(1, source))
        self.hidden.index_copy_(0, target, self.hidden.index_select(0, source))

    def slots(self, table: Sequence[int], start: int, stop: int) -> torch.Tensor:
        """Slots [stop − start] (int64, CPU) of positions [start, stop) of a sequence with this block table."""
        positions = torch.arange(start, stop)
        return torch.tensor(table, dtype=torch.int64)[positions // self.block_size] * self.block_size + (
            positions % self.block_size
        )
