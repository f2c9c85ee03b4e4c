"""The shards an untrusted long-poll answer claims its announcer holds: a well-formed claim or nothing."""

from __future__ import annotations

import pytest

from swarmrl.shardcast.discovery import claimed_shards
from swarmrl.shardcast.manifest import FileEntry, Manifest, ShardEntry

D = "ab" * 32
MANIFEST = Manifest(
    run_id="run",
    version=7,
    created_at=1.5,
    hash_algorithm="sha256",
    shard_size=10,
    total_size=25,
    files=[FileEntry(path="a.bin", size=25, digest=D)],
    shards=[
        ShardEntry(index=0, path="a.bin", offset=0, length=10, digest=D),
        ShardEntry(index=1, path="a.bin", offset=10, length=10, digest=D),
        ShardEntry(index=2, path="a.bin", offset=20, length=5, digest=D),
    ],
)


@pytest.mark.parametrize(("listed", "claimed"), [([0, 1, 2], {0, 1, 2}), ([2], {2}), ([], set())])
def test_a_well_formed_claim_is_taken(listed, claimed):
    assert claimed_shards({"latest": 7, "shards": listed}, MANIFEST) == claimed


@pytest.mark.parametrize(
    "listed",
    [
        None,  # an answer from a server that does not list shards
        "0,1,2",
        {"0": True},
        [0, 3],  # a shard the manifest does not have
        [0, -1],
        [0, 1.0],
        [True, 2],
        [0, 0],  # a repeated index
        [0, 1, 2, 0],  # longer than the manifest's shard list
        list(range(10**5)),
    ],
)
def test_a_malformed_claim_claims_nothing(listed):
    assert claimed_shards({"latest": 7, "shards": listed}, MANIFEST) == set()
