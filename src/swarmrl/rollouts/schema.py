"""The rollout file: one parquet row per completion (SPEC §1), a signed header in the file metadata.

Workers write `RolloutRow`s; the validator (or, in a local run, the trainer) adds the trusted columns of
`ScoredRow`. Both tables have a fixed Arrow schema so a reader can reject anything else before use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

SCHEMA_VERSION = 1
PROOF_BYTES = 258  # TOPLOC: 2-byte modulus + 128 two-byte coefficients per chunk of 32 tokens
PROOF_CHUNK_TOKENS = 32

ROLLOUT_SCHEMA = pa.schema(
    [
        pa.field("prompt_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("completion_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("policy_step", pa.int64(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("prompt_index", pa.int64(), nullable=False),
        pa.field("group_id", pa.int64(), nullable=False),
        pa.field("sample_seed", pa.int64(), nullable=False),
        pa.field("temperature", pa.float32(), nullable=False),
        pa.field("target_length", pa.int32(), nullable=False),
        pa.field("logprobs", pa.list_(pa.float32()), nullable=False),
        pa.field("finish_reason", pa.string(), nullable=False),
        pa.field("proofs", pa.list_(pa.binary(PROOF_BYTES)), nullable=False),
        pa.field("claimed_reward", pa.float32(), nullable=False),
        # Multi-turn rollouts: 1 where the model sampled the completion token, 0 for environment turns.
        # Empty for single-turn rows (every completion token is the model's).
        pa.field("completion_mask", pa.list_(pa.int8()), nullable=False),
    ]
)

SCORED_FIELDS = [
    pa.field("task_reward", pa.float32(), nullable=False),
    pa.field("length_term", pa.float32(), nullable=False),
    pa.field("reward", pa.float32(), nullable=False),
    pa.field("advantage", pa.float32(), nullable=False),
]
SCORED_SCHEMA = pa.schema(list(ROLLOUT_SCHEMA) + SCORED_FIELDS)

FINISH_REASONS = ("eos", "length")


@dataclass
class RolloutRow:
    """One completion as the worker produced it; every field is untrusted until validated."""

    prompt_ids: list[int]
    completion_ids: list[int]
    policy_step: int
    task_id: str
    prompt_index: int
    group_id: int
    sample_seed: int
    temperature: float
    target_length: int
    logprobs: list[float]
    finish_reason: str
    proofs: list[bytes] = field(default_factory=list)
    claimed_reward: float = 0.0
    completion_mask: list[int] = field(default_factory=list)

    @property
    def model_mask(self) -> list[int]:
        """1 per completion token the model sampled: the mask, or all ones for a single-turn row."""
        return list(self.completion_mask) if self.completion_mask else [1] * len(self.completion_ids)

    @property
    def model_token_count(self) -> int:
        return sum(self.model_mask)


@dataclass
class ScoredRow(RolloutRow):
    """A rollout row with the rewards and advantage computed on a trusted node."""

    task_reward: float = 0.0
    length_term: float = 0.0
    reward: float = 0.0
    advantage: float = 0.0
    # Kept in memory, never written: each reward function's reward of the row (by metric name; None where it
    # does not apply or failed) and the functions that failed on it with why, for the trainer's metrics.
    function_rewards: dict[str, float | None] = field(default_factory=dict)
    reward_failures: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RolloutHeader:
    """Who made the file, for which run and policy step; signed together with the rows."""

    run_id: str
    node_id: str
    policy_step: int
    batch_index: int
    schema_version: int = SCHEMA_VERSION
    # False: a local run's file, written without TOPLOC proofs because no validator reads it (the run's
    # `contract.local_proofs`); every reader that requires proofs, a validator's, refuses it.
    proofs: bool = True
