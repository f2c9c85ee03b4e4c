"""The local launchers: a whole run on this machine from one config (`demo`, `rl`, `sft`, `filter`).

Each takes a run config (`@path`, optional) and `section.field=value` overrides; `--dry-run` prints the resolved
config and a preflight of everything the run will need (model, tokenizer, dataset, rewards, ports, run root),
exiting 2 when a check fails, so a mistake shows in seconds instead of minutes into the run.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer
from rich.console import Console

from swarmrl.cli.failures import EXIT_USER_ERROR
from swarmrl.configs import RunConfig, load_config
from swarmrl.errors import UserError
from swarmrl.rundir import RunDir

console = Console()
# What Ctrl-C prints: a run keeps its checkpoints and trainer state, and picks up from them.
RESUME_HINT = "run the same command again to resume from the last checkpoint"

ConfigArg = Annotated[str | None, typer.Argument(help="run config TOML, optionally written @path")]
Overrides = Annotated[list[str] | None, typer.Argument(help="section.field=value overrides")]
DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="print the resolved config and a preflight of what the run needs, then exit"
    ),
]


def run_config(
    path: str | None,
    overrides: list[str] | None,
    dry_run: bool,
    refuse: Callable[[RunConfig], None] | None = None,
) -> RunConfig:
    """The resolved run config, after its preflight passed. With `dry_run`, print the config (stdout: JSON)
    and the whole preflight (stderr), and exit; without, a failed preflight prints its failed checks and
    exits 2 before anything starts. `refuse` raises (a UserError: one line) for what the command cannot run at
    all, before the preflight spends its seconds."""
    from swarmrl.launch.pins import pin_run_code
    from swarmrl.launch.preflight import preflight

    path, overrides = split_overrides(path, overrides or [])
    config = load_config(path, overrides)
    if refuse is not None:
        refuse(config)
    pin_run_code(config)  # the source hashes of the code of yours it names (reward functions, environment)
    report = preflight(config)
    errors = Console(stderr=True, soft_wrap=True)
    if dry_run:
        console.print_json(config.dump_json())
        errors.print(report.render(), markup=False, highlight=False)
        raise typer.Exit(0 if report.ok else EXIT_USER_ERROR)
    errors.print(
        report.render(failed_only=True), markup=False, highlight=False
    )  # the verdict, and what failed
    if not report.ok:
        raise typer.Exit(EXIT_USER_ERROR)
    return config


def split_overrides(path: str | None, overrides: list[str]) -> tuple[str | None, list[str]]:
    """`swarmrl demo trainer.steps=20` means the default config with an override, not a file of that name."""
    if path is not None and "=" in path and not Path(path.removeprefix("@")).exists():
        return None, [path, *overrides]
    return path, overrides


@contextmanager
def supervising(resumable: RunDir | None = None):
    """Around a launcher that starts role processes (`demo`, `rl`). Told to stop (SIGTERM, as `kill` and service
    managers send), the launcher unwinds like Ctrl-C does, so its `finally` stops every role process it started
    instead of leaving them running. A role process that failed ends it with that process's own message and
    log tail, not a traceback through the supervisor's code. Interrupted (Ctrl-C), a `resumable` run says that
    the same command resumes it."""
    from swarmrl.launch.processes import LaunchError

    previous = signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    try:
        yield
    except LaunchError as exc:
        if exc.exit_code == EXIT_USER_ERROR:  # the role's own one line, as the role process printed it
            typer.echo(f"error: {exc}", err=True)
        else:
            console.print(str(exc), style="red", markup=False, highlight=False)
        raise typer.Exit(exc.exit_code) from exc
    except KeyboardInterrupt:
        if resumable is None:
            raise
        typer.echo(f"stopped: {RESUME_HINT} ({resumable.root})", err=True)
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def demo(
    config: ConfigArg = None,
    overrides: Overrides = None,
    dry_run: DryRun = False,
    swarm: Annotated[
        bool, typer.Option("--swarm", help="the decentralized swarm: coordinator, relay, nodes, a cheater")
    ] = False,
    islands: Annotated[
        bool,
        typer.Option(
            "--islands", help="trainer islands, each with its workers, merged by DiLoCo every H steps"
        ),
    ] = False,
    wan: Annotated[
        bool,
        typer.Option(
            "--wan", help="the swarm across emulated regions (latency, loss, narrow links, churn) vs loopback"
        ),
    ] = False,
) -> None:
    """SFT a tiny model, then asynchronous RL: with local workers (held-out accuracy before and after), or with
    --swarm as a swarm of processes on 127.0.0.1 (live table; the cheater is rejected and banned), or with
    --islands as several trainer islands merged every H steps (islands_result.json), or with --wan as the swarm
    spread over emulated regions and measured against loopback (wan_result.json; needs root), or with --islands
    --wan as the islands in emulated regions, merging across the links (islands_wan_result.json)."""
    default = (
        "configs/demo-swarm.toml"
        if swarm
        else "configs/demo-islands.toml"
        if islands
        else "configs/demo-wan.toml"
        if wan
        else "configs/demo.toml"
    )
    path, overrides = split_overrides(config, overrides or [])
    refuse = wan_runnable(islands) if wan else lab_workers_runnable(swarm) if swarm or islands else None
    cfg = run_config(path or default, overrides, dry_run, refuse=refuse)
    from swarmrl.devices import check_run_devices
    from swarmrl.launch.progress import waiting

    with waiting(console, "loading torch to check the run's devices"):  # seconds on a busy machine
        check_run_devices(cfg)
    if wan:
        run_wan_demo(cfg, islands)
        return
    with supervising():
        if islands:
            from swarmrl.islands.demo import run_islands_demo

            run_islands_demo(cfg, console)
        elif swarm and cfg.swarm.submit_packs:  # community task packs submitted mid-run
            from swarmrl.launch.pack_demo import run_pack_demo

            if run_pack_demo(cfg, console):
                raise typer.Exit(1)
        elif swarm:
            from swarmrl.launch.swarm import run_swarm_demo

            if run_swarm_demo(cfg, console).failures():
                raise typer.Exit(1)
        else:
            from swarmrl.launch.demo import run_demo

            run_demo(cfg, console)


def lab_module(name: str, needed_by: str) -> ModuleType:
    """A module of swarmrl's lab (lab/swarmrl_lab: the WAN emulator, the cheating and slow workers), which node
    operators do not install: the one place swarmrl imports it. Missing, it is one line (a UserError) and
    exit 2."""
    try:
        return importlib.import_module(f"swarmrl_lab.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != "swarmrl_lab" and not (exc.name or "").startswith("swarmrl_lab."):
            raise
        raise UserError(
            f"{needed_by} swarmrl's lab package, which is not installed here: pip install -e lab "
            "(make install does)"
        ) from exc


def lab_workers_runnable(swarm: bool) -> Callable[[RunConfig], None]:
    """A swarm (`demo --swarm`, islands of swarms) with cheating or slow workers starts the lab's worker for
    them (launch/swarm.py)."""

    def check(cfg: RunConfig) -> None:
        swarms = swarm or cfg.islands.workers == "swarm"
        if swarms and (cfg.swarm.cheating_workers or cfg.swarm.slow_workers):
            lab_module("cheat_worker", "a swarm's cheating and slow workers need")

    return check


def wan_runnable(islands: bool) -> Callable[[RunConfig], None]:
    """`demo --wan`'s own refusals (the lab not installed, not root, a tool missing, islands of swarms), checked
    before anything."""

    def check(cfg: RunConfig) -> None:
        if islands:
            lab_module("wan.islands", "demo --wan needs").check_runnable(cfg)
        else:
            lab_module("wan.netns", "demo --wan needs").check_available()

    return check


def run_wan_demo(cfg: RunConfig, islands: bool) -> None:
    """`demo --wan` (with --islands: the trainer islands across the regions); a machine that cannot emulate (not
    root, no iproute2/nftables) is told so in one line (`WanUnavailable` is a `UserError`). Exit 1 when the swarm
    lost honest work or trained a unit twice, or when an island's merge failed."""
    wan_error = lab_module("wan.errors", "demo --wan needs").WanError
    with supervising():
        try:
            if islands:
                failed = (
                    lab_module("wan.islands", "demo --wan needs").run_islands_wan_demo(cfg, console)["wan"][
                        "merges_failed"
                    ]
                    > 0
                )
            else:
                goals = lab_module("wan.demo", "demo --wan needs").run_wan_demo(cfg, console)["goals"]
                failed = not (goals["0 honest files lost"] and goals["no unit trained twice"])
        except wan_error as exc:
            if isinstance(exc, UserError):
                raise
            console.print(f"the WAN emulation failed: {exc}", style="red", markup=False, highlight=False)
            raise typer.Exit(1) from exc
    if failed:
        raise typer.Exit(1)


def rl(config: ConfigArg = None, overrides: Overrides = None, dry_run: DryRun = False) -> None:
    """Asynchronous RL on this machine: a trainer and N workers sharing a run directory (resumes if present)."""
    cfg = run_config(config, overrides, dry_run)
    from swarmrl.launch.local import run_local

    rundir = prepared(cfg, check_devices=True)
    with supervising(resumable=rundir):
        run_local(cfg, rundir, console=console)


def sft(config: ConfigArg = None, overrides: Overrides = None, dry_run: DryRun = False) -> None:
    """Warm-start a policy by supervised training on task demonstrations; writes checkpoints/step_0."""
    cfg = run_config(config, overrides, dry_run)
    rundir = prepared(cfg)
    console.print(f"starting policy: {rundir.checkpoints / 'step_0'}")


def prepared(cfg: RunConfig, check_devices: bool = False) -> RunDir:
    """The run directory with its starting policy, its progress shown from the start (loading torch, which
    the device check and SFT need, takes seconds on a busy machine)."""
    from swarmrl.launch.progress import sft_progress

    with sft_progress(console, cfg.sft.steps if cfg.model.path is None else 0) as progress:
        if check_devices:
            from swarmrl.devices import check_run_devices

            check_run_devices(cfg)  # a device this machine lacks is refused before any SFT
        from swarmrl.launch.prepare import prepare_run

        return prepare_run(cfg, progress=progress)


def filter_tasks(
    config: ConfigArg = None,
    overrides: Overrides = None,
    output: Annotated[Path, typer.Option(help="JSONL of the tasks with their solve rates")] = Path(
        "tasks_rated.jsonl"
    ),
    k: Annotated[int, typer.Option(help="samples per task (pass@k)")] = 8,
    num_tasks: Annotated[
        int, typer.Option(help="tasks measured, from the start of the training source")
    ] = 512,
    checkpoint: Annotated[
        Path | None, typer.Option(help="policy to measure; default the run's step_0")
    ] = None,
    dry_run: DryRun = False,
) -> None:
    """Offline difficulty filter: write each task's solve rate under a policy (keep a band with
    tasks.solve_rate_band)."""
    cfg = run_config(config, overrides, dry_run)
    from swarmrl.launch.filter import run_filter, solve_rate_histogram
    from swarmrl.launch.prepare import prepare_run

    policy = checkpoint or prepare_run(cfg).checkpoints / "step_0"
    rated = run_filter(cfg, policy, output, num_tasks, k)
    lo, hi = cfg.tasks.solve_rate_band or (0.1, 0.8)
    kept = sum(lo <= (t.solve_rate or 0.0) <= hi for t in rated)
    console.print(f"solve rates of {len(rated)} tasks (pass@{k}) written to {output}")
    console.print({f"{rate:.3f}": n for rate, n in solve_rate_histogram(rated, k).items()})
    console.print(f"{kept} of {len(rated)} tasks lie in the band [{lo}, {hi}]")
