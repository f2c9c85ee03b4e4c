"""Causal language models and tokenizers: load any HF model directory, or build a tiny one for tests and demos."""

from swarmrl.models.loading import (
    ModelLoadError,
    load_model,
    load_tokenizer,
    policy_vocab_size,
    save_pretrained_atomic,
)
from swarmrl.models.tiny import TinyModelSpec, Vocabulary, build_tiny_model
from swarmrl.models.tokenizer import SPECIAL_TOKENS, train_tokenizer

__all__ = [
    "SPECIAL_TOKENS",
    "ModelLoadError",
    "TinyModelSpec",
    "Vocabulary",
    "build_tiny_model",
    "load_model",
    "load_tokenizer",
    "policy_vocab_size",
    "save_pretrained_atomic",
    "train_tokenizer",
]
