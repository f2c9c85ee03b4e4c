"""The arithmetic of one Llama-family layer (Llama, Qwen2, Qwen3), read from a HF model's own modules.

The engines run these instead of HF's forward: same weights, same operations in the same order — norms are
the model's own modules, rotary phases come from the model's own rotary module — so their hidden states agree
with a HF prefill (the validator's) to rounding. Weights are read from the modules on every call, never
copied, so `load_state_dict` and in-place optimizer updates take effect immediately. Tensors carry any
leading dimensions ([B, 1, H] for the padded engine, [T, H] for the paged one).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from swarmrl.models.lm_types import CausalLM, LayerPart
from swarmrl.models.native import plain_llama_layers


def supports(model: nn.Module) -> bool:
    """Whether `model` is a plain Llama-family model whose layers these functions reproduce."""
    config = getattr(model, "config", None)
    return config is not None and plain_llama_layers(config)


@dataclass(frozen=True)
class AttentionShape:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    scaling: float

    @classmethod
    def of(cls, model: CausalLM) -> AttentionShape:
        attn = model.get_decoder().layers[0].self_attn
        config = model.config
        return cls(config.num_attention_heads, config.num_key_value_heads, attn.head_dim, attn.scaling)

    @property
    def grouped(self) -> bool:
        return self.num_heads != self.num_kv_heads


def project_qkv(
    attn: LayerPart, h: torch.Tensor, shape: AttentionShape
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q [..., Hq, D], k and v [..., Hkv, D] of the normed residual `h` [..., H], before the rotation."""
    lead = h.shape[:-1]
    q = F.linear(h, attn.q_proj.weight, attn.q_proj.bias).view(*lead, shape.num_heads, shape.head_dim)
    k = F.linear(h, attn.k_proj.weight, attn.k_proj.bias).view(*lead, shape.num_kv_heads, shape.head_dim)
    v = F.linear(h, attn.v_proj.weight, attn.v_proj.bias).view(*lead, shape.num_kv_heads, shape.head_dim)
    if hasattr(attn, "q_norm"):  # Qwen3 normalises each head before the rotation
        q, k = attn.q_norm(q), attn.k_norm(k)
    return q, k, v


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's apply_rotary_pos_emb for one tensor: x·cos + rotate_half(x)·sin (cos, sin broadcast over heads)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def attention_output(attn: LayerPart, heads: torch.Tensor) -> torch.Tensor:
    """o_proj of the attention heads flattened into the last dimension ([..., Hq·D] → [..., H])."""
    return F.linear(heads, attn.o_proj.weight, attn.o_proj.bias)


def mlp(layer: LayerPart, x: torch.Tensor) -> torch.Tensor:
    """The layer's gated MLP of its post-attention norm of `x`: down(silu(gate(h)) · up(h))."""
    h = layer.post_attention_layernorm(x)
    mlp = layer.mlp
    gate = F.silu(F.linear(h, mlp.gate_proj.weight, mlp.gate_proj.bias))
    return F.linear(
        gate * F.linear(h, mlp.up_proj.weight, mlp.up_proj.bias), mlp.down_proj.weight, mlp.down_proj.bias
    )
