"""Cut-through at a relay: a shard's bytes are passed on as its request upstream writes them, its last byte only
once that request verified, and the response is cut short when the request fails. A real relay store and HTTP
server; the upstream request is played by hand (bytes written into the mirror, `written` advanced)."""

from __future__ import annotations

import http.client
import json
import logging
import os
import random
import socket
import struct
import threading
import time
import urllib.request
from urllib.parse import urlsplit

import pytest

from swarmrl.httpserve import Notifier
from swarmrl.identity import Identity
from swarmrl.shardcast.hashing import new_hasher
from swarmrl.shardcast.manifest import parse_signed_manifest
from swarmrl.shardcast.publish import publish_checkpoint
from swarmrl.shardcast.range_get import RangeSink
from swarmrl.shardcast.relay import Relay, RelayStore
from swarmrl.shardcast.server import ServerMetrics, ServerThread, build_app

TRAINER = Identity.from_seed(b"c" * 32)
SHARD = 64 * 1024
QUIET_S = 0.3  # long enough for bytes the server should not send to have arrived


@pytest.fixture
def mirror(tmp_path):
    """A relay store holding version 1 with nothing verified, served over HTTP; the model's second shard."""
    source = tmp_path / "origin" / "step_1"
    source.mkdir(parents=True)
    model = random.Random(1).randbytes(3 * SHARD)
    (source / "model.safetensors").write_bytes(model)
    raw = publish_checkpoint(source, 1, TRAINER, "run", SHARD).to_bytes()
    manifest = parse_signed_manifest(raw, TRAINER.node_id, expected_version=1)
    notifier = Notifier()
    store = RelayStore(tmp_path / "relay", notifier.notify)
    directory = store.data_dir / "step_1"
    Relay._prepare_directory(directory, manifest, raw)
    store.add(manifest, raw, set())
    shard = next(s for s in manifest.shards if s.path == "model.safetensors" and s.offset == SHARD)
    server = ServerThread(lambda: build_app(store, notifier, ServerMetrics("relay"))).start()
    fd = os.open(directory / "model.safetensors", os.O_WRONLY)
    sink = RangeSink(
        fd,
        shard.offset,
        shard.length,
        new_hasher("blake3"),
        time.monotonic() + 60,
        threading.Event(),
        lambda n: None,
    )
    yield {"store": store, "shard": shard, "sink": sink, "fd": fd, "bytes": model, "url": server.url}
    os.close(fd)
    server.stop()


def land(mirror, upto: int) -> None:
    """The upstream request writes the shard's bytes up to `upto` (from the shard's start)."""
    shard, sink = mirror["shard"], mirror["sink"]
    os.pwrite(
        mirror["fd"],
        mirror["bytes"][shard.offset + sink.written : shard.offset + upto],
        shard.offset + sink.written,
    )
    landed, sink.written = upto - sink.written, upto
    sink.on_bytes(landed)  # as the fetch thread does after each write: wakes the readers


class Reader(threading.Thread):
    """GETs the shard's range and collects what arrives, as it arrives."""

    def __init__(self, url: str, start: int, length: int) -> None:
        super().__init__(daemon=True)
        self.url, self.start_at, self.length = url, start, length
        self.received = bytearray()
        self.error: Exception | None = None
        self.status: int | None = None

    def run(self) -> None:
        parts = urlsplit(self.url)
        connection = http.client.HTTPConnection(parts.netloc, timeout=20)
        try:
            connection.request(
                "GET",
                "/v/1/data/model.safetensors",
                headers={"Range": f"bytes={self.start_at}-{self.start_at + self.length - 1}"},
            )
            response = connection.getresponse()
            self.status = response.status
            while chunk := response.read1(65536):
                self.received += chunk
            if len(self.received) < self.length:
                raise http.client.IncompleteRead(bytes(self.received), self.length - len(self.received))
        except Exception as exc:  # the failure is what some tests look for
            self.error = exc
        finally:
            connection.close()


def settle(reader: Reader, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(reader.received) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(QUIET_S)
    assert len(reader.received) == count


def availability(url: str) -> list[int]:
    with urllib.request.urlopen(f"{url}/v/1/availability", timeout=10) as resp:
        return json.load(resp)["shards"]


def test_a_shard_is_passed_on_as_it_lands_and_its_last_byte_once_it_verified(mirror):
    store, shard = mirror["store"], mirror["shard"]
    assert shard.index not in availability(mirror["url"])
    flight = store.in_flight.started(1, shard, mirror["sink"])
    assert shard.index in availability(mirror["url"])  # advertised while it arrives

    reader = Reader(mirror["url"], shard.offset, shard.length)
    reader.start()
    land(mirror, 40_000)
    settle(reader, 40_000)  # what landed, and nothing more
    land(mirror, shard.length)
    settle(reader, shard.length - 1)  # all but the last byte: the request has not verified yet
    store.in_flight.ended(flight, verified=True)
    reader.join(10)
    assert reader.error is None and reader.status == 206
    assert bytes(reader.received) == mirror["bytes"][shard.offset : shard.offset + shard.length]
    # Recorded as verified by the relay: served from the file from now on, and still advertised.
    store.get(1).verified.add(shard.index)
    store.in_flight.recorded(1, shard.index)
    assert shard.index in availability(mirror["url"])


def test_a_failed_upstream_request_cuts_the_response_short(mirror):
    store, shard = mirror["store"], mirror["shard"]
    flight = store.in_flight.started(1, shard, mirror["sink"])
    reader = Reader(mirror["url"], shard.offset, shard.length)
    reader.start()
    land(mirror, shard.length)  # every byte landed, but they may be a liar's: they failed their hash
    settle(reader, shard.length - 1)
    store.in_flight.ended(flight, verified=False)
    reader.join(10)
    assert isinstance(reader.error, http.client.IncompleteRead), reader.error
    assert len(reader.received) == shard.length - 1  # the client never holds the whole (wrong) shard
    assert shard.index not in availability(mirror["url"])  # nor is it advertised any longer
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(
            urllib.request.Request(
                f"{mirror['url']}/v/1/data/model.safetensors",
                headers={"Range": f"bytes={shard.offset}-{shard.offset + shard.length - 1}"},
            ),
            timeout=10,
        )
    assert refused.value.code == 503


def test_a_range_beyond_the_shard_in_flight_is_not_passed_on(mirror):
    store, shard = mirror["store"], mirror["shard"]
    store.in_flight.started(1, shard, mirror["sink"])
    land(mirror, shard.length)
    request = urllib.request.Request(
        f"{mirror['url']}/v/1/data/model.safetensors",
        headers={"Range": f"bytes={shard.offset}-{shard.offset + shard.length}"},  # one byte into the next
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 503


def test_a_sub_range_of_the_shard_holds_back_its_own_last_byte(mirror):
    store, shard = mirror["store"], mirror["shard"]
    flight = store.in_flight.started(1, shard, mirror["sink"])
    reader = Reader(mirror["url"], shard.offset + 100, 1000)
    reader.start()
    land(mirror, 5000)
    settle(reader, 999)
    store.in_flight.ended(flight, verified=True)
    reader.join(10)
    assert reader.error is None
    assert bytes(reader.received) == mirror["bytes"][shard.offset + 100 : shard.offset + 1100]


def test_in_flight_listing_is_per_version_and_forgotten_with_it(mirror):
    store, shard = mirror["store"], mirror["shard"]
    store.in_flight.started(1, shard, mirror["sink"])
    store.in_flight.started(2, shard, mirror["sink"])
    assert store.in_flight.indices(1) == {shard.index} == store.in_flight.indices(2)
    store.remove(1)
    assert store.in_flight.indices(1) == set() and store.in_flight.indices(2) == {shard.index}
    assert store.streamable(1, "model.safetensors", shard.offset, shard.offset + 10) is None


def test_the_end_of_a_replaced_request_leaves_the_newer_one_listed(mirror):
    store, shard = mirror["store"], mirror["shard"]
    old = store.in_flight.started(1, shard, mirror["sink"])
    new = store.in_flight.started(1, shard, mirror["sink"])
    store.in_flight.ended(old, verified=False)
    assert store.in_flight.indices(1) == {shard.index}
    assert store.streamable(1, "model.safetensors", shard.offset, shard.offset + 10)[1] is new
    assert new.verified is None and old.verified is False


def test_a_client_hanging_up_mid_shard_is_not_an_error(mirror, caplog):
    """A client cuts a shard passed on to it (a hedge it lost, a source below its floor): the relay stops
    sending quietly, logs no error, and serves the next client."""
    store, shard = mirror["store"], mirror["shard"]
    flight = store.in_flight.started(1, shard, mirror["sink"])
    parts = urlsplit(mirror["url"])
    client = socket.create_connection((parts.hostname, parts.port), timeout=10)
    client.sendall(
        f"GET /v/1/data/model.safetensors HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Range: bytes={shard.offset}-{shard.offset + shard.length - 1}\r\n\r\n".encode()
    )
    land(mirror, 8_000)
    assert client.recv(4096)  # the head, maybe some bytes: the response is under way
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()  # a reset, as a cut connection sends
    with caplog.at_level(logging.DEBUG):
        for upto in range(16_000, shard.length, 8_000):
            land(mirror, upto)
            time.sleep(0.02)
        land(mirror, shard.length)
        store.in_flight.ended(flight, verified=True)
        time.sleep(QUIET_S)

    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    store.get(1).verified.add(shard.index)
    store.in_flight.recorded(1, shard.index)
    reader = Reader(mirror["url"], shard.offset, shard.length)
    reader.start()
    reader.join(10)
    assert bytes(reader.received) == mirror["bytes"][shard.offset : shard.offset + shard.length]
