"""A tiny tokenizer and models shared by the inference tests (built once per process)."""

from __future__ import annotations

import functools

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from swarmrl.configs.model import TinyModelSpec
from swarmrl.models import build_tiny_model, train_tokenizer


@functools.cache
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    texts = [f"What is {a} plus {b}? The answer is {a + b}." for a in range(20) for b in range(15)]
    return train_tokenizer(texts, vocab_size=320)


@functools.cache
def tiny_model(arch: str = "qwen2", hidden_size: int = 64, num_layers: int = 2) -> PreTrainedModel:
    spec = TinyModelSpec(
        arch=arch, hidden_size=hidden_size, num_layers=num_layers, num_heads=4, num_kv_heads=2
    )
    return build_tiny_model(spec, tiny_tokenizer()).eval()


def prompts(count: int, seed: int = 0, min_length: int = 3, max_length: int = 12) -> list[list[int]]:
    """Prompts of mixed lengths, so batches are left-padded."""
    generator = torch.Generator().manual_seed(seed)
    vocab = len(tiny_tokenizer())
    result = []
    for _ in range(count):
        length = int(torch.randint(min_length, max_length + 1, (1,), generator=generator))
        result.append(torch.randint(3, vocab, (length,), generator=generator).tolist())
    return result


def assert_bf16_close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal bf16 bit patterns, up to fp32 rounding noise: a different kernel order (decode vs prefill, batch
    shapes) moves an fp32 value by ~1e-7 absolute, which is at most 1 bf16 step for any element of magnitude
    above ~1e-4 and may be several steps for elements near zero (which TOPLOC's top-k never picks)."""
    assert a.shape == b.shape and a.dtype == b.dtype == torch.bfloat16
    steps = (ordered_bf16(a) - ordered_bf16(b)).abs()
    absolute = (a.float() - b.float()).abs()
    assert ((steps <= 1) | (absolute <= 1e-5)).all()
    assert (steps > 0).float().mean() < 0.01


def ordered_bf16(x: torch.Tensor) -> torch.Tensor:
    """bf16 bit patterns mapped to integers that count representable steps across zero."""
    bits = x.view(torch.int16).to(torch.int32)
    return torch.where(bits < 0, -32768 - bits, bits)
