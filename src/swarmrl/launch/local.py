"""`swarmrl rl`: a trainer and N workers on this machine, talking only through the run directory."""

from __future__ import annotations

import contextlib
import logging
import time

from rich.console import Console

from swarmrl.configs import RunConfig
from swarmrl.launch.processes import ProcessGroup, RoleProcess
from swarmrl.launch.progress import PLAIN_WIDTH, StepLines, plain_lines
from swarmrl.launch.report import FINAL_ROWS, live_table, metrics_table, plot_reward_curve
from swarmrl.layout import available_cores, local_workers
from swarmrl.rundir import RunDir

log = logging.getLogger(__name__)


def run_local(
    config: RunConfig,
    rundir: RunDir,
    *,
    console: Console | None = None,
    pin_cores: bool = False,
) -> list[dict]:
    """Train to `config.trainer.steps`; returns the metrics records. Every started process is stopped.

    With `trainer.colocate` the trainer process generates its own rollouts: no worker process is started.
    """
    console = console or Console()
    config.metrics.check_installed()
    group = ProcessGroup(rundir.root / "logs")
    cores = sorted(available_cores())
    workers = 0 if config.trainer.colocate else local_workers(config, len(cores))
    log.info("local run: a trainer and %d worker process(es) on %d CPU core(s)", workers, len(cores))
    try:
        trainer = group.start(
            "trainer",
            ["trainer", "--run-dir", str(rundir.root)],
            cpu_cores={cores[0]} if pin_cores else None,
        )
        for index in range(workers):
            core = cores[(index + 1) % len(cores)]
            group.start(
                f"worker-{index}",
                ["worker", "--run-dir", str(rundir.root), "--index", str(index)],
                cpu_cores={core} if pin_cores else None,
            )
        started = time.monotonic()
        watch_trainer(group, trainer, rundir, config.trainer.steps, console)
        log.info("trainer finished in %.1fs", time.monotonic() - started)
    finally:
        with contextlib.suppress(OSError):  # a full disk: the processes are stopped all the same
            rundir.stop_file.touch()
        group.stop()
    records = rundir.read_metrics()
    plot_reward_curve(records, rundir.root / "reward_curve.png", title=config.run.name)
    return records


def watch_trainer(
    group: ProcessGroup, trainer: RoleProcess, rundir: RunDir, steps: int, console: Console
) -> None:
    """Until the trainer ends: a live table on a terminal, plain lines elsewhere; then every step's row."""
    if console.is_terminal:
        with live_table(console, metrics_table([]), refresh_per_second=2) as live:
            group.wait(trainer, poll=lambda: live.update(metrics_table(rundir.read_metrics())))
            live.update(metrics_table(rundir.read_metrics(), last=FINAL_ROWS))
        return
    with plain_lines(console) as lines:
        watch = StepLines(rundir, steps, lines)
        group.wait(trainer, poll=watch.poll)
        watch.poll()
    # A pipe or file has no width of its own: rich would squeeze the columns into 80 and cut every figure.
    console.print(metrics_table(rundir.read_metrics(), last=FINAL_ROWS), width=PLAIN_WIDTH)
