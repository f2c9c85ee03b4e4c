"""Split a HF causal LM into its backbone (ids → final hidden state) and its head (hidden state → logits).

Engine, prefill and trainer run the backbone and apply the head only where logits are needed. The final
hidden state — after the last norm, the head's input — is what TOPLOC commits to, so the head must be a plain
projection of it: models that rescale or soft-cap logits after the head are refused rather than bound to a
hidden state that does not determine their logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from swarmrl.inference.errors import UnsupportedModelError
from swarmrl.models.lm_types import CausalLM

# Config attributes of HF models whose logits are not lm_head(hidden) alone (Gemma 2/3, Cohere, Granite).
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


@dataclass(frozen=True)
class CausalLMParts:
    backbone: nn.Module
    head: nn.Linear
    hidden_size: int
    vocab_size: int
    max_positions: int | None  # longest sequence the model's position table covers, when it declares one


def split_causal_lm(model: CausalLM) -> CausalLMParts:
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModelError(f"{type(model).__name__} is not a decoder-only HF causal LM")
    for name in _LOGIT_TRANSFORMS:
        value = getattr(config, name, None)
        if value not in (None, 1, 1.0):
            raise UnsupportedModelError(f"{type(model).__name__} transforms its logits ({name}={value})")
    head = model.get_output_embeddings()
    backbone = model.get_decoder()
    if not isinstance(head, nn.Linear) or backbone is None or backbone is model:
        raise UnsupportedModelError(f"{type(model).__name__} has no separable decoder and linear LM head")
    max_positions = getattr(config, "max_position_embeddings", None)
    return CausalLMParts(backbone, head, head.in_features, head.out_features, max_positions)


def padded_position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens only, so left or right padding leaves each sequence's rotary phases
    exactly as they are unpadded."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
