"""Option types and checks shared by the role commands (`<role>/cli.py`) and the top-level CLI.

Light on purpose: it imports typer, the configuration floor and (lazily) identity only, so any role's command
module can use it and nothing here reaches up into a role or into `swarmrl.cli`.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from swarmrl.configs import RunConfig, load_config
from swarmrl.configs.devices import DEVICE_HELP, InvalidDevice, check_device
from swarmrl.configs.shardcast import check_advertise_url

ADVERTISE_HELP = (
    "URL peers open to reach this server, http://HOST:PORT; default: the bound address, with this machine's "
    "hostname for a wildcard host"
)


def advertise_url_option(url: str | None) -> str | None:
    """Typer callback: an advertised URL peers can open, refused by name at the command line."""
    try:
        return check_advertise_url(url)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def public_key_option(value: str) -> str:
    """Typer callback: a 64-digit hex Ed25519 public key (what `swarmrl keygen` prints)."""
    from swarmrl.identity import PUBLIC_KEY_HEX_LEN

    if len(value) != PUBLIC_KEY_HEX_LEN or any(c not in "0123456789abcdefABCDEF" for c in value):
        raise typer.BadParameter(
            f"{value!r} is not a {PUBLIC_KEY_HEX_LEN}-digit hex public key (what `swarmrl keygen` prints)"
        )
    return value.lower()


def _device_option(value: str | None) -> str | None:
    try:
        return None if value is None else check_device(value)
    except InvalidDevice as exc:
        raise typer.BadParameter(str(exc)) from exc


# --- a node of a swarm (worker, validator) or of a local run ------------------------------------------------
CoordinatorUrl = Annotated[
    str | None, typer.Option("--coordinator", help="coordinator URL: run as a node of that swarm")
]
NodeKey = Annotated[
    Path | None,
    typer.Option(
        "--key", help="this node's Ed25519 private key (PEM; `swarmrl keygen` makes one; created if missing)"
    ),
]
RunId = Annotated[
    str | None, typer.Option("--run-id", help="swarm run to join (default and required: the config's run id)")
]
RunConfigFile = Annotated[
    Path | None,
    typer.Option("--config", help="the run's config: its TOML as written, or the config.json of a run"),
]
Relays = Annotated[
    list[str] | None, typer.Option("--relay", help="shardcast relay or origin URL (repeatable)")
]
WorkDir = Annotated[
    Path | None, typer.Option("--work-dir", help="this node's own files (checkpoints, rollouts)")
]
Device = Annotated[
    str | None,
    typer.Option("--device", callback=_device_option, help=f"where the model runs: {DEVICE_HELP}"),
]
Threads = Annotated[int, typer.Option(help="torch CPU threads")]


def local_run_dir(run_dir: Path | None) -> Path:
    """A worker or validator runs either locally on a run directory or as a node of a swarm."""
    if run_dir is None:
        raise typer.BadParameter("give --run-dir (local run) or --coordinator (swarm)")
    return run_dir


@dataclass(frozen=True)
class NodeArgs:
    """What every swarm node starts from; the run id is the config's (`run.run_id`, else its name)."""

    config: RunConfig
    run_id: str
    key: Path
    relays: list[str]
    work_dir: Path


def node_args(
    run_id: str | None,
    config_file: Path | None,
    key: Path | None,
    relays: list[str] | None,
    work_dir: Path | None,
) -> NodeArgs:
    """A swarm node's arguments, each of them present."""
    if config_file is None or key is None or not relays or work_dir is None:
        flags = (("--config", config_file), ("--key", key), ("--relay", relays), ("--work-dir", work_dir))
        missing = [flag for flag, value in flags if not value]
        raise typer.BadParameter(f"a swarm node also needs {', '.join(missing)}", param_hint="--coordinator")
    config, config_run_id = run_config_of(config_file, run_id)
    return NodeArgs(config, config_run_id, key, relays, work_dir)


def run_config_of(config_file: Path, run_id: str | None) -> tuple[RunConfig, str]:
    """The run config a swarm node was given and its run id (`run.run_id`, else its name), which `--run-id`,
    when given, must equal."""
    config = load_config(str(config_file), [])
    if run_id is not None and run_id != config.run.id:
        # Seeds and signatures bind the config's run id: a node of another id would have all its work rejected.
        raise typer.BadParameter(f"--run-id {run_id!r} differs from the config's run id {config.run.id!r}")
    return config, config.run.id


def stop_on_sigterm(stop: threading.Event) -> None:
    """SIGTERM (what launchers and service managers send) sets `stop`: the node finishes its call and leaves."""
    signal.signal(signal.SIGTERM, lambda *_: stop.set())


# --- the shardcast origin a swarm trainer serves ------------------------------------------------------------
OriginHost = Annotated[
    str | None,
    typer.Option(help="address the shardcast origin of a swarm binds (default: [shardcast] origin_host)"),
]
OriginPort = Annotated[
    int | None,
    typer.Option(
        min=0,
        max=65535,
        help="port of the shardcast origin of a swarm, 0: OS picks (default: [shardcast] origin_port)",
    ),
]
OriginAdvertise = Annotated[
    str | None,
    typer.Option(
        help=f"{ADVERTISE_HELP}; relays are given it (default: [shardcast] advertise_url)",
        callback=advertise_url_option,
    ),
]


def origin_overrides(host: str | None, port: int | None, advertise: str | None) -> dict[str, object]:
    """The [shardcast] origin fields the command line sets (the rest stay the run config's)."""
    given = {"origin_host": host, "origin_port": port, "advertise_url": advertise}
    return {field: value for field, value in given.items() if value is not None}
