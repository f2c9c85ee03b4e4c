import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swarmrl.identity import Identity
from swarmrl.rollouts import (
    RolloutError,
    RolloutHeader,
    RolloutLimits,
    RolloutRow,
    ScoredRow,
    read_rollouts,
    write_rollouts,
)

NODE = Identity.from_seed(bytes(range(32)))
HEADER = RolloutHeader(run_id="run", node_id=NODE.node_id, policy_step=3, batch_index=0)


def make_row(**overrides) -> RolloutRow:
    values = dict(
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5, 6, 7],
        policy_step=3,
        task_id="t0",
        prompt_index=0,
        group_id=0,
        sample_seed=42,
        temperature=1.0,
        target_length=-1,
        logprobs=[-0.5, -1.0, -0.1, -2.0],
        finish_reason="eos",
        proofs=[b"\x01" * 258],
        claimed_reward=1.0,
    )
    values.update(overrides)
    return RolloutRow(**values)


def test_round_trip_keeps_every_field(tmp_path):
    rows = [
        make_row(),
        make_row(group_id=1, completion_ids=[9] * 40, logprobs=[-0.1] * 40, proofs=[b"a" * 258] * 2),
    ]
    path = write_rollouts(tmp_path / "r.parquet", HEADER, rows, NODE)
    header, back = read_rollouts(path)
    assert header == HEADER
    for original, loaded in zip(rows, back, strict=True):
        for field in dataclasses.fields(RolloutRow):
            want, got = getattr(original, field.name), getattr(loaded, field.name)
            if isinstance(want, list) and want and isinstance(want[0], float):
                assert got == pytest.approx(want)
            else:
                assert got == want, field.name


def test_scored_rows_round_trip(tmp_path):
    row = ScoredRow(
        **dataclasses.asdict(make_row()), task_reward=1.0, length_term=-0.1, reward=0.9, advantage=0.5
    )
    path = write_rollouts(tmp_path / "s.parquet", HEADER, [row], NODE)
    _, back = read_rollouts(path, scored=True)
    assert back[0].advantage == pytest.approx(0.5)
    with pytest.raises(RolloutError, match="schema"):
        read_rollouts(path, scored=False)


def test_signature_binds_rows_and_header(tmp_path):
    path = write_rollouts(tmp_path / "r.parquet", HEADER, [make_row()], NODE)
    table = pq.read_table(path)
    rewards = pa.array([5.0], pa.float32())
    forged = table.set_column(
        table.schema.get_field_index("claimed_reward"), table.schema.field("claimed_reward"), rewards
    )
    pq.write_table(forged, tmp_path / "forged.parquet")
    with pytest.raises(RolloutError, match="signature"):
        read_rollouts(tmp_path / "forged.parquet")


def test_signature_by_another_key_is_refused(tmp_path):
    other = Identity.from_seed(b"\x07" * 32)
    with pytest.raises(RolloutError, match="signing key"):
        write_rollouts(tmp_path / "r.parquet", HEADER, [make_row()], other)
    header = dataclasses.replace(HEADER, node_id=other.node_id)
    path = write_rollouts(tmp_path / "r.parquet", header, [make_row()], other)
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    meta[b"swarmrl.header"] = meta[b"swarmrl.header"].replace(other.node_id.encode(), NODE.node_id.encode())
    pq.write_table(table.replace_schema_metadata(meta), tmp_path / "claimed.parquet")
    with pytest.raises(RolloutError, match="signature"):
        read_rollouts(tmp_path / "claimed.parquet")


def test_unsigned_file_is_refused(tmp_path):
    path = write_rollouts(tmp_path / "r.parquet", HEADER, [make_row()])
    with pytest.raises(RolloutError, match="unsigned"):
        read_rollouts(path)
    assert read_rollouts(path, require_signature=False)[1][0].task_id == "t0"


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        (dict(logprobs=[-0.5]), "logprobs for"),
        (dict(logprobs=[0.5, -1.0, -0.1, -2.0]), "positive"),
        (dict(logprobs=[float("nan"), -1.0, -0.1, -2.0]), "not finite"),
        (dict(completion_ids=[], logprobs=[], proofs=[]), "completion length"),
        (dict(completion_ids=[4, 5, -1, 7]), "token id"),
        (dict(prompt_ids=[10**6]), "token id"),
        (dict(temperature=0.0), "temperature"),
        (dict(finish_reason="stop"), "finish reason"),
        (dict(policy_step=2), "policy step"),
        (dict(proofs=[]), "TOPLOC proofs"),
        (dict(claimed_reward=float("inf")), "claimed reward"),
        (dict(target_length=-5), "target length"),
    ],
)
def test_out_of_range_rows_are_named(tmp_path, overrides, problem):
    path = write_rollouts(tmp_path / "r.parquet", HEADER, [make_row(), make_row(**overrides)], NODE)
    with pytest.raises(RolloutError, match=problem) as info:
        read_rollouts(path, RolloutLimits(vocab_size=1000))
    assert "row 1" in str(info.value)


def test_size_and_row_caps(tmp_path):
    path = write_rollouts(tmp_path / "r.parquet", HEADER, [make_row()] * 5, NODE)
    with pytest.raises(RolloutError, match="rows exceeds"):
        read_rollouts(path, RolloutLimits(max_rows=4))
    with pytest.raises(RolloutError, match="byte cap"):
        read_rollouts(path, RolloutLimits(max_file_bytes=100))
    with pytest.raises(RolloutError, match="prompt length"):
        read_rollouts(path, RolloutLimits(max_prompt_tokens=2))
