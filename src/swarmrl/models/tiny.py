"""Tiny Qwen2 / Qwen3 / Llama-shaped causal LMs from a few numbers, for tests, demos and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class Vocabulary:
    """The vocabulary facts a model config needs: from a trained tokenizer, or fixed (e.g. raw bytes)."""

    size: int
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase) -> Vocabulary:
        return cls(len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)


class TinyModelSpec(BaseModel):
    """The few numbers that shape a tiny model; everything else takes the architecture's defaults."""

    arch: Literal["qwen2", "qwen3", "llama"] = Field("qwen2", description="HF architecture family")
    hidden_size: int = Field(128, ge=8, description="width of the residual stream")
    num_layers: int = Field(4, ge=1, description="transformer blocks")
    num_heads: int = Field(4, ge=1, description="attention heads")
    num_kv_heads: int = Field(2, ge=1, description="key/value heads (grouped-query attention)")
    intermediate_size: int = Field(0, ge=0, description="MLP width; 0 means 4 × hidden_size")
    max_position_embeddings: int = Field(512, ge=16, description="longest sequence the rotary table covers")
    tie_word_embeddings: bool = Field(True, description="share the input embedding and the LM head")
    seed: int = Field(0, description="initialisation seed")


def build_tiny_model(
    spec: TinyModelSpec,
    vocabulary: PreTrainedTokenizerBase | Vocabulary,
    attn_implementation: str = "sdpa",
) -> PreTrainedModel:
    """A randomly initialised model whose vocabulary and special tokens match a tokenizer (or `Vocabulary`)."""
    # torch and transformers load here, not at import: the run config embeds `TinyModelSpec`.
    import torch
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    architectures = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
    }
    vocab = vocabulary if isinstance(vocabulary, Vocabulary) else Vocabulary.of(vocabulary)
    if spec.hidden_size % spec.num_heads or spec.num_heads % spec.num_kv_heads:
        raise ValueError("hidden_size must divide by num_heads, and num_heads by num_kv_heads")
    config_cls, model_cls = architectures[spec.arch]
    config = config_cls(
        vocab_size=vocab.size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size or 4 * spec.hidden_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.hidden_size // spec.num_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        bos_token_id=vocab.bos_token_id,
        eos_token_id=vocab.eos_token_id,
        pad_token_id=vocab.pad_token_id,
        attn_implementation=attn_implementation,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = model_cls(config)
    return model
