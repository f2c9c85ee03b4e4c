"""`swarmrl demo --islands --wan`: the trainer islands of `demo --islands`, each on a machine of an emulated
region, merging across the WAN's links; with `[wan] baseline` the same islands on loopback first.

Island i sits in `wan.island_region(i)` (us and asia unless `wan.island_regions` says otherwise: demo-wan's
narrowest path) and the islands' torchft lighthouse in the first region. Every merge's quorum, collectives and
state transfers cross the emulated paths: islands reach each other at their machines' own addresses, which the
emulator's routers carry over the link proxies (`swarmrl_lab.wan.world`). Per arm, from each island's merges.jsonl
and metrics: the traffic between islands, the seconds of each merge, and trainer utilisation, the share of the
trainer's busy time (its steps, merges included) not spent blocked in a merge: OpenDiLoCo's compute
utilisation. Written to
`runs/<name>/islands_wan_result.json` and printed as a table.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from swarmrl.configs import ConfigError, RunConfig
from swarmrl.islands.demo import read_merges, run_fleet
from swarmrl.islands.launch import IslandsNetwork, island_config, prepare_islands
from swarmrl.launch.demo import evaluate_checkpoint
from swarmrl.rundir import RunDir, write_json_atomic
from swarmrl.steps import latest_checkpoint
from swarmrl_lab.wan import netns
from swarmrl_lab.wan.demo import table_cell
from swarmrl_lab.wan.report import steps_per_min
from swarmrl_lab.wan.world import MACHINE_INTERFACE, Machine, World

LIGHTHOUSE = "lighthouse"


def island_machine(island: int) -> str:
    return f"island-{island}"


def island_machines(config: RunConfig) -> list[Machine]:
    wan = config.wan
    machines = [Machine(LIGHTHOUSE, wan.regions[0].name, wan.server_mbit)]
    machines += [
        Machine(island_machine(i), wan.island_region(i), wan.server_mbit) for i in range(config.islands.count)
    ]
    return machines


class WanIslandsNetwork(IslandsNetwork):
    """Island i's trainer and workers on machine island-i of `world`, the lighthouse on its own machine."""

    def __init__(self, world: World) -> None:
        self.world = world

    def prefix(self, island: int) -> list[str]:
        return self.world.prefix(island_machine(island))

    def host(self, island: int) -> str:
        return self.world.address(island_machine(island))

    def env(self) -> dict[str, str]:
        # gloo would otherwise bind the address this machine's hostname resolves to: loopback.
        return {"GLOO_SOCKET_IFNAME": MACHINE_INTERFACE}

    def lighthouse_host(self) -> str:
        return self.world.address(LIGHTHOUSE)

    def lighthouse_seat(self) -> contextlib.AbstractContextManager[object]:
        return netns.entered(self.world.namespace(LIGHTHOUSE))


def arm_config(config: RunConfig, arm: str) -> RunConfig:
    """One arm's config: its own run directory runs/<name>/<arm> (the SFT cache under runs/<name> is shared)."""
    data = config.model_dump(mode="json")
    data["run"].update(root=str(config.run.directory), name=arm)
    return RunConfig.model_validate(data)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def island_figures(index: int, region: str | None, rundir: RunDir) -> dict[str, Any]:
    """One island's merges and trainer time. A trainer step's `train_seconds` holds its merge (the merge runs
    before the step's checkpoint is written), so the trainer's busy time is their sum and the merges' share of
    it is what utilisation leaves out; the first merge also forms the islands' process group."""
    steps = [m for m in rundir.read_metrics() if "train_seconds" in m]
    merges = read_merges(rundir)
    busy = sum(m["train_seconds"] for m in steps)
    merging = sum(m["blocked_seconds"] for m in merges)  # a round in the background blocks for less
    return {
        "island": index,
        "region": region,
        "steps": max((m["step"] for m in steps), default=0),
        "steps_per_min": steps_per_min(rundir),
        "merges_committed": sum(1 for m in merges if m["committed"]),
        "merges_failed": sum(1 for m in merges if not m["committed"]),
        "merge_seconds": [round(m["seconds"], 3) for m in merges],
        "merge_blocked_seconds": [round(m["blocked_seconds"], 3) for m in merges],
        "bytes_per_merge": _median([m["wire_bytes"] for m in merges]),
        "bytes_sent": sum(m["wire_bytes"] for m in merges),
        "train_seconds": busy,
        "merge_seconds_total": merging,
        "utilisation": 1 - merging / busy if busy else None,
        "utilisation_after_first_merge": (
            1 - (merging - merges[0]["blocked_seconds"]) / (busy - merges[0]["blocked_seconds"])
            if merges and busy
            else None
        ),
    }


def arm_figures(per_island: list[dict[str, Any]], wall_seconds: float) -> dict[str, Any]:
    later = [s for island in per_island for s in island["merge_seconds"][1:]]
    later_blocked = [s for island in per_island for s in island["merge_blocked_seconds"][1:]]
    rates = [i["steps_per_min"] for i in per_island if i["steps_per_min"] is not None]
    utilisation = [i["utilisation"] for i in per_island if i["utilisation"] is not None]
    after_first = [i["utilisation_after_first_merge"] for i in per_island]
    return {
        "wall_seconds": wall_seconds,
        "steps_per_min": statistics.fmean(rates) if rates else None,
        "first_merge_seconds": max(
            (i["merge_seconds"][0] for i in per_island if i["merge_seconds"]), default=None
        ),
        "merge_seconds_median": _median(later),
        "merge_seconds_max": max(later, default=None),
        "merge_blocked_seconds_median": _median(later_blocked),
        "bytes_per_merge": _median(
            [i["bytes_per_merge"] for i in per_island if i["bytes_per_merge"] is not None]
        ),
        "bytes_between_islands": sum(i["bytes_sent"] for i in per_island),
        "merges_failed": sum(i["merges_failed"] for i in per_island),
        "utilisation": min(utilisation, default=None),
        "utilisation_after_first_merge": min((u for u in after_first if u is not None), default=None),
        "per_island": per_island,
    }


def run_arm(
    config: RunConfig,
    arm: str,
    console: Console,
    regions: Sequence[str | None],
    network: IslandsNetwork | None = None,
) -> dict[str, Any]:
    """One arm from scratch (the SFT start is cached); its figures, and the held-out accuracy of island 0's
    last policy (merged: the last merge blocks), so that a faster merge is seen to learn."""
    settings = arm_config(config, arm)
    if settings.run.directory.exists():
        shutil.rmtree(settings.run.directory)
    _, islands = prepare_islands(settings)
    load, started = os.getloadavg()[0], time.monotonic()
    run_fleet(settings, islands, console, network)
    wall = time.monotonic() - started
    per_island = [island_figures(i, regions[i], rundir) for i, rundir in enumerate(islands)]
    last = latest_checkpoint(islands[0].checkpoints) or 0
    after = evaluate_checkpoint(island_config(settings, 0), islands[0], last).accuracy
    return {**arm_figures(per_island, wall), "load_1min": [load, os.getloadavg()[0]], "heldout_after": after}


def check_runnable(config: RunConfig) -> None:
    """Refuse in one line what this demo cannot run: islands of swarms, or a machine that cannot emulate."""
    if config.islands.workers != "local":
        raise ConfigError(
            "demo --islands --wan runs islands with local workers: set islands.workers = 'local'"
        )
    netns.check_available()


def run_islands_wan_demo(config: RunConfig, console: Console | None = None) -> dict[str, Any]:
    """Loopback first (when `baseline`), then the islands across the emulated regions; writes and returns
    islands_wan_result.json."""
    console = console or Console()
    check_runnable(config)
    wan, count = config.wan, config.islands.count
    regions = [wan.island_region(i) for i in range(count)]
    result: dict[str, Any] = {
        "regions": [r.name for r in wan.regions],
        "placement": {
            LIGHTHOUSE: wan.regions[0].name,
            **{island_machine(i): r for i, r in enumerate(regions)},
        },
        "links": wan.model_dump(mode="json"),
        "islands": count,
        "merge_every": config.islands.merge_every,
        "codec": config.islands.codec,
        "steps": config.trainer.steps,
    }
    if wan.baseline:
        console.rule("trainer islands on loopback (127.0.0.1)")
        result["lan"] = run_arm(config, "lan", console, [None] * count)
    console.rule(f"trainer islands across the emulated WAN: {', '.join(regions)}")
    with World(wan, island_machines(config), [], config.run.directory / "wan-net") as world:
        result["wan"] = run_arm(config, "wan", console, regions, WanIslandsNetwork(world))
    # Every arm starts from the same cached SFT policy: its accuracy is measured once.
    start = arm_config(config, "wan")
    result["heldout_start"] = evaluate_checkpoint(start, RunDir(start.run.directory), 0).accuracy
    write_json_atomic(config.run.directory / "islands_wan_result.json", result)
    console.print(result_table(result))
    console.print(f"written: {config.run.directory / 'islands_wan_result.json'}")
    return result


def result_table(result: dict[str, Any]) -> Table:
    lan, wan = result.get("lan", {}), result["wan"]
    places = ", ".join(f"{name} in {region}" for name, region in result["placement"].items())
    table = Table(title=f"trainer islands on loopback and across the WAN ({places})")
    for column in ("figure", "loopback", "WAN"):
        table.add_column(column, justify="right")
    rows = [
        ("steps per minute (mean of islands)", "steps_per_min"),
        ("first merge (s; forms the group)", "first_merge_seconds"),
        ("later merges, median (s)", "merge_seconds_median"),
        ("later merges, slowest (s)", "merge_seconds_max"),
        ("later merges, trainer blocked, median (s)", "merge_blocked_seconds_median"),
        ("bytes sent per merge (an island)", "bytes_per_merge"),
        ("bytes between islands (all)", "bytes_between_islands"),
        ("merges failed", "merges_failed"),
        ("trainer utilisation (lowest island)", "utilisation"),
        ("… after the first merge", "utilisation_after_first_merge"),
        (f"held-out accuracy, island 0's last (start {result['heldout_start']:.3f})", "heldout_after"),
        ("wall (s)", "wall_seconds"),
        ("machine load (1 min, start → end)", "load_1min"),
    ]
    for label, key in rows:
        table.add_row(label, table_cell(lan.get(key), 3), table_cell(wan.get(key), 3))
    return table
