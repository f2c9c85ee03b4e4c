"""Coordinator throughput: signed, persisted requests vs the bare HTTP stack they run on.

Anchor: a FastAPI app served by the same uvicorn, with no signature check, no nonce table and no database
(an in-memory dict) — the floor any Python HTTP control plane pays. swarmrl: the real coordinator process on a
SQLite file. Figures: heartbeats per second (sequential and from 8 threads) and full work cycles per second
(upload slot + 1 MiB upload + submit + verdict vs a plain 1 MiB PUT). The heartbeat rate bounds the swarm
size: INTELLECT-2 nodes beat every 10 s, so nodes supported ≈ 10 × heartbeats/s.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from swarmrl.coordinator.client import CoordinatorClient
from swarmrl.coordinator.config import CoordinatorConfig
from swarmrl.coordinator.testing import start_coordinator
from swarmrl.identity import Identity

ANCHOR_APP = textwrap.dedent("""
    import sys
    from fastapi import FastAPI, Request
    import uvicorn
    app = FastAPI()
    beats = {}
    files = {}
    @app.post("/v1/runs/{run_id}/heartbeat")
    async def heartbeat(run_id: str, request: Request):
        beats[request.headers.get("x-node", "")] = await request.json()
        return {"current_step": 0}
    @app.put("/upload/{name}")
    async def upload(name: str, request: Request):
        files[name] = await request.body()
        return {"size": len(files[name])}
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
""")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_anchor() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-c", ANCHOR_APP, str(port)])
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            httpx.post(f"{url}/v1/runs/r/heartbeat", json={}, timeout=1)
            return process, url
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("anchor did not start")


def _rate(count: int, fn, threads: int) -> float:
    start = time.perf_counter()
    if threads == 1:
        for i in range(count):
            fn(i)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(fn, range(count)))
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--beats", type=int, default=400, help="heartbeats per measurement")
    parser.add_argument("--cycles", type=int, default=30, help="work cycles per measurement")
    parser.add_argument("--file-mib", type=float, default=1.0)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="coord-bench-"))
    config = CoordinatorConfig(requests_per_minute=1_000_000, uploads_per_hour=1_000_000)
    coordinator = start_coordinator(workdir, config=config, admin_token="bench")
    anchor, anchor_url = _start_anchor()
    try:
        trainer, validator_key = Identity.generate(), Identity.generate()
        admin = CoordinatorClient(coordinator.url, admin_token="bench")
        admin.create_run("bench", trainer.node_id)
        admin.add_validator("bench", validator_key.node_id)
        workers = [CoordinatorClient(coordinator.url, Identity.generate()) for _ in range(8)]
        for worker in workers:
            worker.register()
            worker.join("bench")
        validator = CoordinatorClient(coordinator.url, validator_key)
        plain = httpx.Client(base_url=anchor_url)
        plain_clients = [httpx.Client(base_url=anchor_url) for _ in range(8)]

        results = {}
        for threads in (1, 8):
            results[f"heartbeat x{threads}"] = (
                _rate(
                    args.beats,
                    lambda i: plain_clients[i % 8].post(
                        "/v1/runs/r/heartbeat", json={"policy_step": 0}, headers={"x-node": str(i % 8)}
                    ),
                    threads,
                ),
                _rate(args.beats, lambda i: workers[i % 8].heartbeat("bench", policy_step=0), threads),
            )

        size = int(args.file_mib * 1024 * 1024)
        blobs = [os.urandom(size) for _ in range(4)]

        def anchor_cycle(i: int) -> None:
            plain.put(f"/upload/{i}", content=blobs[i % 4])

        def swarm_cycle(i: int) -> None:
            data = blobs[i % 4][:-8] + i.to_bytes(8, "big")  # unique sha per cycle
            submission = workers[i % 8].upload_and_submit("bench", 0, data, rows=16, tokens=4096)
            validator.post_verdict(submission.id, accept=True, check="all")

        results[f"work cycle {args.file_mib:g} MiB"] = (
            _rate(args.cycles, anchor_cycle, 1),
            _rate(args.cycles, swarm_cycle, 1),
        )
        assert len(validator.accepted_submissions("bench", 0)) == args.cycles
    finally:
        coordinator.kill()
        anchor.kill()
        anchor.wait(timeout=10)

    print(f"{'measurement':<26}{'anchor /s':>12}{'swarmrl /s':>12}{'swarmrl/anchor':>16}")
    for name, (anchor_rate, swarm_rate) in results.items():
        print(f"{name:<26}{anchor_rate:>12.1f}{swarm_rate:>12.1f}{swarm_rate / anchor_rate:>15.2f}x")
    best_beats = max(results["heartbeat x1"][1], results["heartbeat x8"][1])
    print(f"nodes one coordinator can serve at INTELLECT-2's 10 s heartbeat: ~{int(best_beats * 10)}")


if __name__ == "__main__":
    main()
