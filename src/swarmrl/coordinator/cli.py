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

from swarmrl.coordinator.config import CoordinatorConfig
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
    from swarmrl.coordinator.app import create_app
    from swarmrl.coordinator.server import serve

    logging.basicConfig(level=logging.INFO)
    settings = load_config(config)
    try:
        storage = storage_dir
        if s3_bucket is not None:
            from swarmrl.coordinator.storage import S3Storage

            storage = S3Storage(s3_bucket, storage_dir, endpoint_url=s3_endpoint_url)
        app = create_app(db_url=db_url, storage=storage, admin_token=admin_token, config=settings)
    except (SQLAlchemyError, SchemaVersionError, ModuleNotFoundError) as exc:
        raise typer.BadParameter(f"cannot open {db_url}: {exc}", param_hint="--db-url") from exc
    serve(app, host, port, port_file=port_file, log_level=log_level)


if __name__ == "__main__":
    typer.run(coordinator)
