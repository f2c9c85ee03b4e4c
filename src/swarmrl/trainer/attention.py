"""Attention over packed rows: each token sees only the earlier tokens of its own document.

Three backends, chosen per run (`[trainer] attention`):

- `flex`: PyTorch FlexAttention with a block mask built from the document ids. Fully masked 128×128 blocks
  are skipped, so a 16k-token row of short documents costs about what the documents cost alone. Compiled on
  CUDA; PyTorch has no FlexAttention backward on CPU, so it trains on GPUs only.
- `sdpa`: `scaled_dot_product_attention` with a dense boolean [R, 1, C, C] block-diagonal causal mask — any
  device, memory and compute quadratic in the row length, so rows should stay short (see `pack_length`).
- `eager`: transformers' reference attention with the additive form of the same mask.

`auto` picks flex on CUDA and sdpa elsewhere.
"""

from __future__ import annotations

from functools import cache
from typing import Literal

import torch
from torch import Tensor, nn
from transformers import AttentionInterface

from swarmrl.models.lm_types import CausalLM
from swarmrl.trainer.packing import block_causal_mask

AttentionKind = Literal["sdpa", "eager", "flex"]
AttentionChoice = Literal["auto", "sdpa", "eager", "flex"]

# The name under which swarmrl's document FlexAttention is registered with transformers.
FLEX_IMPLEMENTATION = "swarmrl_document_flex"


class AttentionError(ValueError):
    """An attention backend that cannot run here, or a mask the backend cannot use."""


def resolve_attention(choice: AttentionChoice, device: torch.device) -> AttentionKind:
    if choice == "auto":
        return "flex" if device.type == "cuda" else "sdpa"
    if choice == "flex" and device.type != "cuda":
        raise AttentionError(
            "attention = 'flex' trains on CUDA only (PyTorch has no FlexAttention backward on CPU); "
            "use 'sdpa' or 'auto'"
        )
    return choice


def use_attention(model: CausalLM, kind: AttentionKind) -> None:
    """Switch a transformers model to the backend that takes `document_mask(…, kind)` masks."""
    name = {"sdpa": "sdpa", "eager": "eager", "flex": FLEX_IMPLEMENTATION}[kind]
    if kind == "flex":
        _register_flex()
    model.set_attn_implementation(name)


def document_mask(document_ids: Tensor, kind: AttentionKind, branch_ids: Tensor | None = None):
    """The attention mask of packed rows whose tokens carry `document_ids` [R, C] (-1 on padding) and, where
    documents share a prompt prefix, `branch_ids` (-1 on the prefix: see `block_causal_mask`)."""
    if kind == "sdpa":
        return block_causal_mask(document_ids, dtype=torch.bool, branch_ids=branch_ids)
    if kind == "eager":
        return block_causal_mask(document_ids, dtype=torch.float32, branch_ids=branch_ids)
    if kind == "flex":
        return document_block_mask(document_ids, branch_ids)
    raise AttentionError(f"unknown attention backend {kind!r}")


def document_block_mask(document_ids: Tensor, branch_ids: Tensor | None = None):
    """FlexAttention BlockMask: query q attends key k iff k ≤ q within the same document of its row and, with
    `branch_ids`, k is on the document's shared prefix (-1) or on q's own branch."""
    from torch.nn.attention.flex_attention import create_block_mask

    rows, length = document_ids.shape
    branches = torch.full_like(document_ids, -1) if branch_ids is None else branch_ids

    def same_document_causal(batch, head, q_index, kv_index):
        key_branch = branches[batch, kv_index]
        same_branch = (key_branch == -1) | (key_branch == branches[batch, q_index])
        return (
            (document_ids[batch, q_index] == document_ids[batch, kv_index])
            & (kv_index <= q_index)
            & same_branch
        )

    return create_block_mask(
        same_document_causal,
        rows,
        None,
        length,
        length,
        device=document_ids.device,
        # compiled, the mask is built block by block instead of materialising [R, C, C] first
        _compile=document_ids.device.type == "cuda",
    )


@cache
def _register_flex() -> None:
    AttentionInterface.register(FLEX_IMPLEMENTATION, _document_flex_attention)


@cache
def _flex_kernel(device_type: str):
    from torch.nn.attention.flex_attention import flex_attention

    # Fixed row shapes (every micro-batch has pack_length columns): one compilation per row count.
    return torch.compile(flex_attention, dynamic=False) if device_type == "cuda" else flex_attention


def _document_flex_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[Tensor, None]:
    """transformers' attention-function contract: [B, H, L, D] in, ([B, L, H, D], no weights) out."""
    from torch.nn.attention.flex_attention import BlockMask

    if not isinstance(attention_mask, BlockMask):
        raise AttentionError(
            f"{FLEX_IMPLEMENTATION} needs the trainer's document BlockMask, got {type(attention_mask).__name__}"
        )
    if dropout:
        raise AttentionError("document flex attention has no attention dropout; set attention_dropout = 0")
    out = _flex_kernel(query.device.type)(
        query,
        key,
        value,
        block_mask=attention_mask,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None
