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

Sequences that share their prompt (a GRPO group) can be laid out as one *unit* (`lay_out_units`), as the
engine shares a group's prompt in generation: the prompt but its last token once (the shared prefix), then
one branch per sequence holding that last prompt token and the completion. A branch attends to the prefix
and to itself only, at the positions the sequence has alone, so every completion token sees exactly the
context it was sampled in: its log-probability and gradient are those of the sequence trained alone, while
the prompt's forward and backward run once instead of once per sequence (its gradient is the sum over the
branches, what separate copies would accumulate). Repeating the last prompt token per branch keeps "target
t + 1 from position t" inside each branch.
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
    sequence_ids: Tensor  # [R, C] long; index of the unit (the source sequence when alone), -1 on padding
    branch_ids: Tensor  # [R, C] long; source sequence of a branch token, -1 on a shared prefix and padding
    loss_mask: Tensor  # [R, C-1] bool; True where the target token is a completion token
    target_sequence_ids: Tensor  # [R, C-1] long; source sequence of each target token, -1 on padding
    cu_seqlens: Tensor  # [S+1] int32; unit borders over the flattened rows (padding runs are segments)
    max_seqlen: int  # longest segment, for flash-attention varlen (whose kernels cannot mask branches)
    rows: list[list[int]]  # unit indices per row, in row order
    completion_spans: list[CompletionSpan]  # per source sequence: where its completion targets lie

    def model_inputs(self, dtype: torch.dtype = torch.float32) -> dict[str, Tensor]:
        """Keyword arguments for a transformers causal LM (eager or sdpa attention) on the packed rows."""
        return {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "attention_mask": block_causal_mask(self.sequence_ids, dtype=dtype, branch_ids=self.branch_ids),
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
    return lay_out_units(examples, [[i] for i in range(len(examples))], rows, capacity, pad_token_id)


def unit_length(prompt_length: int, completion_lengths: Sequence[int]) -> int:
    """Tokens of a unit: the shared prefix once, then each branch (last prompt token + completion)."""
    return prompt_length - 1 + sum(1 + length for length in completion_lengths)


def prompt_units(examples: Sequence[tuple[Sequence[int], Sequence[int]]], capacity: int) -> list[list[int]]:
    """Examples with the same prompt grouped into units (in order of first appearance), each split so that no
    unit is longer than `capacity` (a split group repeats its prefix once per part)."""
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for index, (prompt, _) in enumerate(examples):
        by_prompt.setdefault(tuple(prompt), []).append(index)
    units: list[list[int]] = []
    for prompt, members in by_prompt.items():
        unit: list[int] = []
        for index in members:
            lengths = [len(examples[i][1]) for i in [*unit, index]]
            if unit and unit_length(len(prompt), lengths) > capacity:
                units.append(unit)
                unit = []
            unit.append(index)
        units.append(unit)
    return units


def lay_out_units(
    examples: Sequence[tuple[Sequence[int], Sequence[int]]],
    units: Sequence[Sequence[int]],
    rows: Sequence[Sequence[int]],
    capacity: int,
    pad_token_id: int,
) -> PackedBatch:
    """`examples` laid out as `units` (lists of example indices with one prompt, each example in one unit)
    placed as `rows` says (lists of unit indices, each unit used once)."""
    lengths = _check_units(examples, units, rows, capacity)
    shape = (len(rows), capacity)
    input_ids = torch.full(shape, pad_token_id, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    unit_ids = torch.full(shape, -1, dtype=torch.long)
    branch_ids = torch.full(shape, -1, dtype=torch.long)
    completion = torch.zeros(shape, dtype=torch.bool)
    segment_lengths: list[int] = []
    spans: dict[int, CompletionSpan] = {}
    for r, members in enumerate(rows):
        start = 0
        for u in members:
            prompt = examples[units[u][0]][0]
            shared = len(prompt) - 1
            input_ids[r, start : start + shared] = torch.tensor(prompt[:-1], dtype=torch.long)
            position_ids[r, start : start + shared] = torch.arange(shared)
            unit_ids[r, start : start + lengths[u]] = u
            start += shared
            for index in units[u]:
                completion_ids = examples[index][1]
                end = start + 1 + len(completion_ids)
                input_ids[r, start:end] = torch.tensor([prompt[-1], *completion_ids], dtype=torch.long)
                position_ids[r, start:end] = torch.arange(shared, shared + 1 + len(completion_ids))
                branch_ids[r, start:end] = index
                completion[r, start + 1 : end] = True
                # target column t scores token t + 1: the first completion token from the branch's prompt token
                spans[index] = CompletionSpan(row=r, start=start, length=len(completion_ids))
                start = end
            segment_lengths.append(lengths[u])
        if start < capacity:
            position_ids[r, start:] = torch.arange(capacity - start)
            segment_lengths.append(capacity - start)
    # Position t predicts token t + 1: a target is scored if it is a completion token. Every branch starts with
    # a prompt token, so no target ever crosses from one branch or packed sequence into the next.
    loss_mask = completion[:, 1:]
    target_sequence_ids = torch.where(loss_mask, branch_ids[:, 1:], -1)
    cu_seqlens = torch.zeros(len(segment_lengths) + 1, dtype=torch.int32)
    cu_seqlens[1:] = torch.cumsum(torch.tensor(segment_lengths, dtype=torch.int32), 0)
    return PackedBatch(
        input_ids=input_ids,
        position_ids=position_ids,
        sequence_ids=unit_ids,
        branch_ids=branch_ids,
        loss_mask=loss_mask,
        target_sequence_ids=target_sequence_ids,
        cu_seqlens=cu_seqlens,
        max_seqlen=max(segment_lengths, default=0),
        rows=[list(members) for members in rows],
        completion_spans=[spans[i] for i in range(len(examples))],
    )


def _check_units(
    examples: Sequence[tuple[Sequence[int], Sequence[int]]],
    units: Sequence[Sequence[int]],
    rows: Sequence[Sequence[int]],
    capacity: int,
) -> list[int]:
    """Each unit's length, after checking that units and rows place every example once and fit."""
    _check_prompts(examples)
    if sorted(i for unit in units for i in unit) != list(range(len(examples))):
        raise PackingError(f"units must place each of the {len(examples)} examples exactly once")
    if sorted(u for members in rows for u in members) != list(range(len(units))):
        raise PackingError(f"rows must place each of the {len(units)} units exactly once")
    lengths = []
    for u, unit in enumerate(units):
        if not unit or any(examples[i][0] != examples[unit[0]][0] for i in unit):
            raise PackingError(f"unit {u} is empty or mixes prompts")
        lengths.append(unit_length(len(examples[unit[0]][0]), [len(examples[i][1]) for i in unit]))
    for r, members in enumerate(rows):
        if sum(lengths[u] for u in members) > capacity:
            raise PackingError(f"row {r} holds more than the capacity of {capacity} tokens")
    return lengths


def _check_prompts(examples: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
    for index, (prompt, _) in enumerate(examples):
        if not prompt:
            raise PackingError(
                f"example {index} has an empty prompt: its first completion token has no context"
            )


def block_causal_mask(
    sequence_ids: Tensor, dtype: torch.dtype = torch.float32, branch_ids: Tensor | None = None
) -> Tensor:
    """[R, 1, C, C] mask where query q may attend key k iff k ≤ q in the same sequence (unit) and, with
    `branch_ids`, k is on the unit's shared prefix (-1) or on q's own branch.

    Boolean for `dtype=torch.bool` (True = attend; what sdpa takes), else additive: 0 where allowed, dtype's
    min elsewhere (what eager attention adds to its scores). Padding (id -1) attends causally to padding only,
    so no query row is fully masked (that would give NaN in softmax). Pass it as `attention_mask` with
    `position_ids` to a transformers causal LM; a 4D mask is used as given.
    """
    length = sequence_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=sequence_ids.device).tril()
    allowed = causal & (sequence_ids.unsqueeze(-1) == sequence_ids.unsqueeze(-2))
    if branch_ids is not None:
        key = branch_ids.unsqueeze(-2)
        allowed = allowed & ((key == -1) | (key == branch_ids.unsqueeze(-1)))
    allowed = allowed.unsqueeze(1)
    if dtype == torch.bool:
        return allowed
    blocked = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=sequence_ids.device)
    return torch.where(allowed, torch.zeros((), dtype=dtype, device=sequence_ids.device), blocked)
