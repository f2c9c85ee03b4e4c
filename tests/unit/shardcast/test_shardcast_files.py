"""Digests, safe paths, atomic writes and the partial-download directory lock."""

from __future__ import annotations

import fcntl
import hashlib
import os

import blake3
import pytest
from config_unions import sample_of, union_members

from swarmrl.configs.shardcast import HashAlgorithm
from swarmrl.shardcast.fsutil import (
    atomic_write_bytes,
    copy_region,
    is_safe_relative_path,
    preallocate,
    resolve_inside,
    zero_region,
)
from swarmrl.shardcast.hashing import digest_bytes, digest_range, hash_file_and_shards
from swarmrl.shardcast.partial import LOCK_NAME, PartialDownload, Progress


def test_file_and_shard_digests_in_one_pass(tmp_path):
    data = os.urandom(25)
    (tmp_path / "f").write_bytes(data)
    whole, shards = hash_file_and_shards(tmp_path / "f", 10, "sha256")
    assert whole == hashlib.sha256(data).hexdigest()
    assert shards == [hashlib.sha256(data[i : i + 10]).hexdigest() for i in (0, 10, 20)]
    assert digest_range(tmp_path / "f", 10, 10, "sha256") == shards[1]
    assert hash_file_and_shards(tmp_path / "f", 25, "sha256")[1] == [whole]


@pytest.mark.parametrize("algorithm", union_members(HashAlgorithm))
def test_every_algorithm_a_manifest_may_name_digests_as_its_library(algorithm):
    reference = sample_of({"sha256": hashlib.sha256, "blake3": blake3.blake3}, algorithm)
    assert digest_bytes(b"shard", algorithm) == reference(b"shard").hexdigest()


def test_empty_file_has_no_shards(tmp_path):
    (tmp_path / "e").write_bytes(b"")
    assert hash_file_and_shards(tmp_path / "e", 10, "blake3")[1] == []


@pytest.mark.parametrize("path", ["a", "a/b.bin", "tok/vocab.json"])
def test_safe_paths(path):
    assert is_safe_relative_path(path)


@pytest.mark.parametrize(
    "path", ["", "/abs", "../up", "a/../../b", "a//b", "./a", "a\\b", "a\x00b", "x" * 2000]
)
def test_unsafe_paths(path, tmp_path):
    assert not is_safe_relative_path(path)
    with pytest.raises(ValueError):
        resolve_inside(tmp_path, path)


def test_atomic_write_leaves_no_temp_files(tmp_path):
    atomic_write_bytes(tmp_path / "d" / "x.json", b"1")
    atomic_write_bytes(tmp_path / "d" / "x.json", b"2")
    assert (tmp_path / "d" / "x.json").read_bytes() == b"2"
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["x.json"]


def test_preallocate_sets_final_size(tmp_path):
    preallocate(tmp_path / "a" / "b", 12345)
    assert (tmp_path / "a" / "b").stat().st_size == 12345


def test_partial_directory_is_adopted_only_when_its_owner_is_gone(tmp_path):
    first = PartialDownload.acquire(tmp_path, 3)
    first.save(Progress(3, "m" * 64, "full", {1, 2}))
    second = PartialDownload.acquire(tmp_path, 3)  # first still holds its lock: a fresh directory
    assert second.directory != first.directory
    assert second.previous is None
    second.release()

    first.release()  # the owner "dies"
    adopted = PartialDownload.acquire(tmp_path, 3)
    assert adopted.directory == first.directory
    assert adopted.previous == Progress(3, "m" * 64, "full", {1, 2})
    fd = os.open(adopted.directory / LOCK_NAME, os.O_RDWR)
    with pytest.raises(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)
    adopted.release()


def test_damaged_progress_file_means_start_over():
    assert Progress.from_bytes(b"{not json") is None
    assert Progress.from_bytes(b'{"version": 1}') is None
    progress = Progress(1, "a", "delta", {5})
    assert Progress.from_bytes(progress.to_bytes()) == progress


def test_streaming_verifier_hashes_out_of_order_shards_front_to_back(tmp_path):
    import asyncio

    from swarmrl.shardcast.manifest import FileEntry, ShardEntry
    from swarmrl.shardcast.verify import StreamingVerifier

    data = os.urandom(100_000)
    (tmp_path / "f").write_bytes(data)
    entry = FileEntry(path="f", size=len(data), digest=hashlib.sha256(data).hexdigest())
    shards = [
        ShardEntry(index=i, path="f", offset=o, length=min(30_000, len(data) - o), digest="0" * 64)
        for i, o in enumerate(range(0, len(data), 30_000))
    ]

    async def run(order: list[int]) -> str:
        verifier = StreamingVerifier(tmp_path, [entry], "sha256")
        for i in order:
            verifier.shard_done(shards[i])
        return (await verifier.finish())["f"]

    assert asyncio.run(run([3, 1, 0, 2])) == entry.digest
    assert asyncio.run(run([0, 2, 3])) == hashlib.sha256(data[:30_000]).hexdigest()  # a gap stops the cursor


def test_zero_and_copy_region(tmp_path):
    target = tmp_path / "t"
    target.write_bytes(b"abcdefghij")
    source = tmp_path / "s"
    source.write_bytes(b"XYZ")
    fd = os.open(target, os.O_RDWR)
    src = os.open(source, os.O_RDONLY)
    try:
        zero_region(fd, 2, 3, block=2)
        assert target.read_bytes() == b"ab\0\0\0fghij"
        copy_region(src, fd, 3, 6, block=2)
        assert target.read_bytes() == b"ab\0\0\0fXYZj"
    finally:
        os.close(fd)
        os.close(src)
