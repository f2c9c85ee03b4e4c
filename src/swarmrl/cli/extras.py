"""Which extra to install when a command's import fails: `swarmrl relay needs aiohttp ... pip install 'swarmrl[relay]'`."""

from __future__ import annotations

from typing import NoReturn

import typer

from swarmrl.cli.failures import EXIT_USER_ERROR

# Modules of optional dependencies → the extra that installs them (see pyproject.toml; a test keeps them in step).
MODULE_EXTRAS = {
    "torch": "model",
    "transformers": "model",
    "tokenizers": "model",
    "safetensors": "model",
    "math_verify": "tasks",
    "reasoning_gym": "tasks",
    "fastapi": "coordinator",
    "uvicorn": "coordinator",
    "sqlalchemy": "coordinator",
    "aiohttp": "relay",
    "matplotlib": "trainer",
    "psycopg": "postgres",
    "datasets": "hub",
    "boto3": "s3",
    "tensorboard": "metrics",
    "wandb": "metrics",
    "torchft": "elastic",
    "peft": "lora",
}
# Extras named after a role command, and the smaller extras each one installs (pyproject.toml; tested).
ROLE_EXTRAS = {
    "coordinator": {"coordinator"},
    "relay": {"relay"},
    "worker": {"model", "tasks"},
    "validator": {"model", "tasks"},
    "trainer": {"model", "tasks", "relay", "trainer"},
    "diloco": {"model"},
    "serve": {"model", "coordinator"},
}


def missing_extra(command: str | None, module: str) -> str | None:
    """The extra to install when `command` failed to import `module`; None when no extra provides it.

    The command's own extra when it has one that covers the module, else the module's opt-in extra
    (postgres, s3, ...), else `all`, which holds every role's dependencies.
    """
    extra = MODULE_EXTRAS.get(module)
    if extra is None:
        return None
    if extra in ROLE_EXTRAS.get(command or "", set()):
        return command
    return "all" if any(extra in extras for extras in ROLE_EXTRAS.values()) else extra


def explain_missing(command: str | None, exc: ModuleNotFoundError) -> NoReturn:
    """Name the extra that provides the missing module; re-raise when no extra does (a real bug)."""
    module = (exc.name or "").split(".")[0]
    extra = missing_extra(command, module)
    if extra is None:
        raise exc
    typer.echo(
        f"swarmrl {command} needs {module}, which this installation lacks: pip install 'swarmrl[{extra}]'",
        err=True,
    )
    raise typer.Exit(EXIT_USER_ERROR) from exc
