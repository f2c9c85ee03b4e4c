"""`swarmrl demo --islands`: SFT once, N islands of async GRPO merged every H steps, held-out accuracy of the
merged policy before and after, and the traffic between islands against syncing every policy step."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from typing import Any

import torch
from rich.console import Console
from rich.live import Live
from rich.table import Table

from swarmrl.configs import RunConfig
from swarmrl.configs.islands import IslandsConfig
from swarmrl.diloco.communicators.base import ring_all_reduce_bytes
from swarmrl.eval_metrics import is_eval_record
from swarmrl.islands.island import merges_log
from swarmrl.islands.launch import IslandFleet, IslandsNetwork, island_config, prepare_islands
from swarmrl.islands.versions import merging_fragment
from swarmrl.launch.demo import evaluate_checkpoint
from swarmrl.launch.progress import plain_lines, waiting
from swarmrl.layout import local_workers
from swarmrl.models import load_model
from swarmrl.rundir import RunDir, write_json_atomic
from swarmrl.steps import checkpoint_dir, latest_checkpoint


def read_merges(rundir: RunDir) -> list[dict[str, Any]]:
    path = merges_log(rundir)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def island_summary(index: int, rundir: RunDir, window: int = 5) -> dict[str, Any]:
    records = [r for r in rundir.read_metrics() if not is_eval_record(r)]
    merges = read_merges(rundir)
    rewards = [r["sampled_reward"] for r in records]
    return {
        "island": index,
        "steps": records[-1]["step"] if records else 0,
        "sampled_reward_first_steps": _mean(rewards[:window]),
        "sampled_reward_last_steps": _mean(rewards[-window:]),
        "merges_committed": sum(1 for m in merges if m["committed"]),
        "merges_failed": sum(1 for m in merges if not m["committed"]),
        "heals": sum(1 for m in merges if m["healed"]),
        "bytes_sent": sum(m["wire_bytes"] for m in merges),
    }


def every_step_sync_bytes(parameters: int, islands: int, steps: int) -> int:
    """What each island would send to keep the islands identical after every policy step: a ring all-reduce
    of the fp32 policy update per step."""
    return steps * ring_all_reduce_bytes(4 * parameters, islands)


def weights_digest(rundir: RunDir, step: int) -> str:
    digest = hashlib.sha256()
    for path in sorted(checkpoint_dir(rundir.checkpoints, step).glob("*.safetensors")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def progress_table(islands: list[RunDir]) -> Table:
    table = Table(title="swarmrl · trainer islands", expand=False)
    for column in ("island", "step", "sampled reward", "merges", "bytes sent"):
        table.add_column(column, justify="right")
    for index, rundir in enumerate(islands):
        summary = island_summary(index, rundir, window=3)
        last = summary["sampled_reward_last_steps"]
        table.add_row(
            str(index),
            str(summary["steps"]),
            "-" if last is None else f"{last:.3f}",
            str(summary["merges_committed"]),
            f"{summary['bytes_sent'] / 1e6:.1f} MB",
        )
    return table


def run_fleet(
    config: RunConfig, islands: list[RunDir], console: Console, network: IslandsNetwork | None = None
) -> None:
    """Every island of `config` from its prepared run directory to its last step, with a live table."""
    with IslandFleet(config, islands, network or IslandsNetwork()) as fleet:
        for index in range(config.islands.count):
            fleet.start(index)
        with (
            Live(progress_table(islands), console=console, refresh_per_second=1) as live,
            plain_lines(console) as lines,
        ):

            def poll() -> None:
                live.update(progress_table(islands))
                lines.state(lambda: islands_line(islands))  # off a terminal: every few seconds

            fleet.wait(poll=poll)
            live.update(progress_table(islands))


def islands_line(islands: list[RunDir]) -> str:
    """Each island's step, sampled reward and merges on one line."""
    parts = []
    for index, rundir in enumerate(islands):
        summary = island_summary(index, rundir, window=3)
        last = summary["sampled_reward_last_steps"]
        reward = "-" if last is None else f"{last:.3f}"
        parts.append(
            f"island {index}: step {summary['steps']}, reward {reward}, {summary['merges_committed']} merges"
        )
    return " · ".join(parts)


def run_islands_demo(config: RunConfig, console: Console | None = None) -> dict[str, Any]:
    console = console or Console()
    started = time.monotonic()
    torch.set_num_threads(1)
    settings: IslandsConfig = config.islands
    if config.run.directory.exists():
        shutil.rmtree(config.run.directory)
    with waiting(console, "SFT warm start (cached across runs)"):
        base, islands = prepare_islands(config)
    console.print(
        f"run directory: {base.root} · {settings.count} islands × {local_workers(config)} workers, "
        f"merge every {settings.merge_every} steps, {settings.codec} pseudo-gradients"
    )
    with waiting(console, "held-out eval of the SFT policy"):
        before = evaluate_checkpoint(config, base, 0)
    console.print(f"held-out accuracy of the SFT policy: {100 * before.accuracy:.1f}%")
    run_fleet(config, islands, console)
    last = latest_checkpoint(islands[0].checkpoints) or 0
    with waiting(console, f"held-out eval of island 0's policy, step {last}"):
        after = evaluate_checkpoint(island_config(config, 0), islands[0], last)
    parameters = sum(p.numel() for p in load_model(checkpoint_dir(base.checkpoints, 0)).parameters())
    per_island = [island_summary(i, rundir) for i, rundir in enumerate(islands)]
    sent = sum(s["bytes_sent"] for s in per_island)
    every_step = settings.count * every_step_sync_bytes(parameters, settings.count, config.trainer.steps)
    finals = {latest_checkpoint(r.checkpoints) for r in islands}
    result = {
        "name": config.run.name,
        "islands": settings.count,
        "workers_per_island": local_workers(config),
        "merge_every": settings.merge_every,
        "codec": settings.codec,
        "steps": config.trainer.steps,
        "parameters": parameters,
        "heldout_before": before.__dict__,
        "heldout_after_merged": after.__dict__,
        "gain_points": 100 * (after.accuracy - before.accuracy),
        "evaluated_policy": f"islands/island-0/checkpoints/step_{last}",
        "fragments": settings.fragments,
        "last_step_is_merge": merging_fragment(last, settings.merge_every, settings.fragments) is not None,
        "final_policies_identical": len(finals) == 1 and len({weights_digest(r, last) for r in islands}) == 1,
        "per_island": per_island,
        "bytes_between_islands": sent,
        "bytes_if_synced_every_step": every_step,
        "traffic_reduction": every_step / sent if sent else None,
        "wall_seconds": time.monotonic() - started,
    }
    write_json_atomic(base.root / "islands_result.json", result)
    table = Table(title=f"held-out accuracy ({before.completions} completions, T={config.eval.temperature})")
    for column in ("policy", "accuracy", "mean reward"):
        table.add_column(column, justify="right")
    table.add_row("SFT (step 0)", f"{100 * before.accuracy:.1f}%", f"{before.mean_reward:.3f}")
    table.add_row(f"merged (step {last})", f"{100 * after.accuracy:.1f}%", f"{after.mean_reward:.3f}")
    console.print(table)
    console.print(
        f"gain {result['gain_points']:+.1f} points in {result['wall_seconds']:.0f}s · between islands "
        f"{sent / 1e6:.1f} MB vs {every_step / 1e6:.1f} MB syncing every step "
        f"({result['traffic_reduction'] or 0:.1f}× less) · {base.root / 'islands_result.json'}"
    )
    return result
