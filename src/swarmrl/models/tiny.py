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
    head_dim: int = Field(0, ge=0, description="width of one attention head; 0 means hidden_size / num_heads")
    vocab_size: int = Field(
        0,
        ge=0,
        description="rows of the embedding and LM head; 0 means the tokenizer's size. A published shape's "
        "larger vocabulary (Qwen: 151936) keeps the real LM-head cost; ids the tokenizer lacks decode to ''",
    )
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
    if (not spec.head_dim and spec.hidden_size % spec.num_heads) or spec.num_heads % spec.num_kv_heads:
        raise ValueError(
            "hidden_size must divide by num_heads (or set head_dim), and num_heads by num_kv_heads"
        )
    if spec.vocab_size and spec.vocab_size < vocab.size:
        raise ValueError(f"vocab_size {spec.vocab_size} is smaller than the tokenizer's {vocab.size}")
    config_cls, model_cls = architectures[spec.arch]
    config = config_cls(
        vocab_size=spec.vocab_size or vocab.size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size or 4 * spec.hidden_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim or spec.hidden_size // spec.num_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        bos_token_id=vocab.bos_token_id,
        eos_token_id=vocab.eos_token_id,
        pad_token_id=vocab.pad_token_id,
        attn_implementation=attn_implementation,
    )
    from swarmrl.models.construction import MODEL_CONSTRUCTION

    with MODEL_CONSTRUCTION, torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = model_cls(config)
    return model
