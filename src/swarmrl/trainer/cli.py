"""`swarmrl trainer`: the trusted trainer of a local run, or with --coordinator of a swarm."""

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


def trainer(
    run_dir: Annotated[Path, typer.Option(help="run directory prepared by `swarmrl rl` or `sft`")],
    threads: Threads = 1,
    coordinator_url: CoordinatorUrl = None,
    key: NodeKey = None,
    origin_host: OriginHost = None,
    origin_port: OriginPort = None,
    origin_advertise: OriginAdvertise = None,
) -> None:
    """The trusted trainer: of a local run, or with --coordinator of a swarm (it then serves a shardcast origin)."""
    from swarmrl.configs import load_run_config

    load_run_config(run_dir)  # a directory that is not a prepared run is refused before torch loads
    from swarmrl.trainer.role import trainer_role

    origin = origin_overrides(origin_host, origin_port, origin_advertise)
    trainer_role(run_dir, threads=threads, coordinator_url=coordinator_url, key=key, origin=origin)
