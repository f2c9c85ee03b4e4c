"""Slow and silent relays (issue 20, item 7): a client must not be tied up by them.

Before the fix a relay trickling 1 byte/s or staying silent held a client for 318–441 s for 2.3 MB (each shard
request was allowed 35 s of silence plus its size at the floor rate), and a slow manifest from the preferred
relay delayed a fetch by its whole read timeout. Here the liar is listed first, so with equal weights it is
the preferred source.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from adversarial.shardcast.hostile_relay_kit import SHARD, TRAINER, Lies, hostile_app, make_checkpoint

from swarmrl.configs.shardcast import ClientConfig, OriginConfig
from swarmrl.shardcast import Origin, ServerThread, ShardcastClient

BOUND_S = 10.0  # generous for a loaded 2-core machine; the unhardened client needs 30 s or more per case


@pytest.fixture
def world(tmp_path):
    root = tmp_path / "ckpt"
    origin = Origin(root, TRAINER, "adv", OriginConfig(shard_size=SHARD, delta=False))
    directory = make_checkpoint(root, 1, size=900_000)
    origin.publish(directory, 1)
    server = origin.serve_in_thread()
    raw = {1: origin.store.manifest_bytes(1)}
    servers: list[ServerThread] = []

    def liar(lies: Lies) -> str:
        thread = ServerThread(lambda: hostile_app(directory, raw, lies)).start()
        servers.append(thread)
        return thread.url

    yield {"url": server.url, "dir": directory, "tmp": tmp_path, "liar": liar}
    for started in servers:
        started.stop()
    server.stop()


def timed_fetch(world, sources, config: ClientConfig) -> tuple[ShardcastClient, float]:
    async def run():
        async with ShardcastClient(sources, TRAINER.node_id, world["tmp"] / "w", config) as client:
            started = time.monotonic()
            await asyncio.wait_for(client.fetch(1), timeout=45)
            return client, time.monotonic() - started

    client, seconds = asyncio.run(run())
    installed = world["tmp"] / "w" / "step_1" / "model.safetensors"
    assert installed.read_bytes() == (world["dir"] / "model.safetensors").read_bytes()
    return client, seconds


@pytest.mark.parametrize(
    "lies", [Lies(trickle_bytes_per_s=1), Lies(silent_data=True)], ids=["trickle", "silent"]
)
def test_a_trickling_or_silent_relay_is_cut_and_demoted(world, lies):
    bad = world["liar"](lies)

    client, seconds = timed_fetch(world, [bad, world["url"]], ClientConfig(seed=0))

    assert seconds < BOUND_S
    assert client.selector.weight(bad) < client.selector.weight(world["url"]) / 1000
    assert client.last_stats.bytes_by_source.get(bad, 0) < SHARD


def test_a_slow_but_above_floor_relay_is_hedged_on_the_honest_one(world):
    bad = world["liar"](Lies(trickle_bytes_per_s=4096))
    # A floor so low that only hedging can help: a 64 KiB shard from the liar would take 16 s.
    config = ClientConfig(seed=0, min_throughput_bytes_s=1, selection={"type": "weighted", "exploration": 0})

    client, seconds = timed_fetch(world, [bad, world["url"]], config)

    assert seconds < BOUND_S
    assert client.last_stats.bytes_by_source[world["url"]] >= 900_000 - 2 * SHARD


def test_a_slow_manifest_from_the_preferred_relay_is_hedged(world):
    bad = world["liar"](Lies(manifest_delay_s=30))

    _, seconds = timed_fetch(world, [bad, world["url"]], ClientConfig(seed=0))

    assert seconds < BOUND_S
