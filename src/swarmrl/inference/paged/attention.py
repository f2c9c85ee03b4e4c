"""Attention of the paged engine, through PyTorch's own kernels only.

- Prefill: causal SDPA over each sequence's fresh keys (every prefill starts at position 0: group prompts,
  and preempted sequences recomputed whole), so no cache read is needed.
- Decode, gather (CPU, and any device): each row's blocks are gathered from the pool into a padded
  [B, Hkv, W·block, D] tensor and SDPA runs under a length mask. Simple and exact; it moves each row's KV
  three times, which is fine where compute, not memory, bounds the step.
- Decode, flex (CUDA): compiled FlexAttention reads the pool in place through a paged block mask — the block
  table is the mask's list of KV blocks (all but the last are full; the last is partial and masked by
  length) — so a step reads each live token's KV once. Grouped query heads are folded into the query length
  ([B, Hkv, G, D]), which keeps FlexAttention's decoding kernel whatever the head ratio.

Every decode attention exposes `prepare(batch)` (recompute its metadata from the runner's input buffers with
tensor operations only, so a CUDA graph can capture it) and is then called layer by layer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from swarmrl.inference.llama_layers import AttentionShape
from swarmrl.inference.paged.kv_pool import KVPool


class PrefillAttention:
    """Causal attention within each of several packed sequences (lengths in token order)."""

    def __init__(self, lengths: Sequence[int], shape: AttentionShape) -> None:
        self.lengths, self.shape = list(lengths), shape

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        outputs = []
        for q_s, k_s, v_s in zip(
            q.split(self.lengths), k.split(self.lengths), v.split(self.lengths), strict=True
        ):
            # 4-D [1, heads, L, D]: the fused (flash) kernels take nothing else and would fall back to one
            # that materialises the L × L scores.
            out = F.scaled_dot_product_attention(
                q_s.transpose(0, 1)[None],
                k_s.transpose(0, 1)[None],
                v_s.transpose(0, 1)[None],
                is_causal=True,
                scale=self.shape.scaling,
                enable_gqa=self.shape.grouped,
            )
            outputs.append(out[0].transpose(0, 1))
        return torch.cat(outputs) if len(outputs) > 1 else outputs[0]


class DecodeInputs:
    """The per-step inputs of a decoding step: what the runner fills (and a CUDA graph reads)."""

    def __init__(self, max_batch: int, max_blocks: int, pool: KVPool) -> None:
        device = pool.hidden.device
        self.tables = torch.full((max_batch, max_blocks), pool.null_block, dtype=torch.int32, device=device)
        self.seq_lens = torch.ones(max_batch, dtype=torch.int32, device=device)  # context incl. this token


class GatherDecodeAttention:
    def __init__(self, pool: KVPool, shape: AttentionShape, inputs: DecodeInputs) -> None:
        self.pool, self.shape, self.inputs = pool, shape, inputs
        self._offsets = torch.arange(pool.block_size, device=pool.hidden.device)
        self._slots = self._offsets
        self._mask = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=pool.hidden.device)

    def prepare(self, batch: int, width: int | None = None) -> None:
        """Slots and length mask of rows [:batch] over block columns [:width] (default: all), for every layer."""
        width = width if width is not None else self.inputs.tables.shape[1]
        tables = self.inputs.tables[:batch, :width].long()
        self._slots = (tables[:, :, None] * self.pool.block_size + self._offsets).flatten()
        span = torch.arange(width * self.pool.block_size, device=tables.device)
        self._mask = (span[None, :] < self.inputs.seq_lens[:batch, None])[:, None, None, :]

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        batch, heads = q.shape[0], self.shape.num_kv_heads

        def gathered(cache: list[torch.Tensor]) -> torch.Tensor:  # a pool's keys or values, per layer
            # index_select over precomputed slots: several times faster on CPU than indexing by block.
            rows = cache[layer].index_select(1, self._slots)  # [Hkv, B·W·block, D]
            return rows.view(heads, batch, -1, rows.shape[-1]).transpose(0, 1)

        out = F.scaled_dot_product_attention(
            q[:, :, None, :],
            gathered(self.pool.keys),
            gathered(self.pool.values),
            attn_mask=self._mask,
            scale=self.shape.scaling,
            enable_gqa=self.shape.grouped,
        )
        return out[:, :, 0]


class FlexDecodeAttention:
    """Paged decode attention through FlexAttention; one block mask per batch size, built once.

    Every block of a row is listed as a partial block (the mask function decides), not split into full
    blocks and a last partial one: with full blocks, FlexAttention's decoding kernel splits the work over the
    whole pool's length instead of the row's, leaving all but one split idle (vLLM's flex backend does the
    same). The block lists are as wide as the pool, as torch's own PagedAttention makes them.
    """

    def __init__(
        self,
        pool: KVPool,
        shape: AttentionShape,
        inputs: DecodeInputs,
        flex: Callable[..., torch.Tensor],
    ) -> None:
        from torch.nn.attention.flex_attention import BlockMask

        self._block_mask_type = BlockMask
        self.pool, self.shape, self.inputs, self._flex = pool, shape, inputs, flex
        max_batch, max_blocks = inputs.tables.shape
        device = pool.hidden.device
        self._group = shape.num_heads // shape.num_kv_heads
        pool_blocks = pool.num_blocks + 1
        self._count = torch.ones((max_batch, 1, 1), dtype=torch.int32, device=device)
        self._indices = torch.full(
            (max_batch, 1, 1, pool_blocks), pool.null_block, dtype=torch.int32, device=device
        )
        # Row b's logical index of each physical block (−1: not in row b), so the mask is exact wherever it is
        # evaluated (FlexAttention's unfused path ignores the block lists and evaluates it everywhere).
        self._logical = torch.full((max_batch, pool_blocks), -1, dtype=torch.int32, device=device)
        self._columns = torch.arange(max_blocks, dtype=torch.int32, device=device).expand(max_batch, -1)
        self._masks: dict[int, object] = {}
        self._batch = 0

    def prepare(self, batch: int, width: int | None = None) -> None:
        """Block lists and the logical map of rows [:batch] from the inputs; tensor ops only (graph-safe)."""
        tables, seq_lens = self.inputs.tables[:batch], self.inputs.seq_lens[:batch]
        self._count[:batch, 0, 0] = (seq_lens + self.pool.block_size - 1) // self.pool.block_size
        self._indices[:batch, 0, 0, : tables.shape[1]] = tables
        logical = self._logical[:batch]
        logical.fill_(-1)
        # Columns past a row's blocks hold the scratch block; their logical index lies past the row's length.
        logical.scatter_(1, tables.long(), self._columns[:batch])
        self._batch = batch

    def block_mask(self, batch: int):
        if batch not in self._masks:
            self._masks[batch] = self._build_mask(batch)
        return self._masks[batch]

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        batch, heads = self._batch, self.shape.num_kv_heads
        query = q.view(batch, heads, self._group, self.shape.head_dim)
        out = self._flex(
            query,
            self.pool.keys[layer][None],
            self.pool.values[layer][None],
            block_mask=self.block_mask(batch),
            scale=self.shape.scaling,
        )
        return out.reshape(batch, self.shape.num_heads, self.shape.head_dim)

    def _build_mask(self, batch: int):
        block = self.pool.block_size
        logical, seq_lens = self._logical[:batch], self.inputs.seq_lens[:batch]

        def inside(
            b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
        ) -> torch.Tensor:
            index = logical[b, kv_idx // block]
            return (index >= 0) & (index * block + kv_idx % block < seq_lens[b])

        slots = (self.pool.num_blocks + 1) * block
        return self._block_mask_type.from_kv_blocks(
            self._count[:batch],
            self._indices[:batch],
            BLOCK_SIZE=(128, block),
            mask_mod=inside,
            seq_lengths=(self._group, slots),
            compute_q_blocks=False,
        )
