"""The signed manifest: canonical bytes, signature, replay checks, structural checks on untrusted input (the
manifest itself and the shards an announcement claims of it)."""

from __future__ import annotations

import json

import pytest

from swarmrl.identity import Identity
from swarmrl.shardcast.discovery import claimed_shards
from swarmrl.shardcast.errors import ManifestError
from swarmrl.shardcast.manifest import (
    FileEntry,
    Manifest,
    ShardEntry,
    canonical_bytes,
    parse_signed_manifest,
    sign_manifest,
)

TRAINER = Identity.from_seed(b"m" * 32)
D = "ab" * 32


def manifest(**overrides) -> Manifest:
    fields = dict(
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
    fields.update(overrides)
    return Manifest(**fields)


def test_canonical_bytes_are_stable_and_key_order_free():
    m = manifest()
    assert canonical_bytes(m) == canonical_bytes(Manifest.model_validate(json.loads(m.model_dump_json())))
    assert canonical_bytes(m).startswith(b"swarmrl-shardcast-manifest-v1\n{")
    assert b" " not in canonical_bytes(m).split(b"\n", 1)[1]


def test_signed_manifest_round_trips():
    raw = sign_manifest(manifest(), TRAINER).to_bytes()
    assert parse_signed_manifest(raw, TRAINER.node_id, expected_version=7) == manifest()


def test_tampered_manifest_is_forged():
    body = json.loads(sign_manifest(manifest(), TRAINER).to_bytes())
    body["manifest"]["shards"][1]["digest"] = "cd" * 32
    with pytest.raises(ManifestError, match="forged"):
        parse_signed_manifest(json.dumps(body).encode(), TRAINER.node_id)


def test_foreign_signer_is_rejected_even_with_a_valid_signature():
    other = Identity.from_seed(b"o" * 32)
    raw = sign_manifest(manifest(), other).to_bytes()
    with pytest.raises(ManifestError, match="not the trainer key"):
        parse_signed_manifest(raw, TRAINER.node_id)


def test_signer_field_swapped_to_trainer_does_not_help_a_forger():
    other = Identity.from_seed(b"o" * 32)
    body = json.loads(sign_manifest(manifest(), other).to_bytes())
    body["signer"] = TRAINER.node_id
    with pytest.raises(ManifestError, match="forged"):
        parse_signed_manifest(json.dumps(body).encode(), TRAINER.node_id)


def test_other_version_and_older_than_floor_are_replays():
    raw = sign_manifest(manifest(), TRAINER).to_bytes()
    with pytest.raises(ManifestError, match="asked for version 8"):
        parse_signed_manifest(raw, TRAINER.node_id, expected_version=8)
    with pytest.raises(ManifestError, match="replayed"):
        parse_signed_manifest(raw, TRAINER.node_id, min_version=8)
    with pytest.raises(ManifestError, match="run"):
        parse_signed_manifest(raw, TRAINER.node_id, expected_run_id="other")


@pytest.mark.parametrize(
    "raw",
    [b"", b"not json", b"[]", b'{"manifest": {}, "signer": "x", "signature": "y"}', b"{" * 10_000],
)
def test_garbage_is_a_manifest_error(raw):
    with pytest.raises(ManifestError):
        parse_signed_manifest(raw, TRAINER.node_id)


def test_oversized_manifest_is_refused_before_parsing():
    with pytest.raises(ManifestError, match="more than"):
        parse_signed_manifest(b" " * (33 * 1024 * 1024), TRAINER.node_id)


def _shards(*spans):
    return [ShardEntry(index=i, path=p, offset=o, length=n, digest=D) for i, (p, o, n) in enumerate(spans)]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"shards": _shards(("a.bin", 0, 10), ("a.bin", 12, 10), ("a.bin", 22, 3))}, "gap or overlaps"),
        ({"shards": _shards(("a.bin", 0, 10), ("a.bin", 5, 10), ("a.bin", 15, 10))}, "gap or overlaps"),
        ({"shards": _shards(("a.bin", 0, 10), ("a.bin", 10, 10))}, "do not cover"),
        ({"shards": _shards(("a.bin", 0, 10), ("a.bin", 10, 10), ("b.bin", 0, 5))}, "unknown file"),
        ({"shards": _shards(("a.bin", 0, 25))}, "longer than shard_size"),
        ({"total_size": 26}, "total_size"),
        ({"files": [FileEntry(path="../a.bin", size=25, digest=D)]}, "unsafe"),
        ({"files": [FileEntry(path="/etc/a.bin", size=25, digest=D)]}, "unsafe"),
        ({"files": [FileEntry(path=".shardcast/a.bin", size=25, digest=D)]}, "metadata"),
    ],
)
def test_structural_lies_are_rejected(overrides, message):
    with pytest.raises(ValueError, match=message):
        manifest(**overrides)


def test_duplicate_and_nested_paths_are_rejected():
    with pytest.raises(ValueError, match="duplicate"):
        manifest(
            files=[FileEntry(path="a.bin", size=0, digest=D), FileEntry(path="a.bin", size=25, digest=D)]
        )
    with pytest.raises(ValueError, match="nests"):
        manifest(
            files=[FileEntry(path="a.bin", size=25, digest=D), FileEntry(path="a.bin/x", size=0, digest=D)],
        )


def test_signed_but_structurally_bad_manifest_is_a_manifest_error():
    body = json.loads(sign_manifest(manifest(), TRAINER).to_bytes())
    body["manifest"]["shards"][2]["length"] = 6
    with pytest.raises(ManifestError, match="malformed"):
        parse_signed_manifest(json.dumps(body).encode(), TRAINER.node_id)


# The shards an untrusted long-poll answer claims its announcer holds: a well-formed claim or nothing.
@pytest.mark.parametrize(("listed", "claimed"), [([0, 1, 2], {0, 1, 2}), ([2], {2}), ([], set())])
def test_a_well_formed_claim_is_taken(listed, claimed):
    assert claimed_shards({"latest": 7, "shards": listed}, manifest()) == claimed


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
    assert claimed_shards({"latest": 7, "shards": listed}, manifest()) == set()
