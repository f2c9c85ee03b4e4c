"""Range requests parked upstream for the next version (`?wait=`): the origin answers them the moment that version
is published, a relay takes the answers over for the shards its signed manifest names, and a forged answer is
caught by its digest like any other shard's."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request

import aiohttp
import pytest
from aiohttp import web
from shardcast_testkit import (
    TRAINER,
    assert_same_tree,
    origin_and_relay_holding_v1,
    relay_holds,
    start_origin,
    wait_until,
    write_checkpoint,
)

from swarmrl.configs.shardcast import ClientConfig, RelayConfig
from swarmrl.shardcast import Relay, ServerThread
from swarmrl.shardcast.layout import delta_payload_path
from swarmrl.shardcast.parking import ParkedRanges
from swarmrl.shardcast.server import MAX_LONG_POLL_S


def get(url: str, headers: dict | None = None, timeout: float = 10) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_a_parked_range_request_is_answered_when_its_version_is_published(tmp_path, servers):
    root = tmp_path / "ckpt"
    origin, server = start_origin(root, delta=True)
    servers.append(server)
    origin.publish(write_checkpoint(root, 1, 200_000), 1)
    payload = delta_payload_path(1, "model.safetensors")
    timer = threading.Timer(0.5, lambda: origin.publish(write_checkpoint(root, 2, 200_000, seed=3), 2))
    timer.start()

    asked = time.monotonic()
    status, body = get(f"{server.url}/v/2/data/{payload}?wait=10", {"Range": "bytes=0-999"})
    timer.join()

    assert status == 206
    assert body == (root / "step_2" / payload).read_bytes()[:1000]
    assert 0.4 < time.monotonic() - asked < 10 / 2  # answered by the publication, not at the 10 s wait's end


@pytest.mark.parametrize(("wait", "status"), [("0.3", 404), ("nan", 400), ("soon", 400)])
def test_a_parked_request_for_a_version_never_published_ends(tmp_path, servers, wait, status):
    root = tmp_path / "ckpt"
    origin, server = start_origin(root, delta=True)
    servers.append(server)
    origin.publish(write_checkpoint(root, 1, 10_000), 1)

    asked = time.monotonic()
    answered, _ = get(f"{server.url}/v/2/data/model.safetensors?wait={wait}", {"Range": "bytes=0-9"})

    assert answered == status
    assert time.monotonic() - asked < MAX_LONG_POLL_S / 4  # its own wait, not the longest a poll may hold


def test_a_relay_takes_over_the_requests_it_parked_for_the_next_delta(tmp_path, servers):
    root = tmp_path / "ckpt"
    origin, relay = origin_and_relay_holding_v1(tmp_path, servers, 600_000)
    origin.publish(write_checkpoint(root, 2, 600_000, seed=4), 2)  # the delta 2 ← 1 is parked for 3 ← 2
    wait_until(lambda: relay_holds(relay, 2), timeout=10)
    taken = relay.parked.taken

    origin.publish(write_checkpoint(root, 3, 600_000, seed=5), 3)
    wait_until(lambda: relay_holds(relay, 3), timeout=10)

    assert relay.parked.taken > taken
    assert_same_tree(root / "step_3", tmp_path / "relay" / "step_3")


def forging_upstream(origin_url: str, forged: list[str]) -> web.Application:
    """Passes every request on to the origin, but flips a byte of each answer to a parked request."""

    async def forward(request: web.Request) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k in ("Range",)}
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            async with session.get(f"{origin_url}{request.path_qs}", headers=headers) as upstream:
                body = bytearray(await upstream.read())
                status, answer_headers = (
                    upstream.status,
                    {k: v for k, v in upstream.headers.items() if k in ("Content-Range", "Content-Type")},
                )
        if "wait" in request.query and "/data/" in request.path and status == 206 and body:
            body[len(body) // 2] ^= 0xFF
            forged.append(request.path_qs)
        return web.Response(body=bytes(body), status=status, headers=answer_headers)

    app = web.Application()
    app.add_routes([web.get("/{tail:.*}", forward)])
    return app


def test_forged_bytes_on_a_parked_request_are_refused_and_fetched_again(tmp_path, servers):
    root = tmp_path / "ckpt"
    origin, origin_server = start_origin(root, delta=True)
    servers.append(origin_server)
    origin.publish(write_checkpoint(root, 1, 600_000), 1)
    forged: list[str] = []
    forger = ServerThread(lambda: forging_upstream(origin_server.url, forged)).start()
    servers.append(forger)
    config = RelayConfig(upstreams=[forger.url], data_dir=tmp_path / "relay", long_poll_s=5)
    relay = Relay(config, TRAINER.node_id)
    servers.append(relay.serve_in_thread())
    wait_until(lambda: relay_holds(relay, 1))

    for version in (2, 3):
        origin.publish(write_checkpoint(root, version, 600_000, seed=version), version)
        wait_until(lambda version=version: relay_holds(relay, version), timeout=20)

    assert forged, "no parked request was answered"
    assert relay.metrics.registry.get_sample_value("shardcast_shards_rejected_total", {"role": "relay"}) >= 1
    assert_same_tree(root / "step_3", tmp_path / "relay" / "step_3")


def test_parked_requests_wait_for_their_version_and_those_refused_leave_room(tmp_path, servers):
    """The next version's delta requests, predicted from this version's, wait at the origin until dropped;
    requests refused at once (nothing listens there) leave the table as they fail, without blocking the caller,
    so the next ones can be parked."""
    root = tmp_path / "ckpt"
    origin, server = start_origin(root, delta=True)
    servers.append(server)
    for version in (1, 2):
        origin.publish(write_checkpoint(root, version, 600_000, seed=version), version)
    manifest = origin.store.get(2).manifest
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{probe.getsockname()[1]}"  # closed again before anyone connects
    files = {entry.payload_path: entry.path for entry in manifest.delta.entries}
    predicted = [  # version 3's delta shards as predicted from version 2's
        s.model_copy(update={"path": delta_payload_path(2, files[s.path])})
        for s in manifest.delta.shards
        if s.length == manifest.shard_size
    ]
    parked = ParkedRanges(ClientConfig(connect_timeout_s=1), wait_s=5, limit=16)
    try:
        assert parked.park_next(server.url, manifest) == len(predicted) > 0
        wait_until(lambda: origin.notifier.waiting == len(predicted), timeout=10)  # each asked, none answered
        assert all(parked.has(server.url, 3, s) for s in predicted)  # held by the origin: no version 3 yet
        parked.drop(3)
        assert not any(parked.has(server.url, 3, s) for s in predicted)

        assert parked.park_next(nobody, manifest) == len(predicted)
        wait_until(lambda: not any(parked.has(nobody, 3, s) for s in predicted), timeout=5)
        assert parked.park_next(nobody, manifest) == len(predicted)
    finally:
        parked.close()
