"""Which hidden-state rows each proof commits to, and the input checks shared by prover and validator.

Proof order: the prompt chunk first when it is committed, then the completion in chunks of `chunk_size`
tokens (the last one may be shorter). Inside a chunk the rows are flattened, so a committed index is
token_in_chunk·H + dim and a swapped pair of token rows changes which index holds which value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from swarmrl.configs.toploc import MAX_TOPK
from swarmrl.toploc.errors import HiddenStatesError
from swarmrl.toploc.selection import bf16_bits


@dataclass(frozen=True)
class ChunkSpan:
    """Rows [start, end) of one tensor that a proof commits to; `prompt` tells which tensor."""

    prompt: bool
    start: int
    end: int


@dataclass(frozen=True)
class HiddenStates:
    """Checked bf16 hidden states as int16 bit patterns: completion [C, H] and, if committed, prompt [P, H]."""

    completion_bits: np.ndarray
    prompt_bits: np.ndarray | None

    @property
    def hidden_size(self) -> int:
        return self.completion_bits.shape[1]


def chunk_spans(
    completion_tokens: int, *, chunk_size: int, commit_prompt: bool, prompt_tokens: int = 0
) -> list[ChunkSpan]:
    """The proofs' spans, in proof order."""
    _check_chunking(chunk_size)
    spans = [ChunkSpan(prompt=True, start=0, end=prompt_tokens)] if commit_prompt else []
    spans += [
        ChunkSpan(prompt=False, start=start, end=min(start + chunk_size, completion_tokens))
        for start in range(0, completion_tokens, chunk_size)
    ]
    return spans


def expected_proof_count(completion_tokens: int, *, chunk_size: int = 32, commit_prompt: bool = False) -> int:
    """How many proofs a completion of this length carries."""
    _check_chunking(chunk_size)
    return int(commit_prompt) + -(-completion_tokens // chunk_size)


def split_prefill_hidden(prefill_hidden: torch.Tensor, prompt_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt rows, completion rows) of one prefill over prompt + completion, as the prover captured them.

    Completion token i was sampled from the state at position prompt_len - 1 + i, so the completion's rows
    are [prompt_len - 1, end - 1): the last position's state produced no token of the completion.
    """
    if not isinstance(prefill_hidden, torch.Tensor) or prefill_hidden.dim() != 2:
        raise HiddenStatesError("prefill hidden states must be a 2-D tensor [prompt + completion, hidden]")
    if prompt_len < 1 or prompt_len >= prefill_hidden.shape[0]:
        raise HiddenStatesError(
            f"prompt_len {prompt_len} must lie in [1, {prefill_hidden.shape[0] - 1}] for "
            f"{prefill_hidden.shape[0]} prefill positions"
        )
    return prefill_hidden[:prompt_len], prefill_hidden[prompt_len - 1 : -1]


def check_hidden_states(completion: torch.Tensor, prompt: torch.Tensor | None) -> HiddenStates:
    """Validate shapes and dtypes and convert to bf16 bit patterns; finiteness is checked on the selected points."""
    completion_bits = _finite_bf16_bits(completion, "completion hidden states")
    prompt_bits = None if prompt is None else _finite_bf16_bits(prompt, "prompt hidden states")
    if prompt_bits is not None and prompt_bits.shape[1] != completion_bits.shape[1]:
        raise HiddenStatesError(
            f"prompt hidden size {prompt_bits.shape[1]} differs from completion hidden size {completion_bits.shape[1]}"
        )
    return HiddenStates(completion_bits=completion_bits, prompt_bits=prompt_bits)


def check_topk(topk: int) -> None:
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
        raise HiddenStatesError(f"topk must be an int in [1, {MAX_TOPK}], got {topk!r}")


def _check_chunking(chunk_size: int) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise HiddenStatesError(f"chunk_size must be a positive int, got {chunk_size!r}")


def check_state_tensor(values: torch.Tensor, name: str) -> None:
    """HiddenStatesError unless `values` is a non-empty 2-D [tokens, hidden] floating-point tensor."""
    if not isinstance(values, torch.Tensor):
        raise HiddenStatesError(f"{name} must be a torch.Tensor, got {type(values).__name__}")
    if values.dim() != 2:
        raise HiddenStatesError(f"{name} must be 2-D [tokens, hidden], got shape {tuple(values.shape)}")
    if values.numel() == 0:
        raise HiddenStatesError(f"{name} are empty (shape {tuple(values.shape)}): nothing to commit")
    if not values.is_floating_point():
        raise HiddenStatesError(f"{name} must be floating point, got {values.dtype}")


def _finite_bf16_bits(values: torch.Tensor, name: str) -> np.ndarray:
    check_state_tensor(values, name)
    # Rounding to bf16 is the commitment's definition; fp32 states are rounded exactly as the engine would.
    return bf16_bits(values.detach().to(device="cpu", dtype=torch.bfloat16))
