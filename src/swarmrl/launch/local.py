"""`swarmrl rl`: a trainer and N workers on this machine, talking only through the run directory."""

from __future__ import annotations

import logging
import time

from rich.console import Console

from swarmrl.configs import RunConfig
from swarmrl.launch.processes import ProcessGroup
from swarmrl.launch.report import live_table, metrics_table, plot_reward_curve
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
        with live_table(console, metrics_table([]), refresh_per_second=2) as live:
            group.wait(trainer, poll=lambda: live.update(metrics_table(rundir.read_metrics())))
            live.update(metrics_table(rundir.read_metrics()))
        log.info("trainer finished in %.1fs", time.monotonic() - started)
    finally:
        rundir.stop_file.touch()
        group.stop()
    records = rundir.read_metrics()
    plot_reward_curve(records, rundir.root / "reward_curve.png", title=config.run.name)
    return records
