"""The coordinator under 1,500 slow unauthenticated sockets plus signed-request load (issue 20, item 5).

A real coordinator process (SQLite) on 127.0.0.1. Signed load: --threads worker identities, each sending a
heartbeat every --gap seconds for --seconds, no client retries, latency of each measured. Attacker (its own
process) runs slowloris.py's loop: --sockets connections, each with a half-sent request head; every --cycle
seconds (slowloris.py: 15) one more header byte on each, and the sockets the server closed are recreated; in
one arm from --addresses loopback addresses (127.0.0.2 and up), in another from a single one. The server's open connections are counted from
/proc/net/tcp (server-side sockets of its port, ESTABLISHED or CLOSE_WAIT, so including connections still in
the kernel's accept queue) and from the guard's own gauge on /metrics (the connections the server holds), twice
a second.

    .venv/bin/python benchmarks/coordinator_slow_clients_bench.py [--sockets 1500] [--seconds 20]

It imports only what the coordinator had before the slow-client guard, so running it with PYTHONPATH set to an
older source tree measures the unguarded server the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from swarmrl.configs.contract import ContractSection
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.client import AdminClient, NodeClient
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl_lab.coordinator_double import start_coordinator

PARTIAL_HEAD = b"POST /v1/runs/bench/heartbeat HTTP/1.1\r\nHost: coordinator\r\nContent-Type: application/json\r\nX-Pad: "


# ---- the attacker (its own process) -------------------------------------------------------------------
def attack(port: int, sockets: int, addresses: list[str], seconds: float, cycle: float) -> None:
    """slowloris.py's loop: hold `sockets` half-sent requests; every `cycle` seconds send each one more header
    byte and recreate the sockets the server closed."""
    chooser = selectors.DefaultSelector()
    opened = recreated = failed = 0

    def open_one(index: int) -> None:
        nonlocal opened, failed
        try:
            sock = socket.create_connection(
                ("127.0.0.1", port), timeout=2, source_address=(addresses[index % len(addresses)], 0)
            )
            sock.sendall(PARTIAL_HEAD)
            sock.setblocking(False)
        except OSError:
            failed += 1
            return
        chooser.register(sock, selectors.EVENT_READ, index)
        opened += 1

    for index in range(sockets):
        open_one(index)
    print("attacking", flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(cycle)
        held = {key.data for key in chooser.get_map().values()}
        for key, _ in chooser.select(timeout=0):
            sock = key.fileobj
            with contextlib.suppress(OSError):
                if sock.recv(4096):  # an answer (a 4xx) comes before the close
                    continue
            chooser.unregister(sock)
            sock.close()
            held.discard(key.data)
        for key in list(chooser.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.send(b"a")
        for index in set(range(sockets)) - held:
            recreated += 1
            open_one(index)
    print(f"done opened={opened} recreated={recreated} failed={failed}", flush=True)


# ---- measurement (this process) -----------------------------------------------------------------------
def server_connections(port: int) -> int:
    """Server-side TCP sockets of `port` that are open (ESTABLISHED or CLOSE_WAIT)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] in ("01", "08"):
                    count += 1
    return count


def guard_gauge(url: str) -> int | None:
    """The server's own count of the connections it holds (None: a server without the guard)."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith("swarmrl_coordinator_open_connections "):
            return int(float(line.split()[1]))
    return None


@dataclass
class Samples:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0

    def row(self) -> str:
        if not self.latencies:
            return f"{0:>6} {self.errors:>6} {'-':>8} {'-':>8}"
        p99 = (
            statistics.quantiles(self.latencies, n=100)[98] if len(self.latencies) > 1 else self.latencies[0]
        )
        p50 = statistics.median(self.latencies)
        return f"{len(self.latencies):>6} {self.errors:>6} {1000 * p50:>8.1f} {1000 * p99:>8.1f}"


def signed_load(clients: list[NodeClient], newcomer: Identity, url: str, seconds: float, gap: float):
    """Heartbeats of the kept-alive clients, and of a node that opens a new connection for each request (a
    node joining or reconnecting: it needs the server to accept a new connection)."""
    kept, fresh = Samples(), Samples()
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def timed(samples: Samples, call) -> None:
        started = time.perf_counter()
        try:
            call()
        except Exception:  # every failure of a signed request counts, whatever its kind
            with lock:
                samples.errors += 1
        else:
            with lock:
                samples.latencies.append(time.perf_counter() - started)

    def keep_alive(client: NodeClient) -> None:
        while time.monotonic() < stop_at:
            timed(kept, lambda: client.heartbeat("bench", policy_step=0))
            time.sleep(gap)

    def reconnecting() -> None:
        while time.monotonic() < stop_at:

            def beat() -> None:
                with NodeClient.at(url, newcomer, retry=NO_RETRY, timeout_s=10) as client:
                    client.heartbeat("bench", policy_step=0)

            timed(fresh, beat)
            time.sleep(0.25)

    threads = [threading.Thread(target=keep_alive, args=(c,)) for c in clients]
    threads.append(threading.Thread(target=reconnecting))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return kept, fresh


def run_arm(name: str, coordinator, clients, newcomer, args, addresses: list[str] | None) -> None:
    attacker = None
    if addresses:
        attacker = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--attack",
                str(coordinator.port),
                str(args.sockets),
                ",".join(addresses),
            ]
            + [str(args.seconds + 30), str(args.cycle)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert attacker.stdout is not None
        assert "attacking" in attacker.stdout.readline()
    samples: list[int] = []
    held: list[int] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.5):
            samples.append(server_connections(coordinator.port))
            gauge = guard_gauge(coordinator.url)
            if gauge is not None:
                held.append(gauge)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        kept, fresh = signed_load(clients, newcomer, coordinator.url, args.seconds, args.gap)
    finally:
        sampling.set()
        sampler.join()
        if attacker is not None:
            attacker.terminate()
            attacker.wait(10)
    print(
        f"{name:<34} {kept.row()} {fresh.row()} {max(samples):>6} {statistics.mean(samples):>6.0f} "
        f"{max(held) if held else '-':>6} {statistics.mean(held) if held else float('nan'):>6.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sockets", type=int, default=1500)
    parser.add_argument("--addresses", type=int, default=15, help="attacker loopback addresses 127.0.0.2…")
    parser.add_argument("--threads", type=int, default=8, help="signed clients")
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between one client's heartbeats")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each arm")
    parser.add_argument("--cycle", type=float, default=2.0, help="attacker's cycle (slowloris.py: 15 s)")
    parser.add_argument(
        "--server-fd-limit",
        type=int,
        default=1024,
        help="the coordinator's open-file limit (a common default)",
    )
    parser.add_argument("--attack", nargs=5, metavar=("PORT", "SOCKETS", "ADDRESSES", "SECONDS", "CYCLE"))
    args = parser.parse_args()
    if args.attack:
        port, sockets, addresses, seconds, cycle = args.attack
        attack(int(port), int(sockets), addresses.split(","), float(seconds), float(cycle))
        return

    work = Path(tempfile.mkdtemp(prefix="coord-slow-"))
    config = CoordinatorConfig(requests_per_minute=1_000_000)
    # The coordinator runs under a common default open-file limit (children inherit it at start).
    own_limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (args.server_fd_limit, own_limit[1]))
    try:
        coordinator = start_coordinator(work, config=config, admin_token="bench")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, own_limit)
    try:
        admin = AdminClient.at(coordinator.url, admin_token="bench")
        admin.create_run("bench", Identity.generate().node_id, ContractSection())
        clients = [
            NodeClient.at(coordinator.url, Identity.generate(), retry=NO_RETRY) for _ in range(args.threads)
        ]
        newcomer = Identity.generate()
        for client in [*clients, NodeClient.at(coordinator.url, newcomer)]:
            client.register()
            client.join("bench", ContractSection())
        print(
            f"coordinator {coordinator.url} (open-file limit {args.server_fd_limit}); {args.threads} kept-alive "
            f"signed clients, a heartbeat every {args.gap:g} s each; one reconnecting client, a heartbeat on a "
            f"new connection every 0.25 s; {args.seconds:g} s per arm"
        )
        print(
            f"{'':<34} {'kept-alive clients':^30} {'reconnecting client':^30} {'TCP (kernel)':^13} "
            f"{'held (guard)':^13}"
        )
        print(
            f"{'arm':<34}"
            + f" {'ok':>6} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8}" * 2
            + f" {'max':>6} {'mean':>6}" * 2
        )
        run_arm("signed load alone", coordinator, clients, newcomer, args, None)
        many = [f"127.0.0.{2 + i}" for i in range(args.addresses)]
        run_arm(
            f"+ {args.sockets} slowloris, {args.addresses} addresses",
            coordinator,
            clients,
            newcomer,
            args,
            many,
        )
        run_arm(f"+ {args.sockets} slowloris, 1 address", coordinator, clients, newcomer, args, ["127.0.0.2"])
        time.sleep(1.0)
        print(f"open connections 1 s after the last attack: {server_connections(coordinator.port)}")
    finally:
        coordinator.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
