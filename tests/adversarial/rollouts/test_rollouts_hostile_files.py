import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmrl.identity import Identity
from swarmrl.rollouts import RolloutError, RolloutHeader, RolloutRow, read_rollouts, write_rollouts

NODE = Identity.from_seed(b"\x11" * 32)
HEADER = RolloutHeader(run_id="run", node_id=NODE.node_id, policy_step=0, batch_index=0)
ROW = RolloutRow([1, 2], [3, 4], 0, "t", 0, 0, 1, 1.0, -1, [-0.1, -0.2], "eos", [b"p" * 258], 0.0)


@pytest.fixture()
def good_file(tmp_path):
    return write_rollouts(tmp_path / "good.parquet", HEADER, [ROW] * 3, NODE)


def test_truncated_file(good_file, tmp_path):
    data = good_file.read_bytes()
    for cut in (0, 4, len(data) // 2, len(data) - 1):
        bad = tmp_path / f"cut{cut}.parquet"
        bad.write_bytes(data[:cut])
        with pytest.raises(RolloutError):
            read_rollouts(bad)


def test_missing_file_is_a_rollout_error(tmp_path):
    with pytest.raises(RolloutError, match="cannot stat"):
        read_rollouts(tmp_path / "absent.parquet")


def test_mistyped_column(good_file, tmp_path):
    table = pq.read_table(good_file)
    index = table.schema.get_field_index("temperature")
    mistyped = table.set_column(index, "temperature", pa.array(["hot"] * 3))
    pq.write_table(mistyped, tmp_path / "typed.parquet")
    with pytest.raises(RolloutError, match="temperature"):
        read_rollouts(tmp_path / "typed.parquet")


def test_extra_and_missing_columns(good_file, tmp_path):
    table = pq.read_table(good_file)
    pq.write_table(table.append_column("bonus", pa.array([1, 2, 3])), tmp_path / "extra.parquet")
    with pytest.raises(RolloutError, match="unexpected columns"):
        read_rollouts(tmp_path / "extra.parquet")
    pq.write_table(table.drop_columns(["proofs"]), tmp_path / "missing.parquet")
    with pytest.raises(RolloutError, match="missing column 'proofs'"):
        read_rollouts(tmp_path / "missing.parquet")


@pytest.mark.parametrize(
    "header",
    [
        b"not json",
        b"[]",
        b'{"run_id": 1}',
        b'{"run_id":"r","node_id":"x","policy_step":"3","batch_index":0}',
        b'{"run_id":"r","node_id":"x","policy_step":0,"batch_index":0,"schema_version":99}',
    ],
)
def test_hostile_headers(good_file, tmp_path, header):
    table = pq.read_table(good_file)
    meta = dict(table.schema.metadata)
    meta[b"swarmrl.header"] = header
    pq.write_table(table.replace_schema_metadata(meta), tmp_path / "h.parquet")
    with pytest.raises(RolloutError):
        read_rollouts(tmp_path / "h.parquet")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.integers(min_value=0), payload=st.binary(min_size=1, max_size=16))
def test_fuzzed_bytes_never_crash_or_pass(good_file, tmp_path, position, payload):
    data = bytearray(good_file.read_bytes())
    position %= len(data)
    data[position : position + len(payload)] = payload
    bad = tmp_path / f"fuzz{os.getpid()}.parquet"
    bad.write_bytes(bytes(data))
    try:
        _, rows = read_rollouts(bad)
    except RolloutError:
        return
    # A mutation that still reads back must not have changed any signed value.
    assert [r.completion_ids for r in rows] == [ROW.completion_ids] * 3
    assert [r.claimed_reward for r in rows] == [ROW.claimed_reward] * 3
