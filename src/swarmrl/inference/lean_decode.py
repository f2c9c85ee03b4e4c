"""One decoding step of a Llama-family model (Llama, Qwen2, Qwen3) without HF's per-call machinery.

On a small model generating a few dozen tokens per row, most of a decoding step's time goes to Python: HF's
forward builds a 4-D mask, routes keyword arguments and output recorders through every layer and dispatches
attention through a registry. This step does the same arithmetic (`llama_layers`) over the padded engine's
preallocated cache, so its hidden states agree with a HF prefill to fp32 rounding (tested). Whole-generation
throughput on 1 CPU thread rises by about 1.2× (tiny models, batch 64); the rest is matmul, attention and
sampling.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from swarmrl.inference import llama_layers
from swarmrl.inference.kv_cache import PreallocatedLayer
from swarmrl.models.lm_types import CausalLM


class LeanDecoder:
    """Runs decode steps for a supported model; `LeanDecoder.supports(model)` says whether one applies."""

    supports = staticmethod(llama_layers.supports)

    def __init__(self, model: CausalLM) -> None:
        if not self.supports(model):
            raise ValueError(f"{type(model).__name__} is not a plain Llama-family model")
        backbone = model.get_decoder()
        self._embed = backbone.embed_tokens
        self._rotary = backbone.rotary_emb
        self._final_norm = backbone.norm
        self._layers = list(backbone.layers)
        self._shape = llama_layers.AttentionShape.of(model)

    def step(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        attention_mask: torch.Tensor,
        cache_layers: list[PreallocatedLayer],
    ) -> torch.Tensor:
        """Final hidden states [B, H] after feeding `tokens` [B] at `positions` [B]; appends to the cache.

        `attention_mask` [B, L] marks real (1) and padding (0) cache positions including the new token's.
        """
        batch = tokens.shape[0]
        x = self._embed(tokens[:, None])  # [B, 1, H]
        cos, sin = self._rotary(x, positions[:, None])  # [B, 1, head_dim]
        cos, sin = cos[:, None], sin[:, None]  # broadcast over heads: [B, 1, 1, head_dim]
        mask = attention_mask[:, None, None, :].bool()
        for layer, cache in zip(self._layers, cache_layers, strict=True):
            attn = layer.self_attn
            q, k, v = llama_layers.project_qkv(attn, layer.input_layernorm(x), self._shape)
            q = llama_layers.rotate(q.transpose(1, 2), cos, sin)
            k = llama_layers.rotate(k.transpose(1, 2), cos, sin)
            keys, values = cache.update(k, v.transpose(1, 2))
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, scale=self._shape.scaling, enable_gqa=self._shape.grouped
            )
            x = x + llama_layers.attention_output(attn, out.transpose(1, 2).reshape(batch, 1, -1))
            x = x + llama_layers.mlp(layer, x)
        return self._final_norm(x)[:, 0]
