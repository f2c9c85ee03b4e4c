"""The link proxy's delay line (pure) and the proxy itself on 127.0.0.1."""

from __future__ import annotations

import asyncio
import random
import statistics
import time

import pytest

from swarmrl_lab.wan.link import DelayLine, LinkPlan, LinkProxy, Listener, Shape


def test_delay_without_jitter_or_loss_is_the_one_way_delay():
    line = DelayLine(Shape(one_way_s=0.05), random.Random(0))
    assert line.schedule(10.0, 1000) == pytest.approx(10.05)
    assert line.schedule(10.5, 1000) == pytest.approx(10.55)


def test_handshake_holds_the_first_bytes_one_round_trip():
    line = DelayLine(Shape(one_way_s=0.05), random.Random(0), ready_at=10.1)
    assert line.schedule(10.0, 10) == pytest.approx(10.15)


def test_jitter_never_reorders():
    line = DelayLine(Shape(one_way_s=0.05, jitter_s=0.02), random.Random(1))
    due = [line.schedule(i * 0.001, 100) for i in range(5000)]
    assert due == sorted(due)
    spread = [line.schedule(i * 1.0 + 10, 100) - (i * 1.0 + 10) for i in range(2000)]
    assert statistics.fmean(spread) == pytest.approx(0.05, rel=0.05)
    assert statistics.stdev(spread) == pytest.approx(0.02, rel=0.1)


@pytest.mark.parametrize("nbytes", [1448, 8 * 1448, 64 * 1024])
def test_a_chunk_stalls_when_any_of_its_packets_is_lost(nbytes):
    shape = Shape(one_way_s=0.05, loss=0.01, mss=1448, stall_s=0.3)
    line = DelayLine(shape, random.Random(2))
    chunks = 20000
    delays = [line.schedule(i * 10.0, nbytes) - i * 10.0 for i in range(chunks)]  # far apart: no overlap
    packets = -(-nbytes // 1448)
    expected = 1 - (1 - 0.01) ** packets
    assert line.stalls / chunks == pytest.approx(expected, rel=0.1)
    assert sorted(set(round(d, 6) for d in delays)) == [0.05, 0.35]


def test_a_stall_holds_what_follows_but_does_not_add_up():
    """Chunks behind a stalled one are released with it, not each a stall later (SACK keeps the window)."""
    line = DelayLine(Shape(one_way_s=0.05, loss=0.49, stall_s=0.3), random.Random(0))
    due = [line.schedule(i * 0.01, 1448) for i in range(200)]
    assert line.stalls > 50
    assert due[-1] <= 1.99 + 0.05 + 0.3 + 1e-9


async def _echo(reader, writer):
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def _through_proxy(port: int, one_way_s: float, client, upstream_port: int | None = None):
    """Run `client(reader, writer)` against an echo server behind a link proxy listening on `port`."""
    echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
    plan = LinkPlan(
        listeners=[
            Listener(
                name="t", listen_host="127.0.0.1", listen_port=port, upstream_host="127.0.0.1",
                upstream_port=upstream_port or echo.sockets[0].getsockname()[1], shape=Shape(one_way_s=one_way_s),
            )
        ],
        ready_file="/dev/null",
    )  # fmt: skip
    proxy = LinkProxy(plan)
    await proxy.start()
    try:
        return await client(*await asyncio.open_connection("127.0.0.1", port))
    finally:
        await proxy.close()
        echo.close()


@pytest.mark.timing
def test_proxy_delays_both_ways_and_passes_the_half_close(unused_tcp_port):
    async def client(reader, writer):
        writer.write(b"a")
        await reader.readexactly(1)  # handshake round trip + one round trip
        rtts = []
        for _ in range(5):
            sent = time.monotonic()
            writer.write(b"b" * 10000)
            await reader.readexactly(10000)
            rtts.append(time.monotonic() - sent)
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # the echo server saw EOF and closed
        writer.close()
        return rtts

    rtts = asyncio.run(_through_proxy(unused_tcp_port, 0.04, client))
    assert statistics.fmean(rtts) == pytest.approx(0.08, rel=0.25)


def test_proxy_closes_the_client_when_the_upstream_is_down(unused_tcp_port):
    async def client(reader, writer):
        writer.write(b"hello")
        try:
            return await asyncio.wait_for(reader.read(), 5)
        except ConnectionResetError:
            return b""

    # Nothing listens on port 1.
    assert asyncio.run(_through_proxy(unused_tcp_port, 0.0, client, upstream_port=1)) == b""


@pytest.fixture
def unused_tcp_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
