"""Coordinator throughput and latency.

Part 1 (`--part anchor`): signed, persisted requests vs the bare HTTP stack they run on. Anchor: a FastAPI app
served by the same uvicorn, with no signature check, no nonce table and no database (an in-memory dict) — the
floor any Python HTTP control plane pays. swarmrl: the real coordinator process on a SQLite file. Figures:
heartbeats per second (sequential and from 8 threads) and full work cycles per second (lease + upload slot +
1 MiB upload + submit + validation lease + verdict vs a plain 1 MiB PUT).

Part 2 (`--part swarm`): `--nodes` simulated nodes (default 1,000) against the coordinator on a Postgres server
started on 127.0.0.1 (the tests' helper). Every node heartbeats every `--heartbeat-s` (INTELLECT-2: 10 s) and
asks for a work lease every `--lease-s`, on a fixed schedule (open loop: a slow answer does not slow the
offered load, and latency is measured from the moment the request was due, so queueing counts). Then a closed
loop of `--threads` senders measures the most requests per second. Latency is shown as the node sees it (from
the moment the request was due) and as the coordinator's own histogram saw it (app entry to response, bucket-
interpolated); CPU seconds of the coordinator, of Postgres and of this load generator are read from /proc to
name the bottleneck.
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from swarmrl.configs.contract import ContractSection
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.client import AdminClient, NodeClient, TrainerClient, ValidatorClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl_lab.coordinator_double import accept, leased_submit, postgres_server, start_coordinator

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
UNLIMITED = dict(requests_per_minute=1_000_000, uploads_per_hour=1_000_000)


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


def anchor_part(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="coord-bench-"))
    config = CoordinatorConfig(**UNLIMITED, default_step_units=args.cycles + 16)
    coordinator = start_coordinator(workdir, config=config, admin_token="bench")
    anchor, anchor_url = _start_anchor()
    try:
        trainer, validator_key = Identity.generate(), Identity.generate()
        admin = AdminClient.at(coordinator.url, admin_token="bench")
        admin.create_run("bench", trainer.node_id, ContractSection(), bound_claims=False)
        admin.add_validator("bench", validator_key.node_id)
        workers = [NodeClient.at(coordinator.url, Identity.generate()) for _ in range(8)]
        for worker in workers:
            worker.register()
            worker.join("bench", ContractSection())
        validator = ValidatorClient.at(coordinator.url, validator_key)
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
            submission = leased_submit(workers[i % 8], "bench", data, rows=16, tokens=4096)
            assert validator.lease_validation("bench").submission.id == submission.id
            accept(validator, submission)

        results[f"work cycle {args.file_mib:g} MiB"] = (
            _rate(args.cycles, anchor_cycle, 1),
            _rate(args.cycles, swarm_cycle, 1),
        )
        assert len(TrainerClient(validator.transport).accepted_submissions("bench", 0)) == args.cycles
    finally:
        coordinator.kill()
        anchor.kill()
        anchor.wait(timeout=10)

    print(f"{'measurement':<26}{'anchor /s':>12}{'swarmrl /s':>12}{'swarmrl/anchor':>16}")
    for name, (anchor_rate, swarm_rate) in results.items():
        print(f"{name:<26}{anchor_rate:>12.1f}{swarm_rate:>12.1f}{swarm_rate / anchor_rate:>15.2f}x")
    best_beats = max(results["heartbeat x1"][1], results["heartbeat x8"][1])
    print(f"nodes one coordinator can serve at INTELLECT-2's 10 s heartbeat: ~{int(best_beats * 10)}")


# --- part 2: a thousand nodes on Postgres -------------------------------------------------------------------
def _cpu_seconds(pid: int) -> float:
    """utime + stime of one process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _postgres_cpu_seconds() -> float:
    """Every process whose name says postgres (the server started for this bench is the only one here)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip().startswith("postgres"):
                    total += _cpu_seconds(int(entry.name))
            except (OSError, IndexError):
                continue
    return total


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = {}
        self.outcomes: dict[str, int] = {}

    def add(self, kind: str, seconds: float, outcome: str) -> None:
        with self.lock:
            self.latency.setdefault(kind, []).append(seconds)
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


def _call(recorder: Recorder, kind: str, due: float, fn) -> None:
    try:
        fn()
        outcome = "ok"
    except CoordinatorError as exc:
        outcome = exc.kind  # step_full is a normal answer of a full step, and just as costly to give
    recorder.add(kind, time.monotonic() - due, outcome)


def open_loop(
    nodes, run_id: str, seconds: float, heartbeat_s: float, lease_s: float, threads: int
) -> Recorder:
    """Each node beats every heartbeat_s and leases every lease_s, phases spread at random; latency counts from
    the moment each request was due."""
    recorder = Recorder()
    rng = random.Random(0)
    start = time.monotonic()
    events = []
    for index in range(len(nodes)):
        events.append((start + rng.uniform(0, heartbeat_s), index, "heartbeat", heartbeat_s))
        events.append((start + rng.uniform(0, lease_s), index, "lease", lease_s))
    heapq.heapify(events)
    end = start + seconds
    with ThreadPoolExecutor(threads) as pool:
        while events and events[0][0] < end:
            due, index, kind, period = heapq.heappop(events)
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            node = nodes[index]
            fn = (
                (lambda n=node: n.heartbeat(run_id))
                if kind == "heartbeat"
                else (lambda n=node: n.lease_work(run_id))
            )
            pool.submit(_call, recorder, kind, due, fn)
            heapq.heappush(events, (due + period, index, kind, period))
    return recorder


def closed_loop(nodes, run_id: str, seconds: float, threads: int) -> tuple[int, float]:
    """`threads` senders, each alternating heartbeat and lease as fast as answers come; returns (requests, s)."""
    counts = [0] * threads
    stop = time.monotonic() + seconds

    def sender(t: int) -> None:
        i = t
        while time.monotonic() < stop:
            node = nodes[i % len(nodes)]
            try:
                node.heartbeat(run_id) if i % 2 else node.lease_work(run_id)
            except CoordinatorError:
                pass
            counts[t] += 1
            i += threads

    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(sender, range(threads)))
    return sum(counts), time.monotonic() - started


SERVER_ROUTES = {"heartbeat": "/v1/runs/{run_id}/heartbeat", "lease": "/v1/runs/{run_id}/leases"}


def _server_histograms(url: str) -> dict[str, dict[float, float]]:
    """Cumulative bucket counts of the coordinator's own request-latency histogram, per bench request kind."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    out: dict[str, dict[float, float]] = {kind: {} for kind in SERVER_ROUTES}
    for family in text_string_to_metric_families(text):
        if family.name != "swarmrl_coordinator_request_seconds":
            continue
        for sample in family.samples:
            for kind, route in SERVER_ROUTES.items():
                if sample.name.endswith("_bucket") and sample.labels.get("route") == route:
                    out[kind][float(sample.labels["le"])] = sample.value
    return out


def _histogram_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The q-quantile (ms) of what was observed between two scrapes, interpolated inside its bucket."""
    buckets = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in buckets]
    target = q * counts[-1]
    lower, below = 0.0, 0.0
    for bound, cumulative in zip(buckets, counts, strict=True):
        if cumulative >= target:
            if bound == float("inf"):
                return lower * 1000
            share = (target - below) / (cumulative - below) if cumulative > below else 1.0
            return (lower + share * (bound - lower)) * 1000
        lower, below = bound, cumulative
    return lower * 1000


def _percentiles(values: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49] * 1000, cuts[98] * 1000


def swarm_part(args: argparse.Namespace) -> None:
    config = CoordinatorConfig(
        **UNLIMITED,
        default_step_units=args.nodes,  # roughly one unit per node per step
        lease_initial_unit_s=args.lease_s,
        standing_drop_grace=10**9,  # simulated nodes never deliver; their standing is not what is measured
        heartbeat_interval_s=args.heartbeat_s,
    )
    with postgres_server() as db_url:
        workdir = Path(tempfile.mkdtemp(prefix="coord-bench-pg-"))
        coordinator = start_coordinator(workdir, db_url=db_url, config=config, admin_token="bench")
        transport = httpx.HTTPTransport(limits=httpx.Limits(max_connections=args.threads))
        try:
            admin = AdminClient.at(coordinator.url, admin_token="bench")
            admin.create_run("swarm", Identity.generate().node_id, ContractSection(), bound_claims=False)
            nodes = [
                NodeClient.at(coordinator.url, Identity.generate(), transport=transport, retry=NO_RETRY)
                for _ in range(args.nodes)
            ]
            setup = time.monotonic()
            with ThreadPoolExecutor(args.threads) as pool:
                list(pool.map(lambda n: (n.register(), n.join("swarm", ContractSection())), nodes))
            setup = time.monotonic() - setup
            cpu_before = (_cpu_seconds(coordinator.process.pid), _postgres_cpu_seconds(), time.process_time())
            server_before = _server_histograms(coordinator.url)
            started = time.monotonic()
            recorder = open_loop(nodes, "swarm", args.seconds, args.heartbeat_s, args.lease_s, args.threads)
            wall = time.monotonic() - started
            cpu_after = (_cpu_seconds(coordinator.process.pid), _postgres_cpu_seconds(), time.process_time())
            server_after = _server_histograms(coordinator.url)
            requests, closed_s = closed_loop(nodes, "swarm", args.closed_seconds, args.threads)
            units = admin.reads.step_work("swarm", 0)
        finally:
            coordinator.kill()
            transport.close()

    offered = args.nodes * (1 / args.heartbeat_s + 1 / args.lease_s)
    total = sum(len(v) for v in recorder.latency.values())
    print(
        f"{args.nodes} nodes on Postgres · setup (register + join) {setup:.1f}s · open loop {wall:.0f}s at "
        f"{offered:.0f} requests/s offered (heartbeat every {args.heartbeat_s:g}s, lease every {args.lease_s:g}s)"
    )
    print(
        f"{'request':<12}{'count':>8}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}"
        f"{'server p50':>12}{'server p99':>12}"
    )
    for kind, values in sorted(recorder.latency.items()):
        p50, p99 = _percentiles(values)
        before, after = server_before[kind], server_after[kind]
        server = [_histogram_quantile(before, after, q) for q in (0.5, 0.99)]
        print(
            f"{kind:<12}{len(values):>8}{p50:>10.1f}{p99:>10.1f}{max(values) * 1000:>10.1f}"
            f"{server[0]:>12.1f}{server[1]:>12.1f}"
        )
    p50, p99 = _percentiles([v for values in recorder.latency.values() for v in values])
    print(f"{'all':<12}{total:>8}{p50:>10.1f}{p99:>10.1f}")
    print(f"served {total / wall:.1f} requests/s; answers: {recorder.outcomes}")
    print(
        f"units of the open step: leased {units.leased}, expired {units.expired} (nodes never deliver in this "
        "bench; expiry and re-issue are part of the load)"
    )
    coordinator_cpu, postgres_cpu, client_cpu = (
        after - before for after, before in zip(cpu_after, cpu_before, strict=True)
    )
    print(
        f"CPU seconds during the open loop ({wall:.0f}s wall, {os.cpu_count()} cores shared): coordinator "
        f"{coordinator_cpu:.1f} ({coordinator_cpu / wall:.0%} of a core, {coordinator_cpu / total * 1000:.2f} ms per "
        f"request) · postgres {postgres_cpu:.1f} · load generator {client_cpu:.1f}"
    )
    print(f"closed loop, {args.threads} senders: {requests / closed_s:.1f} requests/s")
    verdict = "met" if p99 < 100.0 else "missed"
    print(f"p99 < 100 ms goal: {verdict} ({p99:.1f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=["anchor", "swarm", "all"], default="all")
    parser.add_argument("--beats", type=int, default=400, help="heartbeats per measurement (anchor part)")
    parser.add_argument("--cycles", type=int, default=30, help="work cycles per measurement (anchor part)")
    parser.add_argument("--file-mib", type=float, default=1.0)
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes (swarm part)")
    parser.add_argument("--seconds", type=float, default=30.0, help="open-loop duration (swarm part)")
    parser.add_argument(
        "--closed-seconds", type=float, default=10.0, help="closed-loop duration (swarm part)"
    )
    parser.add_argument("--heartbeat-s", type=float, default=10.0, help="each node's heartbeat interval")
    parser.add_argument(
        "--lease-s", type=float, default=30.0, help="each node's interval between lease requests"
    )
    parser.add_argument("--threads", type=int, default=32, help="concurrent senders of the load generator")
    args = parser.parse_args()
    if args.part in ("anchor", "all"):
        anchor_part(args)
    if args.part in ("swarm", "all"):
        swarm_part(args)


if __name__ == "__main__":
    main()
