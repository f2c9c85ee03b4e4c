"""The committed points of every chunk: top-k flat indices and the bf16 patterns found there.

Prover and validator run the same selection, so on identical states they pick identical points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from swarmrl.toploc.errors import HiddenStatesError
from swarmrl.toploc.layout import HiddenStates
from swarmrl.toploc.selection import top_magnitude_indices

# Magnitudes with all exponent bits set are inf or NaN; they outrank every finite value, so if a chunk holds
# any, its top-k holds one and checking the selected points is enough.
NON_FINITE_MAGNITUDE = 0x7F80


@dataclass(frozen=True)
class ChunkPoints:
    """Points of several chunks of equal length: row r belongs to proof number proof_positions[r]."""

    proof_positions: np.ndarray  # [rows]
    indices: np.ndarray  # [rows, k] int64 flat indices token_in_chunk·H + dim
    patterns: np.ndarray  # [rows, k] int64 raw bf16 bit patterns in [0, 65535]


def select_points(states: HiddenStates, *, chunk_size: int, topk: int) -> list[ChunkPoints]:
    """Every chunk's points, grouped by chunk length (prompt chunk, full completion chunks, short last chunk)."""
    hidden = states.hidden_size
    groups: list[tuple[np.ndarray, np.ndarray]] = []
    offset = 0
    if states.prompt_bits is not None:
        groups.append((np.array([0]), states.prompt_bits.reshape(1, -1)))
        offset = 1
    completion = states.completion_bits
    full_chunks, tail_tokens = divmod(completion.shape[0], chunk_size)
    if full_chunks:
        rows = completion[: full_chunks * chunk_size].reshape(full_chunks, chunk_size * hidden)
        groups.append((offset + np.arange(full_chunks), rows))
    if tail_tokens:
        groups.append(
            (np.array([offset + full_chunks]), completion[full_chunks * chunk_size :].reshape(1, -1))
        )
    return [_points(positions, rows, min(topk, rows.shape[1])) for positions, rows in groups]


def _points(proof_positions: np.ndarray, rows: np.ndarray, k: int) -> ChunkPoints:
    indices = top_magnitude_indices(rows, k)
    patterns = np.take_along_axis(rows, indices, axis=1).astype(np.int64) & 0xFFFF
    if ((patterns & 0x7FFF) >= NON_FINITE_MAGNITUDE).any():
        raise HiddenStatesError(
            "hidden states hold inf or NaN (after rounding to bf16); refusing to use them"
        )
    return ChunkPoints(proof_positions=proof_positions, indices=indices, patterns=patterns)
