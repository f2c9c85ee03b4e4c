"""Rollout files: the schema workers write, and the checked reader for untrusted ones."""

from swarmrl.rollouts.errors import RolloutError
from swarmrl.rollouts.io import RolloutLimits, read_header, read_rollouts, write_rollouts
from swarmrl.rollouts.schema import (
    PROOF_BYTES,
    PROOF_CHUNK_TOKENS,
    ROLLOUT_SCHEMA,
    SCHEMA_VERSION,
    SCORED_SCHEMA,
    RolloutHeader,
    RolloutRow,
    ScoredRow,
)

__all__ = [
    "PROOF_BYTES",
    "PROOF_CHUNK_TOKENS",
    "ROLLOUT_SCHEMA",
    "SCHEMA_VERSION",
    "SCORED_SCHEMA",
    "RolloutError",
    "RolloutHeader",
    "RolloutLimits",
    "RolloutRow",
    "ScoredRow",
    "read_header",
    "read_rollouts",
    "write_rollouts",
]
