"""Polynomial commitments over GF(65497), batched over chunks: one row of points per chunk.

The reference format (toploc 0.1.6) does its arithmetic in GF(65497) — the prime field named by the largest
modulus tried — and uses the per-chunk modulus m only to fold indices: x = index mod m, with m the first value
from 65497 downward for which the folded indices of the chunk stay distinct. Because m <= 65497 the folded
x are also distinct field elements, so interpolation is well defined. y is the raw bf16 bit pattern; every
finite bf16 pattern is <= 0xFF7F = 65407 < 65497, so y is stored exactly (non-finite values are refused before
they get here).

Inputs and outputs are int64 numpy arrays; the arithmetic inside runs exactly in float64 (see _reduce).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from swarmrl.toploc.errors import HiddenStatesError

FIELD_PRIME = 65497
# The reference search stops above 2**15; a smaller modulus is never produced by an honest prover.
MIN_MODULUS = 2**15 + 1
# Moduli tried per vectorised step: the first candidate is injective for ~88% of 128-point chunks.
_MODULUS_WINDOW = 4


@lru_cache(maxsize=1)
def inverse_table() -> np.ndarray:
    """inv[a] = a^(p-2) mod p for every a in GF(p) (Fermat); inv[0] = 0 is never used on honest paths."""
    base = np.arange(FIELD_PRIME, dtype=np.int64)
    result = np.ones(FIELD_PRIME, dtype=np.int64)
    exponent = FIELD_PRIME - 2
    while exponent:
        if exponent & 1:
            result = result * base % FIELD_PRIME
        base = base * base % FIELD_PRIME
        exponent >>= 1
    result.flags.writeable = False
    return result


def injective_moduli(indices: np.ndarray) -> np.ndarray:
    """For each row of distinct non-negative indices [rows, k], the first m <= 65497 with all index mod m distinct."""
    rows = indices.shape[0]
    moduli = np.zeros(rows, dtype=np.int64)
    pending = np.arange(rows)
    for start in range(FIELD_PRIME, MIN_MODULUS - 1, -_MODULUS_WINDOW):
        candidates = np.arange(start, max(start - _MODULUS_WINDOW, MIN_MODULUS - 1), -1, dtype=np.int64)
        folded = np.sort(indices[pending, None, :] % candidates[None, :, None], axis=-1)
        injective = (np.diff(folded, axis=-1) != 0).all(axis=-1)  # [pending, candidates]
        found = injective.any(axis=1)
        moduli[pending[found]] = candidates[injective[found].argmax(axis=1)]
        pending = pending[~found]
        if pending.size == 0:
            return moduli
    raise HiddenStatesError(
        f"no modulus in [{MIN_MODULUS}, {FIELD_PRIME}] keeps the top-k indices of {pending.size} chunk(s) distinct"
    )


def interpolate(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Coefficients c[0..k-1] (ascending powers) of the polynomial through (x[r, i], y[r, i]) for every row r.

    Newton divided differences, then expansion of the Newton form into monomials by Horner's rule:
    P(X) = dd_0 + (X - x_0)(dd_1 + (X - x_1)(dd_2 + ...)).
    x must hold distinct field elements per row; y field elements.
    """
    k = x.shape[1]
    signed_inverse = _signed_inverse_table()
    x_field = x.astype(np.float64)
    dd = y.astype(np.float64)
    for order in range(1, k):
        step = dd[:, order:] - dd[:, order - 1 : -1]
        step *= signed_inverse[x[:, order:] - x[:, :-order] + FIELD_PRIME]
        dd[:, order:] = _reduce(step)

    coefficients = np.zeros_like(dd)
    coefficients[:, 0] = dd[:, k - 1]
    for i in range(k - 2, -1, -1):
        degree = k - 2 - i  # of the partial polynomial before it is multiplied by (X - x_i)
        previous = coefficients[:, : degree + 1].copy()
        coefficients[:, 1 : degree + 2] = previous
        coefficients[:, 0] = dd[:, i]
        previous *= x_field[:, i : i + 1]
        coefficients[:, : degree + 1] -= previous
        coefficients[:, : degree + 2] = _reduce(coefficients[:, : degree + 2])
    return coefficients.astype(np.int64)


def evaluate(coefficients: np.ndarray, x: np.ndarray) -> np.ndarray:
    """P_r(x[r, j]) mod p for every row r, by Horner's rule; x must already be reduced mod the row's modulus."""
    x_field = (x % FIELD_PRIME).astype(np.float64)
    coefficients = coefficients.astype(np.float64)
    values = np.broadcast_to(coefficients[:, -1:], x.shape).copy()
    for i in range(coefficients.shape[1] - 2, -1, -1):
        values *= x_field
        values += coefficients[:, i : i + 1]
        values = _reduce(values)
    return values.astype(np.int64)


@lru_cache(maxsize=1)
def _signed_inverse_table() -> np.ndarray:
    """inverse of (d mod p) at position d + p, for differences d in (-p, p), as float64."""
    table = inverse_table().astype(np.float64)
    return np.concatenate([table, table])


def _reduce(values: np.ndarray) -> np.ndarray:
    """values mod p for integer-valued float64 arrays with |values| < 2**40.

    Field arithmetic runs in float64 because numpy's vectorised float multiply and floor are several times
    faster than int64 division. Integers below 2**53 are exact; with the +0.5 offset the fractional part of
    (v + 0.5)/p lies at least 0.5/p (~2**-17) from an integer, while the quotient's rounding error is about
    |v|/p · 2**-52 (< 2**-28 here), so the floor is always the true quotient.
    """
    quotient = values + 0.5
    quotient *= _INVERSE_PRIME
    np.floor(quotient, out=quotient)
    quotient *= FIELD_PRIME
    return values - quotient


_INVERSE_PRIME = 1.0 / FIELD_PRIME
