"""`swarmrl demo --wan`: the swarm of `demo --swarm` spread over emulated regions, measured against loopback.

The first region of `[wan] regions` holds the coordinator, the trainer with its SHARDCAST origin and the
validators; every region gets a relay; workers sit in `worker_regions` (mixed speeds: `[swarm] slow_workers`
run `slowdown` times slower). Each role is a machine of `swarmrl_lab.wan.World` (its own namespace and access
link) and reaches the coordinator, the origin and the relays at one virtual address each. Churn kills and
restarts `churn.worker_fraction` of the workers and `churn.relays` relays during the run.

With `baseline = true` the same swarm (same config, same workers, no emulation, no churn) runs on 127.0.0.1
first. Both arms' figures go to `runs/<name>/wan_result.json` and a table (see `wan_report.py`); each arm's
own run directory is `runs/<name>/lan` and `runs/<name>/wan`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from rich.console import Console
from rich.table import Table

from swarmrl.configs import RunConfig
from swarmrl.launch.swarm import SwarmNetwork, run_swarm_demo, validator_names
from swarmrl.rundir import RunDir, write_json_atomic
from swarmrl_lab.wan.cpu_use import same_work_ratio
from swarmrl_lab.wan.netns import check_available
from swarmrl_lab.wan.report import arm_figures
from swarmrl_lab.wan.watch import SwarmWatch
from swarmrl_lab.wan.world import Machine, Service, World

COORDINATOR_PORT, ORIGIN_PORT, RELAY_PORT = 8700, 8800, 8900
THROUGHPUT_GOAL = 0.8  # WAN steps/min over loopback's
BROADCAST_GOAL = 1.5  # broadcast median over its physical bound


def wan_machines(config: RunConfig) -> tuple[list[Machine], list[Service]]:
    """Every role of the swarm as a machine of its region, and the services every machine reaches."""
    wan = config.wan
    home = wan.regions[0].name
    servers = ["coordinator", "trainer", *validator_names(config.swarm.validators)]
    machines = [Machine(name, home, wan.server_mbit) for name in servers]
    machines += [Machine(f"relay-{i}", region.name, wan.server_mbit) for i, region in enumerate(wan.regions)]
    workers = [f"worker-{i}" for i in range(config.swarm.honest_workers)]
    workers += [f"cheater-{i}" for i in range(config.swarm.cheating_workers)]
    for i, name in enumerate(workers):
        region = wan.worker_regions[i % len(wan.worker_regions)]
        machines.append(Machine(name, region, wan.worker_mbit[i % len(wan.worker_mbit)]))
    services = [
        Service("coordinator", "coordinator", COORDINATOR_PORT),
        Service("origin", "trainer", ORIGIN_PORT),
    ]
    services += [Service(f"relay-{i}", f"relay-{i}", RELAY_PORT) for i in range(len(wan.regions))]
    return machines, services


class WanNetwork(SwarmNetwork):
    """Each role on its machine of `world`; every service at its one URL."""

    def __init__(self, world: World) -> None:
        super().__init__(bind_host="0.0.0.0", coordinator_port=COORDINATOR_PORT)
        self.world = world

    def prefix(self, role: str) -> list[str]:
        return self.world.prefix(role)

    def coordinator_url(self, port: int) -> str:
        return self.world.url("coordinator")

    def relay_args(self, index: int) -> list[str]:
        name = f"relay-{index}"
        return ["--host", "0.0.0.0", "--port", str(RELAY_PORT), "--advertise", self.world.url(name)]


def arm_config(config: RunConfig, arm: str, world: World | None = None) -> RunConfig:
    """The run config of one arm: its own run directory under runs/<name>/, a relay per region; on the WAN
    the origin listens on its machine and is advertised at its one URL."""
    data = config.model_dump(mode="json")
    data["run"].update(root=str(config.run.directory), name=arm)
    data["swarm"]["relays"] = len(config.wan.regions)
    if world is not None:
        data["shardcast"].update(
            origin_host="0.0.0.0", origin_port=ORIGIN_PORT, advertise_url=world.url("origin")
        )
    return RunConfig.model_validate(data)


def physical_bound(world: World, worker: str, nbytes: int) -> float:
    """A checkpoint of `nbytes` reaching `worker` through the relay of its region: bytes over the narrowest
    link on the way, plus the worker's round trip to the origin (SPEC §10)."""
    regions = [r.name for r in world.wan.regions]
    region = world.region_of(worker)
    relay = f"relay-{regions.index(region)}"
    mbit = min(world.bottleneck_mbit("trainer", relay), world.bottleneck_mbit(relay, worker))
    return nbytes * 8 / (mbit * 1e6) + world.wan.path(regions[0], region).rtt_ms / 1000


def run_wan_demo(config: RunConfig, console: Console | None = None) -> dict:
    """Loopback first (when `baseline`), then the emulated WAN with churn; writes and returns wan_result.json."""
    console = console or Console()
    check_available()
    root = config.run.directory
    root.mkdir(parents=True, exist_ok=True)
    result: dict = {
        "regions": [r.name for r in config.wan.regions],
        "links": config.wan.model_dump(mode="json"),
    }
    if config.wan.baseline:
        console.rule("loopback (127.0.0.1, no churn)")
        lan = arm_config(config, "lan")
        watch = SwarmWatch()
        load = os.getloadavg()[0]
        run_swarm_demo(lan, console, observer=watch)
        result["lan"] = arm_figures(watch, RunDir(lan.run.directory), lan.contract.async_level, None)
        result["lan"]["load_1min"] = [load, os.getloadavg()[0]]  # a shared machine: what else ran
    console.rule(f"emulated WAN: {', '.join(result['regions'])}")
    machines, services = wan_machines(config)
    with World(config.wan, machines, services, root / "wan-net") as world:
        wan = arm_config(config, "wan", world)
        links = {
            proxy.pid: f"link-{region.name}"
            for proxy, region in zip(world.proxies, config.wan.regions, strict=True)
        }
        watch = SwarmWatch(churn=config.wan.churn, links=links)
        load = os.getloadavg()[0]
        with world.operator():
            run_swarm_demo(wan, console, network=WanNetwork(world), observer=watch)
        result["wan"] = arm_figures(
            watch,
            RunDir(wan.run.directory),
            wan.contract.async_level,
            functools.partial(physical_bound, world),
        )
        result["wan"]["load_1min"] = [load, os.getloadavg()[0]]
    result["wan"]["lease_period_s"] = config.coordinator.lease_target_s + config.coordinator.lease_grace_s
    if "cpu" in result.get("lan", {}) and "cpu" in result["wan"]:
        result["wan"]["cpu"]["same_work_vs_loopback"] = same_work_ratio(
            result["wan"]["cpu"], result["lan"]["cpu"]
        )
    result["goals"] = goals(result)
    write_json_atomic(root / "wan_result.json", result)
    console.print(result_table(result))
    console.print(f"written: {Path(root) / 'wan_result.json'}")
    for name, met in result["goals"].items():
        if not met:
            console.print(f"[red]goal missed:[/red] {name}")
    return result


def goals(result: dict) -> dict[str, bool]:
    wan, lan = result["wan"], result.get("lan")
    met = {
        "0 honest files lost": wan["honest_files_lost"] == 0,
        "no unit trained twice": wan["units_trained_twice"] == 0,
        "every restarted node back to work within one lease period": all(
            s is not None and s <= wan["lease_period_s"] for s in _back(wan["churn"]).values()
        ),
    }
    if wan["broadcast_s"] is not None and wan.get("broadcast_bound_s"):
        met[f"broadcast median ≤ {BROADCAST_GOAL}× the physical bound"] = (
            wan["broadcast_s"] <= BROADCAST_GOAL * wan["broadcast_bound_s"]
        )
    if lan is not None and lan["steps_per_min"] and wan["steps_per_min"] is not None:
        met[f"WAN throughput ≥ {THROUGHPUT_GOAL}× loopback"] = (
            wan["steps_per_min"] >= THROUGHPUT_GOAL * lan["steps_per_min"]
        )
    return met


def _back(churn: dict) -> dict[str, float | None]:
    """Seconds from each restart until the node works again: a relay holding a new version, a worker asking
    for work (whether a unit is left for it then is the run's, not the node's)."""
    return {
        role: churn["ready_s"].get(role) if role in churn["ready_s"] else seconds
        for role, seconds in churn["back_to_work_s"].items()
    }


def table_cell(value: object, digits: int = 2) -> str:
    """A figure of a result table: `-` for none, floats to `digits`, a list as `a → b` (one digit each)."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return " → ".join(table_cell(v, 1) for v in value)
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def result_table(result: dict) -> Table:
    lan, wan = result.get("lan", {}), result["wan"]
    table = Table(title=f"the swarm on loopback and across {', '.join(result['regions'])}")
    for column in ("figure", "loopback", "WAN"):
        table.add_column(column, justify="right")
    rows = [
        ("steps per minute", "steps_per_min"),
        ("broadcast median (s)", "broadcast_s"),
        ("physical bound (s)", "broadcast_bound_s"),
        ("worker idle fraction", "worker_idle_fraction"),
        ("policy lag (mean)", "policy_lag_mean"),
        ("honest files lost", "honest_files_lost"),
        ("units trained twice", "units_trained_twice"),
        ("machine load (1 min, start → end)", "load_1min"),
    ]
    for label, key in rows:
        table.add_row(label, table_cell(lan.get(key)), table_cell(wan.get(key)))
    cpu = [arm.get("cpu") for arm in (lan, wan)]
    table.add_row(
        f"CPU used, core-s (share of {os.cpu_count()} cores)",
        *(f"{table_cell(c['core_s'], 1)} ({table_cell(c['cores_busy'])})" if c else "-" for c in cpu),
    )
    table.add_row(
        "of which link proxies, core-s",
        "-",
        table_cell((cpu[1] or {}).get("by_role", {}).get("link proxies"), 1),
    )
    table.add_row(
        "trainer + validators, core-s (the same work)",
        *(table_cell((c or {}).get("same_work_s"), 1) for c in cpu),
    )
    table.add_row("machine steal time (s)", *(table_cell((c or {}).get("steal_s"), 1) for c in cpu))
    churn = wan["churn"]
    back = [s for s in churn["back_to_work_s"].values() if s is not None]
    table.add_row("nodes killed / back", "-", f"{churn['nodes_killed']} / {churn['nodes_rejoined']}")
    ready = [s for s in churn.get("ready_s", {}).values() if s is not None]
    table.add_row("slowest restarted worker ready (s)", "-", table_cell(max(ready, default=None)))
    table.add_row("slowest back to work (s)", "-", table_cell(max(back, default=None)))
    for relay, seconds in wan["relay_holding_s"].items():
        table.add_row(
            f"{relay} holds a version after (s)",
            table_cell(lan.get("relay_holding_s", {}).get(relay)),
            table_cell(seconds),
        )
    return table
