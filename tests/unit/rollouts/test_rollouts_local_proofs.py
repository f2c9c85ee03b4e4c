"""A local run's files without TOPLOC proofs say so in their signed header; a validator's reader refuses them."""

import dataclasses
import json

import pyarrow.parquet as pq
import pytest

from swarmrl.identity import Identity
from swarmrl.rollouts import (
    RolloutError,
    RolloutHeader,
    RolloutLimits,
    RolloutRow,
    read_rollouts,
    write_rollouts,
)

NODE = Identity.from_seed(b"\x05" * 32)
PROOFLESS = RolloutHeader("run", NODE.node_id, 0, 0, proofs=False)
LOCAL = RolloutLimits(require_proofs=False)


def row(proofs: list[bytes]) -> RolloutRow:
    return RolloutRow([1, 2], [3, 4, 5], 0, "t0", 0, 0, 7, 1.0, -1, [-0.1, -0.2, -0.3], "eos", proofs)


def test_a_proofless_file_says_so_and_the_local_trainer_reads_it(tmp_path):
    path = write_rollouts(tmp_path / "a.parquet", PROOFLESS, [row([])], NODE)
    header, rows = read_rollouts(path, LOCAL)
    assert header.proofs is False and rows[0].proofs == []
    assert json.loads(pq.read_schema(path).metadata[b"swarmrl.header"])["proofs"] is False


def test_a_validator_refuses_a_proofless_file_by_name(tmp_path):
    path = write_rollouts(tmp_path / "a.parquet", PROOFLESS, [row([])], NODE)
    with pytest.raises(RolloutError, match="written without TOPLOC proofs"):
        read_rollouts(path)  # a validator's limits: require_proofs stays on


def test_a_header_that_hides_missing_proofs_is_refused_everywhere(tmp_path):
    honest_claim = dataclasses.replace(PROOFLESS, proofs=True)
    path = write_rollouts(tmp_path / "a.parquet", honest_claim, [row([])], NODE)
    with pytest.raises(RolloutError, match="0 TOPLOC proofs for 3 model tokens, expected 1"):
        read_rollouts(path, LOCAL)


def test_proofs_in_a_file_whose_header_says_none_are_refused(tmp_path):
    path = write_rollouts(tmp_path / "a.parquet", PROOFLESS, [row([b"\x01" * 258])], NODE)
    with pytest.raises(RolloutError, match="the header says the file carries none"):
        read_rollouts(path, LOCAL)


def rewrite_header(tmp_path, path, old: bytes, new: bytes):
    """A copy of the file whose header metadata has `old` replaced by `new` (its signature kept)."""
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    meta[b"swarmrl.header"] = meta[b"swarmrl.header"].replace(old, new)
    pq.write_table(table.replace_schema_metadata(meta), tmp_path / "edited.parquet")
    return tmp_path / "edited.parquet"


def test_the_proofs_flag_is_signed(tmp_path):
    path = write_rollouts(tmp_path / "a.parquet", PROOFLESS, [row([])], NODE)
    edited = rewrite_header(tmp_path, path, b'"proofs": false', b'"proofs": true')
    with pytest.raises(RolloutError, match="signature"):
        read_rollouts(edited, LOCAL)


def test_a_non_boolean_proofs_flag_is_refused(tmp_path):
    path = write_rollouts(tmp_path / "a.parquet", PROOFLESS, [row([])], NODE)
    edited = rewrite_header(tmp_path, path, b'"proofs": false', b'"proofs": 0')
    with pytest.raises(RolloutError, match="proofs must be bool"):
        read_rollouts(edited, LOCAL)
