"""The policy as the trainer runs it: packed micro-batches in, per-target log-probabilities out.

`PackedPolicy` wraps a transformers causal LM. Its forward runs the backbone over packed rows with the
document mask of the configured attention backend, then the chunked head + log-softmax of
`swarmrl.models.logprobs` on the scored positions only — the [tokens, vocab] tensor never exists. It is the
module FSDP2 shards as its root, so the head weight it reads is gathered like any other root parameter.

Mixed precision (`precision = "bf16"`): the weights and the optimizer state stay fp32 (the master copy).
In one process the forward runs under `torch.autocast(bf16)`; under FSDP2 the sharding's
`MixedPrecisionPolicy` gathers bf16 parameters and reduces gradients in fp32 instead (torchtitan's split:
autocast only where FSDP does not already cast).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import Tensor, nn

from swarmrl.models.lm_types import CausalLM
from swarmrl.models.logprobs import DEFAULT_CHUNK_TOKENS, split_lm, token_logprobs
from swarmrl.trainer.attention import AttentionKind, document_mask, use_attention
from swarmrl.trainer.batch import MicroBatch


class PackedPolicy(nn.Module):
    def __init__(
        self,
        model: CausalLM,
        *,
        attention: AttentionKind = "sdpa",
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
        autocast_dtype: torch.dtype | None = None,
        activation_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        split_lm(model)  # refuse models whose logits are not head(hidden) before any training
        self.model = model
        self.attention = attention
        self.chunk_tokens = chunk_tokens
        self.autocast_dtype = autocast_dtype
        use_attention(model, attention)
        if activation_checkpointing:
            enable_activation_checkpointing(model)

    def forward(
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        document_ids: Tensor,
        loss_mask: Tensor,
        temperature: float,
        with_entropy: bool = False,
        branch_ids: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """(log π(target), entropy or None), each [R, C-1] float32, 0 off `loss_mask`. `branch_ids`: rows laid
        out in units whose branches share a prompt prefix (`trainer.packing.lay_out_units`)."""
        backbone, head = split_lm(self.model)
        autocast = (
            torch.autocast(input_ids.device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else nullcontext()
        )
        with autocast:
            hidden = backbone(
                input_ids=input_ids,
                position_ids=position_ids,
                attention_mask=document_mask(document_ids, self.attention, branch_ids),
                use_cache=False,
            ).last_hidden_state[:, :-1]
            # Always score position (0, 0) too: a micro-batch with nothing on its mask (rank padding) then
            # still runs backward through every layer, which FSDP's gradient collectives need.
            scored = loss_mask.clone()
            scored[0, 0] = True
            scores = token_logprobs(
                hidden[scored],
                head,
                input_ids[:, 1:][scored],
                temperature,
                with_entropy=with_entropy,
                chunk_tokens=self.chunk_tokens,
            )
        blank = torch.zeros(loss_mask.shape, dtype=torch.float32, device=input_ids.device)
        logprobs = blank.masked_scatter(scored, scores.logprobs.float())
        entropy = None if scores.entropy is None else blank.masked_scatter(scored, scores.entropy.float())
        return logprobs, entropy

    def score(self, micro: MicroBatch, temperature: float, with_entropy: bool = False):
        """`forward` on a planned micro-batch (through `__call__`, so FSDP's hooks run)."""
        return self(
            micro.input_ids,
            micro.position_ids,
            micro.document_ids,
            micro.loss_mask,
            temperature,
            with_entropy,
            micro.branch_ids,
        )


def enable_activation_checkpointing(model: CausalLM) -> None:
    """Recompute each transformer block in backward (transformers' own per-layer checkpointing)."""
    # Non-reentrant: works under FSDP2 and when the block inputs do not require grad.
    options = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x renamed it
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=options)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=options)
