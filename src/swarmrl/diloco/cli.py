"""`swarmrl diloco`: train the tiny causal LM across N local worker processes and report traffic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from swarmrl.configs.diloco import DiLoCoConfig
from swarmrl.diloco.config_file import load_diloco_config
from swarmrl.diloco.errors import DiLoCoError


def diloco(
    config: Annotated[
        Path | None, typer.Argument(help="TOML config ([diloco] table or bare); a leading '@' is stripped.")
    ] = None,
    workers: Annotated[int | None, typer.Option(help="Worker processes.")] = None,
    mode: Annotated[str | None, typer.Option(help="'diloco' or the 'ddp' baseline.")] = None,
    total_steps: Annotated[int | None, typer.Option(help="Inner steps per worker.")] = None,
    inner_steps: Annotated[int | None, typer.Option(help="H: inner steps between syncs.")] = None,
    fragments: Annotated[int | None, typer.Option(help="F: streaming fragments (1 = plain DiLoCo).")] = None,
    overlap_steps: Annotated[
        int | None, typer.Option(help="Inner steps a sync overlaps with compute.")
    ] = None,
    codec: Annotated[str | None, typer.Option(help="fp32, fp16, bf16 or int8.")] = None,
    throttle: Annotated[bool, typer.Option(help="Simulate a WAN link (see [throttle]).")] = False,
    report_json: Annotated[Path | None, typer.Option(help="Also write the full run report here.")] = None,
) -> None:
    """Run DiLoCo (or DDP) with N local workers on gloo and print eval loss, bytes and compute utilisation."""
    from swarmrl.diloco.launcher import launch  # torch: loaded to run, not for --help

    overrides = {
        "workers": workers,
        "mode": mode,
        "total_steps": total_steps,
        "inner_steps": inner_steps,
        "fragments": fragments,
        "overlap_steps": overlap_steps,
        "codec": codec,
    }
    try:
        if config is None:
            resolved = DiLoCoConfig.model_validate({k: v for k, v in overrides.items() if v is not None})
        else:
            resolved = load_diloco_config(Path(str(config).removeprefix("@")), overrides)
        if throttle:
            resolved = resolved.model_copy(
                update={"throttle": resolved.throttle.model_copy(update={"enabled": True})}
            )
        report = launch(resolved)
    except (DiLoCoError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    summary = {"parameters": report.parameters, "workers": resolved.workers, **report.summary()}
    typer.echo(json.dumps(summary, indent=2))
    if report_json is not None:
        report_json.write_text(report.model_dump_json(indent=2))


def diloco_replica(
    config: Annotated[
        Path, typer.Argument(help="TOML config; a leading '@' is stripped. Codec must be fp32.")
    ],
    replica_rank: Annotated[int, typer.Option(help="This replica's data shard, 0..workers-1.")],
    lighthouse: Annotated[str, typer.Option(help="torchft lighthouse address, e.g. http://127.0.0.1:29510.")],
    rounds: Annotated[int, typer.Option(help="Stop after this many committed sync rounds.")] = 10,
    min_replicas: Annotated[int, typer.Option(help="Smallest quorum that may commit a round.")] = 2,
    progress_file: Annotated[Path, typer.Option(help="JSON progress / final report of this replica.")] = Path(
        "diloco-replica.json"
    ),
) -> None:
    """One elastic DiLoCo replica on torchft (start a lighthouse first: `torchft_lighthouse --min_replicas 2`).

    Replicas may be killed and restarted at any time; a restarted one heals from a healthy peer.
    """
    from swarmrl.diloco.elastic import run_elastic_replica  # torch and torchft: loaded to run, not for --help

    try:
        resolved = load_diloco_config(Path(str(config).removeprefix("@")))
        report = run_elastic_replica(
            resolved, replica_rank, lighthouse, rounds, progress_file, min_replicas=min_replicas
        )
    except (DiLoCoError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    typer.echo(report.model_dump_json(indent=2))
