"""What the emulated WAN showed slow (issue 35), fixed: a relay mirrors a version's delta before its full copy,
and a worker installs each new version in the background as soon as a relay announces it."""

from __future__ import annotations

import threading
import time

import pytest
from shardcast_testkit import (
    TRAINER,
    SlowLink,
    relay_holds,
    start_origin,
    start_relay,
    wait_until,
    write_checkpoint,
)

from swarmrl.shardcast import local_versions
from swarmrl.shardcast.client import CheckpointFetcher
from swarmrl.worker.node import Prefetch


@pytest.fixture
def servers():
    started = []
    yield started
    for server in reversed(started):
        server.stop()


def _next_version(root, version: int, size: int):
    """Version `version`: the previous one with a few bytes changed, so its delta is small."""
    directory = write_checkpoint(root, version, size)
    model = bytearray((root / f"step_{version - 1}" / "model.safetensors").read_bytes())
    model[1000:1010] = bytes(range(version, version + 10))
    (directory / "model.safetensors").write_bytes(bytes(model))
    return directory


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
        origin.publish(_next_version(root, 2, 1_000_000), 2)
        order: list[int] = []
        wait_until(lambda: relay.store.get(2) is not None)
        entry = relay.store.get(2)
        deadline = time.monotonic() + 30
        while not entry.complete and time.monotonic() < deadline:
            order += sorted(entry.verified - set(order))
            time.sleep(0.005)
        order += sorted(entry.verified - set(order))
    finally:
        link.close()
    full = len(entry.manifest.shards)
    delta = [i for i in order if i >= full]
    assert delta and len(order) == len(entry.manifest.all_shards)
    # Every delta shard was held before the first shard of the full copy.
    assert order[: len(delta)] == sorted(delta), order


def test_a_worker_installs_each_version_in_the_background(tmp_path, servers):
    root = tmp_path / "ckpt"
    origin, server = start_origin(root, delta=True)
    servers.append(server)
    origin.publish(write_checkpoint(root, 0, 300_000), 0)
    fetcher = CheckpointFetcher([server.url], TRAINER.node_id, tmp_path / "worker", run_id="test-run")
    stop = threading.Event()
    prefetch = Prefetch(fetcher, stop, poll_s=2.0)
    prefetch.start()
    try:
        wait_until(lambda: local_versions(tmp_path / "worker") == [0])
        origin.publish(_next_version(root, 1, 300_000), 1)
        # No unit asked for it: the announcement alone brings it in.
        wait_until(lambda: 1 in local_versions(tmp_path / "worker"), timeout=10)
    finally:
        stop.set()
        prefetch.join(timeout=10)
    assert not prefetch.is_alive()
