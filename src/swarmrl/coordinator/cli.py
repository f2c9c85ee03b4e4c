"""`swarmrl coordinator`: run the protocol service."""

from __future__ import annotations

import json
import logging
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from swarmrl.configs import ConfigError, RunConfig
from swarmrl.configs import load_config as load_run_config_file
from swarmrl.configs.base import validation_problems
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.errors import SchemaVersionError
from swarmrl.retry import RetryPolicy

if TYPE_CHECKING:
    from swarmrl.coordinator.store.storage import Storage

ADMIN_TOKEN_ENV = "SWARMRL_ADMIN_TOKEN"
EXIT_REFUSED = 2  # the coordinator refused an operator command (wrong token, unknown run ...): one line
# An operator command waits up to half a minute for a coordinator that is still starting (or restarting).
OPERATOR_RETRY = RetryPolicy(attempts=10, deadline_seconds=30.0, initial_seconds=0.25, max_seconds=4.0)


def load_config(path: Path | None) -> CoordinatorConfig:
    """The coordinator's settings from `path`: a run config as it is (TOML, or a run's config.json), whose
    [coordinator] table is read and defaulted when absent, or a file holding only the coordinator's fields."""
    if path is None:
        return CoordinatorConfig()
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:  # TOMLDecodeError is a ValueError
        raise ConfigError(
            f"{path}: cannot read it as {'JSON' if path.suffix == '.json' else 'TOML'} ({exc})"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a table of settings")
    if set(data) <= set(CoordinatorConfig.model_fields):
        try:
            return CoordinatorConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{path}: {validation_problems(exc, CoordinatorConfig)}") from exc
    return load_run_config_file(path, []).coordinator


def coordinator(
    db_url: Annotated[
        str, typer.Option(help="SQLAlchemy URL: sqlite:///path.db or postgresql+psycopg://...")
    ] = ("sqlite:///coordinator.db"),
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one (see --port-file)")] = 8700,
    storage_dir: Annotated[Path, typer.Option(help="directory that stores uploaded rollout files")] = Path(
        "coordinator_storage"
    ),
    admin_token: Annotated[
        str | None,
        typer.Option(envvar=ADMIN_TOKEN_ENV, help="bearer token of admin endpoints (unset: disabled)"),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            help="the run config as it is (its [coordinator] table; defaults when absent), or a TOML of those fields"
        ),
    ] = None,
    port_file: Annotated[Path | None, typer.Option(help="write the bound port here once listening")] = None,
    s3_bucket: Annotated[
        str | None,
        typer.Option(
            help="store uploads in this S3-compatible bucket (nodes upload by presigned URL; `s3` extra)"
        ),
    ] = None,
    s3_endpoint_url: Annotated[
        str | None,
        typer.Option(help="endpoint of a non-AWS store (MinIO, Ceph); credentials from the AWS env"),
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "warning",
) -> None:
    """Run the coordinator: identities, heartbeats, step counter, task seeds, uploads, verdicts, ledger."""
    from swarmrl.coordinator.server.app import create_app
    from swarmrl.coordinator.server.listen import serve

    logging.basicConfig(level=logging.INFO)
    settings = load_config(config)
    try:
        storage: Path | Storage = storage_dir
        if s3_bucket is not None:
            from swarmrl.coordinator.store.storage import S3Storage

            storage = S3Storage(s3_bucket, storage_dir, endpoint_url=s3_endpoint_url)
        app = create_app(db_url=db_url, storage=storage, admin_token=admin_token, config=settings)
    except (SQLAlchemyError, SchemaVersionError, ModuleNotFoundError) as exc:
        raise typer.BadParameter(f"cannot open {db_url}: {exc}", param_hint="--db-url") from exc
    serve(app, host, port, port_file=port_file, log_level=log_level)


admin = typer.Typer(
    help="Operator commands against a running coordinator (admin token from the environment)."
)
CoordinatorUrl = Annotated[str, typer.Option("--coordinator", help="coordinator base URL")]
AdminToken = Annotated[str, typer.Option(envvar=ADMIN_TOKEN_ENV, help="the coordinator's admin token")]


def _public_key(value: str, option: str) -> str:
    """A hex Ed25519 public key, or the PEM private key file it belongs to (`swarmrl keygen --out FILE`)."""
    from swarmrl.identity import PUBLIC_KEY_HEX_LEN, Identity, KeyFileError

    if Path(value).is_file():
        return Identity.load(value).node_id
    if len(value) == PUBLIC_KEY_HEX_LEN and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    suggested = value if value.endswith(".pem") else "key.pem"
    raise KeyFileError(
        f"{option} {value!r} is neither a key file nor a {PUBLIC_KEY_HEX_LEN}-digit hex public key "
        f"(make a key with `swarmrl keygen --out {suggested}`)"
    )


def _admin_call(coordinator_url: str, token: str, call) -> None:
    from swarmrl.coordinator.client import AdminClient
    from swarmrl.coordinator.errors import CoordinatorError

    with AdminClient.at(coordinator_url, admin_token=token, retry=OPERATOR_RETRY) as client:
        try:
            result = call(client)
        except CoordinatorError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(EXIT_REFUSED) from exc
    typer.echo(result.model_dump_json(indent=2))


RunConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="the run config: its run id (run.run_id, else run.name)"),
]
RunIdOption = Annotated[str | None, typer.Option(help="the run (default: the run config's run id)")]


def _run_of(config: Path | None, run_id: str | None) -> str:
    """The run an operator command is about: --run-id, else the run config's id (they must agree)."""
    if config is None:
        if run_id is None:
            raise typer.BadParameter("give --config (the run config) or --run-id", param_hint="--run-id")
        return run_id
    return _named_run(load_run_config_file(str(config), []), run_id)


def _named_run(settings: RunConfig, run_id: str | None) -> str:
    if run_id is not None and run_id != settings.run.id:
        raise typer.BadParameter(f"--run-id {run_id!r} differs from the config's run id {settings.run.id!r}")
    return settings.run.id


@admin.command("create-run")
def create_run(
    trainer_key: Annotated[
        str, typer.Option(help="trainer's key file (`swarmrl keygen --out FILE`) or its hex public key")
    ],
    config: Annotated[
        Path,
        typer.Option(
            "--config",
            help="the run config: its run id (run.run_id, else run.name) and its [contract], which every "
            "trainer, validator, worker and relay must then present",
        ),
    ],
    coordinator_url: CoordinatorUrl,
    token: AdminToken,
    run_id: RunIdOption = None,
) -> None:
    """Open a run for a trainer with the config's contract (and, when its [tasks.community] accepts task
    packs, their policy); prints its state, including the run secret that keys task seeds."""
    from swarmrl.coordinator.pack_client import PackClient

    settings = load_run_config_file(str(config), [])
    run = _named_run(settings, run_id)
    key = _public_key(trainer_key, "--trainer-key")

    def open_run(client):
        created = client.create_run(run, key, settings.contract)
        if settings.tasks.community.accept:
            PackClient(client.transport).set_pack_policy(run, settings.tasks.community)
        return created

    _admin_call(coordinator_url, token, open_run)


@admin.command("pack-policy")
def pack_policy(
    config: Annotated[Path, typer.Option("--config", help="the run config: its [tasks.community]")],
    coordinator_url: CoordinatorUrl,
    token: AdminToken,
    run_id: RunIdOption = None,
) -> None:
    """Set (or change) the run's community task-pack policy from the config's [tasks.community]: whether it
    takes packs, their shares, admission budgets and retirement; it applies from the next step's mix."""
    from swarmrl.coordinator.pack_client import PackClient

    settings = load_run_config_file(str(config), [])
    run = _named_run(settings, run_id)
    _admin_call(
        coordinator_url,
        token,
        lambda c: PackClient(c.transport).set_pack_policy(run, settings.tasks.community),
    )


@admin.command("add-validator")
def add_validator(
    validator_key: Annotated[
        str, typer.Option(help="validator's key file (`swarmrl keygen --out FILE`) or its hex public key")
    ],
    coordinator_url: CoordinatorUrl,
    token: AdminToken,
    config: RunConfigOption = None,
    run_id: RunIdOption = None,
) -> None:
    """Let a validator key post verdicts for a run."""
    run = _run_of(config, run_id)
    key = _public_key(validator_key, "--validator-key")
    _admin_call(coordinator_url, token, lambda c: c.add_validator(run, key))


@admin.command("ban")
def ban(
    node_id: Annotated[str, typer.Argument(help="hex public key of the node")],
    coordinator_url: CoordinatorUrl,
    token: AdminToken,
    reason: Annotated[str, typer.Option(help="recorded with the ban")] = "banned by admin",
) -> None:
    """Ban a node from every run and eject it from the runs it joined."""
    _admin_call(coordinator_url, token, lambda c: c.ban(node_id, reason))


@admin.command("unban")
def unban(
    node_id: Annotated[str, typer.Argument(help="hex public key of the node")],
    coordinator_url: CoordinatorUrl,
    token: AdminToken,
) -> None:
    """Lift a ban."""
    _admin_call(coordinator_url, token, lambda c: c.unban(node_id))


if __name__ == "__main__":  # `python -m swarmrl.coordinator.cli`: what swarmrl_lab.coordinator_double starts
    typer.run(coordinator)
