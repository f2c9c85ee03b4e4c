"""Hostile requests to an origin: bad versions, ranges, paths and long-poll arguments get 4xx, never bytes."""

from __future__ import annotations

import random
import urllib.error
import urllib.request

import pytest

from swarmrl.configs.shardcast import OriginConfig
from swarmrl.identity import Identity
from swarmrl.shardcast import Origin

TRAINER = Identity.from_seed(b"s" * 32)


@pytest.fixture(scope="module")
def origin_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    (root / "step_1").mkdir()
    (root / "step_1" / "model.safetensors").write_bytes(random.Random(0).randbytes(100_000))
    (root / "secret.txt").write_text("not part of any checkpoint")
    origin = Origin(root, TRAINER, "x", OriginConfig(shard_size=32_768))
    origin.publish(root / "step_1", 1)
    server = origin.serve_in_thread()
    yield server.url
    server.stop()


def status(url: str, headers: dict | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v/abc/manifest", 400),
        ("/v/99/manifest", 404),
        ("/v/1/availability?known=x", 400),
        ("/latest?after=x", 400),
        ("/v/1/data/nope.bin", 404),
        ("/v/1/data/..%2Fsecret.txt", 404),
        ("/v/1/data/%2E%2E/%2E%2E/secret.txt", 404),
        ("/v/1/data/.shardcast/manifest.json", 404),
    ],
)
def test_bad_requests_are_refused(origin_url, path, expected):
    assert status(origin_url + path) == expected


@pytest.mark.parametrize(
    "byte_range", ["bytes=200000-", "bytes=5-2", "bytes=abc", "items=0-5", "bytes=-0", "bytes=-000"]
)
def test_unsatisfiable_or_malformed_ranges_get_416(origin_url, byte_range):
    assert status(origin_url + "/v/1/data/model.safetensors", {"Range": byte_range}) == 416


def test_valid_range_returns_exactly_those_bytes(origin_url):
    request = urllib.request.Request(
        origin_url + "/v/1/data/model.safetensors", headers={"Range": "bytes=10-19"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 206
        assert resp.read() == random.Random(0).randbytes(100_000)[10:20]


def test_long_poll_wait_is_capped_and_returns_current(origin_url):
    with urllib.request.urlopen(origin_url + "/latest?after=5&wait=0.2", timeout=10) as resp:
        assert resp.read() == b'{"latest": 1}'
