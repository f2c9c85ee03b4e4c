"""Fuzz `validate_file` with hostile rollout files: every one gets a rejecting Verdict naming a check, never an
exception, a hang or an accept.

Two families: byte-level garbage (random bytes, truncated or corrupted honest files), caught by the schema and
signature check; and honest rows edited field by field and re-signed with the worker's own key, so that the
signature holds and the deeper checks have to catch the edit. A few edits are meaning-preserving by design
(the claimed reward is never used, row order is free, the TOPLOC modulus only folds indices and c_0 shifts
every committed value alike); those must be rejected or give exactly the honest file's trusted result.
"""

import dataclasses
import hashlib
import json
import math
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from adversarial.validator import test_validator_attacks as attacks
from hypothesis import HealthCheck, assume, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from swarmrl.identity import Identity
from swarmrl.rollouts import RolloutHeader, RolloutRow, write_rollouts
from swarmrl.rollouts.schema import FINISH_REASONS, PROOF_BYTES
from swarmrl.validator.rollout_checks import CHECKS, Verdict, validate_file

# The attack suite's fixtures: `world` (config, tokenizer, model, tasks — built once for this module) and
# `context` (a ValidationContext with its own SeenFiles per test function).
world = attacks.world
context = attacks.context
NODE = attacks.NODE

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
HANG_SECONDS = 20.0  # one honest file takes ~0.1 s; anything near this is a hang
# Seeded replay is on (the default), so the heuristic "termination" check never runs: the order checks pass in.
ORDER = [c for c in CHECKS if c != "termination"]


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


@dataclasses.dataclass(repr=False)  # a short repr keeps hypothesis' failure reports readable
class Honest:
    header: RolloutHeader
    rows: list[RolloutRow]
    data: bytes  # the signed file


@pytest.fixture(scope="module")
def honest(world, tmp_path_factory) -> Honest:
    """The honest batch, generated and signed once per module."""
    rows = attacks.honest_rows(world)
    path = attacks.submit(world, tmp_path_factory.mktemp("honest"), rows)
    return Honest(RolloutHeader(world[0].run.id, NODE.node_id, 0, 0), rows, path.read_bytes())


@pytest.fixture()
def honest_verdict(context, tmp_path, honest):
    verdict = judge(context, tmp_path, honest.data)
    assert verdict.accepted, f"{verdict.failed_check}: {verdict.reason}"
    return verdict


def judge(context, tmp_path, data: bytes) -> Verdict:
    """Validate `data` as a file for step 0 from NODE; forget it afterwards so no example masks the next as a
    duplicate (the duplicate check keys on content hash and on node/step/batch)."""
    path = tmp_path / f"{uuid.uuid4().hex}.parquet"
    path.write_bytes(data)
    start = time.monotonic()
    try:
        verdict = validate_file(path, 0, context, node_id=NODE.node_id)
    finally:
        context.seen.forget(hashlib.sha256(data).hexdigest())
        path.unlink()
    elapsed = time.monotonic() - start
    assert elapsed < HANG_SECONDS, f"validate_file took {elapsed:.1f} s"
    assert isinstance(verdict, Verdict)
    if currently_in_test_context():  # tallied by --hypothesis-show-statistics
        event(f"rejected by {verdict.failed_check}" if not verdict.accepted else "accepted")
    return verdict


def signed(tmp_path, header: RolloutHeader, rows, identity: Identity = NODE) -> bytes:
    path = write_rollouts(tmp_path / f"w-{uuid.uuid4().hex}.parquet", header, rows, identity)
    data = path.read_bytes()
    path.unlink()
    return data


def assert_rejected(verdict: Verdict, allowed: set[str] | None = None) -> None:
    assert not verdict.accepted, "hostile file accepted"
    assert isinstance(verdict.failed_check, str) and verdict.failed_check in CHECKS, verdict.failed_check
    assert isinstance(verdict.reason, str) and verdict.reason.strip(), "empty rejection reason"
    assert verdict.scored_rows is None
    # The checks before the failing one passed, in order, and nothing after it ran.
    assert verdict.passed == ORDER[: len(verdict.passed)]
    assert ORDER[len(verdict.passed)] == verdict.failed_check
    if allowed is not None:
        assert verdict.failed_check in allowed, f"{verdict.failed_check}: {verdict.reason}"


def trusted(verdict: Verdict, *, with_claims: bool = True) -> list[dict]:
    """The accepted rows as the trainer would get them, in a canonical order."""
    rows = sorted(verdict.scored_rows, key=lambda r: (r.group_id, r.sample_seed))
    out = [dataclasses.asdict(r) for r in rows]
    if not with_claims:
        for row in out:
            del row["claimed_reward"]
    return out


def assert_rejected_or_same_trust(verdict: Verdict, honest_verdict: Verdict, *, with_claims=True) -> None:
    if not verdict.accepted:
        assert_rejected(verdict)
        return
    assert verdict.header == honest_verdict.header
    assert trusted(verdict, with_claims=with_claims) == trusted(honest_verdict, with_claims=with_claims)


def test_honest_file_is_accepted(honest_verdict, honest):
    """Control: the unmodified file passes every check, so the rejections below are the checks' doing."""
    assert honest_verdict.passed == ORDER
    assert len(honest_verdict.scored_rows) == len(honest.rows)


# --- 1. byte-level garbage -----------------------------------------------------------------------------


@fuzz(150)
@given(
    data=st.one_of(
        st.binary(max_size=4096),
        st.sampled_from(
            [b"", b"PAR1", b"PAR1PAR1", b"PAR1" + b"\0" * 4 + b"PAR1", b"PAR1\xff\xff\xff\x7fPAR1"]
        ),
    )
)
def test_random_bytes_are_rejected(context, tmp_path, data):
    assert_rejected(judge(context, tmp_path, data), {"schema_and_signature"})


@fuzz(60)
@given(cut=st.floats(0.0, 1.0, exclude_max=True))
def test_truncated_honest_file_is_rejected(context, tmp_path, honest, cut):
    data = honest.data
    assert_rejected(judge(context, tmp_path, data[: int(cut * len(data))]), {"schema_and_signature"})


@fuzz(300)
@given(
    edits=st.lists(
        st.tuples(st.floats(0.0, 1.0, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=8
    ),
    tail=st.binary(max_size=16),
)
def test_corrupted_honest_file_is_rejected_or_unchanged(
    context, tmp_path, honest, honest_verdict, edits, tail
):
    """Byte flips anywhere (plus optional appended junk): a flip in bytes nobody reads (parquet statistics,
    padding) may leave the signed content intact, and then the verdict must be exactly the honest one."""
    data = bytearray(honest.data)
    for where, xor in edits:
        data[int(where * len(data))] ^= xor
    verdict = judge(context, tmp_path, bytes(data) + tail)
    assert_rejected_or_same_trust(verdict, honest_verdict)


HEADER_KEYS = ("run_id", "node_id", "policy_step", "batch_index", "schema_version")
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@pytest.mark.slow
@fuzz(120)
@given(data=st.data())
def test_hostile_header_metadata_is_rejected_or_unchanged(context, tmp_path, honest, honest_verdict, data):
    """The signed file with its header metadata swapped for garbage, or for JSON with some fields of the
    honest header retyped; the signature is kept. JSON that parses back to the honest header (keys in
    another order, schema_version left to its default) may pass, and then nothing may differ."""
    fields = dataclasses.asdict(honest.header)
    raw = data.draw(
        st.one_of(
            st.binary(max_size=300),
            JSON_VALUES.map(lambda v: json.dumps(v).encode()),
            st.fixed_dictionaries(
                {},
                optional={key: st.one_of(st.just(fields[key]), JSON_VALUES) for key in HEADER_KEYS},
            ).map(lambda d: json.dumps(d).encode()),
        )
    )
    table = pq.read_table(pa.BufferReader(honest.data))
    metadata = dict(table.schema.metadata)
    metadata[b"swarmrl.header"] = raw
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(metadata), sink)
    verdict = judge(context, tmp_path, sink.getvalue().to_pybytes())
    assert_rejected_or_same_trust(verdict, honest_verdict)


@pytest.mark.parametrize("column", ["task_id", "finish_reason"])
def test_invalid_utf8_in_a_string_column_is_rejected(context, tmp_path, honest, column):
    """Found by the byte-flip fuzz above: a flipped byte inside a string value leaves a file that parquet
    still reads but whose strings are not UTF-8. Deterministic here: the signed table rewritten uncompressed
    (signature still valid), then one byte of a string value set to 0xff."""
    table = pq.read_table(pa.BufferReader(honest.data))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="none", use_dictionary=False, write_statistics=False)
    data = sink.getvalue().to_pybytes()
    rewritten = judge(context, tmp_path, data)  # control: the re-encoding alone changes nothing
    assert rewritten.accepted, f"{rewritten.failed_check}: {rewritten.reason}"
    value = getattr(honest.rows[0], column).encode()
    at = data.index(value)
    corrupted = data[:at] + b"\xff" + data[at + 1 :]
    verdict = judge(context, tmp_path, corrupted)
    assert_rejected(verdict, {"schema_and_signature"})


# --- 2. field edits, re-signed with the worker's key -----------------------------------------------------


def _row(draw, rows, predicate=lambda r: True) -> int:
    candidates = [i for i, r in enumerate(rows) if predicate(r)]
    assume(candidates)
    return draw(st.sampled_from(candidates))


def _replace(rows, i, **changes):
    rows = list(rows)
    rows[i] = dataclasses.replace(rows[i], **changes)
    return rows


def _different(draw, strategy, old):
    value = draw(strategy)
    assume(value != old)
    return value


def _completion_token(low, high):
    def mutate(draw, header, rows, world):
        i = _row(draw, rows)
        ids = list(rows[i].completion_ids)
        j = draw(st.integers(0, len(ids) - 1))
        ids[j] = _different(draw, st.integers(low(world), high(world)), ids[j])
        return header, _replace(rows, i, completion_ids=ids)

    return mutate


def _vocab(world):
    return world[2].config.vocab_size


def mutate_truncate_completion(draw, header, rows, world):
    i = _row(draw, rows, lambda r: len(r.completion_ids) >= 2)
    k = draw(st.integers(1, len(rows[i].completion_ids) - 1))
    return header, _replace(rows, i, completion_ids=rows[i].completion_ids[:k], logprobs=rows[i].logprobs[:k])


def mutate_extend_completion(draw, header, rows, world):
    i = _row(draw, rows)
    token = draw(st.integers(0, _vocab(world) - 1))
    logprob = draw(st.floats(-20.0, 0.0, width=32))
    row = rows[i]
    return header, _replace(
        rows, i, completion_ids=[*row.completion_ids, token], logprobs=[*row.logprobs, logprob]
    )


def mutate_logprob(draw, header, rows, world):
    i = _row(draw, rows)
    logprobs = list(rows[i].logprobs)
    j = draw(st.integers(0, len(logprobs) - 1))
    new = draw(st.one_of(st.floats(-30.0, 0.0, width=32), st.floats(width=32)))
    # 5x the validator's tolerance (2e-4): a smaller change is honest noise and is accepted by design.
    assume(not (math.isfinite(new) and abs(new - logprobs[j]) <= 1e-3))
    logprobs[j] = new
    return header, _replace(rows, i, logprobs=logprobs)


def mutate_sample_seed(draw, header, rows, world):
    i = _row(draw, rows)
    return header, _replace(rows, i, sample_seed=_different(draw, st.integers(*INT64), rows[i].sample_seed))


def mutate_swap_seeds_in_group(draw, header, rows, world):
    """The group's seed set stays right, so only the seeded replay can tell which row used which seed."""
    i = _row(draw, rows)
    j = _row(
        draw, rows, lambda r: r.group_id == rows[i].group_id and r.completion_ids != rows[i].completion_ids
    )
    return header, _swap_seeds(rows, i, j)


def _swap_seeds(rows, i, j):
    rows = list(rows)
    rows[i], rows[j] = (
        dataclasses.replace(rows[i], sample_seed=rows[j].sample_seed),
        dataclasses.replace(rows[j], sample_seed=rows[i].sample_seed),
    )
    return rows


def mutate_group_id(draw, header, rows, world):
    i = _row(draw, rows)
    return header, _replace(rows, i, group_id=_different(draw, st.integers(*INT64), rows[i].group_id))


def mutate_proof_coefficient_bytes(draw, header, rows, world):
    """Bytes of c_1..c_127: the committed polynomial changes at every index but 0."""
    i = _row(draw, rows)
    proofs = [bytearray(p) for p in rows[i].proofs]
    k = draw(st.integers(0, len(proofs) - 1))
    proofs[k][draw(st.integers(4, PROOF_BYTES - 1))] ^= draw(st.integers(1, 255))
    return header, _replace(rows, i, proofs=[bytes(p) for p in proofs])


def mutate_proof_random(draw, header, rows, world):
    i = _row(draw, rows)
    proofs = list(rows[i].proofs)
    k = draw(st.integers(0, len(proofs) - 1))
    proofs[k] = _different(draw, st.binary(min_size=PROOF_BYTES, max_size=PROOF_BYTES), proofs[k])
    return header, _replace(rows, i, proofs=proofs)


def mutate_proof_count(draw, header, rows, world):
    i = _row(draw, rows)
    proofs = list(rows[i].proofs)
    if draw(st.booleans()) and proofs:
        proofs.pop(draw(st.integers(0, len(proofs) - 1)))
    else:
        proofs.append(draw(st.binary(min_size=PROOF_BYTES, max_size=PROOF_BYTES)))
    return header, _replace(rows, i, proofs=proofs)


def mutate_temperature(draw, header, rows, world):
    i = _row(draw, rows)
    new = draw(st.one_of(st.floats(0.125, 10.0, width=32), st.floats(width=32)))
    assume(not (math.isfinite(new) and abs(new - world[0].contract.temperature) <= 1e-3))
    return header, _replace(rows, i, temperature=new)


def mutate_finish_reason(draw, header, rows, world):
    i = _row(draw, rows)
    others = [reason for reason in FINISH_REASONS if reason != rows[i].finish_reason]
    choices = st.one_of(st.sampled_from(others), st.text(max_size=8))
    return header, _replace(rows, i, finish_reason=_different(draw, choices, rows[i].finish_reason))


def mutate_prompt_token(draw, header, rows, world):
    i = _row(draw, rows)
    ids = list(rows[i].prompt_ids)
    j = draw(st.integers(0, len(ids) - 1))
    ids[j] = _different(draw, st.one_of(st.integers(0, _vocab(world) - 1), st.integers(*INT32)), ids[j])
    return header, _replace(rows, i, prompt_ids=ids)


def mutate_task_id(draw, header, rows, world):
    i = _row(draw, rows)
    return header, _replace(rows, i, task_id=_different(draw, st.text(max_size=40), rows[i].task_id))


def mutate_prompt_index(draw, header, rows, world):
    i = _row(draw, rows)
    new = _different(draw, st.one_of(st.integers(0, 4000), st.integers(*INT64)), rows[i].prompt_index)
    return header, _replace(rows, i, prompt_index=new)


def mutate_target_length(draw, header, rows, world):
    i = _row(draw, rows)
    new = _different(draw, st.one_of(st.integers(-1, 64), st.integers(*INT32)), rows[i].target_length)
    return header, _replace(rows, i, target_length=new)


def mutate_duplicate_row(draw, header, rows, world):
    i = _row(draw, rows)
    j = _row(draw, rows, lambda r: r is not rows[i])
    rows = list(rows)
    rows[j] = rows[i]
    return header, rows


def mutate_drop_row(draw, header, rows, world):
    rows = list(rows)
    rows.pop(_row(draw, rows))
    return header, rows


def mutate_header_policy_step(draw, header, rows, world):
    """Rows follow the header, so the file is consistent but claims a policy outside the async window."""
    step = draw(st.integers(1, INT64[1]))
    return dataclasses.replace(header, policy_step=step), [
        dataclasses.replace(r, policy_step=step) for r in rows
    ]


def mutate_header_policy_step_only(draw, header, rows, world):
    step = _different(draw, st.integers(min_value=-(2**70), max_value=2**70), header.policy_step)
    return dataclasses.replace(header, policy_step=step), rows


def mutate_header_batch_index(draw, header, rows, world):
    index = _different(draw, st.one_of(st.integers(1, 64), st.integers(0, 2**70)), header.batch_index)
    return dataclasses.replace(header, batch_index=index), rows


def mutate_header_schema_version(draw, header, rows, world):
    version = _different(draw, st.integers(*INT64), header.schema_version)
    return dataclasses.replace(header, schema_version=version), rows


# name → (edit, the checks allowed to catch it)
REJECTED_EDITS = {
    "completion_token_in_vocab": (
        _completion_token(lambda w: 0, lambda w: _vocab(w) - 1),
        {"termination_format", "toploc", "logprobs", "seeded_sampling"},
    ),
    "completion_token_out_of_vocab": (
        _completion_token(_vocab, lambda w: INT32[1]),
        {"schema_and_signature"},
    ),
    "completion_token_negative": (
        _completion_token(lambda w: INT32[0], lambda w: -1),
        {"schema_and_signature"},
    ),
    "completion_truncated": (mutate_truncate_completion, {"termination_format"}),
    "completion_extended": (mutate_extend_completion, {"schema_and_signature", "termination_format"}),
    "logprob": (mutate_logprob, {"schema_and_signature", "logprobs"}),
    "sample_seed": (mutate_sample_seed, {"assigned_prompts"}),
    "sample_seeds_swapped_in_group": (mutate_swap_seeds_in_group, {"seeded_sampling"}),
    "group_id": (mutate_group_id, {"schema_and_signature", "assigned_prompts"}),
    "proof_coefficient_bytes": (mutate_proof_coefficient_bytes, {"toploc"}),
    "proof_random": (mutate_proof_random, {"toploc"}),
    "proof_count": (mutate_proof_count, {"schema_and_signature"}),
    "temperature": (mutate_temperature, {"schema_and_signature", "sampling_params"}),
    "finish_reason": (mutate_finish_reason, {"schema_and_signature", "termination_format"}),
    "prompt_token": (mutate_prompt_token, {"schema_and_signature", "assigned_prompts"}),
    "task_id": (mutate_task_id, {"assigned_prompts"}),
    "prompt_index": (mutate_prompt_index, {"schema_and_signature", "assigned_prompts"}),
    "target_length": (mutate_target_length, {"schema_and_signature", "assigned_prompts"}),
    "duplicate_row": (mutate_duplicate_row, {"assigned_prompts", "rewards"}),
    "drop_row": (mutate_drop_row, {"assigned_prompts"}),
    "header_policy_step": (mutate_header_policy_step, {"async_window"}),
    "header_policy_step_only": (mutate_header_policy_step_only, {"schema_and_signature"}),
    "header_batch_index": (mutate_header_batch_index, {"assigned_prompts"}),
    "header_schema_version": (mutate_header_schema_version, {"schema_and_signature"}),
}


@pytest.mark.parametrize("edit", sorted(REJECTED_EDITS))
@fuzz(40)
@given(data=st.data())
def test_resigned_field_edit_is_rejected(context, tmp_path, world, honest, edit, data):
    mutate, allowed = REJECTED_EDITS[edit]
    header, rows = mutate(data.draw, honest.header, honest.rows, world)
    verdict = judge(context, tmp_path, signed(tmp_path, header, rows))
    assert_rejected(verdict, allowed)


@fuzz(15)
@given(key=st.binary(min_size=32, max_size=32))
def test_file_signed_by_another_node_is_rejected(context, tmp_path, honest, key):
    other = Identity.from_seed(key)
    assume(other.node_id != NODE.node_id)
    header = dataclasses.replace(honest.header, node_id=other.node_id)
    verdict = judge(context, tmp_path, signed(tmp_path, header, honest.rows, other))
    assert_rejected(verdict, {"node"})


@fuzz(15)
@given(run_id=st.text(max_size=40))
def test_file_for_another_run_is_rejected(context, tmp_path, honest, run_id):
    """The header's run id is signed; a file labelled for another run is not this run's rollout."""
    assume(run_id != honest.header.run_id)
    header = dataclasses.replace(honest.header, run_id=run_id)
    verdict = judge(context, tmp_path, signed(tmp_path, header, honest.rows))
    assert_rejected(verdict)


# --- meaning-preserving edits: rejected, or exactly the honest file's trusted result -----------------------


@fuzz(30)
@given(data=st.data())
def test_claimed_reward_is_never_trusted(context, tmp_path, honest, honest_verdict, data):
    """The validator recomputes rewards, so a forged claim is either refused (non-finite) or ignored."""
    header, rows = honest.header, honest.rows
    i = data.draw(st.integers(0, len(rows) - 1))
    claim = data.draw(st.one_of(st.floats(-1e6, 1e6, width=32), st.floats(width=32)))
    verdict = judge(context, tmp_path, signed(tmp_path, header, _replace(rows, i, claimed_reward=claim)))
    if not math.isfinite(claim):
        assert_rejected(verdict, {"schema_and_signature"})
    assert_rejected_or_same_trust(verdict, honest_verdict, with_claims=False)


@fuzz(40)
@given(data=st.data())
def test_proof_modulus_and_constant_term(context, tmp_path, honest, honest_verdict, data):
    """The modulus only folds indices (all below any valid modulus here) and c_0 shifts every committed value
    by the same amount, within honest noise for a small change: such an edit may pass, but then nothing
    the trainer receives may differ from the honest file's (the proofs themselves aside)."""
    header, rows = honest.header, honest.rows
    i = data.draw(st.integers(0, len(rows) - 1))
    proof = bytearray(rows[i].proofs[0])
    proof[data.draw(st.integers(0, 3))] ^= data.draw(st.integers(1, 255))
    mutated = _replace(rows, i, proofs=[bytes(proof), *rows[i].proofs[1:]])
    verdict = judge(context, tmp_path, signed(tmp_path, header, mutated))
    if verdict.accepted:
        strip = lambda v: [dict(r, proofs=None) for r in trusted(v)]  # noqa: E731
        assert strip(verdict) == strip(honest_verdict)
    else:
        assert_rejected(verdict, {"toploc"})


@fuzz(15)
@given(data=st.data())
def test_row_order_does_not_matter(context, tmp_path, honest, honest_verdict, data):
    """Control for the edits above: reordering rows changes no value, so the file stays acceptable."""
    order = data.draw(st.permutations(range(len(honest.rows))))
    verdict = judge(context, tmp_path, signed(tmp_path, honest.header, [honest.rows[k] for k in order]))
    assert verdict.accepted, f"{verdict.failed_check}: {verdict.reason}"
    assert_rejected_or_same_trust(verdict, honest_verdict)
