"""Shared pieces of the trainer tests: a tiny Qwen2 and a padded batch of four prompt/completion pairs."""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

EXAMPLES = [([3, 4, 5], [6, 7, 8, 9]), ([10, 11], [12]), ([13], [14, 15, 16]), ([17, 18, 19, 20], [21, 22])]
ADVANTAGES = torch.tensor([1.0, -0.5, 0.8, -1.2])


def tiny_model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    return Qwen2ForCausalLM(config)


def padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(p) + len(c) for p, c in EXAMPLES)
    input_ids = torch.zeros(len(EXAMPLES), width, dtype=torch.long)
    attention = torch.zeros(len(EXAMPLES), width, dtype=torch.long)
    completion = torch.zeros(len(EXAMPLES), width - 1, dtype=torch.bool)
    for i, (prompt, comp) in enumerate(EXAMPLES):
        input_ids[i, : len(prompt) + len(comp)] = torch.tensor(prompt + comp)
        attention[i, : len(prompt) + len(comp)] = 1
        completion[i, len(prompt) - 1 : len(prompt) + len(comp) - 1] = True
    return input_ids, attention, completion
