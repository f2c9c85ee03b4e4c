"""The 258-byte proof format: 2-byte big-endian modulus m, then the polynomial's coefficients c_0..c_{k-1}
(ascending powers) as 2-byte big-endian integers — byte-for-byte the format of the reference `toploc` 0.1.6.

The coefficients live in GF(65497), not GF(m) (the reference interpolates in the fixed prime field and uses m
only to fold indices), so a valid coefficient is any value below 65497, possibly above m.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from swarmrl.toploc.errors import ProofFormatError
from swarmrl.toploc.field import FIELD_PRIME, MIN_MODULUS

DEFAULT_TOPK = 128
_WORD = np.dtype(">u2")


def proof_size(topk: int = DEFAULT_TOPK) -> int:
    """Bytes in one encoded proof: 258 for the default 128 coefficients."""
    return 2 + 2 * topk


@dataclass(frozen=True)
class Proof:
    """One chunk's commitment: the index-folding modulus and the polynomial's coefficients over GF(65497)."""

    modulus: int
    coefficients: tuple[int, ...]


def encode_proof(proof: Proof) -> bytes:
    """Serialise a proof; raises ProofFormatError if a field is not an integer in the format's range."""
    fields = (proof.modulus, *proof.coefficients)
    if not all(isinstance(field, int | np.integer) and not isinstance(field, bool) for field in fields):
        raise ProofFormatError("proof modulus and coefficients must be integers")
    return encode_rows(
        np.asarray([proof.modulus], dtype=np.int64), np.asarray([proof.coefficients], dtype=np.int64)
    )[0]


def decode_proof(data: bytes, *, topk: int = DEFAULT_TOPK) -> Proof:
    """Parse one proof from untrusted bytes; raises ProofFormatError naming what is wrong."""
    moduli, coefficients = decode_proofs([data], topk=topk)
    return Proof(modulus=int(moduli[0]), coefficients=tuple(int(c) for c in coefficients[0]))


def decode_proofs(proofs: Sequence[bytes], *, topk: int = DEFAULT_TOPK) -> tuple[np.ndarray, np.ndarray]:
    """Parse many proofs at once into moduli [n] and coefficients [n, topk] (int64); ProofFormatError if any is bad."""
    if isinstance(proofs, bytes | bytearray | str) or not isinstance(proofs, Sequence):
        raise ProofFormatError(f"proofs must be a sequence of bytes objects, got {type(proofs).__name__}")
    size = proof_size(topk)
    for position, data in enumerate(proofs):
        if not isinstance(data, bytes | bytearray | memoryview):
            raise ProofFormatError(f"proof {position} must be bytes, got {type(data).__name__}")
        if len(data) != size:
            raise ProofFormatError(f"proof {position} has {len(data)} bytes; a {topk}-point proof has {size}")
    words = np.frombuffer(b"".join(bytes(data) for data in proofs), dtype=_WORD).astype(np.int64)
    words = words.reshape(len(proofs), topk + 1)
    moduli, coefficients = words[:, 0], words[:, 1:]
    _check_fields(moduli, coefficients)
    return moduli, coefficients


def encode_rows(moduli: np.ndarray, coefficients: np.ndarray) -> list[bytes]:
    """Serialise many proofs (moduli [n], coefficients [n, k]) produced by the builder."""
    _check_fields(moduli, coefficients)
    return _encode_rows(moduli, coefficients)


def _encode_rows(moduli: np.ndarray, coefficients: np.ndarray) -> list[bytes]:
    words = np.concatenate([moduli.reshape(-1, 1), coefficients], axis=1).astype(_WORD)
    return [row.tobytes() for row in words]


def _check_fields(moduli: np.ndarray, coefficients: np.ndarray) -> None:
    bad_modulus = np.flatnonzero((moduli < MIN_MODULUS) | (moduli > FIELD_PRIME))
    if bad_modulus.size:
        first = int(bad_modulus[0])
        raise ProofFormatError(
            f"proof {first} has modulus {int(moduli[first])}; valid moduli lie in [{MIN_MODULUS}, {FIELD_PRIME}]"
        )
    if coefficients.ndim != 2 or coefficients.shape[1] == 0:
        raise ProofFormatError(
            f"coefficients must be a non-empty [proofs, k] array, got shape {coefficients.shape}"
        )
    bad_row, bad_column = np.nonzero((coefficients < 0) | (coefficients >= FIELD_PRIME))
    if bad_row.size:
        row, column = int(bad_row[0]), int(bad_column[0])
        raise ProofFormatError(
            f"proof {row} coefficient {column} is {int(coefficients[row, column])}; "
            f"coefficients are elements of GF({FIELD_PRIME})"
        )
