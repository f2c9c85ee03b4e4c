"""Origin, relays, clients on 127.0.0.1: fetches, chains, deltas, long-poll, metrics, local retention; a relay
mirrors the delta before the full copy and a worker and a validator install each new version in the
background."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
import urllib.request
from pathlib import Path

import torch
from shardcast_testkit import (
    TRAINER,
    SlowLink,
    assert_same_tree,
    next_version,
    origin_and_relay_holding_v1,
    relay_holds,
    start_origin,
    start_relay,
    wait_until,
    write_checkpoint,
)

from swarmrl.configs.shardcast import ClientConfig
from swarmrl.shardcast import (
    ShardcastClient,
    fetch_checkpoint,
    latest_version,
    local_versions,
    read_local_manifest,
)
from swarmrl.shardcast.client import CheckpointFetcher
from swarmrl.shardcast.hashing import digest_file
from swarmrl.shardcast.prefetch import Prefetch
from swarmrl.validator.node import FetchedPolicies, ValidatorOptions


def test_fetch_direct_from_origin_installs_verified_copy(tmp_path, servers):
    root = tmp_path / "ckpt"
    source = write_checkpoint(root, 3, 700_000)
    origin, server = start_origin(root)
    servers.append(server)
    manifest = origin.publish(source, 3)
    assert len(manifest.shards) > 10

    path = fetch_checkpoint([server.url], 3, tmp_path / "worker", TRAINER.node_id)

    assert path == tmp_path / "worker" / "step_3"
    assert_same_tree(source, path)
    assert read_local_manifest(path, TRAINER.node_id, 3).version == 3
    assert not list((tmp_path / "worker" / ".partial").iterdir())
    assert latest_version([server.url], TRAINER.node_id) == 3


def test_relay_chain_serves_verified_copy(tmp_path, servers):
    root = tmp_path / "ckpt"
    source = write_checkpoint(root, 1, 500_000)
    origin, origin_server = start_origin(root)
    servers.append(origin_server)
    origin.publish(source, 1)
    first, first_server = start_relay([origin_server.url], tmp_path / "relay1")
    servers.append(first_server)
    second, second_server = start_relay([first_server.url], tmp_path / "relay2")
    servers.append(second_server)

    wait_until(lambda: relay_holds(second, 1))
    path = fetch_checkpoint([second_server.url], 1, tmp_path / "worker", TRAINER.node_id)

    assert_same_tree(source, path)
    assert_same_tree(source, tmp_path / "relay2" / "step_1")


def test_relay_learns_new_version_promptly_through_long_poll(tmp_path, servers):
    root = tmp_path / "ckpt"
    origin, origin_server = start_origin(root)
    servers.append(origin_server)
    origin.publish(write_checkpoint(root, 1, 100_000), 1)
    relay, relay_server = start_relay([origin_server.url], tmp_path / "relay")
    servers.append(relay_server)
    wait_until(lambda: relay_holds(relay, 1))

    published_at = time.monotonic()
    origin.publish(write_checkpoint(root, 2, 100_000), 2)
    wait_until(lambda: relay_holds(relay, 2), timeout=10)

    assert time.monotonic() - published_at < 30.0 / 4  # the reference polls every 30 s


def test_relay_fetches_an_announced_version_without_asking_the_origin_what_it_holds(tmp_path, servers):
    """The long poll's answer lists the shards the origin holds with the manifest: over a long path the shard
    requests go out at once, not one round trip later (the availability question used to be that trip)."""
    root = tmp_path / "ckpt"
    origin, relay = origin_and_relay_holding_v1(tmp_path, servers, 300_000)

    asked = origin.metrics.requests.labels("origin", "availability", "200")
    before = asked._value.get()
    origin.publish(write_checkpoint(root, 2, 300_000, seed=5), 2)
    wait_until(lambda: relay_holds(relay, 2), timeout=10)

    assert_same_tree(root / "step_2", tmp_path / "relay" / "step_2")
    assert asked._value.get() == before


def test_client_long_poll_wakes_on_publish(tmp_path, servers):
    root = tmp_path / "ckpt"
    origin, server = start_origin(root)
    servers.append(server)
    origin.publish(write_checkpoint(root, 1, 10_000), 1)
    timer = threading.Timer(0.3, lambda: origin.publish(write_checkpoint(root, 2, 10_000), 2))
    timer.start()

    async def wait() -> int | None:
        async with ShardcastClient([server.url], TRAINER.node_id, tmp_path / "w") as client:
            return await client.wait_for_version(after=1, timeout_s=10)

    started = time.monotonic()
    assert asyncio.run(wait()) == 2
    assert time.monotonic() - started < 10 / 2  # woken by the publication, not at the 10 s timeout
    timer.join()


def test_delta_version_is_rebuilt_from_local_parent_and_falls_back_without_it(tmp_path, servers):
    root = tmp_path / "ckpt"
    origin, server = start_origin(root, delta=True)
    servers.append(server)
    v1 = write_checkpoint(root, 1, 400_000, seed=1)
    origin.publish(v1, 1)
    v2 = write_checkpoint(root, 2, 400_000, seed=1)
    data = bytearray((v2 / "model.safetensors").read_bytes())
    for i in range(0, len(data), 4096):
        data[i] ^= 0x01  # a sparse low-bit change, like a tiny optimizer step
    (v2 / "model.safetensors").write_bytes(bytes(data))
    manifest = origin.publish(v2, 2)
    assert manifest.delta is not None and manifest.parent_version == 1

    async def fetch_two(dest: Path, versions: list[int]) -> list:
        async with ShardcastClient([server.url], TRAINER.node_id, dest) as client:
            stats = []
            for version in versions:
                await client.fetch(version)
                stats.append(client.last_stats)
            return stats

    first, second = asyncio.run(fetch_two(tmp_path / "with_parent", [1, 2]))
    assert second.used_delta
    assert second.bytes_downloaded < manifest.total_size / 5
    assert_same_tree(v2, tmp_path / "with_parent" / "step_2")

    (without,) = asyncio.run(fetch_two(tmp_path / "no_parent", [2]))
    assert not without.used_delta
    assert without.bytes_downloaded == manifest.total_size
    assert_same_tree(v2, tmp_path / "no_parent" / "step_2")


def test_client_keeps_only_newest_versions(tmp_path, servers):
    root = tmp_path / "ckpt"
    origin, server = start_origin(root)
    servers.append(server)
    for version in range(1, 5):
        origin.publish(write_checkpoint(root, version, 20_000, seed=version), version)
    config = ClientConfig(keep_versions=2)
    for version in range(1, 5):
        fetch_checkpoint([server.url], version, tmp_path / "w", TRAINER.node_id, config)
    assert local_versions(tmp_path / "w") == [3, 4]


def test_two_clients_on_one_host_do_not_collide(tmp_path, servers):
    root = tmp_path / "ckpt"
    source = write_checkpoint(root, 5, 600_000)
    origin, server = start_origin(root)
    servers.append(server)
    origin.publish(source, 5)

    async def both() -> list[Path]:
        async def one() -> Path:
            async with ShardcastClient([server.url], TRAINER.node_id, tmp_path / "shared") as client:
                return await client.fetch(5)

        return await asyncio.gather(one(), one())

    paths = asyncio.run(both())
    assert paths[0] == paths[1]
    assert_same_tree(source, paths[0])
    assert not list((tmp_path / "shared" / ".partial").iterdir())


def test_every_server_exposes_prometheus_metrics(tmp_path, servers):
    root = tmp_path / "ckpt"
    origin, origin_server = start_origin(root)
    servers.append(origin_server)
    origin.publish(write_checkpoint(root, 1, 100_000), 1)
    relay, relay_server = start_relay([origin_server.url], tmp_path / "relay")
    servers.append(relay_server)
    wait_until(lambda: relay_holds(relay, 1))

    origin_text = urllib.request.urlopen(origin_server.url + "/metrics", timeout=5).read().decode()
    relay_text = urllib.request.urlopen(relay_server.url + "/metrics", timeout=5).read().decode()

    assert 'shardcast_bytes_served_total{role="origin"}' in origin_text
    assert 'shardcast_shards_verified_total{role="relay"}' in relay_text
    assert 'shardcast_latest_version{role="relay"} 1.0' in relay_text


def test_published_digests_match_files(tmp_path, servers):
    root = tmp_path / "ckpt"
    source = write_checkpoint(root, 1, 300_000)
    origin, server = start_origin(root)
    servers.append(server)
    manifest = origin.publish(source, 1)
    for entry in manifest.files:
        assert digest_file(source / entry.path, manifest.hash_algorithm) == entry.digest
    assert manifest.total_size == sum(
        p.stat().st_size for p in source.rglob("*") if p.is_file() and ".shardcast" not in p.parts
    )


def test_origin_forgets_versions_the_trainer_pruned(tmp_path, servers):
    import shutil

    root = tmp_path / "ckpt"
    origin, server = start_origin(root)
    servers.append(server)
    for version in (1, 2):
        origin.publish(write_checkpoint(root, version, 10_000), version)
    shutil.rmtree(root / "step_1")
    origin.store.rescan()
    assert origin.store.versions() == [2]
    assert latest_version([server.url], TRAINER.node_id) == 2


# --- what the emulated WAN showed slow (issue 35) ----------------------------------------------------------
def test_a_relay_mirrors_the_delta_before_the_full_copy(tmp_path, servers):
    root = tmp_path / "ckpt"
    origin, origin_server = start_origin(root, delta=True)
    servers.append(origin_server)
    origin.publish(write_checkpoint(root, 1, 1_000_000), 1)
    link = SlowLink(origin_server.url, 2_000_000).start()  # the full copy takes half a second over it
    try:
        relay, relay_server = start_relay([link.url], tmp_path / "relay")
        servers.append(relay_server)
        wait_until(lambda: relay_holds(relay, 1))
        origin.publish(next_version(root, 2, 1_000_000), 2)
        seen_in: dict[int, int] = {}  # shard index → the poll that first saw it verified
        wait_until(lambda: relay.store.get(2) is not None)
        entry = relay.store.get(2)
        deadline, poll = time.monotonic() + 30, 0
        while not entry.complete and time.monotonic() < deadline:
            seen_in.update({i: poll for i in entry.verified if i not in seen_in})
            poll += 1
            time.sleep(0.005)
        seen_in.update({i: poll for i in entry.verified if i not in seen_in})
    finally:
        link.close()
    full = len(entry.manifest.shards)
    delta = [i for i in seen_in if i >= full]
    assert delta and len(seen_in) == len(entry.manifest.all_shards)
    # No shard of the full copy was held before the last delta shard: one poll sees the shards that landed since
    # the one before together, in no knowable order (on a loaded machine a poll can come late).
    last_delta = max(seen_in[i] for i in delta)
    assert all(seen_in[i] >= last_delta for i in range(full)), seen_in


def _delta_origin_with_version_0(tmp_path, servers):
    """An origin publishing deltas, holding version 0, and a worker's fetcher of it: (root, origin, url, fetcher)."""
    root = tmp_path / "ckpt"
    origin, server = start_origin(root, delta=True)
    servers.append(server)
    origin.publish(write_checkpoint(root, 0, 300_000), 0)
    fetcher = CheckpointFetcher([server.url], TRAINER.node_id, tmp_path / "worker", run_id="test-run")
    return root, origin, server.url, fetcher


@contextlib.contextmanager
def _prefetching(fetcher):
    """A worker's background installs of each announced version, stopped (and checked stopped) at the end."""
    stop = threading.Event()
    prefetch = Prefetch(fetcher, stop, poll_s=2.0)
    prefetch.start()
    try:
        yield
    finally:
        stop.set()
        prefetch.join(timeout=10)
    assert not prefetch.is_alive()


def test_a_worker_installs_each_version_in_the_background(tmp_path, servers, caplog):
    root, origin, url, fetcher = _delta_origin_with_version_0(tmp_path, servers)
    with caplog.at_level(logging.INFO, logger="swarmrl.shardcast.prefetch"), _prefetching(fetcher):
        wait_until(lambda: local_versions(tmp_path / "worker") == [0])
        origin.publish(next_version(root, 1, 300_000), 1)
        # No unit asked for it: the announcement alone brings it in.
        wait_until(lambda: 1 in local_versions(tmp_path / "worker"), timeout=10)
        wait_until(lambda: "policy step 1 installed" in caplog.text, timeout=5)
    # The log line says what the install took and where its bytes came from: the delta, from the origin.
    assert fetcher.last_stats.used_delta and set(fetcher.last_stats.bytes_by_source) == {url}
    line = rf"policy step 1 installed [0-9.]+s after its announcement \(0\.\d MB from {url}, a delta\)"
    assert re.search(line, caplog.text), caplog.text


def test_a_node_two_versions_behind_catches_up_through_the_deltas(tmp_path, servers, caplog):
    root, origin, url, fetcher = _delta_origin_with_version_0(tmp_path, servers)
    fetcher.fetch(0)
    for version in (1, 2):  # published while the node was busy: it holds step 0, two behind
        origin.publish(next_version(root, version, 300_000), version)
    with caplog.at_level(logging.INFO, logger="swarmrl.shardcast.prefetch"), _prefetching(fetcher):
        wait_until(lambda: "policy step 2 installed" in caplog.text, timeout=20)
    assert local_versions(tmp_path / "worker") == [0, 1, 2]
    on_the_way = (
        rf"policy step 1 installed [0-9.]+s after step 2's announcement \(0\.0 MB from {url}, a delta\)"
    )
    assert re.search(on_the_way, caplog.text), caplog.text
    assert fetcher.last_stats.used_delta  # and step 2 from step 1's, not whole


def test_a_validator_installs_each_version_before_a_file_asks_for_it(tmp_path, servers):
    root = tmp_path / "ckpt"
    origin, server = start_origin(root, delta=True)
    servers.append(server)
    origin.publish(write_checkpoint(root, 0, 300_000), 0)
    options = ValidatorOptions(
        server.url, "test-run", tmp_path / "v.pem", [server.url], tmp_path / "validator"
    )
    policies = FetchedPolicies(
        options, TRAINER.node_id, "float32", keep=2, fetching=ClientConfig(), device=torch.device("cpu")
    )
    installed = tmp_path / "validator" / "checkpoints"
    assert policies.path(0) == installed / "step_0"  # fetched on first use
    policies.prefetch.start()
    try:
        origin.publish(next_version(root, 1, 300_000), 1)
        wait_until(lambda: 1 in local_versions(installed), timeout=10)  # no file asked for it
        assert_same_tree(root / "step_1", installed / "step_1")
    finally:
        started = time.monotonic()
        policies.close()
    assert not policies.prefetch.is_alive()
    assert time.monotonic() - started < 5  # the long poll is short: a drained validator exits promptly
