"""Issue 57's attacks 1 and 2 against the coordinator, each beside its attack-free anchor, in one run.

One in-process coordinator per arm (real HTTP on 127.0.0.1, a clock the script moves), run "r" with the default
contract; a proven honest worker, the operator's relay (`operator_relays`) and, where a view is measured, a
banned cheater.

- anchor: the honest worker uploads `--honest-files` files (each accepted), a newcomer uploads its first; no
  attacker.
- attack 1 (disk fill with rejected files): `--keys` throwaway keys, one after another through HTTP, each
  registers, joins, leases a unit, uploads `--junk-kib` KiB of junk with its submission and is banned at its
  hard rejection (the issue's attack: each key banned at once), one second of the run's clock per key; the
  quota is half the junk's bytes. The honest worker uploads a file after every `--keys / --honest-files` keys,
  and a newcomer uploads its first file at the end. Printed: honest uploads refused, the junk's bytes on disk
  at most at once (sampled while each file waits for its verdict, and after it), the bytes the quota counted
  at the end, and the bytes of rejected files still on disk after the last key and one janitor period later.
- attack 2 (the operator's view eclipsed by ground keys): `--ground` members whose ids start with `00`, a tenth
  of them relays claiming version 999999, written straight into the database (the HTTP path of a join is not
  what is measured); then, while they are alive and after they fell silent, which of the honest worker, the
  operator's relay and the banned cheater each view shows: the nodes table, the relays panel (and the tree it
  is drawn from), `GET /v1/runs/r/nodes` and `swarmrl status`, and what each view says it left out.

    PYTHONPATH=src .venv/bin/python benchmarks/trust_storage_views_bench.py [--keys 1000] [--ground 10000]
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

import httpx
from rich.console import Console

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.rules.janitor import PURGE_EVERY_S
from swarmrl.coordinator.status import summary_view
from swarmrl.identity import Identity
from swarmrl_lab import crowd
from swarmrl_lab.coordinator_double import ClockedCoordinator, accept, leased_submit

RELAY_REPORT = {
    "url": "http://127.0.0.1:8901",
    "upstreams": ["http://127.0.0.1:8900"],
    "versions": [{"version": 3, "complete": True, "bytes": 1000}],
}


def world_for(root: Path, name: str, relay: Identity, **config) -> ClockedCoordinator:
    base = dict(
        requests_per_minute=1_000_000,
        uploads_per_hour=1_000_000,
        hard_rejects_before_ban=1,
        spot_check_fraction=1.0,
        lease_ahead_steps=0,
        default_step_units=10_000,  # one step holds the whole arm: the trainer never has to open the next
        operator_relays=[relay.node_id],
    )
    return ClockedCoordinator(root / name, CoordinatorConfig(**{**base, **config}))


def honest_members(world: ClockedCoordinator, relay_identity: Identity):
    """A proven worker and the operator's relay, reporting."""
    worker = world.node()
    accept(world.validator, leased_submit(worker, "r", b"the worker's first file"))
    relay = world.node(role="relay", identity=relay_identity)
    relay.heartbeat("r", relay=RELAY_REPORT)
    return worker, relay


def honest_upload(world: ClockedCoordinator, node, data: bytes) -> bool:
    """One honest file: uploaded, submitted and accepted; False when the upload was refused."""
    try:
        submission = leased_submit(node, "r", data)
    except CoordinatorError as exc:
        print(f"  honest upload refused: {exc.kind}: {exc.detail}")
        return False
    accept(world.validator, submission)
    return True


def parquet_bytes(world: ClockedCoordinator, node_ids: set[str] | None = None) -> int:
    """Bytes of the run's files on disk (of `node_ids` alone when given: a file's directory is its node's)."""
    return sum(
        p.stat().st_size
        for p in world.storage.rglob("*.parquet")
        if node_ids is None or p.parent.name in node_ids
    )


def counted_bytes(world: ClockedCoordinator) -> int:
    text = httpx.get(f"{world.url}/metrics").text
    (line,) = [x for x in text.splitlines() if x.startswith('swarmrl_coordinator_storage_bytes{run="r"}')]
    return int(float(line.split()[-1]))


def storage_arm(root: Path, name: str, keys: int, honest_files: int, junk: int, quota: int) -> dict:
    relay_identity = Identity.generate()
    world = world_for(root, name, relay_identity, storage_quota_bytes=quota)
    started = time.perf_counter()
    try:
        worker, relay = honest_members(world, relay_identity)
        tried = refused = 0
        every = max(1, keys // honest_files) if keys else 1
        attackers: set[str] = set()
        peak = 0
        for i in range(max(keys, honest_files)):
            if i < keys:
                key = world.node()
                attackers.add(key.node_id)
                forged = leased_submit(key, "r", i.to_bytes(4, "big") * (junk // 4))
                peak = max(peak, parquet_bytes(world, attackers))  # its file waits for its verdict
                world.validator.post_verdict(forged.id, accept=False, check="upload_hash", reason="junk")
                world.wait(1.0, worker, relay)
            if i % every == 0 and tried < honest_files:
                tried += 1
                refused += not honest_upload(
                    world, worker, hashlib.sha256(f"{name} {i}".encode()).digest() * 64
                )
        tried += 1
        refused += not honest_upload(world, world.node(), b"a newcomer's first file")
        counted = counted_bytes(world)
        on_disk = parquet_bytes(world, attackers)
        world.wait(PURGE_EVERY_S + 1, worker, relay)
        return {
            "honest uploads": f"{tried - refused}/{tried} accepted",
            "honest refused": refused,
            "junk on disk at most at once (bytes)": peak,
            "junk on disk after the last key (bytes)": on_disk,
            "bytes the quota counts at the end": counted,
            "rejected files' bytes on disk one janitor period later": parquet_bytes(world, attackers),
            "seconds": round(time.perf_counter() - started, 1),
        }
    finally:
        world.close()


def shown(summary, world: ClockedCoordinator, ids: dict[str, str]) -> dict[str, str]:
    """Which of the named honest members each view shows."""
    console = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(summary_view(summary, world.url))
    text = console.export_text()
    nodes = {n.node_id for n in summary.nodes}
    relays = {r.node_id for r in summary.relays}
    listed = {m["node_id"] for m in httpx.get(f"{world.url}/v1/runs/r/nodes").json()}
    views = {
        "nodes table": nodes,
        "GET /nodes": listed,
        "swarmrl status": {i for i in ids.values() if i[:12] in text},
    }
    out = {
        view: ", ".join(name for name, i in ids.items() if i in seen) or "none"
        for view, seen in views.items()
    }
    out["relays panel + tree"] = "relay" if ids["relay"] in relays else "none"
    out["nodes left out"] = str(summary.nodes_left_out)
    out["relays left out"] = str(summary.relays_left_out)
    return out


def views_arm(root: Path, name: str, ground: int) -> dict:
    relay_identity = Identity.generate()
    world = world_for(root, name, relay_identity)
    started = time.perf_counter()
    try:
        worker, relay = honest_members(world, relay_identity)
        cheater = world.node()
        forged = leased_submit(cheater, "r", b"a forged file")
        world.validator.post_verdict(forged.id, accept=False, check="upload_hash", reason="forged")
        ids = {"worker": worker.node_id, "relay": relay.node_id, "banned cheater": cheater.node_id}
        state, now = world.app.state.coordinator, world.clock()
        keys = crowd.ground_ids(ground, prefix="00")
        relays = keys[: ground // 10]
        crowd.add_members(state, "r", keys[len(relays) :], now=now)
        crowd.add_members(state, "r", relays, now=now, role="relay")
        crowd.add_relay_reports(state, "r", relays, now=now, version=999_999)
        out = {"alive: " + k: v for k, v in shown(world.admin.reads.summary("r"), world, ids).items()}
        world.wait(120.0, worker, relay)
        out |= {"silent: " + k: v for k, v in shown(world.admin.reads.summary("r"), world, ids).items()}
        out["seconds"] = round(time.perf_counter() - started, 1)
        return out
    finally:
        world.close()


def report(title: str, figures: dict) -> None:
    print(f"\n{title}")
    for name, value in figures.items():
        print(f"  {name}: {value:,}" if isinstance(value, int) else f"  {name}: {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1000, help="throwaway keys of attack 1 (at least 1)")
    parser.add_argument("--junk-kib", type=int, default=64, help="KiB of junk each throwaway key uploads")
    parser.add_argument("--honest-files", type=int, default=20, help="files the honest worker uploads")
    parser.add_argument("--ground", type=int, default=10_000, help="ground keys of attack 2")
    args = parser.parse_args()
    junk = args.junk_kib * 1024
    with tempfile.TemporaryDirectory(prefix="trust-bench-") as tmp:
        root = Path(tmp)
        quota = args.keys * junk // 2  # the junk is twice the quota
        anchor = storage_arm(root, "anchor", 0, args.honest_files, junk, quota)
        anchor.pop("junk on disk at most at once (bytes)")
        report("anchor (no attacker): honest uploads", anchor)
        report(f"attack 1: {args.keys:,} throwaway keys, each banned at once", storage_arm(
            root, "attack1", args.keys, args.honest_files, junk, quota
        ))  # fmt: skip
        report("anchor (no ground keys): what each view shows", views_arm(root, "views-anchor", 0))
        report(f"attack 2: {args.ground:,} ground keys (ids 00…)", views_arm(root, "attack2", args.ground))


if __name__ == "__main__":
    main()
