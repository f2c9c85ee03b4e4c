"""TOPLOC: commit to the final hidden states of untrusted inference and check them — pure functions, no I/O."""

from swarmrl.toploc.build import DEFAULT_CHUNK_SIZE, build_proofs, build_proofs_batch
from swarmrl.toploc.config import ToplocConfig, VerifyThresholds
from swarmrl.toploc.encoding import DEFAULT_TOPK, Proof, decode_proof, decode_proofs, encode_proof, proof_size
from swarmrl.toploc.errors import HiddenStatesError, ProofError, ProofFormatError
from swarmrl.toploc.field import FIELD_PRIME
from swarmrl.toploc.layout import ChunkSpan, expected_proof_count, split_prefill_hidden
from swarmrl.toploc.verify import ChunkCheck, VerifyReport, verify_proofs, verify_proofs_batch

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
    "ToplocConfig",
    "VerifyReport",
    "VerifyThresholds",
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
