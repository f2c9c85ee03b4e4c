"""A KV cache that writes into preallocated buffers instead of concatenating on every decoding step.

HF's `DynamicLayer` grows by `torch.cat`, copying the whole cache once per token and layer — on a tiny CPU model
that copy costs as much as the attention itself. These layers reserve room for the whole generation up front
and hand the model views of the filled part.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        batch, heads, _, head_dim = key_states.shape
        self._key_buffer = key_states.new_empty((batch, heads, self.capacity, head_dim))
        self._value_buffer = value_states.new_empty(
            (batch, value_states.shape[1], self.capacity, value_states.shape[3])
        )
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache holds {self.capacity} positions, asked for {end}")
        self._key_buffer[:, :, self.length : end] = key_states
        self._value_buffer[:, :, self.length : end] = value_states
        self.length = end
        return self._refresh_views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._key_buffer = self._key_buffer[indices]
            self._value_buffer = self._value_buffer[indices]
            self._refresh_views()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx.to(self.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self._key_buffer = self._key_buffer.repeat_interleave(repeats, dim=0)
            self._value_buffer = self._value_buffer.repeat_interleave(repeats, dim=0)
            self._refresh_views()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of tokens to remove, got {tokens_to_remove}")
        if self.is_initialized:
            self.length = max(0, self.length + tokens_to_remove)
            self._refresh_views()

    def reset(self) -> None:
        self.length = 0
        if self.is_initialized:
            self._refresh_views()

    def _refresh_views(self) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self._key_buffer[:, :, : self.length], self._value_buffer[:, :, : self.length]
        self.keys, self.values = keys, values
        return keys, values


def generation_cache(model_config: PretrainedConfig, capacity: int) -> DynamicCache:
    """A cache for `capacity` positions; models with sliding-window or other special layers keep HF's own."""
    cache = DynamicCache(config=model_config)
    if all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [PreallocatedLayer(capacity) for _ in cache.layers]
    return cache
