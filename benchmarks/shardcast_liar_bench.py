"""One lying relay beside an honest one: do the workers keep up with the trainer? (issue 20, item 1 and 7)

Real processes on 127.0.0.1: this process is the trainer (a shardcast origin in a thread, publishing a new
checkpoint version every --interval seconds and then advancing the step counter); one honest relay
(`python -m swarmrl.shardcast relay`); in the second arm one lying relay that announces version 10^9, holds
every manifest request for 30 s and trickles shard bytes at 1 byte/s while claiming every shard; --workers
worker processes, each refreshing its policy the way `swarmrl worker` does (`CheckpointFetcher.refresh` with
the coordinator's step as the ceiling; the step counter is a file here, not a coordinator, which is the
only part of the swarm left out). The liar is listed first, so a worker trying sources in order meets it first.

Figures per arm: for each published version, the time from publishing until the last worker holds a verified
copy (median and max over versions), and how often a worker was two or more versions behind the trainer
(it still lacked version k when k+1 was published).

    .venv/bin/python benchmarks/shardcast_liar_bench.py [--workers 4] [--versions 6] [--interval 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web
from shardcast_bench import read_line_with, spawn, stop_all

from swarmrl.configs.shardcast import ClientConfig, OriginConfig
from swarmrl.identity import Identity
from swarmrl.shardcast import CheckpointFetcher, Origin, ShardcastError
from swarmrl.shardcast.server import start_site

TRAINER = Identity.from_seed(b"L" * 32)
RUN_ID = "liar-bench"
HUGE = 1_000_000_000
MiB = 1024 * 1024


# ---- the liar (its own process) -----------------------------------------------------------------------
def liar_app(upstream: str) -> web.Application:
    """Everything it says is the origin's, except the huge version; everything it sends is as slow as can be."""
    session: aiohttp.ClientSession | None = None

    async def upstream_get(path: str, headers: dict | None = None) -> tuple[int, bytes]:
        assert session is not None
        async with session.get(upstream + path, headers=headers or {}) as resp:
            return resp.status, await resp.read()

    async def versions(request: web.Request) -> web.Response:
        _, body = await upstream_get("/versions")
        found = json.loads(body)["versions"] + [HUGE]
        return web.json_response({"versions": found, "latest": HUGE})

    async def latest(request: web.Request) -> web.Response:
        return web.json_response({"latest": HUGE})

    async def manifest(request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        status, body = await upstream_get(request.path)
        return web.Response(status=status, body=body, content_type="application/json")

    async def availability(request: web.Request) -> web.Response:
        status, body = await upstream_get(request.path.split("?")[0])
        return web.Response(status=status, body=body, content_type="application/json")

    async def data(request: web.Request) -> web.StreamResponse:
        status, body = await upstream_get(request.path, {"Range": request.headers.get("Range", "")})
        if status not in (200, 206):
            return web.Response(status=status)
        start = request.http_range.start or 0
        response = web.StreamResponse(
            status=206, headers={"Content-Range": f"bytes {start}-{start + len(body) - 1}/*"}
        )
        response.content_length = len(body)
        await response.prepare(request)
        try:
            for position in range(len(body)):
                await response.write(body[position : position + 1])
                await asyncio.sleep(1.0)
        except ConnectionError:
            pass  # the client cut it: what a trickle should get
        return response

    async def client_session(app: web.Application):
        nonlocal session
        session = aiohttp.ClientSession()
        yield
        await session.close()

    app = web.Application()
    app.cleanup_ctx.append(client_session)
    app.add_routes(
        [
            web.get("/versions", versions),
            web.get("/latest", latest),
            web.get("/v/{version}/manifest", manifest),
            web.get("/v/{version}/availability", availability),
            web.get("/v/{version}/data/{path:.+}", data),
        ]
    )
    return app


async def serve_liar(upstream: str) -> None:
    runner, url = await start_site(liar_app(upstream), "127.0.0.1", 0)
    print("liar listening on", url, flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


# ---- a worker (its own process) -----------------------------------------------------------------------
def run_worker(sources: list[str], dest: Path, step_file: Path, until: int) -> None:
    """Refresh like `swarmrl worker` does; print "have <version> <unix time>" for each newly installed one."""
    fetcher = CheckpointFetcher(sources, TRAINER.node_id, dest, ClientConfig(), RUN_ID)
    held = -1
    print("ready", flush=True)
    while held < until:
        ceiling = int(step_file.read_text())
        try:
            found = fetcher.refresh(ceiling)
        except ShardcastError as exc:
            print("refresh failed:", exc, file=sys.stderr, flush=True)
            found = None
        if found is not None and found[0] > held:
            held = found[0]
            print("have", held, time.time(), flush=True)
        time.sleep(0.1)


# ---- the trainer and the measurement (this process) ---------------------------------------------------
def write_version(root: Path, version: int, size: int) -> Path:
    directory = root / f"step_{version}"
    directory.mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(os.urandom(size))
    (directory / "config.json").write_text(json.dumps({"step": version}))
    return directory


def set_step(step_file: Path, step: int) -> None:
    tmp = step_file.with_suffix(".tmp")
    tmp.write_text(str(step))
    tmp.replace(step_file)


def run_arm(with_liar: bool, args: argparse.Namespace, work: Path) -> dict:
    root, step_file = work / "ckpt", work / "step"
    origin = Origin(root, TRAINER, RUN_ID, OriginConfig(shard_size=int(args.shard_mib * MiB)))
    origin.publish(write_version(root, 0, int(args.model_mib * MiB)), 0)
    set_step(step_file, 0)
    server = origin.serve_in_thread()
    procs: list[subprocess.Popen] = []
    try:
        relay = spawn(
            ["-m", "swarmrl.shardcast", "relay", "--upstream", server.url]
            + ["--trainer-public-key", TRAINER.node_id, "--data-dir", str(work / "relay")],
            procs,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        sources = [read_line_with(relay, "listening on").split()[-1]]
        if with_liar:
            liar = spawn([__file__, "--serve-liar", server.url], procs, stdout=subprocess.PIPE, text=True)
            sources.insert(0, read_line_with(liar, "listening on").split()[-1])
        workers = [
            spawn(
                [
                    __file__,
                    "--worker",
                    ",".join(sources),
                    str(work / f"w{i}"),
                    str(step_file),
                    str(args.versions),
                ],
                procs,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for i in range(args.workers)
        ]
        for worker in workers:
            read_line_with(worker, "ready")
        for worker in workers:  # everyone starts from version 0
            read_line_with(worker, "have 0", timeout=120)
        published = {}
        for version in range(1, args.versions + 1):
            time.sleep(args.interval)
            directory = write_version(root, version, int(args.model_mib * MiB))
            published[version] = time.time()
            origin.publish(directory, version)
            set_step(step_file, version)  # the coordinator opens the step once the checkpoint is out
        installed: list[dict[int, float]] = []
        for worker in workers:
            have: dict[int, float] = {}
            while max(have, default=0) < args.versions:  # a worker that falls behind skips versions
                line = read_line_with(worker, "have", timeout=300).split()
                have[int(line[1])] = float(line[2])
            installed.append(have)
    finally:
        stop_all(procs)
        server.stop()
    # A worker that skipped v counts as holding it when it got a newer one.
    to_last = [
        max(min(t for k, t in have.items() if k >= v) for have in installed) - published[v] for v in published
    ]
    # Behind by two: still without version v when v+1 was published (versions skipped count as held).
    behind = sum(
        1
        for have in installed
        for v in range(1, args.versions)
        if min((t for k, t in have.items() if k >= v), default=float("inf")) > published[v + 1]
    )
    return {"to_last_worker_s": to_last, "two_behind": behind}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--versions", type=int, default=6)
    parser.add_argument("--interval", type=float, default=3.0, help="seconds between published versions")
    parser.add_argument("--model-mib", type=float, default=8.0)
    parser.add_argument("--shard-mib", type=float, default=1.0)
    parser.add_argument("--serve-liar", metavar="UPSTREAM")
    parser.add_argument("--worker", nargs=4, metavar=("SOURCES", "DEST", "STEP_FILE", "UNTIL"))
    args = parser.parse_args()
    if args.serve_liar:
        asyncio.run(serve_liar(args.serve_liar))
        return
    if args.worker:
        sources, dest, step_file, until = args.worker
        run_worker(sources.split(","), Path(dest), Path(step_file), int(until))
        return

    print(
        f"{args.workers} workers, {args.versions} versions of {args.model_mib:g} MiB "
        f"({args.shard_mib:g} MiB shards) published every {args.interval:g} s"
    )
    print(f"{'arm':<28} {'to last worker: median':>24} {'max':>8} {'worker two versions behind':>28}")
    for with_liar in (False, True):
        with tempfile.TemporaryDirectory(prefix="liar-bench-") as tmp:
            result = run_arm(with_liar, args, Path(tmp))
        times = result["to_last_worker_s"]
        name = "honest relay + lying relay" if with_liar else "honest relay only"
        print(
            f"{name:<28} {statistics.median(times):>22.2f} s {max(times):>6.2f} s "
            f"{result['two_behind']:>20} of {args.workers * (args.versions - 1)}"
        )


if __name__ == "__main__":
    main()
