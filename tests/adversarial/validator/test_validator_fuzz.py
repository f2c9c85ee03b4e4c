"""Hypothesis against `validate_file`: hostile bytes and re-signed field edits are rejected with a named check,
never crash, hang or slip through (a byte edit is accepted only when the file still decodes to the signed rows);
a forged reward claim is ignored (rewards are recomputed)."""

import dataclasses
import random
import tempfile
from pathlib import Path

import pytest
from adversarial.validator.test_validator_attacks import NODE, honest_rows, submit, world  # noqa: F401
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmrl.rollouts import RolloutLimits
from swarmrl.rollouts.assignment import batch_seed
from swarmrl.validator.config import ValidatorConfig
from swarmrl.validator.rollout_checks import CHECKS, SeenFiles, ValidationContext, validate_file

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def honest(world):  # noqa: F811
    return honest_rows(world)


def judge(world, rows=None, *, raw: bytes | None = None, policy_step=0):  # noqa: F811
    """A fresh replay table per example, so the duplicate check never hides a deeper one."""
    config, tokenizer, model, tasks, _ = world
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        context = ValidationContext(
            config=config,
            settings=ValidatorConfig(),
            tasks=tasks,
            tokenizer=tokenizer,
            policy=lambda step: model,
            task_seed=lambda node, step, batch: batch_seed(config.run.id, node, step, batch),
            seen=SeenFiles(tmp / "seen.sqlite"),
            limits=RolloutLimits(
                max_completion_tokens=config.worker.max_new_tokens, vocab_size=model.config.vocab_size
            ),
        )
        if raw is None:
            path = submit(world, tmp, rows, policy_step=policy_step)
        else:
            path = tmp / "f.parquet"
            path.write_bytes(raw)
        return validate_file(path, 0, context, node_id=NODE.node_id)


def rejected(verdict) -> bool:
    return not verdict.accepted and verdict.failed_check in CHECKS and bool(verdict.reason)


def test_the_untouched_file_is_accepted(world, honest):  # noqa: F811
    assert judge(world, honest).accepted


@FUZZ
@given(data=st.data())
def test_corrupted_bytes_are_rejected(world, honest, data, tmp_path):  # noqa: F811
    original = submit(world, tmp_path, honest).read_bytes()
    mode = data.draw(st.sampled_from(["truncate", "flip", "random"]))
    if mode == "truncate":
        raw = original[: data.draw(st.integers(0, len(original) - 1))]
    elif mode == "random":
        raw = data.draw(st.binary(max_size=4096))
    else:
        raw = bytearray(original)
        for position in data.draw(
            st.lists(st.integers(0, len(raw) - 1), min_size=1, max_size=8, unique=True)
        ):
            raw[position] ^= data.draw(st.integers(1, 255))
        raw = bytes(raw)
    verdict = judge(world, raw=raw)
    if verdict.accepted:
        # Bytes the parquet reader never looks at (the leading magic, padding) may change; what it decodes may not.
        assert [(r.prompt_ids, r.completion_ids, r.logprobs, r.proofs) for r in verdict.scored_rows] == [
            (r.prompt_ids, r.completion_ids, r.logprobs, r.proofs) for r in honest
        ]
    else:
        assert rejected(verdict), (mode, verdict)


def _edit(rows, index: int, field: str, rng: random.Random, vocab: int):
    row = rows[index]
    if field == "completion_ids":
        position = rng.randrange(len(row.completion_ids))
        ids = list(row.completion_ids)
        ids[position] = rng.choice([t for t in range(-3, vocab + 3) if t != ids[position]])
        value = ids
    elif field == "logprobs":
        value = [lp + (rng.choice([-1, 1]) * 10 ** rng.uniform(-3, 1)) for lp in row.logprobs]
    elif field == "sample_seed":
        value = row.sample_seed ^ (1 << rng.randrange(62))
    elif field == "group_id":
        value = rng.choice([g for g in range(-2, 12) if g != row.group_id])
    elif field == "temperature":
        value = row.temperature * rng.choice([0.5, 0.9, 1.1, 2.0])
    elif field == "prompt_ids":
        value = list(row.prompt_ids)[:-1] or [0]
    else:  # proofs
        blob = bytearray(row.proofs[0])
        blob[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
        value = [bytes(blob), *row.proofs[1:]]
    return [dataclasses.replace(r, **{field: value}) if i == index else r for i, r in enumerate(rows)]


FIELDS = ["completion_ids", "logprobs", "sample_seed", "group_id", "temperature", "prompt_ids", "proofs"]


@FUZZ
@given(field=st.sampled_from(FIELDS), index=st.integers(0, 15), seed=st.integers(0, 2**32))
def test_resigned_edits_of_one_field_are_rejected(world, honest, field, index, seed):  # noqa: F811
    vocab = world[2].config.vocab_size
    rows = _edit(honest, index % len(honest), field, random.Random(seed), vocab)
    verdict = judge(world, rows)
    assert rejected(verdict), (field, verdict.passed)


@FUZZ
@given(policy_step=st.integers(-5, 50).filter(lambda s: s != 0))
def test_a_claimed_policy_step_that_is_not_the_real_one_is_rejected(world, honest, policy_step):  # noqa: F811
    assert rejected(judge(world, honest, policy_step=policy_step))


@FUZZ
@given(claims=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=16, max_size=16))
def test_forged_reward_claims_change_nothing(world, honest, claims):  # noqa: F811
    truth = [row.reward for row in judge(world, honest).scored_rows]
    forged = [dataclasses.replace(r, claimed_reward=c) for r, c in zip(honest, claims, strict=False)]
    verdict = judge(world, forged)
    assert rejected(verdict) or [row.reward for row in verdict.scored_rows] == truth
