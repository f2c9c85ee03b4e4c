"""What a narrow regional link asks of SHARDCAST (issue 35): a relay holding the previous version fetches only
the delta and rebuilds the full copy itself; a client waits for the relay near it rather than pulling the
same bytes from a distant source, unless that relay stops making progress (then from the nearest source
left, as when it dies, and from it again as soon as it answers after an outage); and the next version's shards
travel on the connections the last one opened (a new one costs a round trip more)."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request

import pytest
import urllib3
from shardcast_testkit import (
    TRAINER,
    SlowLink,
    assert_same_tree,
    next_version,
    relay_holds,
    start_origin,
    start_relay,
    wait_until,
    write_checkpoint,
)

from swarmrl.configs.shardcast import ClientConfig, RelayConfig
from swarmrl.shardcast import CheckpointFetcher, Relay, ShardcastClient
from swarmrl.shardcast.range_pool import RangePool
from swarmrl.shardcast.selection import SourcePolicy, source_policy

SIZE = 600_000


def origin_and_relay(tmp_path, servers, link_rate: float | None = None):
    """An origin that published version 1 and a relay holding it, mirroring the origin over a link of
    `link_rate` bytes/s when given (the caller closes that link)."""
    root = tmp_path / "ckpt"
    origin, origin_server = start_origin(root, delta=True)
    servers.append(origin_server)
    origin.publish(write_checkpoint(root, 1, SIZE, seed=1), 1)
    link = SlowLink(origin_server.url, link_rate).start() if link_rate else None
    relay, relay_server = start_relay([link.url if link else origin_server.url], tmp_path / "relay")
    servers.append(relay_server)
    wait_until(lambda: relay_holds(relay, 1))
    return root, origin, origin_server, relay, relay_server, link


def test_a_relay_rebuilds_the_full_copy_from_the_delta_and_its_parent(tmp_path, servers):
    root, origin, _, relay, _, _ = origin_and_relay(tmp_path, servers)

    manifest = origin.publish(next_version(root, 2, SIZE), 2)
    wait_until(lambda: relay_holds(relay, 2))

    assert manifest.delta is not None
    delta_bytes = sum(s.length for s in manifest.delta.shards)
    assert relay.stats[2].bytes_downloaded == delta_bytes < manifest.total_size / 20
    assert_same_tree(root / "step_2", tmp_path / "relay" / "step_2")


def test_a_relay_rebuilds_a_version_whose_parent_is_still_mirroring(tmp_path, servers):
    root, origin, _, relay, _, link = origin_and_relay(tmp_path, servers, link_rate=1e6)
    try:
        origin.publish(write_checkpoint(root, 2, SIZE, seed=2), 2)  # a delta as big as the file: ~0.6 s
        wait_until(lambda: relay.store.get(2) is not None)
        manifest = origin.publish(next_version(root, 3, SIZE), 3)  # a tiny delta, in long before 2 is whole
        wait_until(lambda: relay_holds(relay, 2) and relay_holds(relay, 3))
    finally:
        link.close()
    assert manifest.delta is not None
    assert relay.stats[3].bytes_downloaded == sum(s.length for s in manifest.delta.shards)
    assert_same_tree(root / "step_3", tmp_path / "relay" / "step_3")


def test_a_relay_takes_the_manifest_the_announcement_carries(tmp_path, servers):
    root, origin, _, relay, _, _ = origin_and_relay(tmp_path, servers)

    def manifests_served() -> float:
        labels = {"role": "origin", "endpoint": "manifest", "code": "200"}
        return origin.metrics.registry.get_sample_value("shardcast_requests_total", labels) or 0.0

    before = manifests_served()
    origin.publish(next_version(root, 2, SIZE), 2)
    wait_until(lambda: relay_holds(relay, 2))
    assert manifests_served() == before  # no round trip for it: the long poll's answer held it


def test_a_relay_whose_parent_copy_went_bad_fetches_the_full_copy(tmp_path, servers):
    root, origin, _, relay, _, _ = origin_and_relay(tmp_path, servers)
    parent_model = tmp_path / "relay" / "step_1" / "model.safetensors"
    damaged = bytearray(parent_model.read_bytes())
    damaged[5000] ^= 0xFF  # the disk under the relay, not any peer: the rebuilt file cannot match its hash
    parent_model.write_bytes(bytes(damaged))

    manifest = origin.publish(next_version(root, 2, SIZE), 2)
    wait_until(lambda: relay_holds(relay, 2))

    model_bytes = manifest.file_by_path["model.safetensors"].size
    assert relay.stats[2].bytes_downloaded >= model_bytes
    assert_same_tree(root / "step_2", tmp_path / "relay" / "step_2")


class Node:
    """A client that keeps what it learned about its sources, and its connections, between refreshes: a
    worker's `CheckpointFetcher`."""

    def __init__(self, sources: list[str], dest, config: ClientConfig) -> None:
        self.fetcher = CheckpointFetcher(sources, TRAINER.node_id, dest, config)
        self.selector: SourcePolicy = self.fetcher.selector
        self.bytes_by_source: dict[str, int] = {}

    def refresh(self):
        found = self.fetcher.refresh()
        self.bytes_by_source = dict(self.fetcher.last_stats.bytes_by_source)
        return found

    def close(self) -> None:
        self.fetcher.close()


def _near_relay_and_far_origin(tmp_path, servers):
    """An origin reached at a 150 ms round trip (fast otherwise), and a relay next to the node that mirrors
    the origin at 300 kB/s; version 1 held by both and by the node."""
    root, origin, origin_server, _, relay_server, relay_link = origin_and_relay(
        tmp_path, servers, link_rate=300e3
    )
    far = SlowLink(origin_server.url, 50e6, delay_s=0.15).start()
    node = Node([far.url, relay_server.url], tmp_path / "worker", ClientConfig(near_wait_s=1.0))
    assert node.refresh() is not None  # version 1; the round trips are measured on the way
    assert node.selector.near([far.url, relay_server.url]) == [relay_server.url]
    return root, origin, far, relay_link, relay_server.url, node


def test_a_client_waits_for_its_near_relay_rather_than_pulling_from_afar(tmp_path, servers):
    root, origin, far, relay_link, relay_url, node = _near_relay_and_far_origin(tmp_path, servers)
    try:
        # A new model, so the delta is as big as the file: the relay needs ~2 s to hold it, the distant
        # origin holds it at once.
        origin.publish(write_checkpoint(root, 2, SIZE, seed=2), 2)
        version, path = node.refresh()
    finally:
        far.close()
        relay_link.close()
    assert version == 2
    assert_same_tree(root / "step_2", path)
    assert node.bytes_by_source.get(far.url, 0) == 0 and node.bytes_by_source[relay_url] > 0, (
        node.bytes_by_source
    )


def _next_version_fetched(root, origin, node, links: list[SlowLink]) -> float:
    """Publish version 2 (a new model: its delta is as big as the file), have `node` fetch it, close `links`;
    the seconds the fetch took, once version 2 is checked to be installed whole."""
    try:
        origin.publish(write_checkpoint(root, 2, SIZE, seed=2), 2)
        started = time.monotonic()
        version, path = node.refresh()
        took = time.monotonic() - started
    finally:
        for link in links:
            link.close()
    assert version == 2
    assert_same_tree(root / "step_2", path)
    return took


def test_a_node_whose_first_round_trips_were_slow_measures_its_sources_again(tmp_path, servers):
    """Samples taken while a node starts (importing, downloading its first policy over a narrow link) can be a
    second long for every source, near or far. Waiting for the next version, the node asks its sources again,
    and its own relay is near again: the distant one is not."""
    root, origin, far, relay_link, relay_url, node = _near_relay_and_far_origin(tmp_path, servers)
    sources = [far.url, relay_url]
    selector = source_policy(sources, ClientConfig())
    selector.observe_round_trip(far.url, 1.2)
    selector.observe_round_trip(relay_url, 1.0)
    assert selector.near(sources) == sources

    async def wait_for_the_next_version():
        async with ShardcastClient(
            sources, TRAINER.node_id, tmp_path / "restarted", ClientConfig(), selector=selector
        ) as client:
            return await client.next_verified(after=1, timeout_s=1.5)

    try:
        assert asyncio.run(wait_for_the_next_version()) is None  # nothing newer than version 1 comes
    finally:
        far.close()
        relay_link.close()
    assert selector.near(sources) == [relay_url]


def test_a_client_stops_waiting_for_a_near_relay_that_makes_no_progress(tmp_path, servers):
    root, origin, far, relay_link, relay_url, node = _near_relay_and_far_origin(tmp_path, servers)
    relay_link.close()  # the relay's upstream is gone: it will not get version 2
    took = _next_version_fetched(root, origin, node, [far])
    assert node.bytes_by_source.get(far.url, 0) > 0
    assert 1.0 <= took < 6.0  # the near wait (1 s), then the distant source


def test_a_client_whose_near_relay_died_fetches_from_the_next_nearest_source(tmp_path, servers):
    """The relay next to the node goes away; the same origin is reachable at an 80 ms and a 300 ms round trip
    (the next region and the far side of the world): every shard of the next version comes the shorter way."""
    root, origin, origin_server, _, relay_server, _ = origin_and_relay(tmp_path, servers)
    near = SlowLink(relay_server.url, 50e6).start()
    nearest_left = SlowLink(origin_server.url, 50e6, delay_s=0.08).start()
    far = SlowLink(origin_server.url, 50e6, delay_s=0.3).start()
    node = Node([near.url, nearest_left.url, far.url], tmp_path / "worker", ClientConfig(near_wait_s=1.0))
    assert node.refresh() is not None  # version 1; every source's round trip is measured on the way
    # Under a loaded suite the relay's first answers can all be slow; a few more asks (each a manifest request,
    # a round trip) give its shortest round trip, as a node running for a while has it.
    for _ in range(10):
        if node.selector.near([near.url, nearest_left.url, far.url]) == [near.url]:
            break
        node.refresh()
    assert node.selector.near([near.url, nearest_left.url, far.url]) == [near.url]
    near.close()
    _next_version_fetched(root, origin, node, [nearest_left, far])
    assert node.bytes_by_source.get(far.url, 0) == 0 and node.bytes_by_source[nearest_left.url] > 0, (
        node.bytes_by_source
    )


@pytest.mark.parametrize("relay_down", [False, True])
def test_a_near_relay_that_is_down_is_not_waited_for(tmp_path, servers, relay_down):
    """A relay out of reach is not one still mirroring: the next version comes from the next source at once,
    not after the near wait (5 s here). Its control: a near relay that is up but never gets the version is
    waited for (it may still get it)."""
    root, origin, origin_server, _, relay_server, relay_upstream = origin_and_relay(tmp_path, servers, 50e6)
    near = SlowLink(relay_server.url, 50e6).start()
    next_region = SlowLink(origin_server.url, 50e6, delay_s=0.08).start()
    node = Node([near.url, next_region.url], tmp_path / "worker", ClientConfig(near_wait_s=5.0))
    assert node.refresh() is not None  # version 1; both round trips measured
    relay_upstream.close()  # the relay will not get version 2
    if relay_down:
        near.close()
    took = _next_version_fetched(root, origin, node, [next_region, near])
    assert node.bytes_by_source[next_region.url] > 0
    assert (took < 5.0) if relay_down else (took >= 5.0), took  # the near wait: not waited, or waited


def test_a_near_relay_that_dies_holding_the_version_is_not_waited_for(tmp_path, servers):
    """WAN run 103: the us relay was killed for 10 s just after it had mirrored a version; a us worker fetching
    from it kept asking it for the shards it had listed and held the version 21 s after its announcement. The
    shards left come from the next region at once."""
    root, origin, origin_server, relay, relay_server, _ = origin_and_relay(tmp_path, servers)
    near = SlowLink(relay_server.url, 200e3).start()  # slow: the fetch is under way when the relay dies
    next_region = SlowLink(origin_server.url, 50e6, delay_s=0.08).start()
    # One request at a time, each held to the slow link (not cut for it), so the fetch is under way at the kill.
    config = ClientConfig(near_wait_s=5.0, concurrency=1, min_throughput_bytes_s=50e3)
    node = Node([near.url, next_region.url], tmp_path / "worker", config)
    assert node.refresh() is not None  # version 1; both round trips measured
    origin.publish(write_checkpoint(root, 2, SIZE, seed=2), 2)
    wait_until(lambda: relay_holds(relay, 2))
    fetched: list = []
    carried = near.carried
    fetch = threading.Thread(target=lambda: fetched.append(node.refresh()), daemon=True)
    fetch.start()
    wait_until(lambda: near.carried >= carried + 150_000, timeout=20)  # version 2's shards under way
    near.close()
    died = time.monotonic()
    fetch.join(timeout=30)
    took = time.monotonic() - died
    next_region.close()
    assert fetched, "the node still waits for its dead relay"
    ((version, path),) = fetched
    assert version == 2
    assert_same_tree(root / "step_2", path)
    assert node.bytes_by_source[near.url] > 0 and node.bytes_by_source[next_region.url] > 0
    assert took < config.near_wait_s, took  # the shards left were not held to the near wait


def test_a_near_relay_back_from_an_outage_serves_at_once_not_after_its_back_off(tmp_path, servers):
    """The node's relay was out of reach long enough for its back-off to reach the cap (10 s), and is back:
    its first answer ends the back-off, so the next version comes from it within seconds."""
    root, origin, origin_server, _, relay_server, _ = origin_and_relay(tmp_path, servers)
    far = SlowLink(origin_server.url, 50e6, delay_s=0.15).start()
    node = Node([relay_server.url, far.url], tmp_path / "worker", ClientConfig(near_wait_s=1.0))
    assert node.refresh() is not None  # version 1; the round trips are measured on the way
    for _ in range(7):  # what a long outage leaves: failed requests, the back-off at its cap
        node.selector.record_failure(relay_server.url, time.monotonic(), unreachable=True)
    assert not node.selector.ready(relay_server.url, time.monotonic() + 9.0)
    took = _next_version_fetched(root, origin, node, [far])
    assert node.bytes_by_source[relay_server.url] > 0 and node.bytes_by_source.get(far.url, 0) == 0
    assert took < 9.0  # not after the 9 s of back-off left


@pytest.mark.parametrize("another_source_may_be_faster", [False, True])
def test_a_shard_only_slow_sources_hold_waits_only_for_a_source_that_may_be_faster(
    tmp_path, servers, another_source_may_be_faster
):
    """Over a narrow link a download's requests share it, so each can measure below the throughput floor while
    the source serves as fast as the link allows (WAN runs 109-111: the asia relay, whose one upstream is the
    origin, waited a second before fetching a version, every few versions). A shard only slow sources hold
    waits (`hedge_after_s`, 4 s here) for a better one only when another source may yet offer it faster: here
    a relay not measured yet that does not hold the version (its upstream is gone). Every measured source is
    below this floor; no request is cut for it (the grace outlasts the test)."""
    root, origin, origin_server, _, relay_server, relay_upstream = origin_and_relay(tmp_path, servers, 50e6)
    config = ClientConfig(min_throughput_bytes_s=1e12, throughput_grace_s=60.0, hedge_after_s=4.0)
    sources = [origin_server.url, relay_server.url] if another_source_may_be_faster else [origin_server.url]
    node = Node(sources, tmp_path / "worker", config)
    assert node.refresh() is not None  # version 1
    relay_upstream.close()  # the relay will not get version 2
    if another_source_may_be_faster:
        node.selector.stats[relay_server.url].throughput = None  # not measured yet: it may be fast
    took = _next_version_fetched(root, origin, node, [])
    assert node.bytes_by_source[origin_server.url] > 0
    assert (took >= 4.0) if another_source_may_be_faster else (took < 4.0), (
        took
    )  # the hedge delay: waited or not


def test_the_next_version_reuses_the_shard_connections_of_the_last(tmp_path, servers, monkeypatch):
    root = tmp_path / "ckpt"
    origin, origin_server = start_origin(root, delta=True)
    servers.append(origin_server)
    origin.publish(write_checkpoint(root, 1, SIZE, seed=1), 1)
    opened: list[int] = []  # the fetch thread of each connection opened
    taken: list[bool] = []  # per shard request: did it go out on a kept connection
    connect, send = urllib3.connection.HTTPConnection.connect, RangePool.open

    def counted(self):
        opened.append(threading.get_ident())
        return connect(self)

    def watched(self, *args):
        before = opened.count(threading.get_ident())
        response = send(self, *args)
        taken.append(opened.count(threading.get_ident()) == before)
        return response

    monkeypatch.setattr(urllib3.connection.HTTPConnection, "connect", counted)
    monkeypatch.setattr(RangePool, "open", watched)
    node = Node([origin_server.url], tmp_path / "worker", ClientConfig(concurrency=4))
    try:
        assert node.refresh()[0] == 1
        first, taken_first = len(opened), len(taken)
        origin.publish(write_checkpoint(root, 2, SIZE, seed=2), 2)  # ten shards of delta
        assert node.refresh()[0] == 2
    finally:
        node.close()
    # Version 2's first requests go out on the connections version 1 opened; it opens new ones only to top them
    # up to the concurrency (under load version 1 may have needed fewer at once), never four more.
    assert 1 <= first <= 4 and len(opened) <= 4, opened
    assert taken[taken_first], taken


def test_after_a_pause_past_the_servers_keep_alive_no_request_fails_on_a_dead_connection(tmp_path, servers):
    """Training steps take longer than a server keeps an idle connection open, so by the next version every
    connection the last one kept is closed. Reusing one failed the request, marked the source out of reach,
    and a node then fetched from across the world instead of waiting for its own region's relay."""
    root = tmp_path / "ckpt"
    origin, origin_server = start_origin(root, delta=True, header_timeout_s=0.3)
    servers.append(origin_server)
    origin.publish(write_checkpoint(root, 1, SIZE, seed=1), 1)
    node = Node([origin_server.url], tmp_path / "worker", ClientConfig(concurrency=4))
    try:
        assert node.refresh()[0] == 1
        # Past the origin's keep-alive: it closes the connections the node keeps.
        wait_until(lambda: origin.metrics.connections.open_connections == 0, timeout=10)
        origin.publish(write_checkpoint(root, 2, SIZE, seed=2), 2)
        assert node.refresh()[0] == 2
    finally:
        node.close()
    stats = node.selector.stats[origin_server.url]
    assert (stats.failures, stats.unreachable) == (0, False)


@pytest.mark.parametrize("cut_through", [True, False])
def test_a_cut_through_relay_passes_a_shard_on_while_it_arrives(tmp_path, servers, cut_through):
    """Mirroring over a slow link, a cut-through relay sends a shard's first bytes before it verified the shard
    (and the whole shard once it has); a store-and-forward relay answers 503 until then."""
    root = tmp_path / "ckpt"
    origin, origin_server = start_origin(root, shard_size=512 * 1024)
    servers.append(origin_server)
    link = SlowLink(origin_server.url, 400_000).start()  # a 512 KiB shard takes 1.3 s
    config = RelayConfig(
        upstreams=[link.url],
        data_dir=tmp_path / "relay",
        long_poll_s=5,
        concurrency=1,
        cut_through=cut_through,
    )
    relay = Relay(config, TRAINER.node_id)
    relay_server = relay.serve_in_thread()
    servers.append(relay_server)
    origin.publish(write_checkpoint(root, 1, 2 * 512 * 1024, seed=1), 1)
    wait_until(lambda: relay.store.get(1) is not None)
    entry = relay.store.get(1)
    shard = max((s for s in entry.manifest.shards if s.path == "model.safetensors"), key=lambda s: s.offset)
    request = urllib.request.Request(
        f"{relay_server.url}/v/1/data/model.safetensors",
        headers={"Range": f"bytes={shard.offset}-{shard.offset + shard.length - 1}"},
    )
    expected = (root / "step_1" / "model.safetensors").read_bytes()[
        shard.offset : shard.offset + shard.length
    ]
    if cut_through:
        wait_until(lambda: shard.index in relay.store.in_flight.indices(1))
        with urllib.request.urlopen(request, timeout=20) as response:
            first = response.read(1)
            verified_then = shard.index in entry.verified
            rest = response.read()
        assert first and not verified_then
        assert first + rest == expected
    else:
        wait_until(lambda: relay.stats.get(1) is not None and relay.stats[1].bytes_downloaded > 0)
        assert shard.index not in entry.verified  # its 1.3 s have not passed: the relay still mirrors it
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=20)
        assert refused.value.code == 503
    wait_until(lambda: relay_holds(relay, 1))
    link.close()
