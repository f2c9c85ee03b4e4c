"""The user-space half of an emulated path: one-way delay with jitter, and loss as a retransmission stall.

This kernel has no `netem`, so a link proxy stands on every path between regions (and inside each region):
a client's connection to a service's virtual address is redirected (nftables DNAT) to the proxy of its
region for that service, which opens the upstream connection and carries both directions through a
`DelayLine`. Any other connection from one region to a machine of another (a torchft quorum, a gloo
collective between trainer islands) is redirected in the region's router to its transparent listener for that
region (nftables REDIRECT), which reads where the connection was going (SO_ORIGINAL_DST) and carries it over
the path the same way. Each chunk read is held for the path's one-way delay plus a jitter draw; order is kept (a chunk
is never delivered before the one before it). A loss is drawn per packet (`mss` bytes); a chunk holding a
lost packet is delivered one retransmission timeout later, and so is everything behind it that would have
arrived earlier — the head-of-line stall a TCP receiver sees while a SACK sender retransmits, with the rest of
the window still flowing. A new connection's first bytes wait one round trip more (the handshake).

Rates are not the proxy's job: the kernel enforces them (HTB on the veth ends, `swarmrl_lab.wan.netns`).

    python -m swarmrl_lab.wan.link PLAN.json       # serve every listener of the plan until SIGTERM
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import math
import random
import signal
import socket
import struct
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

log = logging.getLogger(__name__)

READ_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 10.0
SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h: where a redirected connection was addressed


class Shape(BaseModel):
    """How one path treats the bytes of a stream (both directions alike)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    one_way_s: float = Field(ge=0, description="mean one-way delay")
    jitter_s: float = Field(0.0, ge=0, description="standard deviation of the one-way delay")
    loss: float = Field(0.0, ge=0, lt=0.5, description="probability that one packet of mss bytes is lost")
    mss: int = Field(1448, ge=64, description="packet payload the loss probability applies to")
    stall_s: float = Field(0.0, ge=0, description="delivery delay a lost packet adds (retransmission)")

    @property
    def rtt_s(self) -> float:
        return 2 * self.one_way_s


class Listener(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        description="what this listener stands for, in logs (client region → service or region)"
    )
    listen_host: str
    listen_port: int = Field(ge=1, le=65535)
    upstream_host: str | None = Field(
        None,
        description="None: transparent, each connection goes on to where it was addressed (SO_ORIGINAL_DST)",
    )
    upstream_port: int | None = Field(None, ge=1, le=65535)
    shape: Shape

    @model_validator(mode="after")
    def _upstream_whole(self) -> Listener:
        if (self.upstream_host is None) != (self.upstream_port is None):
            raise ValueError(f"listener {self.name}: upstream_host and upstream_port go together")
        return self


class LinkPlan(BaseModel):
    """What one link proxy process serves: written by the emulator, read by `python -m swarmrl_lab.wan.link`."""

    model_config = ConfigDict(extra="forbid")

    listeners: list[Listener]
    window_bytes: int = Field(4 * 1024 * 1024, ge=65536, description="bytes in flight per direction")
    seed: int = 0
    ready_file: Path = Field(description="written once every listener is bound")


def original_destination(sock: socket.socket) -> tuple[str, int]:
    """Where a connection redirected to this machine by nftables was addressed (IPv4 sockaddr_in)."""
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, address = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(address), port


@dataclass
class DelayLine:
    """When each chunk of one direction of a stream is delivered. Pure: the clock is passed in."""

    shape: Shape
    rng: random.Random
    ready_at: float = 0.0  # nothing is delivered as if sent before this (a new connection's handshake)
    last_delivery: float = field(default=-math.inf)
    stalls: int = 0

    def lost(self, nbytes: int) -> bool:
        """Whether any of the chunk's packets is lost (each independently with probability `loss`)."""
        if self.shape.loss <= 0 or nbytes <= 0:
            return False
        packets = -(-nbytes // self.shape.mss)
        return self.rng.random() < 1.0 - (1.0 - self.shape.loss) ** packets

    def schedule(self, now: float, nbytes: int) -> float:
        """The delivery time of `nbytes` read at `now`: delay, jitter and a stall if a packet is lost; never
        before the chunk before it."""
        delay = self.shape.one_way_s
        if self.shape.jitter_s > 0:
            delay = max(0.0, delay + self.rng.gauss(0.0, self.shape.jitter_s))
        if self.lost(nbytes):
            self.stalls += 1
            delay += self.shape.stall_s
        self.last_delivery = max(self.last_delivery, max(now, self.ready_at) + delay)
        return self.last_delivery


async def carry(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: DelayLine, window: int
) -> None:
    """Copy one direction through `line` until EOF, holding at most `window` bytes (backpressure beyond)."""
    loop = asyncio.get_running_loop()
    pending: deque[tuple[float, bytes]] = deque()  # (due, bytes), due never decreasing; b"" is the EOF
    arrived, room = asyncio.Event(), asyncio.Event()
    room.set()
    held = 0

    async def receive() -> None:
        nonlocal held
        while True:
            await room.wait()
            data = await reader.read(READ_BYTES)
            pending.append((line.schedule(loop.time(), len(data)), data))
            arrived.set()
            if not data:
                return
            held += len(data)
            if held >= window:
                room.clear()

    async def send() -> None:
        nonlocal held
        while True:
            if not pending:
                arrived.clear()
                await arrived.wait()
                continue
            wait = pending[0][0] - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            now, batch = loop.time(), bytearray()
            while pending and pending[0][0] <= now and pending[0][1]:
                batch += pending.popleft()[1]
            if batch:
                writer.write(batch)
                await writer.drain()
                held -= len(batch)
                if held < window:
                    room.set()
                continue
            pending.popleft()  # the EOF is due: pass the half-close on
            if writer.can_write_eof():
                writer.write_eof()
            return

    async with asyncio.TaskGroup() as group:
        group.create_task(receive())
        group.create_task(send())


class LinkProxy:
    """Serves the listeners of a plan; `await proxy.start()`, later `await proxy.close()`."""

    def __init__(self, plan: LinkPlan) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.servers: list[asyncio.Server] = []
        self.connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        for listener in self.plan.listeners:
            server = await asyncio.start_server(
                functools.partial(self._accept, listener),
                listener.listen_host,
                listener.listen_port,
                reuse_address=True,
            )
            self.servers.append(server)
        self.plan.ready_file.write_text("ready\n")

    def _accept(self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._connection(listener, reader, writer))
        self.connections.add(task)
        task.add_done_callback(self.connections.discard)

    async def _connection(
        self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        accepted = asyncio.get_running_loop().time()
        try:
            if listener.upstream_host is None:
                sock = writer.get_extra_info("socket")
                host, port = original_destination(sock)
                if (host, port) == sock.getsockname()[:2]:
                    raise OSError("addressed to the proxy itself, not redirected to it")
            else:
                assert listener.upstream_port is not None  # given with upstream_host
                host, port = listener.upstream_host, listener.upstream_port
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            log.debug("%s: upstream unreachable (%s)", listener.name, exc)
            writer.transport.abort()
            return
        shape = listener.shape
        # The client's first bytes leave after its handshake's round trip; the answers need none.
        outbound = DelayLine(shape, random.Random(self.rng.random()), ready_at=accepted + shape.rtt_s)
        inbound = DelayLine(shape, random.Random(self.rng.random()))
        broken = False
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(carry(reader, up_writer, outbound, self.plan.window_bytes))
                group.create_task(carry(up_reader, writer, inbound, self.plan.window_bytes))
        except* (OSError, RuntimeError) as failed:
            log.debug("%s: connection reset (%s)", listener.name, failed.exceptions[0])
            broken = True
        for side in (writer, up_writer):
            if broken:
                side.transport.abort()  # a reset on one side resets the other, as end to end
            else:
                side.close()

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for task in list(self.connections):
            task.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)


async def serve(plan: LinkPlan) -> None:
    proxy = LinkProxy(plan)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await proxy.start()
    log.info("link proxy serving %d listeners", len(plan.listeners))
    await stop.wait()
    await proxy.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m swarmrl_lab.wan.link", description=__doc__.splitlines()[0]
    )
    parser.add_argument("plan", type=Path, help="the LinkPlan JSON file the emulator wrote")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        plan = LinkPlan.model_validate_json(args.plan.read_text())
    except (OSError, ValidationError) as exc:
        print(f"link plan {args.plan}: {exc}", file=sys.stderr)
        return 2
    asyncio.run(serve(plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
