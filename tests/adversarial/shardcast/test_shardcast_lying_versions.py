"""A relay announcing versions it does not hold (issue 20, item 1) must not stall anyone.

Before the fix the client took the highest version any relay announced and then failed ("no source served the
manifest of version 1000000000"), ~26 s per refresh, never installing a policy.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from adversarial.shardcast.hostile_relay_kit import (
    HUGE,
    QUICK,
    SHARD,
    TRAINER,
    Lies,
    hostile_app,
    make_checkpoint,
)
from polling import wait_for

from swarmrl.configs.shardcast import OriginConfig, RelayConfig
from swarmrl.shardcast import CheckpointFetcher, Origin, Relay, ServerThread, ShardcastClient, latest_version
from swarmrl.shardcast.layout import manifest_path
from swarmrl.shardcast.selection.base import ROUND_TRIP_WINDOW

# A refresh with an honest source beside the liar costs one hedge delay (1 s) at most, plus the honest work.
REFRESH_BOUND_S = 6.0


@pytest.fixture
def world(tmp_path):
    root = tmp_path / "ckpt"
    origin = Origin(root, TRAINER, "adv", OriginConfig(shard_size=SHARD, delta=False))
    dirs = {v: make_checkpoint(root, v) for v in (1, 2)}
    for version, directory in dirs.items():
        origin.publish(directory, version)
    server = origin.serve_in_thread()
    raw = {v: origin.store.manifest_bytes(v) for v in dirs}
    servers: list[ServerThread] = []

    def liar(lies: Lies) -> str:
        thread = ServerThread(lambda: hostile_app(dirs[1], {1: raw[1]}, lies)).start()
        servers.append(thread)
        return thread.url

    yield {"url": server.url, "dirs": dirs, "tmp": tmp_path, "liar": liar, "servers": servers}
    for started in servers:
        started.stop()
    server.stop()


def newest(sources, dest, **fetch_kwargs):
    async def run():
        async with ShardcastClient(sources, TRAINER.node_id, dest, QUICK) as client:
            started = time.monotonic()
            path = await client.fetch(**fetch_kwargs)
            return path, client, time.monotonic() - started

    return asyncio.run(run())


def test_a_huge_announced_version_does_not_stop_the_newest_genuine_one(world):
    lies = Lies(announce=HUGE)
    bad = world["liar"](lies)

    path, client, seconds = newest([bad, world["url"]], world["tmp"] / "w")

    assert path == world["tmp"] / "w" / "step_2"
    assert (path / "model.safetensors").read_bytes() == (world["dirs"][2] / "model.safetensors").read_bytes()
    assert seconds < REFRESH_BOUND_S
    assert client.selector.stats[bad].corrupt >= 1  # the false announcement demotes the liar
    assert f"announced version {HUGE}" in client.last_stats.manifest_rejected_by_source[bad]


def test_a_lie_with_a_slow_manifest_costs_one_hedge_delay(world):
    bad = world["liar"](Lies(announce=HUGE, manifest_delay_s=30))

    path, client, seconds = newest([bad, world["url"]], world["tmp"] / "w")

    assert path.name == "step_2"
    assert seconds < REFRESH_BOUND_S
    assert client.selector.stats[bad].failures >= 1


def test_claims_above_the_ceiling_are_not_even_asked_about(world):
    lies = Lies(announce=HUGE)
    bad = world["liar"](lies)

    assert latest_version([bad, world["url"]], TRAINER.node_id, ceiling=2) == 2
    assert latest_version([bad, world["url"]], TRAINER.node_id, ceiling=1) == 1
    assert f"/v/{HUGE}/manifest" not in lies.requests
    # Without a ceiling the lie is checked, refuted, and the genuine newest version still wins.
    assert latest_version([bad, world["url"]], TRAINER.node_id) == 2
    assert f"/v/{HUGE}/manifest" in lies.requests


def test_fetch_within_the_coordinators_step(world):
    bad = world["liar"](Lies(announce=HUGE))

    path, _, _ = newest([bad, world["url"]], world["tmp"] / "w", max_version=1)

    assert path.name == "step_1"


def refresh_durations(fetcher: CheckpointFetcher, ceiling: int | None, times: int) -> list[float]:
    durations = []
    for _ in range(times):
        started = time.monotonic()
        version, path = fetcher.refresh(ceiling)
        durations.append(time.monotonic() - started)
        assert (version, path.name) == (2, "step_2")
    return durations


def test_a_workers_refreshes_within_the_step_never_ask_the_liar_about_its_lie(world):
    lies = Lies(announce=HUGE, manifest_delay_s=30)
    bad = world["liar"](lies)
    fetcher = CheckpointFetcher([bad, world["url"]], TRAINER.node_id, world["tmp"] / "w", QUICK, run_id="adv")

    durations = refresh_durations(fetcher, ceiling=2, times=3)

    assert max(durations) < REFRESH_BOUND_S
    assert f"/v/{HUGE}/manifest" not in lies.requests


def test_without_a_ceiling_a_slow_lie_costs_a_refresh_at_most_the_discovery_timeout(world):
    lies = Lies(announce=HUGE, manifest_delay_s=30)
    bad = world["liar"](lies)
    config = QUICK.model_copy(update={"discovery_timeout_s": 2.0})
    fetcher = CheckpointFetcher(
        [bad, world["url"]], TRAINER.node_id, world["tmp"] / "w", config, run_id="adv"
    )

    durations = refresh_durations(fetcher, ceiling=None, times=3)

    assert max(durations) < config.discovery_timeout_s + 3.0
    assert fetcher.selector.stats[bad].failures >= 1


def test_long_poll_ignores_a_version_nobody_can_back(world):
    bad = world["liar"](Lies(announce=HUGE))

    async def run():
        async with ShardcastClient([bad, world["url"]], TRAINER.node_id, world["tmp"] / "w", QUICK) as client:
            return await client.wait_for_version(after=1, timeout_s=5)

    started = time.monotonic()
    assert asyncio.run(run()) == 2
    assert time.monotonic() - started < REFRESH_BOUND_S


def relabelled(raw: bytes, version: int) -> bytes:
    """A genuine signed manifest with its version changed: the signature no longer covers it."""
    signed = json.loads(raw)
    signed["manifest"]["version"] = version
    return json.dumps(signed).encode()


@pytest.mark.parametrize("enclosing", ["a relabelled manifest", "an older genuine manifest"])
def test_an_announcement_enclosing_a_manifest_that_does_not_verify_is_not_believed(world, enclosing):
    genuine = world["dirs"]
    raw_1 = manifest_path(genuine[1]).read_bytes()
    lie = relabelled(raw_1, HUGE) if enclosing == "a relabelled manifest" else raw_1
    lies = Lies(announce=HUGE, enclosed=lie)
    bad = world["liar"](lies)
    alone = CheckpointFetcher([bad], TRAINER.node_id, world["tmp"] / "a", QUICK, run_id="adv")
    beside = CheckpointFetcher([bad, world["url"]], TRAINER.node_id, world["tmp"] / "b", QUICK, run_id="adv")

    assert alone.next_verified(after=1, timeout_s=2) is None
    assert alone.selector.stats[bad].corrupt >= 1  # its claim went through the race and was refuted there
    started = time.monotonic()
    manifest, _ = beside.next_verified(after=1, timeout_s=5)
    assert manifest.version == 2
    assert time.monotonic() - started < REFRESH_BOUND_S


def test_a_genuine_announcement_is_installed_without_asking_for_its_manifest_again(world):
    lies = Lies()  # an honest relay: its long-poll answer carries the announced version's signed manifest
    honest = world["liar"](lies)
    fetcher = CheckpointFetcher([honest], TRAINER.node_id, world["tmp"] / "w", QUICK, run_id="adv")

    manifest, raw = fetcher.next_verified(after=-1, timeout_s=5)
    installed = fetcher.install(manifest, raw)

    assert manifest.version == 1  # the hostile kit serves version 1's files
    assert (installed / "model.safetensors").read_bytes() == (
        world["dirs"][1] / "model.safetensors"
    ).read_bytes()
    assert [p for p in lies.requests if p.endswith("/manifest")] == []
    # Its round trip, which decides whether it is near, was measured meanwhile, once.
    assert lies.requests.count("/versions") == 1
    assert fetcher.selector.stats[honest].round_trip is not None
    # Round trips are sampled again only until a node holds a window of them.
    for _ in range(ROUND_TRIP_WINDOW):
        fetcher.selector.observe_round_trip(honest, 0.001)
    fetcher.next_verified(after=-1, timeout_s=5)
    assert lies.requests.count("/versions") == 1


def mirrored(relay: Relay, version: int) -> bool:
    entry = relay.store.get(version)
    return entry is not None and entry.complete


def test_relay_does_not_chase_an_upstream_announcing_lies(world):
    lies = Lies(announce=HUGE)
    bad = world["liar"](lies)
    relay = Relay(
        RelayConfig(upstreams=[bad, world["url"]], data_dir=world["tmp"] / "relay", long_poll_s=1),
        TRAINER.node_id,
        QUICK,
    )
    server = relay.serve_in_thread()
    world["servers"].append(server)

    wait_for(lambda: mirrored(relay, 2), 20, "the relay to mirror the genuine version", 0.05)
    asked = len(lies.requests)
    wait_for(lambda: len(lies.requests) >= asked + 2, 20, "two more polls of the liar", 0.05)

    assert HUGE not in relay._mirroring  # no mirror task spins on the lie
    assert HUGE not in relay.store.versions()
    assert relay.selector.stats[bad].corrupt >= 1


def test_a_relay_mirrors_from_the_truth_when_an_announcer_claims_shards_it_does_not_hold(tmp_path):
    """The shards an announcement claims are requested at once; an announcer that holds none of them costs a
    refused request per shard and then answers what it holds (nothing), and the genuine source serves them."""
    root = tmp_path / "ckpt"
    origin = Origin(root, TRAINER, "adv", OriginConfig(shard_size=SHARD, delta=False))
    genuine = make_checkpoint(root, 1)
    origin.publish(genuine, 1)
    raw = origin.store.manifest_bytes(1)
    lies = Lies(holds_nothing=True)
    servers = [origin.serve_in_thread(), ServerThread(lambda: hostile_app(genuine, {1: raw}, lies)).start()]
    relay = Relay(
        RelayConfig(upstreams=[servers[1].url], data_dir=tmp_path / "relay", long_poll_s=1),
        TRAINER.node_id,
        QUICK,
    )
    servers.append(relay.serve_in_thread())
    try:
        wait_for(
            lambda: any(p.startswith("/v/1/data/") for p in lies.requests), 10, "a claimed shard asked", 0.05
        )
        asyncio.run_coroutine_threadsafe(relay.add_upstream(servers[0].url), servers[2].loop).result(5)
        wait_for(lambda: mirrored(relay, 1), 20, "the relay to mirror the version from the origin", 0.05)
    finally:
        for server in servers:
            server.stop()

    held = tmp_path / "relay" / "step_1" / "model.safetensors"
    assert held.read_bytes() == (genuine / "model.safetensors").read_bytes()
    assert "/v/1/availability" in lies.requests  # a refused shard sends the relay to ask what it holds
