"""The committed points of every chunk, selected where the hidden states already are (a GPU).

The same set of points as `points.select_points` on the host (the proof's polynomial and modulus depend on the
set, not its order). One int64 key per element, (0x7FFF − |x| bits) << 32 | index, gives a total order, so
`torch.topk` of the smallest keys is the same on every device. Where the k-th magnitude is unique that top-k is
the only possible set; where equal magnitudes straddle the k-th place, which of them the reference commits to
is its CPU top-k's choice (`selection.py`), so only those chunks' bits cross to the host and are selected
there. Otherwise only [chunks, k] indices and patterns cross; interpolation stays on the host.
"""

from __future__ import annotations

import numpy as np
import torch

from swarmrl.toploc.errors import HiddenStatesError
from swarmrl.toploc.layout import check_state_tensor
from swarmrl.toploc.points import NON_FINITE_MAGNITUDE, ChunkPoints
from swarmrl.toploc.selection import top_magnitude_indices

_INDEX_BITS = 32
# Elements keyed at once (8 bytes each): bounds the temporaries on long completions.
_ELEMENTS_PER_PASS = 1 << 26


def device_points(
    completion: torch.Tensor, prompt: torch.Tensor | None, *, chunk_size: int, topk: int
) -> list[ChunkPoints]:
    """`select_points` for states [C, H] (and [P, H]) on any device; rounds to bf16 like the host path."""
    check_state_tensor(completion, "completion hidden states")
    if prompt is not None:
        check_state_tensor(prompt, "prompt hidden states")
        if prompt.shape[1] != completion.shape[1]:
            raise HiddenStatesError(
                f"prompt hidden size {prompt.shape[1]} differs from completion hidden size {completion.shape[1]}"
            )
    groups: list[tuple[np.ndarray, torch.Tensor]] = []
    offset = 0
    if prompt is not None:
        groups.append((np.array([0]), _bits(prompt).reshape(1, -1)))
        offset = 1
    bits = _bits(completion)
    hidden = bits.shape[1]
    full_chunks, tail_tokens = divmod(bits.shape[0], chunk_size)
    if full_chunks:
        rows = bits[: full_chunks * chunk_size].reshape(full_chunks, chunk_size * hidden)
        groups.append((offset + np.arange(full_chunks), rows))
    if tail_tokens:
        groups.append((np.array([offset + full_chunks]), bits[full_chunks * chunk_size :].reshape(1, -1)))
    return [_points(positions, rows, min(topk, rows.shape[1])) for positions, rows in groups]


def _points(proof_positions: np.ndarray, rows: torch.Tensor, k: int) -> ChunkPoints:
    per_pass = max(1, _ELEMENTS_PER_PASS // rows.shape[1])
    indices, patterns = [], []
    for start in range(0, rows.shape[0], per_pass):
        block = rows[start : start + per_pass].to(torch.int64) & 0xFFFF  # raw patterns, unsigned
        magnitude = block & 0x7FFF
        flat = torch.arange(block.shape[1], device=block.device, dtype=torch.int64)
        key = ((0x7FFF - magnitude) << _INDEX_BITS) | flat
        chosen = torch.topk(key, k, dim=1, largest=False, sorted=True).values & ((1 << _INDEX_BITS) - 1)
        kth_magnitude = magnitude.gather(1, chosen[:, -1:])
        tied = ((magnitude >= kth_magnitude).sum(dim=1) > k).nonzero().flatten()
        if tied.numel():
            host_bits = rows[start : start + per_pass][tied].cpu().numpy()
            chosen[tied] = torch.from_numpy(top_magnitude_indices(host_bits, k)).to(chosen.device)
        indices.append(chosen)
        patterns.append(block.gather(1, chosen))
    index_array = torch.cat(indices).cpu().numpy()
    pattern_array = torch.cat(patterns).cpu().numpy()
    if ((pattern_array & 0x7FFF) >= NON_FINITE_MAGNITUDE).any():
        raise HiddenStatesError(
            "hidden states hold inf or NaN (after rounding to bf16); refusing to use them"
        )
    return ChunkPoints(proof_positions=proof_positions, indices=index_array, patterns=pattern_array)


def _bits(values: torch.Tensor) -> torch.Tensor:
    return values.detach().to(torch.bfloat16).contiguous().view(torch.int16)
