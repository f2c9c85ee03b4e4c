"""`swarmrl island-trainer`: one trainer island, merged with the other islands every H steps."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from swarmrl.cli_options import (
    CoordinatorUrl,
    NodeKey,
    OriginAdvertise,
    OriginHost,
    OriginPort,
    Threads,
    origin_overrides,
)


def island_trainer(
    run_dir: Annotated[Path, typer.Option(help="this island's run directory (prepared by demo --islands)")],
    island: Annotated[int, typer.Option(help="island number: its member id in the merge quorum")],
    lighthouse: Annotated[str, typer.Option(help="address of the islands' torchft lighthouse")],
    threads: Threads = 1,
    coordinator_url: CoordinatorUrl = None,
    key: NodeKey = None,
    origin_host: OriginHost = None,
    origin_port: OriginPort = None,
    origin_advertise: OriginAdvertise = None,
    host: Annotated[
        str, typer.Option(help="this machine's address, at which the other islands reach its merge servers")
    ] = "127.0.0.1",
) -> None:
    """One trainer island: the trainer of a local run or, with --coordinator, of the island's own swarm (merged
    policies then go out through its shardcast origin), merged with the other islands every H steps."""
    from swarmrl.islands.island import island_trainer_role

    island_trainer_role(
        run_dir,
        island,
        lighthouse,
        threads=threads,
        coordinator_url=coordinator_url,
        key=key,
        origin=origin_overrides(origin_host, origin_port, origin_advertise),
        host=host,
    )
