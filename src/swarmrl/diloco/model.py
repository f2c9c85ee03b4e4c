"""The tiny causal LM DiLoCo trains: a `swarmrl.models` tiny Qwen2 over raw bytes (no tokenizer to train)."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from swarmrl.configs.diloco import TinyModelConfig
from swarmrl.configs.model import TinyModelSpec
from swarmrl.models import Vocabulary, build_tiny_model

# Byte-level tokens 0..255 plus BOS and EOS.
BYTE_VOCAB_SIZE = 256
BOS_TOKEN_ID = 256
EOS_TOKEN_ID = 257
VOCAB_SIZE = 258


def build_tiny_causal_lm(config: TinyModelConfig) -> PreTrainedModel:
    """Deterministically initialised tiny causal LM over the byte vocabulary (tied embeddings)."""
    spec = TinyModelSpec(
        arch="qwen2",
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        num_kv_heads=config.num_key_value_heads,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        seed=config.seed,
    )
    model = build_tiny_model(
        spec, Vocabulary(VOCAB_SIZE, BOS_TOKEN_ID, EOS_TOKEN_ID), attn_implementation="eager"
    )
    model.config.use_cache = False  # training only: no KV cache to build
    return model


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
