"""Sequence packing: several prompt ‖ completion sequences share one row of fixed capacity.

Packing saves the compute padding wastes, but a causal LM must not let a token attend to the sequence
packed before it. Position ids restart at 0 at each sequence start, and attention is masked per document:

- an explicit 4D block-diagonal causal mask (`block_causal_mask`) for transformers' eager or sdpa
  attention (CPU, or GPU without FlexAttention);
- a FlexAttention block mask over the same document ids (`swarmrl.trainer.attention`), which skips the
  masked blocks instead of computing them — the GPU path;
- `cu_seqlens` / `max_seqlen` for flash-attention's varlen kernels, where a user has them.

Position ids alone are not enough with eager or sdpa attention (checked with transformers 5.23, with and
without a 2D mask): attention crosses sequence borders and the logprobs of later sequences change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


class PackingError(ValueError):
    """A sequence cannot be packed: longer than a row, empty, or the capacity is not positive."""


def pack_sequences(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """First-fit decreasing: bins of sequence indices whose lengths sum to at most `capacity`.

    Sequences are placed longest first (ties by index), each into the first open bin with room; a bin lists
    its sequences in the order they were placed. Deterministic for the same input.
    """
    if capacity < 1:
        raise PackingError(f"capacity must be >= 1, got {capacity}")
    for index, length in enumerate(lengths):
        if length < 1:
            raise PackingError(f"sequence {index} has length {length}; lengths must be >= 1")
        if length > capacity:
            raise PackingError(
                f"sequence {index} has length {length}, longer than the row capacity {capacity}"
            )
    bins: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        length = lengths[index]
        target = next((b for b, free in enumerate(room) if free >= length), None)
        if target is None:
            bins.append([index])
            room.append(capacity - length)
        else:
            bins[target].append(index)
            room[target] -= length
    return bins


@dataclass(frozen=True)
class CompletionSpan:
    """The completion targets of one sequence: row `row`, target columns [start, start + length)."""

    row: int
    start: int
    length: int


@dataclass(frozen=True)
class PackedBatch:
    """Rows of packed sequences; target-aligned tensors ([R, C-1]) score token t + 1 from position t."""

    input_ids: Tensor  # [R, C] long; padding after the last sequence of a row
    position_ids: Tensor  # [R, C] long; 0, 1, 2, ... from each sequence start (padding continues its own run)
    sequence_ids: Tensor  # [R, C] long; index of the source sequence, -1 on padding
    loss_mask: Tensor  # [R, C-1] bool; True where the target token is a completion token
    target_sequence_ids: Tensor  # [R, C-1] long; source sequence of each target token, -1 on padding
    cu_seqlens: Tensor  # [S+1] int32; segment borders over the flattened rows (padding runs are segments)
    max_seqlen: int  # longest segment, for flash-attention varlen
    rows: list[list[int]]  # source sequence indices per row, in row order
    completion_spans: list[CompletionSpan]  # per source sequence: where its completion targets lie

    def model_inputs(self, dtype: torch.dtype = torch.float32) -> dict[str, Tensor]:
        """Keyword arguments for a transformers causal LM (eager or sdpa attention) on the packed rows."""
        return {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "attention_mask": block_causal_mask(self.sequence_ids, dtype=dtype),
        }

    def per_target_token(self, per_sequence: Tensor) -> Tensor:
        """Spread one value per source sequence (e.g. its advantage) onto the [R, C-1] target positions."""
        index = self.target_sequence_ids.clamp(min=0)
        values = per_sequence.to(self.input_ids.device)[index]
        return torch.where(self.target_sequence_ids >= 0, values, torch.zeros_like(values))

    def per_completion_token(
        self, per_sequence: Sequence[Sequence[float]], dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """Per-completion-token values (e.g. engine logprobs) placed on the [R, C-1] targets, 0 elsewhere."""
        if len(per_sequence) != len(self.completion_spans):
            raise PackingError(f"{len(per_sequence)} value lists for {len(self.completion_spans)} sequences")
        placed = torch.zeros(self.loss_mask.shape, dtype=dtype)
        for index, (values, span) in enumerate(zip(per_sequence, self.completion_spans, strict=True)):
            if len(values) != span.length:
                raise PackingError(
                    f"sequence {index}: {len(values)} values for {span.length} completion tokens"
                )
            placed[span.row, span.start : span.start + span.length] = torch.tensor(values, dtype=dtype)
        return placed

    def unpack_targets(self, per_target: Tensor, sequence: int) -> Tensor:
        """The completion-token values of one source sequence, in order, from a [R, C-1] tensor."""
        span = self.completion_spans[sequence]
        return per_target[span.row, span.start : span.start + span.length]


def pack_examples(
    examples: Sequence[tuple[Sequence[int], Sequence[int]]], capacity: int, pad_token_id: int
) -> PackedBatch:
    """Pack (prompt_ids, completion_ids) pairs into rows of `capacity` tokens (first-fit decreasing)."""
    _check_prompts(examples)
    rows = pack_sequences([len(prompt) + len(completion) for prompt, completion in examples], capacity)
    return lay_out_rows(examples, rows, capacity, pad_token_id)


def lay_out_rows(
    examples: Sequence[tuple[Sequence[int], Sequence[int]]],
    rows: Sequence[Sequence[int]],
    capacity: int,
    pad_token_id: int,
) -> PackedBatch:
    """The packed tensors of `examples` placed as `rows` says (lists of example indices, each used once)."""
    _check_prompts(examples)
    lengths = [len(prompt) + len(completion) for prompt, completion in examples]
    placed = sorted(i for members in rows for i in members)
    if placed != list(range(len(examples))):
        raise PackingError(f"rows must place each of the {len(examples)} examples exactly once")
    for r, members in enumerate(rows):
        if sum(lengths[i] for i in members) > capacity:
            raise PackingError(f"row {r} holds more than the capacity of {capacity} tokens")
    input_ids = torch.full((len(rows), capacity), pad_token_id, dtype=torch.long)
    position_ids = torch.zeros((len(rows), capacity), dtype=torch.long)
    sequence_ids = torch.full((len(rows), capacity), -1, dtype=torch.long)
    completion = torch.zeros((len(rows), capacity), dtype=torch.bool)
    segment_lengths: list[int] = []
    spans: dict[int, CompletionSpan] = {}
    for r, members in enumerate(rows):
        start = 0
        for index in members:
            prompt_ids, completion_ids = examples[index]
            end = start + lengths[index]
            input_ids[r, start:end] = torch.tensor([*prompt_ids, *completion_ids], dtype=torch.long)
            position_ids[r, start:end] = torch.arange(lengths[index])
            sequence_ids[r, start:end] = index
            completion[r, start + len(prompt_ids) : end] = True
            # target column t scores token t + 1: the first completion token is scored from its prompt's end
            spans[index] = CompletionSpan(
                row=r, start=start + len(prompt_ids) - 1, length=len(completion_ids)
            )
            segment_lengths.append(lengths[index])
            start = end
        if start < capacity:
            position_ids[r, start:] = torch.arange(capacity - start)
            segment_lengths.append(capacity - start)
    # Position t predicts token t + 1: a target is scored if it is a completion token. The first token of a
    # sequence is a prompt token, so no target ever crosses from one packed sequence into the next.
    loss_mask = completion[:, 1:]
    target_sequence_ids = torch.where(loss_mask, sequence_ids[:, 1:], -1)
    cu_seqlens = torch.zeros(len(segment_lengths) + 1, dtype=torch.int32)
    cu_seqlens[1:] = torch.cumsum(torch.tensor(segment_lengths, dtype=torch.int32), 0)
    return PackedBatch(
        input_ids=input_ids,
        position_ids=position_ids,
        sequence_ids=sequence_ids,
        loss_mask=loss_mask,
        target_sequence_ids=target_sequence_ids,
        cu_seqlens=cu_seqlens,
        max_seqlen=max(segment_lengths, default=0),
        rows=[list(members) for members in rows],
        completion_spans=[spans[i] for i in range(len(examples))],
    )


def _check_prompts(examples: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
    for index, (prompt, _) in enumerate(examples):
        if not prompt:
            raise PackingError(
                f"example {index} has an empty prompt: its first completion token has no context"
            )


def block_causal_mask(sequence_ids: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """[R, 1, C, C] mask where query q may attend key k iff k ≤ q in the same sequence.

    Boolean for `dtype=torch.bool` (True = attend; what sdpa takes), else additive: 0 where allowed, dtype's
    min elsewhere (what eager attention adds to its scores). Padding (id -1) attends causally to padding only,
    so no query row is fully masked (that would give NaN in softmax). Pass it as `attention_mask` with
    `position_ids` to a transformers causal LM; a 4D mask is used as given.
    """
    length = sequence_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=sequence_ids.device).tril()
    same_sequence = sequence_ids.unsqueeze(-1) == sequence_ids.unsqueeze(-2)
    allowed = (causal & same_sequence).unsqueeze(1)
    if dtype == torch.bool:
        return allowed
    blocked = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=sequence_ids.device)
    return torch.where(allowed, torch.zeros((), dtype=dtype, device=sequence_ids.device), blocked)
