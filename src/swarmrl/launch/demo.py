"""`swarmrl demo`: SFT a tiny model (cached), asynchronous RL with local workers, held-out accuracy before/after."""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from swarmrl.config import RunConfig
from swarmrl.evaluation import EvalResult, HeldOutEval
from swarmrl.launch.local import run_local
from swarmrl.launch.prepare import prepare_run
from swarmrl.rundir import RunDir, write_json_atomic
from swarmrl.steps import checkpoint_dir, latest_checkpoint


def evaluate_checkpoint(config: RunConfig, rundir: RunDir, step: int) -> EvalResult:
    path = checkpoint_dir(rundir.checkpoints, step)
    return HeldOutEval.from_checkpoint(config, path, step, config.eval.num_tasks).run()


@dataclass
class DemoResult:
    before: EvalResult
    after: EvalResult
    steps: int
    seconds: float

    @property
    def gain_points(self) -> float:
        return 100 * (self.after.accuracy - self.before.accuracy)


def run_demo(config: RunConfig, console: Console | None = None) -> DemoResult:
    console = console or Console()
    config.metrics.check_installed()
    started = time.monotonic()
    torch.set_num_threads(1)
    if config.run.directory.exists():
        shutil.rmtree(config.run.directory)
    with Progress(
        TextColumn("[bold]SFT warm start"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} loss {task.fields[loss]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("sft", total=config.sft.steps, loss="-")
        rundir = prepare_run(
            config, progress=lambda step, loss: bar.update(task, completed=step, loss=f"{loss:.3f}")
        )
    console.print(f"run directory: {rundir.root}")
    before = evaluate_checkpoint(config, rundir, 0)
    console.print(f"held-out accuracy of the SFT policy: {100 * before.accuracy:.1f}%")
    run_local(config, rundir, console=console)
    last = latest_checkpoint(rundir.checkpoints) or 0
    after = evaluate_checkpoint(config, rundir, last)
    result = DemoResult(before, after, last, time.monotonic() - started)
    table = Table(title=f"held-out accuracy ({before.completions} completions, T={config.eval.temperature})")
    k = config.eval.samples_per_task
    for column in ("policy", f"accuracy (avg@{k})", f"pass@{k}", "mean reward", "tokens/completion"):
        table.add_column(column, justify="right")
    table.add_row(
        "SFT (step 0)",
        f"{100 * before.accuracy:.1f}%",
        f"{100 * before.pass_at_k:.1f}%",
        f"{before.mean_reward:.3f}",
        f"{before.mean_completion_tokens:.1f}",
    )
    table.add_row(
        f"RL (step {last})",
        f"{100 * after.accuracy:.1f}%",
        f"{100 * after.pass_at_k:.1f}%",
        f"{after.mean_reward:.3f}",
        f"{after.mean_completion_tokens:.1f}",
    )
    console.print(table)
    console.print(
        f"gain: {result.gain_points:+.1f} points in {result.seconds:.0f}s · reward curve: {rundir.root / 'reward_curve.png'}"
    )
    write_json_atomic(rundir.root / "demo_result.json", {**asdict(result), "gain_points": result.gain_points})
    return result
