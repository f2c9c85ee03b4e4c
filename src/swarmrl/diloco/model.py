"""Tiny Qwen2-style causal LM built from a config (no download); swap for `swarmrl.models` once shared."""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from swarmrl.diloco.config import TinyModelConfig

# Byte-level tokens 0..255 plus BOS and EOS.
BYTE_VOCAB_SIZE = 256
BOS_TOKEN_ID = 256
EOS_TOKEN_ID = 257
VOCAB_SIZE = 258


def build_tiny_causal_lm(config: TinyModelConfig) -> Qwen2ForCausalLM:
    """Deterministically initialised tiny causal LM over the byte vocabulary (tied embeddings)."""
    hf_config = Qwen2Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=BOS_TOKEN_ID,
        eos_token_id=EOS_TOKEN_ID,
        use_cache=False,
    )
    hf_config._attn_implementation = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = Qwen2ForCausalLM(hf_config)
    return model


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
