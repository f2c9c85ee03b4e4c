"""`swarmrl validator`: judge rollout files (a local run's, or a swarm's pending submissions); `calibrate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from swarmrl.cli_options import (
    CoordinatorUrl,
    Device,
    NodeKey,
    Relays,
    RunConfigFile,
    RunId,
    WorkDir,
    local_run_dir,
    node_args,
    stop_on_sigterm,
)

validator = typer.Typer(
    help="The validator: judge rollout files; `calibrate` its thresholds.", add_completion=False
)


@validator.callback(invoke_without_command=True)
def judge(
    ctx: typer.Context,
    run_dir: Annotated[
        Path | None, typer.Option(help="local run directory: config, checkpoints, and where accepted rows go")
    ] = None,
    submissions: Annotated[
        Path | None, typer.Option(help="directory of step_k/*.parquet; default <run>/rollouts")
    ] = None,
    once: Annotated[bool, typer.Option(help="judge what is there and exit")] = False,
    coordinator_url: CoordinatorUrl = None,
    run_id: RunId = None,
    config: RunConfigFile = None,
    key: NodeKey = None,
    relay: Relays = None,
    work_dir: WorkDir = None,
    device: Device = None,
) -> None:
    """Check submitted rollout files (TOPLOC, seeded replay, prompts, rewards ...): those of a local run
    directory, or with --coordinator the pending submissions of a swarm, posting verdicts. The prefill is
    recomputed on --device (default cpu)."""
    if ctx.invoked_subcommand is not None:
        return
    device = device or "cpu"
    if coordinator_url is None:
        from swarmrl.validator.service import run_validator

        judged = run_validator(local_run_dir(run_dir), submissions, once=once, device=device)
        typer.echo(f"judged {judged} file(s)")
        return
    from swarmrl.validator.node import ValidatorOptions, ValidatorStopped, run_validator_node

    node = node_args(run_id, config, key, relay, work_dir)
    settings = node.config
    options = ValidatorOptions(
        coordinator_url, node.run_id, node.key, node.relays, node.work_dir, device=device
    )
    stop_on_sigterm(options.stop)
    try:
        posted = run_validator_node(settings, options)
    except ValidatorStopped:
        posted = 0
    typer.echo(f"posted {posted} verdict(s)")


@validator.command("calibrate")
def calibrate(
    config: Annotated[
        str, typer.Argument(help="run config TOML, optionally written @path")
    ] = "configs/demo.toml",
    overrides: Annotated[list[str] | None, typer.Argument(help="section.field=value overrides")] = None,
    completions: Annotated[int, typer.Option(help="completions per honest setting and per attack")] = 64,
    safety: Annotated[float, typer.Option(help="tolerance = safety × the worst honest value")] = 4.0,
    output: Annotated[Path | None, typer.Option(help="write every measurement and the rates as JSON")] = None,
) -> None:
    """Honest rollouts across attention kernels, thread counts and batch sizes, plus each attack on the run's
    starting policy (write it first with `swarmrl sft`): print the false-reject and miss rate of every numeric
    check and the tolerances chosen from the honest worst case."""
    from rich.console import Console

    from swarmrl.configs import load_config
    from swarmrl.validator.calibration_report import run_calibration

    run_calibration(load_config(config, overrides or []), completions, safety, output, Console())
