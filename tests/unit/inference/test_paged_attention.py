"""Paged decode attention and batch buckets: the flex block mask reads exactly what the gather path reads."""

from __future__ import annotations

import pytest
import torch

from swarmrl.inference.llama_layers import AttentionShape
from swarmrl.inference.paged.attention import DecodeInputs, FlexDecodeAttention, GatherDecodeAttention
from swarmrl.inference.paged.kv_pool import KVPool, PoolShape
from swarmrl.inference.paged.model_runner import _eager_flex, bucket_for, decode_buckets

torch.set_num_threads(1)


def test_buckets_cover_every_batch_size_with_the_smallest_fit() -> None:
    assert decode_buckets(256) == [1, 2, 4, 8, 16, 32, 64, 128, 192, 256]
    assert decode_buckets(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert decode_buckets(1) == [1]
    buckets = decode_buckets(256)
    assert [bucket_for(b, buckets) for b in (1, 3, 64, 65, 193, 256)] == [1, 4, 64, 128, 256, 256]
    with pytest.raises(ValueError):
        bucket_for(257, buckets)


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 2), (6, 2), (4, 4)])
def test_flex_over_the_pool_equals_sdpa_over_gathered_blocks(heads: int, kv_heads: int) -> None:
    generator = torch.Generator().manual_seed(heads)
    block, head_dim = 4, 8
    pool = KVPool(
        PoolShape(1, kv_heads, head_dim, 16, torch.float32),
        num_blocks=12,
        block_size=block,
        device=torch.device("cpu"),
        zero_all=True,
    )
    for cache in (*pool.keys, *pool.values):
        cache.copy_(torch.randn(cache.shape, generator=generator))
    # Shared prompt blocks, private tails, a full last block, a one-token row, and two padding rows.
    tables = [[3, 7, 1], [3, 7, 5], [9], [0, 2, 4, 6], [11]]
    lengths = [10, 11, 3, 16, 1]
    rows = len(tables) + 2
    inputs = DecodeInputs(rows, 5, pool)
    for row, (table, length) in enumerate(zip(tables, lengths, strict=True)):
        inputs.tables[row, : len(table)] = torch.tensor(table, dtype=torch.int32)
        inputs.seq_lens[row] = length
    shape = AttentionShape(heads, kv_heads, head_dim, head_dim**-0.5)
    q = torch.randn(rows, heads, head_dim, generator=generator)
    gather = GatherDecodeAttention(pool, shape, inputs)
    gather.prepare(rows)
    flex = FlexDecodeAttention(pool, shape, inputs, _eager_flex())
    flex.prepare(rows)
    expected, got = gather(0, q, None, None), flex(0, q, None, None)
    real = len(tables)
    assert torch.allclose(got[:real], expected[:real], atol=1e-5)
    # By hand for one row: its positions are slots table[p // block] * block + p % block.
    slots = torch.tensor([tables[1][p // block] * block + p % block for p in range(lengths[1])])
    keys, values = pool.keys[0][:, slots], pool.values[0][:, slots]  # [Hkv, L, D]
    group = heads // kv_heads
    scores = torch.einsum("hd,hld->hl", q[1], keys.repeat_interleave(group, 0)) * shape.scaling
    by_hand = torch.einsum("hl,hld->hd", scores.softmax(-1), values.repeat_interleave(group, 0))
    assert torch.allclose(got[1], by_hand, atol=1e-5)
