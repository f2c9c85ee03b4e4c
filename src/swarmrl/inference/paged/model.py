"""A Llama-family model run over flat token batches with its KV in the paged pool.

Tokens of every sequence in a step are packed into one [T] batch (T = prompt tokens in a prefill, one token
per row in a decode); linear layers run on [T, H] at once and only attention knows where each sequence
begins. The arithmetic is `llama_layers` over the HF model's own modules, as in the validator's prefill.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from swarmrl.inference import llama_layers
from swarmrl.inference.errors import UnsupportedModelError
from swarmrl.inference.lm_parts import split_causal_lm
from swarmrl.inference.paged.kv_pool import KVPool, PoolShape
from swarmrl.models.lm_types import CausalLM

Attention = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class PagedModel:
    def __init__(self, model: CausalLM) -> None:
        if not llama_layers.supports(model):
            raise UnsupportedModelError(f"{type(model).__name__} is not a plain Llama-family model")
        self.parts = split_causal_lm(model)
        backbone = model.get_decoder()
        self._embed = backbone.embed_tokens
        self._rotary = backbone.rotary_emb
        self._final_norm = backbone.norm
        self._layers = list(backbone.layers)
        self.shape = llama_layers.AttentionShape.of(model)
        weight = self.parts.head.weight
        self.device, self.dtype = weight.device, weight.dtype
        self.pool_shape = PoolShape(
            num_layers=len(self._layers),
            num_kv_heads=self.shape.num_kv_heads,
            head_dim=self.shape.head_dim,
            hidden_size=self.parts.hidden_size,
            dtype=self.dtype,
        )

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        pool: KVPool,
        attention: Attention,
    ) -> torch.Tensor:
        """Final hidden states [T, H] of `tokens` [T] at `positions` [T]; writes their keys, values and
        bf16 hidden states into `slots` [T] of the pool."""
        x = self._embed(tokens)  # [T, H]
        cos, sin = self._rotary(x[None], positions[None])  # [1, T, D]
        cos, sin = cos[0, :, None], sin[0, :, None]  # broadcast over heads: [T, 1, D]
        for index, layer in enumerate(self._layers):
            attn = layer.self_attn
            q, k, v = llama_layers.project_qkv(attn, layer.input_layernorm(x), self.shape)
            q, k = llama_layers.rotate(q, cos, sin), llama_layers.rotate(k, cos, sin)
            pool.write(index, slots, k, v)
            out = attention(index, q, k, v)  # [T, Hq, D]
            x = x + llama_layers.attention_output(attn, out.reshape(out.shape[0], -1))
            x = x + llama_layers.mlp(layer, x)
        hidden = self._final_norm(x)
        pool.write_hidden(slots, hidden)
        return hidden

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.parts.head(hidden)
