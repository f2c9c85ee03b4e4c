"""The `swarmrl` command: one subcommand per role, plus the local launchers (demo, rl, sft)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler

from swarmrl.config import ConfigError, RunConfig, load_config

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()

ConfigArg = Annotated[str | None, typer.Argument(help="run config TOML, optionally written @path")]
Overrides = Annotated[list[str] | None, typer.Argument(help="section.field=value overrides")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="print the resolved config and exit")]


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=True)],
    )
    for noisy in ("httpx", "transformers", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _config(path: str | None, overrides: list[str] | None, dry_run: bool) -> RunConfig:
    try:
        config = load_config(path, overrides or [])
    except ConfigError as exc:
        console.print(f"[red]config error:[/red] {exc}")
        raise typer.Exit(2) from exc
    if dry_run:
        console.print_json(config.dump_json())
        raise typer.Exit(0)
    return config


@app.command()
def demo(config: ConfigArg = "configs/demo.toml", overrides: Overrides = None, dry_run: DryRun = False) -> None:
    """SFT a tiny model, run asynchronous RL with local workers, print held-out accuracy before and after."""
    from swarmrl.launch.demo import run_demo

    run_demo(_config(config, overrides, dry_run), console)


@app.command()
def rl(config: ConfigArg = None, overrides: Overrides = None, dry_run: DryRun = False) -> None:
    """Asynchronous RL on this machine: a trainer and N workers sharing a run directory (resumes if present)."""
    from swarmrl.launch.local import run_local
    from swarmrl.launch.prepare import prepare_run

    cfg = _config(config, overrides, dry_run)
    run_local(cfg, prepare_run(cfg), console=console)


@app.command()
def sft(config: ConfigArg = None, overrides: Overrides = None, dry_run: DryRun = False) -> None:
    """Warm-start a policy by supervised training on task demonstrations; writes checkpoints/step_0."""
    from swarmrl.launch.prepare import prepare_run

    rundir = prepare_run(_config(config, overrides, dry_run))
    console.print(f"starting policy: {rundir.checkpoints / 'step_0'}")


@app.command()
def trainer(
    run_dir: Annotated[Path, typer.Option(help="run directory prepared by `swarmrl rl` or `sft`")],
    threads: Annotated[int, typer.Option(help="torch CPU threads")] = 1,
) -> None:
    """The trusted trainer of a local run (started by `rl`/`demo`; run by hand to resume)."""
    from swarmrl.launch.roles import trainer_role

    trainer_role(run_dir, threads=threads)


@app.command()
def worker(
    run_dir: Annotated[Path, typer.Option(help="run directory of a local run")],
    index: Annotated[int, typer.Option(help="worker number, names its key and files")] = 0,
) -> None:
    """An inference worker of a local run."""
    from swarmrl.launch.roles import worker_role

    worker_role(run_dir, index)


if __name__ == "__main__":
    app()
