"""Measuring an emulated path from inside its namespaces: `python wan_probe.py serve PORT` on one machine,
`python wan_probe.py rtt|download|upload|stall HOST PORT ...` on another; the clients print one JSON object.

One connection, one mode (its first byte): e = echo, d = send N bytes, u = receive N bytes and answer the
seconds from first to last byte, s = receive messages of a fixed size, each starting with its send time
(CLOCK_MONOTONIC is one clock for every process of the machine), and answer their one-way latencies.
"""

from __future__ import annotations

import asyncio
import json
import struct
import sys
import time

CHUNK = 64 * 1024


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    mode = await reader.readexactly(1)
    if mode == b"e":
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    elif mode == b"d":
        (count,) = struct.unpack("!Q", await reader.readexactly(8))
        block = b"\0" * CHUNK
        for start in range(0, count, CHUNK):
            writer.write(block[: min(CHUNK, count - start)])
            await writer.drain()
    elif mode == b"u":
        (count,) = struct.unpack("!Q", await reader.readexactly(8))
        _, seconds = await _receive(reader, count)
        writer.write(struct.pack("!d", seconds))
        await writer.drain()
    elif mode == b"s":
        (size,) = struct.unpack("!I", await reader.readexactly(4))
        latencies = []
        while True:
            try:
                message = await reader.readexactly(size)
            except asyncio.IncompleteReadError:
                break
            latencies.append(time.monotonic() - struct.unpack("!d", message[:8])[0])
        writer.write(json.dumps(latencies).encode())
        await writer.drain()
    writer.close()


async def _receive(reader: asyncio.StreamReader, count: int) -> tuple[int, float]:
    """Read `count` bytes; returns the bytes after the first tenth and the seconds they took to arrive (the
    first tenth also holds what a busy machine let pile up before the transfer found its pace)."""
    start = last = 0.0
    received = 0
    while received < count and (data := await reader.read(CHUNK)):
        last = time.monotonic()
        received += len(data)
        if not start and received >= count // 10:
            start, first_tenth = last, received
    if received < count:  # the server was not up yet (the proxy took the connection and closed it)
        raise ConnectionResetError(f"the stream ended after {received} of {count} bytes")
    return received - first_tenth, last - start


async def serve(port: int) -> None:
    server = await asyncio.start_server(_serve_one, "0.0.0.0", port, reuse_address=True)
    async with server:
        await server.serve_forever()


async def rtt(host: str, port: int, pings: int) -> dict:
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"e" + b"x")
    await reader.readexactly(1)
    first = time.monotonic() - started
    rtts = []
    for _ in range(pings):
        sent = time.monotonic()
        writer.write(b"x")
        await reader.readexactly(1)
        rtts.append(time.monotonic() - sent)
        await asyncio.sleep(0.01)
    writer.close()
    return {"first_exchange_s": first, "rtts_s": rtts}


async def download(host: str, port: int, count: int) -> dict:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"d" + struct.pack("!Q", count))
    received, seconds = await _receive(reader, count)
    writer.close()
    return {"bytes": received, "seconds": seconds}


async def upload(host: str, port: int, count: int) -> dict:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"u" + struct.pack("!Q", count))
    block = b"\0" * CHUNK
    for start in range(0, count, CHUNK):
        writer.write(block[: min(CHUNK, count - start)])
        await writer.drain()
    (seconds,) = struct.unpack("!d", await reader.readexactly(8))
    writer.close()
    return {"bytes": count, "seconds": seconds}


async def _stream(host: str, port: int, messages: int, size: int, spacing_s: float) -> list[float]:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"s" + struct.pack("!I", size))
    for _ in range(messages):
        writer.write(struct.pack("!d", time.monotonic()) + b"\0" * (size - 8))
        await writer.drain()
        await asyncio.sleep(spacing_s)
    writer.write_eof()
    answer = await reader.read()
    writer.close()
    return json.loads(answer)


async def stall(host: str, port: int, connections: int, messages: int, size: int, spacing_s: float) -> dict:
    streams = [_stream(host, port, messages, size, spacing_s) for _ in range(connections)]
    return {"latencies_s": [x for stream in await asyncio.gather(*streams) for x in stream]}


def main() -> None:
    command, *args = sys.argv[1:]
    if command == "serve":
        asyncio.run(serve(int(args[0])))
        return
    host, port, *rest = args
    numbers = [float(x) if "." in x else int(x) for x in rest]
    run = {"rtt": rtt, "download": download, "upload": upload, "stall": stall}[command]
    print(json.dumps(asyncio.run(run(host, int(port), *numbers))))


if __name__ == "__main__":
    main()
