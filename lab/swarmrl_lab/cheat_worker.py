"""`python -m swarmrl_lab.cheat_worker cheat-worker ...`: a swarm worker that misbehaves on purpose, for the
swarm demo and the tests: `--cheat half-layers` generates with half the model's layers and claims the full
model's work (the validators' TOPLOC check must reject it), `--slowdown N` takes N times as long per unit (a
slow machine). It is `swarmrl worker` with the lab's edits on its seams (worker/feed.py `NodeOptions`): the
same options, logging and exit codes, run through swarmrl's own command line.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any, Literal

import typer

from swarmrl.cli import COMMANDS, Command, app, one
from swarmrl.cli_options import CoordinatorUrl, Device, NodeKey, Relays, RunConfigFile, RunId, WorkDir
from swarmrl.worker.cli import run_swarm_node

Cheat = Literal["half-layers"]
COMMAND = "cheat-worker"


def half_layers(model: Any) -> None:
    """Keep the first half of the decoder layers: half the compute, the full model's work claimed."""
    keep = max(1, model.config.num_hidden_layers // 2)
    model.model.layers = model.model.layers[:keep]
    model.config.num_hidden_layers = keep


def slowed(factor: float):
    """After each unit, wait (factor - 1) times what it took to generate: a machine `factor` times slower."""

    def wait(generate_seconds: float, stop: threading.Event) -> None:
        stop.wait((factor - 1.0) * generate_seconds)

    return wait


def cheat_worker(
    coordinator_url: CoordinatorUrl = None,
    run_id: RunId = None,
    config: RunConfigFile = None,
    key: NodeKey = None,
    relay: Relays = None,
    work_dir: WorkDir = None,
    cheat: Annotated[Cheat | None, typer.Option(help="misbehave on purpose: half-layers")] = None,
    slowdown: Annotated[float, typer.Option(min=1.0, help="each unit takes N times as long")] = 1.0,
    max_batches: Annotated[int | None, typer.Option(help="stop after this many submissions")] = None,
    device: Device = None,
) -> None:
    """A swarm worker that cheats (--cheat) or runs slower (--slowdown) on purpose."""
    if coordinator_url is None:
        raise typer.BadParameter("the lab's worker is a swarm node only", param_hint="--coordinator")
    seams: dict[str, Any] = {}
    if cheat == "half-layers":
        seams["edit_model"] = half_layers
    if slowdown > 1.0:
        seams["after_generate"] = slowed(slowdown)
    run_swarm_node(coordinator_url, run_id, config, key, relay, work_dir, device, max_batches, **seams)


def main() -> None:
    COMMANDS[COMMAND] = Command(
        "A swarm worker that cheats or runs slower on purpose (the lab's).",
        one("swarmrl_lab.cheat_worker", "cheat_worker"),
    )
    app()


if __name__ == "__main__":
    main()
