"""`swarmrl coordinator`: run the protocol service."""

from __future__ import annotations

import json
import logging
import tomllib
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.errors import SchemaVersionError

ADMIN_TOKEN_ENV = "SWARMRL_ADMIN_TOKEN"


def load_config(path: Path | None) -> CoordinatorConfig:
    """A TOML file (or a run's config.json) holding a `coordinator` table or the fields at top level."""
    if path is None:
        return CoordinatorConfig()
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        return CoordinatorConfig.model_validate(data.get("coordinator", data))
    except (OSError, ValueError, tomllib.TOMLDecodeError, ValidationError) as exc:
        raise typer.BadParameter(f"{path}: {exc}", param_hint="--config") from exc


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
        typer.Option(help="TOML: a run config (its coordinator table) or the fields at top level"),
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
        storage = storage_dir
        if s3_bucket is not None:
            from swarmrl.coordinator.store.storage import S3Storage

            storage = S3Storage(s3_bucket, storage_dir, endpoint_url=s3_endpoint_url)
        app = create_app(db_url=db_url, storage=storage, admin_token=admin_token, config=settings)
    except (SQLAlchemyError, SchemaVersionError, ModuleNotFoundError) as exc:
        raise typer.BadParameter(f"cannot open {db_url}: {exc}", param_hint="--db-url") from exc
    serve(app, host, port, port_file=port_file, log_level=log_level)


if __name__ == "__main__":
    typer.run(coordinator)


admin = typer.Typer(
    help="Operator commands against a running coordinator (admin token from the environment)."
)
CoordinatorUrl = Annotated[str, typer.Option("--coordinator", help="coordinator base URL")]
AdminToken = Annotated[str, typer.Option(envvar=ADMIN_TOKEN_ENV, help="the coordinator's admin token")]


def _public_key(value: str) -> str:
    """A hex Ed25519 public key, or the PEM private key file it belongs to."""
    from swarmrl.identity import Identity

    path = Path(value)
    return Identity.load(path).node_id if path.is_file() else value


def _admin_call(coordinator_url: str, token: str, call) -> None:
    from swarmrl.coordinator.client import CoordinatorClient
    from swarmrl.coordinator.errors import CoordinatorError

    with CoordinatorClient(coordinator_url, admin_token=token, max_retries=2) as client:
        try:
            result = call(client)
        except CoordinatorError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
    typer.echo(result.model_dump_json(indent=2))


@admin.command("create-run")
def create_run(
    run_id: Annotated[str, typer.Option(help="name of the new run")],
    trainer_key: Annotated[str, typer.Option(help="trainer's hex public key, or its PEM key file")],
    coordinator_url: CoordinatorUrl,
    token: AdminToken,
    async_level: Annotated[
        int, typer.Option(help="oldest policy a submission may use: step - async_level")
    ] = 2,
    run_config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="the run's TOML (or config.json): its [worker] section bounds the rows and tokens a unit's "
            "file may claim (without it claims are unbounded)",
        ),
    ] = None,
) -> None:
    """Open a run for a trainer; prints its state, including the run secret that keys task seeds."""
    from swarmrl.configs import ConfigError, load_config
    from swarmrl.coordinator.api import UnitBounds

    key = _public_key(trainer_key)
    unit = None
    if run_config is not None:
        try:
            unit = UnitBounds.of_worker(load_config(run_config).worker)
        except ConfigError as exc:
            raise typer.BadParameter(str(exc), param_hint="--config") from exc
    _admin_call(
        coordinator_url, token, lambda c: c.create_run(run_id, key, async_level=async_level, unit=unit)
    )


@admin.command("add-validator")
def add_validator(
    run_id: Annotated[str, typer.Option(help="the run")],
    validator_key: Annotated[str, typer.Option(help="validator's hex public key, or its PEM key file")],
    coordinator_url: CoordinatorUrl,
    token: AdminToken,
) -> None:
    """Let a validator key post verdicts for a run."""
    key = _public_key(validator_key)
    _admin_call(coordinator_url, token, lambda c: c.add_validator(run_id, key))


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
