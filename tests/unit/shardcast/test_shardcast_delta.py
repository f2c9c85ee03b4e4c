"""Delta payloads: shuffle/unshuffle, encode/apply round trips, and hostile payloads."""

from __future__ import annotations

import random

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmrl.shardcast.delta import apply_delta, encode_delta, shuffle_bytes, unshuffle_bytes
from swarmrl.shardcast.errors import DeltaError
from swarmrl.shardcast.hashing import digest_bytes


def test_shuffle_groups_byte_planes_hand_computed():
    data = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9], dtype=np.uint8)
    assert shuffle_bytes(data).tolist() == [1, 5, 9, 2, 6, 0, 3, 7, 0, 4, 8, 0]
    assert unshuffle_bytes(shuffle_bytes(data), 9).tolist() == data.tolist()


@given(st.binary(max_size=300))
def test_unshuffle_inverts_shuffle(raw):
    data = np.frombuffer(raw, dtype=np.uint8)
    assert unshuffle_bytes(shuffle_bytes(data), len(data)).tobytes() == raw


@settings(max_examples=30, deadline=None)
@given(
    target=st.binary(max_size=200),
    parent=st.one_of(st.none(), st.binary(max_size=200)),
    chunk=st.sampled_from([4, 8, 64]),
)
def test_round_trip_any_sizes(tmp_path_factory, target, parent, chunk):
    tmp = tmp_path_factory.mktemp("d")
    (tmp / "t").write_bytes(target)
    parent_path = None
    if parent is not None:
        parent_path = tmp / "p"
        parent_path.write_bytes(parent)
    encode_delta(tmp / "t", parent_path, tmp / "payload", chunk)
    digest = apply_delta(tmp / "payload", parent_path, tmp / "out", len(target), chunk, "sha256")
    assert (tmp / "out").read_bytes() == target
    assert digest == digest_bytes(target, "sha256")


def test_small_change_to_fp32_weights_compresses_well(tmp_path):
    weights = np.random.default_rng(0).normal(0, 0.02, 250_000).astype(np.float32)
    (tmp_path / "parent").write_bytes(weights.tobytes())
    (tmp_path / "target").write_bytes((weights - 1e-6 * np.sign(weights)).astype(np.float32).tobytes())
    encode_delta(tmp_path / "target", tmp_path / "parent", tmp_path / "payload", 1 << 20)
    assert (tmp_path / "payload").stat().st_size < 0.5 * weights.nbytes


def test_corrupt_payload_raises_delta_error(tmp_path):
    (tmp_path / "t").write_bytes(random.Random(0).randbytes(5000))
    encode_delta(tmp_path / "t", None, tmp_path / "payload", 1024)
    data = bytearray((tmp_path / "payload").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "payload").write_bytes(bytes(data))
    with pytest.raises(DeltaError):
        digest = apply_delta(tmp_path / "payload", None, tmp_path / "out", 5000, 1024, "blake3")
        assert digest != digest_bytes(
            (tmp_path / "t").read_bytes(), "blake3"
        )  # zstd may not notice; the hash does
        raise DeltaError("rebuilt bytes differ")


def test_payload_longer_or_shorter_than_target_is_rejected(tmp_path):
    (tmp_path / "long").write_bytes(zstandard.ZstdCompressor().compress(b"\0" * 2000))
    with pytest.raises(DeltaError, match="more bytes"):
        apply_delta(tmp_path / "long", None, tmp_path / "out", 1000, 1024, "blake3")
    (tmp_path / "short").write_bytes(zstandard.ZstdCompressor().compress(b"\0" * 100))
    with pytest.raises(DeltaError, match="ends before"):
        apply_delta(tmp_path / "short", None, tmp_path / "out", 1000, 1024, "blake3")
    (tmp_path / "junk").write_bytes(b"not zstd at all")
    with pytest.raises(DeltaError, match="corrupt"):
        apply_delta(tmp_path / "junk", None, tmp_path / "out", 1000, 1024, "blake3")
