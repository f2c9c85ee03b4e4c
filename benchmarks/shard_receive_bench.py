"""The shard receive path alone: CPU seconds per GiB of swarmrl's fetch threads against the plainest receiver
and against httpx, on loopback (issue 60: why shard bytes go through urllib3 while every other request of a
node goes through httpx).

Each arm moves one file in `--shard-mib` ranges on `--threads` threads from a local aiohttp server (another
process: its CPU is not counted), hashing each range (blake3) and writing it with pwritev at its offset, as the
downloader does; arms alternate, `--rounds` times:

- `http.client`: a connection per thread, `read1` of up to 1 MiB (the floor: no pool, no checks);
- `swarmrl`: `fetch_range_into` over `RangePool` (urllib3's pools, cuttable connections);
- `httpx`: one `httpx.Client`, `iter_raw` (h11 parses the body; httpcore reads 64 KiB at a time).

    .venv/bin/python benchmarks/shard_receive_bench.py [--size-mib 1024] [--threads 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import blake3
import httpx

from swarmrl.shardcast.range_get import RangeSink, fetch_range_into, hash_and_write
from swarmrl.shardcast.range_pool import READ_SIZE, RangePool

MiB = 1024 * 1024
SERVER = """
import sys
from aiohttp import web
async def serve(request):
    return web.FileResponse(sys.argv[1])
app = web.Application()
app.router.add_get("/f", serve)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[2]), print=None)
"""

Receive = Callable[[str, int, int, int], str]  # (url, fd, first, length) → hex digest


def plain_receiver() -> Receive:
    local = threading.local()

    def receive(url: str, fd: int, first: int, length: int) -> str:
        parts = urlsplit(url)
        connection = getattr(local, "connection", None) or http.client.HTTPConnection(parts.netloc)
        local.connection = connection
        connection.request("GET", parts.path, headers={"Range": f"bytes={first}-{first + length - 1}"})
        response = connection.getresponse()
        digest = _land(iter(lambda: response.read1(READ_SIZE), b""), fd, first)
        response.read()  # marks the spent response closed, so the connection may send again
        return digest

    return receive


def swarmrl_receiver() -> Receive:
    pool = RangePool(connect_timeout_s=5, read_timeout_s=30)
    stop = threading.Event()

    def receive(url: str, fd: int, first: int, length: int) -> str:
        sink = RangeSink(fd, first, length, blake3.blake3(), time.monotonic() + 300, stop, lambda n: None)
        fetch_range_into(pool, url, sink)
        return sink.digest.hexdigest()

    return receive


def httpx_receiver() -> Receive:
    client = httpx.Client(limits=httpx.Limits(max_connections=64), timeout=30, trust_env=False)

    def receive(url: str, fd: int, first: int, length: int) -> str:
        headers = {"Range": f"bytes={first}-{first + length - 1}"}
        with client.stream("GET", url, headers=headers) as response:
            return _land(response.iter_raw(), fd, first)

    return receive


def _land(chunks, fd: int, first: int) -> str:
    """Hash and write `chunks` at `first` in 4 MiB batches, as the downloader does."""
    digest, batch, batched, position = blake3.blake3(), [], 0, first
    for chunk in chunks:
        batch.append(chunk)
        batched += len(chunk)
        if batched >= 4 * MiB:
            hash_and_write(fd, digest, batch, position)
            position, batch, batched = position + batched, [], 0
    if batch:
        hash_and_write(fd, digest, batch, position)
    return digest.hexdigest()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_pass(receive: Receive, url: str, out: Path, size: int, shard: int, threads: int) -> tuple:
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.ftruncate(fd, size)
    try:
        cpu, started = cpu_seconds(), time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            ranges = [(first, min(shard, size - first)) for first in range(0, size, shard)]
            digests = list(pool.map(lambda r: receive(url, fd, *r), ranges))
        return time.perf_counter() - started, cpu_seconds() - cpu, digests
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--shard-mib", type=int, default=50)
    parser.add_argument("--threads", type=int, default=8, help="fetch threads (the client's concurrency)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/dev/shm"), help="tmpfs keeps the disk out")
    args = parser.parse_args()
    size, shard = args.size_mib * MiB, args.shard_mib * MiB
    work = Path(tempfile.mkdtemp(prefix="shard_receive_", dir=args.workdir))
    source = work / "source.bin"
    with open(source, "wb") as f:
        for _ in range(0, size, 64 * MiB):
            f.write(os.urandom(min(64 * MiB, size - f.tell())))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(source), str(port)])
    url = f"http://127.0.0.1:{port}/f"
    arms = {"http.client": plain_receiver(), "swarmrl": swarmrl_receiver(), "httpx": httpx_receiver()}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        expected = None
        for _ in range(args.rounds):
            for name, receive in arms.items():
                wall, cpu, digests = one_pass(receive, url, work / "out.bin", size, shard, args.threads)
                expected = expected or digests
                assert digests == expected, f"{name} landed other bytes"
                figures[name].append((wall, cpu))
                print(f"{name}: {wall:.2f} s, {cpu:.2f} CPU-s (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        server.terminate()
        server.wait(10)
        for path in work.iterdir():
            path.unlink()
        work.rmdir()
    gib = size / (1024 * MiB)
    floor = statistics.median(cpu for _, cpu in figures["http.client"]) / gib
    for name, runs in figures.items():
        cpus = sorted(cpu / gib for _, cpu in runs)
        walls = sorted(wall for wall, _ in runs)
        print(
            f"{name}: CPU-s per GiB median {statistics.median(cpus):.2f} (min {cpus[0]:.2f}, max {cpus[-1]:.2f}), "
            f"{statistics.median(cpus) / floor:.2f}x http.client's; wall median {statistics.median(walls):.2f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
