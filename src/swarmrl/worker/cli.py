"""`swarmrl worker`: an inference worker of a local run, or a permissionless node of a swarm."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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
    max_batches: Annotated[int | None, typer.Option(help="stop after this many submissions")] = None,
    device: Device = None,
) -> None:
    """An inference worker: of a local run (--run-dir), or a permissionless node of a swarm (--coordinator).
    --device overrides the config's worker.device."""
    if coordinator_url is None:
        from swarmrl.worker.local import worker_of_run_dir

        worker_of_run_dir(local_run_dir(run_dir), index, device)
        return
    run_swarm_node(coordinator_url, run_id, config, key, relay, work_dir, device, max_batches)


def run_swarm_node(
    coordinator_url: str,
    run_id: str | None,
    config: Path | None,
    key: Path | None,
    relay: list[str] | None,
    work_dir: Path | None,
    device: str | None,
    max_batches: int | None,
    **seams: Any,
) -> None:
    """A node of a swarm until stopped (SIGTERM), its run drains or `max_batches`; a node the coordinator
    refused for good exits with EXIT_REFUSED. `seams`: NodeOptions' (the lab's misbehaving workers)."""
    from swarmrl.worker.feed import NodeOptions, start_policy_feed

    node = node_args(run_id, config, key, relay, work_dir)
    settings = node.config
    if device is not None:
        settings.worker.device = device
    options = NodeOptions(
        coordinator_url, node.run_id, node.key, node.relays, node.work_dir, max_batches=max_batches, **seams
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
