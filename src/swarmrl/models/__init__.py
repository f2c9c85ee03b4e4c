"""Causal language models and tokenizers: load any HF model directory, or build a tiny one for tests and demos.

Names are imported on first use, so importing the package does not load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl.lazy_exports import lazy_exports

_EXPORTS = {
    "ModelLoadError": "swarmrl.models.errors",
    "load_model": "swarmrl.models.loading",
    "load_tokenizer": "swarmrl.models.tokenizer",
    "model_skeleton": "swarmrl.models.loading",
    "policy_vocab_size": "swarmrl.models.loading",
    "save_pretrained_atomic": "swarmrl.models.loading",
    "Vocabulary": "swarmrl.models.tiny",
    "build_tiny_model": "swarmrl.models.tiny",
    "SPECIAL_TOKENS": "swarmrl.models.tokenizer",
    "train_tokenizer": "swarmrl.models.tokenizer",
}

__all__ = [
    "SPECIAL_TOKENS",
    "ModelLoadError",
    "Vocabulary",
    "build_tiny_model",
    "load_model",
    "load_tokenizer",
    "model_skeleton",
    "policy_vocab_size",
    "save_pretrained_atomic",
    "train_tokenizer",
]

if TYPE_CHECKING:
    from swarmrl.models.errors import ModelLoadError
    from swarmrl.models.loading import (
        load_model,
        model_skeleton,
        policy_vocab_size,
        save_pretrained_atomic,
    )
    from swarmrl.models.tiny import Vocabulary, build_tiny_model
    from swarmrl.models.tokenizer import SPECIAL_TOKENS, load_tokenizer, train_tokenizer


__getattr__ = lazy_exports(__name__, _EXPORTS)
