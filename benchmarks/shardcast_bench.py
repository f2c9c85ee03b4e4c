"""SHARDCAST benchmark: swarmrl vs a plain HTTP GET and vs the reference `shardcast` 0.3.2 on loopback.

(a) one client straight from the origin vs one plain GET (curl; aiohttp streaming to disk) of the file;
(b) publish → 4 clients through 2 relays, time until the last client holds a verified copy; the same with the
    reference package (origin, 2 middle nodes, 4 client nodes; wget per shard, as it ships);
(c) bytes a client downloads for a delta checkpoint of a tiny Qwen2 after one AdamW step, vs the full size.

    .venv/bin/python benchmarks/shardcast_bench.py [--size-mib 1024] [--swarm 1024:/tmp,512:/dev/shm]

Big files go under --workdir (default /tmp) and are deleted at the end. The reference binds 0.0.0.0 by
default; its servers are started here with their bind address patched to 127.0.0.1 (no code copied).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from swarmrl.configs.shardcast import ClientConfig, OriginConfig
from swarmrl.identity import Identity
from swarmrl.shardcast import Origin, ShardcastClient

TRAINER = Identity.from_seed(b"b" * 32)
MiB = 1024 * 1024


# ---- helpers ------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_random_file(path: Path, size: int) -> None:
    rng = np.random.default_rng(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        remaining = size
        while remaining:
            n = min(remaining, 64 * MiB)
            f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            remaining -= n


def spawn(args: list[str], started: list[subprocess.Popen], **kwargs) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, *args], **kwargs)
    started.append(process)
    return process


def spawn_ready(arg_lists: list[list[str]], started: list[subprocess.Popen]) -> list[subprocess.Popen]:
    """Start one client per argument list, each after the previous one printed "ready"."""
    clients = []
    for args in arg_lists:
        client = spawn(args, started, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        read_line_with(client, "ready")
        clients.append(client)
    return clients


def stop_all(started: list[subprocess.Popen]) -> None:
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in started:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def read_line_with(process: subprocess.Popen, marker: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if marker in line:
            return line.strip()
        if not line and process.poll() is not None:
            raise RuntimeError(f"process exited before printing {marker!r}")
    raise RuntimeError(f"no {marker!r} within {timeout} s")


def drop(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# ---- (a) single client vs plain GET ---------------------------------------------------------------------
def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


async def aiohttp_get(url: str, out: Path) -> float:
    import aiohttp

    started = time.perf_counter()
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        with open(out, "wb") as f:
            async for chunk in resp.content.iter_any():
                f.write(chunk)
    return time.perf_counter() - started


async def swarmrl_fetch(sources: list[str], dest: Path, version: int) -> float:
    async with ShardcastClient(sources, TRAINER.node_id, dest, ClientConfig()) as client:
        started = time.perf_counter()
        await client.fetch(version)
        return time.perf_counter() - started


def bench_single(work: Path, size: int, shard_size: int, repeats: int) -> dict:
    root = work / "a_ckpt"
    write_random_file(root / "step_1" / "model.safetensors", size)
    results: dict = {}
    for algorithm in ("blake3", "sha256"):
        drop(root / "step_1" / ".shardcast")
        origin = Origin(
            root, TRAINER, "bench", OriginConfig(shard_size=shard_size, delta=False, hash_algorithm=algorithm)
        )
        started = time.perf_counter()
        origin.publish(root / "step_1", 1)
        publish_s = time.perf_counter() - started
        key = work / "trainer.pem"
        TRAINER.save(key)
        procs: list[subprocess.Popen] = []
        try:
            server = spawn(
                ["-m", "swarmrl.shardcast", "origin", "--checkpoint-root", str(root), "--key", str(key)],
                procs,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            url = read_line_with(server, "listening on").split()[-1]
            file_url = f"{url}/v/1/data/model.safetensors"
            curl, aio, ours, curl_cpu, ours_cpu = [], [], [], [], []
            for _ in range(repeats):
                out = work / "get.bin"
                if shutil.which("curl"):
                    cpu_before = cpu_seconds(resource.RUSAGE_CHILDREN)
                    started = time.perf_counter()
                    subprocess.run(["curl", "-s", "-o", str(out), file_url], check=True)
                    curl.append(time.perf_counter() - started)
                    curl_cpu.append(cpu_seconds(resource.RUSAGE_CHILDREN) - cpu_before)
                    out.unlink()
                aio.append(asyncio.run(aiohttp_get(file_url, out)))
                out.unlink()
                dest = work / "a_dest"
                cpu_before = cpu_seconds(resource.RUSAGE_SELF)
                ours.append(asyncio.run(swarmrl_fetch([url], dest, 1)))
                ours_cpu.append(cpu_seconds(resource.RUSAGE_SELF) - cpu_before)
                drop(dest)
        finally:
            stop_all(procs)
        results[algorithm] = {
            "publish_s": publish_s,
            "curl_s": statistics.median(curl) if curl else None,
            "aiohttp_get_s": statistics.median(aio),
            "swarmrl_s": statistics.median(ours),
            "runs": {"curl": curl, "aiohttp": aio, "swarmrl": ours},
            "cpu_s": {"curl": curl_cpu, "swarmrl": ours_cpu},
        }
    drop(root)
    return results


# ---- (b) 4 clients through 2 relays --------------------------------------------------------------------
CLIENT_WAIT = """
import asyncio, sys, time
from pathlib import Path
from swarmrl.configs.shardcast import ClientConfig
from swarmrl.shardcast import ShardcastClient
async def main():
    async with ShardcastClient(sys.argv[1].split(","), sys.argv[2], Path(sys.argv[3]), ClientConfig()) as c:
        print("ready", flush=True)
        version = None
        while version is None:
            version = await c.wait_for_version(after=0, timeout_s=30)
        await c.fetch(version)
        print("done", time.time(), flush=True)
asyncio.run(main())
"""


def bench_swarm_swarmrl(work: Path, size: int, shard_size: int) -> float:
    root = work / "b_ckpt"
    write_random_file(root / "step_1" / "model.safetensors", size)
    os.sync()
    origin = Origin(root, TRAINER, "bench", OriginConfig(shard_size=shard_size, delta=False))
    server = origin.serve_in_thread()
    procs: list[subprocess.Popen] = []
    try:
        relays = []
        for i in range(2):
            relay = spawn(
                [
                    "-m",
                    "swarmrl.shardcast",
                    "relay",
                    "--upstream",
                    server.url,
                    "--trainer-public-key",
                    TRAINER.node_id,
                    "--data-dir",
                    str(work / f"b_relay{i}"),
                ],
                procs,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            relays.append(read_line_with(relay, "listening on").split()[-1])
        clients = spawn_ready(
            [
                ["-c", CLIENT_WAIT, ",".join(relays), TRAINER.node_id, str(work / f"b_client{i}")]
                for i in range(4)
            ],
            procs,
        )
        time.sleep(0.5)
        started = time.time()
        origin.publish(root / "step_1", 1)
        finished = [float(read_line_with(c, "done", timeout=600).split()[-1]) for c in clients]
        return max(finished) - started
    finally:
        stop_all(procs)
        server.stop()
        for path in (
            [root] + [work / f"b_relay{i}" for i in range(2)] + [work / f"b_client{i}" for i in range(4)]
        ):
            drop(path)


REF_PATCH = """
import shardcast.server as _server
_orig_init = _server.ShardcastServer.__init__
def _local_init(self, address, *args, **kwargs):
    _orig_init(self, ("127.0.0.1", address[1]), *args, **kwargs)
_server.ShardcastServer.__init__ = _local_init
"""

REF_RELAY = (
    REF_PATCH
    + """
import sys, time
from shardcast import MiddleNode
node = MiddleNode([sys.argv[1]], sys.argv[2], int(sys.argv[3]), check_interval=1)
print("ready", flush=True)
while True:
    time.sleep(1)
"""
)

REF_CLIENT = (
    REF_PATCH
    + """
import sys, time, os
from shardcast import ClientNode
servers = sys.argv[1].split(",")
node = ClientNode(servers, sys.argv[2])
print("ready", flush=True)
# The reference has no wait-for-version call: poll its distribution file, retrying through its own races
# (all clients share site-packages/temp_distribution.txt and /tmp/dummy.bin).
while True:
    try:
        if "v1" in node.list_available_versions():
            result = node.download_version("v1", os.path.join(sys.argv[2], "model.bin"))
            if result:
                break
    except Exception:
        pass
    time.sleep(0.2)
print("done", time.time(), flush=True)
"""
)


def bench_swarm_reference(work: Path, size: int, timeout_s: float) -> float | str:
    import shardcast.server as ref_server

    original_init = ref_server.ShardcastServer.__init__

    def local_init(self, address, *args, **kwargs):
        original_init(self, ("127.0.0.1", address[1]), *args, **kwargs)

    ref_server.ShardcastServer.__init__ = local_init
    from shardcast import OriginServer

    source = work / "r_src" / "model.bin"
    write_random_file(source, size)
    origin_port = free_port()
    origin_dir = work / "r_origin"
    origin = OriginServer(str(origin_dir), origin_port)
    procs: list[subprocess.Popen] = []
    try:
        # The reference downloader probes every server for a file named data1.bin before anything else.
        (origin_dir / "data1.bin").write_bytes(b"x")
        relays = []
        for i in range(2):
            port = free_port()
            data = work / f"r_relay{i}"
            data.mkdir(parents=True)
            (data / "data1.bin").write_bytes(b"x")
            relay = spawn(
                ["-c", REF_RELAY, f"http://127.0.0.1:{origin_port}", str(data), str(port)],
                procs,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            read_line_with(relay, "ready")
            relays.append(f"http://127.0.0.1:{port}")
        # One at a time (spawn_ready waits for each): concurrent start-ups race on /tmp/dummy.bin.
        clients = spawn_ready(
            [["-c", REF_CLIENT, ",".join(relays), str(work / f"r_client{i}")] for i in range(4)], procs
        )
        time.sleep(0.5)
        started = time.time()
        origin.broadcast(str(source))
        try:
            finished = [float(read_line_with(c, "done", timeout=timeout_s).split()[-1]) for c in clients]
        except RuntimeError as exc:
            return f"did not finish: {exc}"
        return max(finished) - started
    finally:
        stop_all(procs)
        origin.shutdown()
        ref_server.ShardcastServer.__init__ = original_init
        for path in (
            [work / "r_src", origin_dir]
            + [work / f"r_relay{i}" for i in range(2)]
            + [work / f"r_client{i}" for i in range(4)]
        ):
            drop(path)


# ---- (c) delta of a tiny Qwen2 after one AdamW step --------------------------------------------------------
def bench_delta(work: Path) -> dict:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = Qwen2ForCausalLM(config)  # fp32 weights, saved in their training dtype
    root = work / "c_ckpt"
    model.save_pretrained(root / "step_1", safe_serialization=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    tokens = torch.randint(0, 512, (4, 32))
    model(input_ids=tokens, labels=tokens).loss.backward()
    optimizer.step()
    model.save_pretrained(root / "step_2", safe_serialization=True)

    origin = Origin(root, TRAINER, "bench", OriginConfig(delta=True))
    server = origin.serve_in_thread()
    try:
        origin.publish(root / "step_1", 1)
        manifest = origin.publish(root / "step_2", 2)

        async def fetch_both() -> tuple[int, int]:
            async with ShardcastClient([server.url], TRAINER.node_id, work / "c_dest") as client:
                await client.fetch(1)
                full = client.last_stats.bytes_downloaded
                await client.fetch(2)
                assert client.last_stats.used_delta
                return full, client.last_stats.bytes_downloaded

        full_bytes, delta_bytes = asyncio.run(fetch_both())
    finally:
        server.stop()
    import zstandard

    weights = (root / "step_2" / "model.safetensors").read_bytes()
    zstd_only = len(zstandard.ZstdCompressor(level=3).compress(weights))
    result = {
        "checkpoint_bytes": manifest.total_size,
        "first_fetch_bytes": full_bytes,
        "delta_fetch_bytes": delta_bytes,
        "zstd_of_full_weights": zstd_only,
        "weights_bytes": len(weights),
    }
    drop(root)
    drop(work / "c_dest")
    return result


def report_single(results: dict, size_mib: int) -> None:
    for algorithm, r in results.items():
        baseline = r["curl_s"] or r["aiohttp_get_s"]
        best_get = min(r["runs"]["curl"] or r["runs"]["aiohttp"])
        best_ours = min(r["runs"]["swarmrl"])
        print(
            f"(a) {algorithm}: publish {r['publish_s']:.2f} s | plain GET (median) "
            f"curl {r['curl_s'] or 0:.2f} s, "
            f"aiohttp {r['aiohttp_get_s']:.2f} s | swarmrl fetch+verify {r['swarmrl_s']:.2f} s "
            f"({size_mib / r['swarmrl_s']:.0f} MiB/s) | swarmrl/GET throughput "
            f"{baseline / r['swarmrl_s']:.0%} "
            f"(goal >= 60%) | best runs: GET {best_get:.2f} s, swarmrl {best_ours:.2f} s "
            f"({best_get / best_ours:.0%})",
            flush=True,
        )
        cpu = r["cpu_s"]
        print(
            f"(a) {algorithm}: CPU seconds per fetch (median) curl "
            f"{statistics.median(cpu['curl']) if cpu['curl'] else float('nan'):.2f}, swarmrl client "
            f"{statistics.median(cpu['swarmrl']):.2f} (receive, two hash passes, writes; servers excluded)",
            flush=True,
        )


def bench_swarm_once(size_mib: int, directory: str, shard: int, args: argparse.Namespace) -> dict:
    """One (b) run: swarmrl, then the reference, on a fresh working directory under `directory`."""
    swarm_work = Path(tempfile.mkdtemp(prefix="shardcast_swarm_", dir=directory))
    try:
        ours = bench_swarm_swarmrl(swarm_work, size_mib * MiB, shard)
        line = f"(b) {size_mib} MiB in {directory}: swarmrl publish -> 4 clients via 2 relays {ours:.2f} s"
        ref: float | str = "skipped"
        if not args.skip_reference:
            ref = bench_swarm_reference(swarm_work, size_mib * MiB, args.reference_timeout_s)
            if isinstance(ref, float):
                line += f" | reference shardcast 0.3.2 {ref:.2f} s | speed-up {ref / ours:.1f}x (goal >= 5x)"
            else:
                line += f" | reference shardcast 0.3.2 {ref}"
    finally:
        drop(swarm_work)
    print(line, flush=True)
    return {"swarmrl_s": ours, "reference_s": ref}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the broadcast file in (a)")
    parser.add_argument("--shard-mib", type=int, default=50, help="shard size")
    parser.add_argument("--repeats", type=int, default=3, help="runs of (a); median and best are reported")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument(
        "--swarm",
        default="1024:/tmp",
        help="(b) runs as SIZE_MIB:DIR[,SIZE_MIB:DIR]; e.g. 1024:/tmp,512:/dev/shm (tmpfs takes the "
        "shared disk out of the measurement: 6 parties writing one disk is an artefact of a single box)",
    )
    parser.add_argument(
        "--swarm-repeats",
        type=int,
        default=1,
        help="runs of each (b) variant; the median speed-up is reported",
    )
    parser.add_argument("--skip-reference", action="store_true", help="do not run the reference shardcast")
    parser.add_argument("--reference-timeout-s", type=float, default=300.0)
    parser.add_argument("--parts", default="abc", help="which of a, b, c to run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shardcast_bench_", dir=args.workdir))
    shard = args.shard_mib * MiB
    report: dict = {"size_mib": args.size_mib, "shard_mib": args.shard_mib}
    try:
        if "a" in args.parts:
            report["a"] = bench_single(work, args.size_mib * MiB, shard, args.repeats)
            report_single(report["a"], args.size_mib)
        if "b" in args.parts:
            for variant in args.swarm.split(","):
                size_mib, directory = variant.split(":", 1)
                runs = [
                    bench_swarm_once(int(size_mib), directory, shard, args) for _ in range(args.swarm_repeats)
                ]
                report[f"b_{size_mib}_{directory}"] = runs
                timed = [r for r in runs if isinstance(r["reference_s"], float)]
                if len(runs) > 1 and timed:
                    ratios = [r["reference_s"] / r["swarmrl_s"] for r in timed]
                    ours_mean = statistics.mean(r["swarmrl_s"] for r in timed)
                    ref_mean = statistics.mean(r["reference_s"] for r in timed)
                    print(
                        f"(b) {size_mib} MiB in {directory}: median speed-up {statistics.median(ratios):.1f}x "
                        f"over {len(ratios)} runs (each: {', '.join(f'{x:.1f}x' for x in ratios)}); mean time "
                        f"swarmrl {ours_mean:.2f} s, reference {ref_mean:.2f} s: {ref_mean / ours_mean:.1f}x "
                        "(goal >= 5x)",
                        flush=True,
                    )
        if "c" in args.parts:
            report["c"] = c = bench_delta(work)
            print(
                f"(c) tiny Qwen2 fp32, one AdamW step lr 1e-6: checkpoint {c['checkpoint_bytes']} B, "
                f"full fetch "
                f"{c['first_fetch_bytes']} B, delta fetch {c['delta_fetch_bytes']} B "
                f"({c['delta_fetch_bytes'] / c['checkpoint_bytes']:.1%} of full); plain zstd of the weights: "
                f"{c['zstd_of_full_weights'] / c['weights_bytes']:.1%}",
                flush=True,
            )
        print("json:", json.dumps(report))
    finally:
        drop(work)


if __name__ == "__main__":
    main()
