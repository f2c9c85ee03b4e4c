"""Relays that lie: corrupt shards, forged, foreign-signed and replayed manifests, oversized answers.

A hostile relay here is a real HTTP server on 127.0.0.1 speaking the shardcast protocol with the genuine files
of a published version, altered in one way per test.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from adversarial.shardcast.hostile_relay_kit import QUICK, SHARD, TRAINER, Lies, hostile_app, make_checkpoint

from swarmrl.configs.shardcast import OriginConfig, RelayConfig
from swarmrl.identity import Identity
from swarmrl.shardcast import (
    ManifestError,
    Origin,
    Relay,
    ServerThread,
    ShardcastClient,
    ShardcastError,
    sign_manifest,
)
from swarmrl.shardcast.hashing import digest_file
from swarmrl.shardcast.manifest import SignedManifest


@pytest.fixture
def world(tmp_path):
    """An origin with versions 1 and 2 published, and a list to register extra servers for teardown."""
    root = tmp_path / "ckpt"
    origin = Origin(root, TRAINER, "adv", OriginConfig(shard_size=SHARD, delta=False))
    dirs = {v: make_checkpoint(root, v) for v in (1, 2)}
    for version, directory in dirs.items():
        origin.publish(directory, version)
    server = origin.serve_in_thread()
    extra: list[ServerThread] = []
    raw = {v: origin.store.manifest_bytes(v) for v in dirs}
    yield {"origin": origin, "url": server.url, "dirs": dirs, "raw": raw, "servers": extra, "tmp": tmp_path}
    for started in extra:
        started.stop()
    server.stop()


def serve(world, app_factory) -> str:
    thread = ServerThread(app_factory).start()
    world["servers"].append(thread)
    return thread.url


def fetch(sources: list[str], dest: Path, version: int, **kwargs) -> ShardcastClient:
    async def run() -> ShardcastClient:
        async with ShardcastClient(sources, TRAINER.node_id, dest, QUICK) as client:
            await client.fetch(version, **kwargs)
            return client

    return asyncio.run(run())


def test_corrupt_shard_is_refetched_elsewhere_and_relay_demoted(world):
    bad = serve(
        world, lambda: hostile_app(world["dirs"][1], world["raw"], Lies(corrupt_shards={0, 1, 2, 3, 4, 5}))
    )
    dest = world["tmp"] / "w"

    client = fetch([bad, world["url"]], dest, 1)

    installed = dest / "step_1" / "model.safetensors"
    assert installed.read_bytes() == (world["dirs"][1] / "model.safetensors").read_bytes()
    assert client.last_stats.corrupt_by_source.get(bad, 0) >= 1
    assert client.selector.stats[bad].corrupt >= 1
    assert client.selector.weight(bad) < client.selector.weight(world["url"])
    assert not list((dest / ".partial").iterdir())


def test_only_a_corrupt_source_fails_and_installs_nothing(world):
    bad = serve(world, lambda: hostile_app(world["dirs"][1], world["raw"], Lies(corrupt_shards={2})))
    dest = world["tmp"] / "w"

    with pytest.raises(ShardcastError, match=r"shard 3 \(model.safetensors bytes 131072-196607\)") as failure:
        fetch([bad], dest, 1)  # shard 0 is config.json, so the third model shard is index 3

    assert bad in str(failure.value) and "does not match the signed manifest" in str(failure.value)
    assert not (dest / "step_1").exists()
    progress = next((dest / ".partial").glob("*/.progress.json"))
    assert 3 not in json.loads(progress.read_text())["verified"]


def _tampered(raw: bytes) -> bytes:
    body = json.loads(raw)
    body["manifest"]["files"][0]["digest"] = "0" * 64  # keep the signature: a forged manifest
    return json.dumps(body).encode()


def test_forged_manifest_is_rejected(world):
    forged = {1: _tampered(world["raw"][1])}
    bad = serve(world, lambda: hostile_app(world["dirs"][1], forged))

    with pytest.raises(ManifestError, match="forged"):
        fetch([bad], world["tmp"] / "w", 1)
    assert not (world["tmp"] / "w" / "step_1").exists()


def test_forged_manifest_source_is_skipped_when_a_genuine_one_exists(world):
    forged = {1: _tampered(world["raw"][1])}
    bad = serve(world, lambda: hostile_app(world["dirs"][1], forged))

    client = fetch([bad, world["url"]], world["tmp"] / "w", 1)

    # Equal weights keep the given order, so the forger is asked first: it must be caught and demoted.
    assert "forged" in client.last_stats.manifest_rejected_by_source[bad]
    assert client.selector.stats[bad].corrupt == 1
    assert world["url"] not in client.last_stats.manifest_rejected_by_source
    assert (world["tmp"] / "w" / "step_1" / "config.json").exists()


def test_manifest_signed_by_another_key_is_rejected(world):
    impostor = Identity.from_seed(b"i" * 32)
    genuine = SignedManifest.model_validate_json(world["raw"][1]).manifest
    foreign = {1: sign_manifest(genuine, impostor).to_bytes()}
    bad = serve(world, lambda: hostile_app(world["dirs"][1], foreign))

    with pytest.raises(ManifestError, match="not the trainer key"):
        fetch([bad], world["tmp"] / "w", 1)


def test_replayed_manifest_for_another_version_is_rejected(world):
    replay = {2: world["raw"][1]}  # genuinely signed, but for version 1
    bad = serve(world, lambda: hostile_app(world["dirs"][1], replay))

    with pytest.raises(ManifestError, match="asked for version 2"):
        fetch([bad], world["tmp"] / "w", 2)


def test_manifest_older_than_the_floor_is_a_replay(world):
    with pytest.raises(ManifestError, match="replayed"):
        fetch([world["url"]], world["tmp"] / "w", 1, min_version=2)


def test_oversized_answer_is_not_written_past_the_shard(world):
    bad = serve(world, lambda: hostile_app(world["dirs"][1], world["raw"], Lies(oversize=True)))
    dest = world["tmp"] / "w"

    client = fetch([bad, world["url"]], dest, 1)

    assert (dest / "step_1" / "model.safetensors").read_bytes() == (
        world["dirs"][1] / "model.safetensors"
    ).read_bytes()
    assert client.selector.stats[bad].successes == 0


@pytest.mark.slow
def test_relay_verifies_upstream_shards_before_serving(world):
    bad = serve(
        world, lambda: hostile_app(world["dirs"][2], {2: world["raw"][2]}, Lies(corrupt_shards={1, 3}))
    )
    relay = Relay(
        RelayConfig(
            upstreams=[bad],
            data_dir=world["tmp"] / "relay",
            long_poll_s=1,
            retry_interval_s=0.2,
            cut_through=True,
        ),
        TRAINER.node_id,
        QUICK,
    )
    relay_server = relay.serve_in_thread()
    world["servers"].append(relay_server)

    async def poll_until_all_but_corrupt() -> list[int]:
        for _ in range(400):
            entry = relay.store.get(2)
            if entry is not None and len(entry.verified) == len(entry.manifest.all_shards) - 2:
                return sorted(entry.verified)
            await asyncio.sleep(0.05)
        raise AssertionError("relay did not mirror the good shards")

    held = asyncio.run(poll_until_all_but_corrupt())
    assert 2 not in held and 4 not in held  # model byte-shards 1 and 3 (shard 0 is config.json)
    with pytest.raises(ShardcastError, match="could not be fetched") as failed:
        fetch([relay_server.url], world["tmp"] / "w", 2)
    # The relay passes shards on as they arrive, but cuts a response short when its upstream lied: the client
    # never completes a corrupt shard from it (which would demote the honest relay for its upstream's lie).
    assert "does not match" not in str(failed.value), failed.value

    # Once a genuine upstream appears, the relay completes and serves a verified copy.
    asyncio.run_coroutine_threadsafe(relay.add_upstream(world["url"]), relay_server.loop).result(5)
    client = fetch([relay_server.url], world["tmp"] / "w2", 2)
    assert digest_file(world["tmp"] / "w2" / "step_2" / "model.safetensors", "blake3") == digest_file(
        world["dirs"][2] / "model.safetensors", "blake3"
    )
    assert client.last_stats.corrupt_shards == 0


@pytest.mark.slow
def test_trickling_source_is_dropped_in_bounded_time(world):
    slow = serve(world, lambda: hostile_app(world["dirs"][1], world["raw"], Lies(trickle_bytes_per_s=20)))
    config = QUICK.model_copy(
        update={"request_timeout_s": 0.5, "min_throughput_bytes_s": 1_000_000, "max_attempts_per_shard": 2}
    )

    async def run() -> None:
        async with ShardcastClient([slow], TRAINER.node_id, world["tmp"] / "w", config) as client:
            await client.fetch(1)

    started = time.monotonic()
    with pytest.raises(ShardcastError, match="could not be fetched"):
        asyncio.run(run())
    assert time.monotonic() - started < 20
