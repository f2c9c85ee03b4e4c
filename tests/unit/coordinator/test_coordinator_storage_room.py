"""The rules of a run's storage room: a file's cap from the contract's unit bounds, and the quota's two pools."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from swarmrl.configs.contract import ContractSection
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.rules.storage_room import pools, unit_file_cap, upload_cap
from swarmrl.coordinator.store.db import Run
from swarmrl.identity import Identity
from swarmrl.rollouts.io import write_rollouts
from swarmrl.rollouts.schema import PROOF_BYTES, PROOF_CHUNK_TOKENS, RolloutHeader, RolloutRow


def largest_file(path: Path, contract: ContractSection, prompt_tokens: int) -> int:
    """A unit's file as large as a validator still takes: every row at the longest prompt and completion,
    incompressible values everywhere; returns its size."""
    rnd, tokens = random.Random(0), contract.max_new_tokens
    identity = Identity.generate()
    rows = [
        RolloutRow(
            prompt_ids=[rnd.randrange(2**31 - 1) for _ in range(prompt_tokens)],
            completion_ids=[rnd.randrange(2**31 - 1) for _ in range(tokens)],
            policy_step=2**40,
            task_id="t" * 64,
            prompt_index=rnd.randrange(2**62),
            group_id=rnd.randrange(2**62),
            sample_seed=rnd.randrange(2**62),
            temperature=rnd.random(),
            target_length=rnd.randrange(2**30),
            logprobs=[-10 * rnd.random() for _ in range(tokens)],
            finish_reason="length",
            proofs=[rnd.randbytes(PROOF_BYTES) for _ in range(-(-tokens // PROOF_CHUNK_TOKENS))],
            claimed_reward=rnd.random(),
            completion_mask=[1] * tokens,
        )
        for _ in range(contract.rows_per_batch)
    ]
    header = RolloutHeader(run_id="r" * 128, node_id=identity.node_id, policy_step=2**40, batch_index=2**30)
    return write_rollouts(path, header, rows, identity).stat().st_size


@pytest.mark.parametrize(
    ("prompts", "group", "tokens", "prompt_tokens"),
    [(1, 2, 1, 1), (2, 8, 16, 64), (4, 4, 256, 512), (1, 2, 1024, 2048)],
)
def test_the_largest_file_a_validator_takes_fits_the_cap(tmp_path, prompts, group, tokens, prompt_tokens):
    contract = ContractSection(prompts_per_batch=prompts, group_size=group, max_new_tokens=tokens)
    size = largest_file(tmp_path / "unit.parquet", contract, prompt_tokens)
    cap = unit_file_cap(contract, prompt_tokens)
    assert size <= cap
    assert cap < 2 * size + 64 * 1024  # an upper bound, not a different order of magnitude


def test_the_cap_grows_with_the_units_bounds_and_stays_within_upload_max_bytes():
    small = ContractSection(prompts_per_batch=4, group_size=4, max_new_tokens=16)
    assert unit_file_cap(small) < unit_file_cap(small.model_copy(update={"max_new_tokens": 4096}))
    assert unit_file_cap(small) < unit_file_cap(small.model_copy(update={"group_size": 8}))
    config = CoordinatorConfig()
    run = Run(run_id="r", contract=small.model_dump(mode="json"))
    assert upload_cap(run, config) == unit_file_cap(small) < config.upload_max_bytes
    huge = ContractSection(prompts_per_batch=1024, group_size=64, max_new_tokens=32768)
    assert (
        upload_cap(Run(run_id="r", contract=huge.model_dump(mode="json")), config) == config.upload_max_bytes
    )
    assert upload_cap(Run(run_id="r", contract=None), config) == config.upload_max_bytes


def test_the_unproven_pool_is_a_share_and_the_proven_pool_the_rest():
    config = CoordinatorConfig(storage_quota_bytes=1000, storage_unproven_fraction=0.1)
    assert pools(config) == (900, 100)
