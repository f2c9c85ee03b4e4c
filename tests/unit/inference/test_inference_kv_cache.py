"""The preallocated KV cache layer behaves like HF's concatenating DynamicLayer."""

from __future__ import annotations

import pytest
import torch
from inference_testkit import tiny_model
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from swarmrl.inference.kv_cache import PreallocatedLayer, generation_cache

torch.set_num_threads(1)


def chunks(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = [5, 1, 1, 3]
    return [
        (torch.randn(3, 2, n, 4, generator=generator), torch.randn(3, 2, n, 4, generator=generator))
        for n in lengths
    ]


def test_updates_return_what_the_concatenating_layer_returns() -> None:
    reference, preallocated = DynamicLayer(), PreallocatedLayer(capacity=16)
    for keys, values in chunks(0):
        expected = reference.update(keys, values)
        got = preallocated.update(keys, values)
        assert torch.equal(expected[0], got[0]) and torch.equal(expected[1], got[1])
    assert preallocated.get_seq_length() == reference.get_seq_length() == 10
    index = torch.tensor([2, 0])
    reference.batch_select_indices(index)
    preallocated.batch_select_indices(index)
    assert torch.equal(reference.keys, preallocated.keys) and torch.equal(
        reference.values, preallocated.values
    )
    reference.crop(-4)
    preallocated.crop(-4)
    assert torch.equal(reference.keys, preallocated.keys)
    keys, values = torch.ones(2, 2, 1, 4), torch.ones(2, 2, 1, 4)
    assert torch.equal(reference.update(keys, values)[0], preallocated.update(keys, values)[0])
    preallocated.reset()
    assert preallocated.get_seq_length() == 0


def test_overflowing_the_capacity_is_an_error() -> None:
    layer = PreallocatedLayer(capacity=6)
    layer.update(torch.zeros(1, 1, 5, 2), torch.zeros(1, 1, 5, 2))
    with pytest.raises(RuntimeError, match="holds 6 positions"):
        layer.update(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2))


def test_generation_cache_preallocates_full_attention_models_only() -> None:
    cache = generation_cache(tiny_model().config, 32)
    assert isinstance(cache, DynamicCache) and all(
        isinstance(layer, PreallocatedLayer) for layer in cache.layers
    )
    settings = tiny_model().config.to_dict()
    settings.update(use_sliding_window=True, sliding_window=4, layer_types=["sliding_attention"] * 2)
    sliding = tiny_model().config.__class__(**settings)
    assert not any(isinstance(layer, PreallocatedLayer) for layer in generation_cache(sliding, 32).layers)
