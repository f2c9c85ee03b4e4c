"""Relays that lie: corrupt shards, forged, foreign-signed and replayed manifests, oversized answers.

A hostile relay here is a real HTTP server on 127.0.0.1 speaking the shardcast protocol with the genuine files
of a published version, altered in one way per test.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import pytest
from aiohttp import web

from swarmrl.identity import Identity
from swarmrl.shardcast import (
    ClientConfig,
    ManifestError,
    Origin,
    OriginConfig,
    Relay,
    RelayConfig,
    ServerThread,
    ShardcastClient,
    ShardcastError,
    sign_manifest,
)
from swarmrl.shardcast.hashing import digest_file
from swarmrl.shardcast.manifest import SignedManifest

TRAINER = Identity.from_seed(b"t" * 32)
SHARD = 64 * 1024
QUICK = ClientConfig(
    max_attempts_per_shard=4,
    stall_timeout_s=3,
    backoff_base_s=0.05,
    backoff_max_s=0.3,
    connect_timeout_s=1,
    seed=0,
)


def make_checkpoint(root: Path, version: int, size: int = 600_000) -> Path:
    directory = root / f"step_{version}"
    directory.mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(random.Random(version).randbytes(size))
    (directory / "config.json").write_text("{}")
    return directory


def hostile_app(
    directory: Path,
    manifests: dict[int, bytes],
    corrupt_shards: set[int] = frozenset(),
    shard_size: int = SHARD,
    oversize: bool = False,
    trickle: bool = False,
) -> web.Application:
    """Serves `manifests[v]` for version v, claims every shard, and flips a byte inside `corrupt_shards`."""

    async def manifest(request: web.Request) -> web.Response:
        raw = manifests.get(int(request.match_info["version"]))
        if raw is None:
            raise web.HTTPNotFound()
        return web.Response(body=raw, content_type="application/json")

    async def availability(request: web.Request) -> web.Response:
        raw = manifests.get(int(request.match_info["version"]))
        if raw is None:
            raise web.HTTPNotFound()
        shards = SignedManifest.model_validate_json(raw).manifest.all_shards
        return web.json_response(
            {"version": int(request.match_info["version"]), "shards": [s.index for s in shards]}
        )

    async def data(request: web.Request) -> web.StreamResponse:
        content = (directory / request.match_info["path"]).read_bytes()
        if trickle:  # never silent for long, never done: a slowloris source
            start, stop = request.http_range.start or 0, request.http_range.stop or len(content)
            response = web.StreamResponse(
                status=206, headers={"Content-Range": f"bytes {start}-{stop - 1}/{len(content)}"}
            )
            response.content_length = stop - start
            await response.prepare(request)
            for position in range(start, stop):
                await response.write(content[position : position + 1])
                await asyncio.sleep(0.05)
            return response
        if oversize:
            return web.Response(body=content + b"x" * 100_000, status=200)
        start = request.http_range.start or 0
        stop = request.http_range.stop or len(content)
        body = bytearray(content[start:stop])
        if request.match_info["path"] == "model.safetensors" and start // shard_size in corrupt_shards:
            body[len(body) // 2] ^= 0xFF
        return web.Response(
            body=bytes(body),
            status=206,
            headers={"Content-Range": f"bytes {start}-{stop - 1}/{len(content)}"},
        )

    async def versions(request: web.Request) -> web.Response:
        return web.json_response({"versions": sorted(manifests), "latest": max(manifests)})

    async def latest(request: web.Request) -> web.Response:
        return web.json_response({"latest": max(manifests)})

    app = web.Application()
    app.add_routes(
        [
            web.get("/versions", versions),
            web.get("/latest", latest),
            web.get("/v/{version}/manifest", manifest),
            web.get("/v/{version}/availability", availability),
            web.get("/v/{version}/data/{path:.+}", data),
        ]
    )
    return app


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
    bad = serve(world, lambda: hostile_app(world["dirs"][1], world["raw"], corrupt_shards={0, 1, 2, 3, 4, 5}))
    dest = world["tmp"] / "w"

    client = fetch([bad, world["url"]], dest, 1)

    installed = dest / "step_1" / "model.safetensors"
    assert installed.read_bytes() == (world["dirs"][1] / "model.safetensors").read_bytes()
    assert client.last_stats.corrupt_by_source.get(bad, 0) >= 1
    assert client.selector.stats[bad].corrupt >= 1
    assert client.selector.weight(bad) < client.selector.weight(world["url"])
    assert not list((dest / ".partial").iterdir())


def test_only_a_corrupt_source_fails_and_installs_nothing(world):
    bad = serve(world, lambda: hostile_app(world["dirs"][1], world["raw"], corrupt_shards={2}))
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

    assert bad in client.last_stats.manifest_rejected_by_source or client.selector.stats[bad].corrupt == 0
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
    bad = serve(world, lambda: hostile_app(world["dirs"][1], world["raw"], oversize=True))
    dest = world["tmp"] / "w"

    client = fetch([bad, world["url"]], dest, 1)

    assert (dest / "step_1" / "model.safetensors").read_bytes() == (
        world["dirs"][1] / "model.safetensors"
    ).read_bytes()
    assert client.selector.stats[bad].successes == 0


def test_relay_verifies_upstream_shards_before_serving(world):
    bad = serve(world, lambda: hostile_app(world["dirs"][2], {2: world["raw"][2]}, corrupt_shards={1, 3}))
    relay = Relay(
        RelayConfig(upstreams=[bad], data_dir=world["tmp"] / "relay", long_poll_s=1, retry_interval_s=0.2),
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
    with pytest.raises(ShardcastError, match="could not be fetched"):
        fetch([relay_server.url], world["tmp"] / "w", 2)

    # Once a genuine upstream appears, the relay completes and serves a verified copy.
    asyncio.run_coroutine_threadsafe(relay.add_upstream(world["url"]), relay_server.loop).result(5)
    client = fetch([relay_server.url], world["tmp"] / "w2", 2)
    assert digest_file(world["tmp"] / "w2" / "step_2" / "model.safetensors", "blake3") == digest_file(
        world["dirs"][2] / "model.safetensors", "blake3"
    )
    assert client.last_stats.corrupt_shards == 0


def test_trickling_source_is_dropped_in_bounded_time(world):
    slow = serve(world, lambda: hostile_app(world["dirs"][1], world["raw"], trickle=True))
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
