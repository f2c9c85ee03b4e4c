"""Top-k by magnitude over bf16 bit patterns, choosing among equal magnitudes exactly as the reference does.

The reference (toploc 0.1.6) commits to `flat.abs().topk(k)` of each chunk; bf16 has 8 significant bits, so
equal magnitudes at the k-th place are the rule, not the exception, and which of them it commits to decides
the proof's bytes. On CPU torch.topk runs libstdc++'s std::partial_sort (heap select) when 64·k <= n and
std::nth_element (introselect) otherwise, so the tie choice is that algorithm's, not "lowest index first".
We run the same torch.topk on the magnitudes as int16 (for finite bf16 values the magnitude order is the
integer order of the low 15 bits, and the comparisons, hence the choices, are the same as on the bf16 values).
On CUDA the reference's topk (radix select) keeps the lowest indices among ties instead, so its bytes depend on
the device it ran on; ours are always computed here, on the CPU, whatever device produced the states.
"""

from __future__ import annotations

import numpy as np
import torch

_MAGNITUDE_MASK = np.int16(0x7FFF)
# Rows (chunks) handled together are capped so the magnitude copy stays around 16 MB for long sequences.
_ELEMENTS_PER_BLOCK = 1 << 23


def bf16_bits(values: torch.Tensor) -> np.ndarray:
    """The raw 16-bit patterns of a CPU bf16 tensor as an int16 array (same shape, no copy when contiguous)."""
    return values.contiguous().view(torch.int16).numpy()


def top_magnitude_indices(bits: np.ndarray, k: int) -> np.ndarray:
    """Flat indices [rows, k] (int64) of the k largest |x| per row of int16 bf16 patterns [rows, n], in
    descending magnitude: the indices the reference's CPU `row.abs().topk(k)` returns, in its order.

    Requires k <= n and finite values (a NaN pattern sorts as the largest magnitude, so callers see it).
    """
    rows_per_block = max(1, _ELEMENTS_PER_BLOCK // max(1, bits.shape[1]))
    return np.concatenate(
        [
            torch.from_numpy(bits[start : start + rows_per_block] & _MAGNITUDE_MASK)
            .topk(k, dim=1)
            .indices.numpy()
            for start in range(0, bits.shape[0], rows_per_block)
        ]
    )
