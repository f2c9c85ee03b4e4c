"""One version's way to a far region over the emulated WAN: relays with and without cut-through, with requests
parked for the next version, with small shards (issue 35).

The trainer's origin in us publishes a version every `--period` seconds (a ~4 MB model whose every weight moves
a little per step, so its delta is nearly as big: demo-wan's shape); a relay and a worker sit in asia behind
the demo-wan links (250 ms RTT, 1% loss, the region's 20 Mbit/s). Per version: when the relay held its signed
manifest, when it held the whole delta, when the worker installed the version; against the physical bound of
`demo --wan` (delta bytes over 20 Mbit/s plus the RTT). The arms (`ARMS`) run in one invocation: the relay
passing shards on cut-through or not, parking its requests for the next version's delta upstream or not,
demo-wan's 512 KiB shards or 128 KiB ones with twice the requests in flight; nothing else on the machine: the
broadcast path alone, without the swarm's CPU.

    sudo .venv/bin/python benchmarks/wan_broadcast.py [--versions 10] [--period 4] [--arms a,b]

Needs root (network namespaces, tc, nftables), like `demo --wan`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MODEL_FLOATS = 1_000_000  # 4 MB of float32, demo-wan's checkpoint size
# arm → (relay passes shards on cut-through, shard size, shard requests a relay keeps in flight upstream, relay
# parks the next version's delta requests upstream); 512 KiB is demo-wan's shard size, 8 the relay's concurrency
ARMS = {
    "store-and-forward": (False, 512 * 1024, 8, False),
    "cut-through": (True, 512 * 1024, 8, False),
    "parked": (True, 512 * 1024, 8, True),  # the relay's defaults
    "small-shards": (False, 128 * 1024, 16, False),
}


def write_versions(root: Path, count: int) -> None:
    """step_k/model.bin: weights that all move a little each step (an optimizer step's pattern)."""
    rng = np.random.default_rng(0)
    weights = rng.standard_normal(MODEL_FLOATS).astype(np.float32)
    for version in range(count):
        directory = root / f"step_{version}"
        directory.mkdir(parents=True)
        (directory / "model.bin").write_bytes(weights.tobytes())
        (directory / "config.json").write_text('{"hidden_size": 128}')
        weights = weights + (rng.standard_normal(MODEL_FLOATS) * 1e-3).astype(np.float32)


def role_origin(args: argparse.Namespace) -> None:
    from swarmrl.configs.shardcast import OriginConfig
    from swarmrl.identity import Identity
    from swarmrl.shardcast import Origin

    root = Path(args.dir) / "origin"
    origin = Origin(
        root,
        Identity.load(Path(args.dir) / "trainer.pem"),
        "bench",
        OriginConfig(host="0.0.0.0", port=args.port, shard_size=ARMS[args.arm][1]),
    )
    origin.serve_in_thread()
    staged = Path(args.dir) / "versions"
    for version in range(args.versions):
        shutil.copytree(staged / f"step_{version}", root / f"step_{version}")
        manifest = origin.publish(root / f"step_{version}", version)
        delta = sum(s.length for s in manifest.delta.shards) if manifest.delta else 0
        print(json.dumps({"published": version, "t": time.time(), "delta_bytes": delta}), flush=True)
        time.sleep(args.period if version else 8.0)  # the first: the relay and worker fetch it whole
    time.sleep(5.0)


def role_relay(args: argparse.Namespace) -> None:
    from swarmrl.configs.shardcast import RelayConfig
    from swarmrl.shardcast.relay import Relay

    config = RelayConfig(
        upstreams=[args.upstream],
        host="0.0.0.0",
        port=args.port,
        data_dir=Path(args.dir) / f"relay-{args.arm}",
        cut_through=ARMS[args.arm][0],
        concurrency=ARMS[args.arm][2],
        park_next=ARMS[args.arm][3],
    )
    relay = Relay(config, args.key)
    notify = relay.notifier.notify

    def watched() -> None:  # every manifest and verified shard passes here
        for version in relay.store.versions():
            entry = relay.store.get(version)
            if entry is None or entry.manifest.delta is None:
                continue
            done = {s.index for s in entry.manifest.delta.shards} <= entry.verified
            print(json.dumps({"version": version, "t": time.time(), "delta_held": done}), flush=True)
        notify()

    relay.notifier.notify = watched

    async def serve() -> None:
        await relay.start()
        await asyncio.Event().wait()

    asyncio.run(serve())


def role_worker(args: argparse.Namespace) -> None:
    from swarmrl.configs.shardcast import ClientConfig
    from swarmrl.shardcast.client import CheckpointFetcher
    from swarmrl.shardcast.prefetch import Prefetch

    fetcher = CheckpointFetcher(
        [args.upstream], args.key, Path(args.dir) / f"worker-{args.arm}", ClientConfig(), "bench"
    )
    install = fetcher.install

    def timed(manifest, raw):
        installed = install(manifest, raw)
        print(json.dumps({"installed": manifest.version, "t": time.time()}), flush=True)
        return installed

    fetcher.install = timed
    Prefetch(fetcher, threading.Event()).run()


def run_arm(world, arm: str, work: Path, args: argparse.Namespace, key: str) -> dict:
    python = sys.executable
    me = str(Path(__file__).resolve())
    common = ["--dir", str(work), "--arm", arm, "--key", key]
    logs = {name: open(work / f"{arm}-{name}.log", "w") for name in ("origin", "relay", "worker")}
    relay = subprocess.Popen(
        [
            *world.prefix("relay"),
            python,
            me,
            "--role",
            "relay",
            "--upstream",
            world.url("origin"),
            "--port",
            "8900",
            *common,
        ],
        stdout=logs["relay"],
        stderr=subprocess.STDOUT,
    )
    worker = subprocess.Popen(
        [*world.prefix("worker"), python, me, "--role", "worker", "--upstream", world.url("relay"), *common],
        stdout=logs["worker"],
        stderr=subprocess.STDOUT,
    )
    try:
        time.sleep(3.0)
        subprocess.run(
            [
                *world.prefix("trainer"),
                python,
                me,
                "--role",
                "origin",
                "--port",
                "8800",
                "--versions",
                str(args.versions),
                "--period",
                str(args.period),
                *common,
            ],
            stdout=logs["origin"],
            stderr=subprocess.STDOUT,
            check=True,
            timeout=120 + args.versions * args.period,
        )
    finally:
        for process in (relay, worker):
            process.terminate()
            process.wait(timeout=10)
        for log in logs.values():
            log.close()
    shutil.rmtree(work / "origin", ignore_errors=True)

    def rows(name: str) -> list[dict]:
        return [json.loads(line) for line in open(work / f"{arm}-{name}.log") if line.startswith("{")]

    published = {r["published"]: r for r in rows("origin")}
    manifest_at, delta_at = {}, {}
    for r in rows("relay"):
        manifest_at.setdefault(r["version"], r["t"])
        if r["delta_held"]:
            delta_at.setdefault(r["version"], r["t"])
    installed_at = {r["installed"]: r["t"] for r in rows("worker")}
    figures: dict[str, list[float]] = {"manifest": [], "delta": [], "installed": [], "bound": []}
    for version, row in sorted(published.items()):
        if version == 0 or version not in installed_at:
            continue  # version 0 travels whole, before the clock matters
        figures["manifest"].append(manifest_at[version] - row["t"])
        figures["delta"].append(delta_at[version] - row["t"])
        figures["installed"].append(installed_at[version] - row["t"])
        figures["bound"].append(row["delta_bytes"] * 8 / 20e6 + 0.25)
    return {name: statistics.median(values) for name, values in figures.items()} | {
        "versions": len(figures["installed"])
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--period", type=float, default=4.0)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    parser.add_argument("--role", choices=["origin", "relay", "worker"])
    for option in ("--dir", "--arm", "--key", "--upstream"):
        parser.add_argument(option)
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.role is not None:
        {"origin": role_origin, "relay": role_relay, "worker": role_worker}[args.role](args)
        return 0

    from swarmrl.configs.wan import WanConfig
    from swarmrl.identity import Identity
    from swarmrl_lab.wan import netns
    from swarmrl_lab.wan.world import Machine, Service, World

    try:
        netns.check_available()
    except netns.WanUnavailable as exc:
        print(f"wan_broadcast: {exc}", file=sys.stderr)
        return 2
    wan = WanConfig.model_validate(tomllib.loads((REPO / "configs" / "demo-wan.toml").read_text())["wan"])
    machines = [
        Machine("trainer", "us", wan.server_mbit),
        Machine("relay", "asia", wan.server_mbit),
        Machine("worker", "asia", 20),
    ]
    services = [Service("origin", "trainer", 8800), Service("relay", "relay", 8900)]
    results = {}
    with tempfile.TemporaryDirectory(prefix="wan-broadcast-") as tmp:
        work = Path(tmp)
        trainer = Identity.generate()
        trainer.save(work / "trainer.pem")
        write_versions(work / "versions", args.versions)
        with World(wan, machines, services, work / "world") as world:
            for arm in args.arms.split(","):
                results[arm] = run_arm(world, arm, work, args, trainer.node_id)
                print(
                    f"{arm}: medians over {results[arm]['versions']} versions: relay holds the manifest "
                    f"{results[arm]['manifest']:.2f} s, the delta {results[arm]['delta']:.2f} s; worker installed "
                    f"{results[arm]['installed']:.2f} s = {results[arm]['installed'] / results[arm]['bound']:.2f}x "
                    f"the bound {results[arm]['bound']:.2f} s",
                    flush=True,
                )
    if "store-and-forward" in results:
        before = results["store-and-forward"]["installed"]
        for arm, figures in results.items():
            if arm != "store-and-forward":
                after = figures["installed"]
                print(
                    f"{arm} / store-and-forward, worker installed: {after / before:.2f}x ({after - before:+.2f} s)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
