"""Tiny Qwen2 / Qwen3 / Llama-shaped causal LMs from a few numbers, for tests, demos and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from swarmrl.configs.model import TinyModelSpec

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


def build_tiny_model(
    spec: TinyModelSpec,
    vocabulary: PreTrainedTokenizerBase | Vocabulary,
    attn_implementation: str = "sdpa",
) -> PreTrainedModel:
    """A randomly initialised model whose vocabulary and special tokens match a tokenizer (or `Vocabulary`)."""
    # torch and transformers load here, not at import, so importing swarmrl.models stays light.
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
