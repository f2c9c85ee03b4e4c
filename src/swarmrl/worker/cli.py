"""`swarmrl worker`: an inference worker of a local run, or a permissionless node of a swarm."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

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

# A node the coordinator refused for good (banned, ejected, lost standing) ends with this code.
EXIT_REFUSED = 3


def worker(
    run_dir: Annotated[Path | None, typer.Option(help="run directory of a local run")] = None,
    index: Annotated[int, typer.Option(help="worker number, names its key and files")] = 0,
    coordinator_url: CoordinatorUrl = None,
    run_id: RunId = None,
    config: RunConfigFile = None,
    key: NodeKey = None,
    relay: Relays = None,
    work_dir: WorkDir = None,
    cheat: Annotated[
        Literal["half-layers"] | None, typer.Option(help="misbehave on purpose (demo and tests): half-layers")
    ] = None,
    max_batches: Annotated[int | None, typer.Option(help="stop after this many submissions")] = None,
    slowdown: Annotated[
        float,
        typer.Option(
            min=1.0, help="simulate a slower machine (demo and tests): each unit takes N times as long"
        ),
    ] = 1.0,
    device: Device = None,
) -> None:
    """An inference worker: of a local run (--run-dir), or a permissionless node of a swarm (--coordinator).
    --device overrides the config's worker.device."""
    if coordinator_url is None:
        from swarmrl.worker.local import worker_of_run_dir

        worker_of_run_dir(local_run_dir(run_dir), index, device)
        return
    from swarmrl.worker.feed import NodeOptions, start_policy_feed

    node = node_args(run_id, config, key, relay, work_dir)
    settings = node.config
    if device is not None:
        settings.worker.device = device
    options = NodeOptions(
        coordinator_url,
        node.run_id,
        node.key,
        node.relays,
        node.work_dir,
        cheat=cheat,
        max_batches=max_batches,
        slowdown=slowdown,
    )
    stop_on_sigterm(options.stop)
    # The first policy downloads while torch and the engine are imported (seconds of CPU on a busy machine).
    feed = start_policy_feed(settings, options)
    from swarmrl.worker.node import NodeEjected, run_node

    try:
        submitted = run_node(settings, options, feed)
    except NodeEjected as exc:
        typer.echo(f"refused by the coordinator: {exc}", err=True)
        raise typer.Exit(EXIT_REFUSED) from exc
    typer.echo(f"submitted {submitted} rollout file(s)")
