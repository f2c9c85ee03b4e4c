"""TOPLOC: commit to the final hidden states of untrusted inference and check them — pure functions, no I/O.

Names are imported on first use (`swarmrl.lazy_exports`): importing the
package must not load the rest of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl.lazy_exports import lazy_exports

_EXPORTS = {
    "DEFAULT_CHUNK_SIZE": "swarmrl.toploc.build",
    "build_proofs": "swarmrl.toploc.build",
    "build_proofs_batch": "swarmrl.toploc.build",
    "DEFAULT_TOPK": "swarmrl.toploc.encoding",
    "Proof": "swarmrl.toploc.encoding",
    "decode_proof": "swarmrl.toploc.encoding",
    "decode_proofs": "swarmrl.toploc.encoding",
    "encode_proof": "swarmrl.toploc.encoding",
    "proof_size": "swarmrl.toploc.encoding",
    "HiddenStatesError": "swarmrl.toploc.errors",
    "ProofError": "swarmrl.toploc.errors",
    "ProofFormatError": "swarmrl.toploc.errors",
    "FIELD_PRIME": "swarmrl.toploc.field",
    "ChunkSpan": "swarmrl.toploc.layout",
    "expected_proof_count": "swarmrl.toploc.layout",
    "split_prefill_hidden": "swarmrl.toploc.layout",
    "ChunkCheck": "swarmrl.toploc.verify",
    "VerifyReport": "swarmrl.toploc.verify",
    "verify_proofs": "swarmrl.toploc.verify",
    "verify_proofs_batch": "swarmrl.toploc.verify",
}

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_TOPK",
    "FIELD_PRIME",
    "ChunkCheck",
    "ChunkSpan",
    "HiddenStatesError",
    "Proof",
    "ProofError",
    "ProofFormatError",
    "VerifyReport",
    "build_proofs",
    "build_proofs_batch",
    "decode_proof",
    "decode_proofs",
    "encode_proof",
    "expected_proof_count",
    "proof_size",
    "split_prefill_hidden",
    "verify_proofs",
    "verify_proofs_batch",
]

if TYPE_CHECKING:
    from swarmrl.toploc.build import DEFAULT_CHUNK_SIZE, build_proofs, build_proofs_batch
    from swarmrl.toploc.encoding import (
        DEFAULT_TOPK,
        Proof,
        decode_proof,
        decode_proofs,
        encode_proof,
        proof_size,
    )
    from swarmrl.toploc.errors import HiddenStatesError, ProofError, ProofFormatError
    from swarmrl.toploc.field import FIELD_PRIME
    from swarmrl.toploc.layout import ChunkSpan, expected_proof_count, split_prefill_hidden
    from swarmrl.toploc.verify import ChunkCheck, VerifyReport, verify_proofs, verify_proofs_batch


__getattr__ = lazy_exports(__name__, _EXPORTS)
