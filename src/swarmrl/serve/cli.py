"""The `swarmrl serve` command: a run's newest checkpoint (or any HF model directory) behind the OpenAI API."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

import typer

from swarmrl.configs import ConfigError, RunConfig, load_config
from swarmrl.configs.devices import DEVICE_HELP, InvalidDevice, check_device
from swarmrl.configs.model import PromptSection
from swarmrl.serve.errors import ServeError


def serve(
    config: Annotated[
        str | None, typer.Argument(help="run config (TOML or a run's config.json), optionally @path")
    ] = None,
    overrides: Annotated[list[str] | None, typer.Argument(help="section.field=value overrides")] = None,
    model: Annotated[Path | None, typer.Option(help="serve this HF model directory instead")] = None,
    step: Annotated[
        int | None, typer.Option(min=0, help="the run's checkpoint to serve (default newest)")
    ] = None,
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port; 0: the OS picks")] = 8000,
    url_file: Annotated[Path | None, typer.Option(help="write the server's URL here once listening")] = None,
    device: Annotated[str, typer.Option(help=f"where the model runs: {DEVICE_HELP}")] = "auto",
    dtype: Annotated[
        str | None, typer.Option(help="weights dtype (default: the config's model.dtype)")
    ] = None,
    served_model_name: Annotated[
        list[str] | None,
        typer.Option(
            "--served-model-name",
            "--name",
            help="the model's name in responses (default: the run's name, or the directory's); repeat it to "
            "accept more names: a request naming any other model is a 404",
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="SWARMRL_API_KEY",
            help="require `Authorization: Bearer KEY` on every /v1 route (default: $SWARMRL_API_KEY; none: open)",
        ),
    ] = None,
    max_waiting: Annotated[
        int, typer.Option(min=1, help="completions waiting for a row in the engine's batch before 503")
    ] = 256,
) -> None:
    """Serve a checkpoint over an OpenAI-compatible API: /v1/completions and /v1/chat/completions."""
    from swarmrl.devices import DeviceUnavailable
    from swarmrl.errors import UserError
    from swarmrl.models.errors import ModelLoadError
    from swarmrl.models.prompting import PromptError
    from swarmrl.serve.preflight import check_model_dir

    sock = None
    try:
        cfg = load_config(config, overrides or []) if config is not None else None
        path = served_checkpoint(cfg, model, step)
        check_model_dir(path)
        device = check_device(device)
        sock = _bound(host, port)  # the port is ours before seconds of loading, or refused at once
        from swarmrl.serve.launch import build_served

        default_name = cfg.run.name if cfg is not None and model is None else path.name
        served = build_served(
            path,
            cfg.prompt if cfg is not None else PromptSection(),
            engine=cfg.engine if cfg is not None else None,
            names=tuple(served_model_name or [default_name]),
            dtype=dtype or (cfg.model.dtype if cfg is not None else "float32"),
            device=device,
            max_waiting=max_waiting,
            api_key=api_key or None,
        )
    except (
        ConfigError,
        InvalidDevice,
        ServeError,
        DeviceUnavailable,
        ModelLoadError,
        PromptError,
        UserError,
    ) as exc:
        if sock is not None:
            sock.close()
        typer.echo(f"swarmrl serve: {exc}", err=True)
        raise typer.Exit(2) from exc
    from swarmrl.serve.launch import run_server

    run_server(served, sock, url_file)


def _bound(host: str, port: int) -> socket.socket:
    from swarmrl.errors import AddressInUse
    from swarmrl.httpserve.uvicorn_config import bind

    try:
        return bind(host, port, "the server")
    except AddressInUse:
        raise
    except OSError as exc:  # a host that is no address of this machine, a port below 1024 without the right
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def served_checkpoint(config: RunConfig | None, model: Path | None, step: int | None) -> Path:
    """--model, else the run's checkpoint `step` (default its newest), else the config's model.path."""
    from swarmrl.steps import checkpoint_dir, latest_checkpoint

    if model is not None:
        if not (model / "config.json").is_file():
            raise ServeError(f"{model} is not a model directory (no config.json)")
        return model
    if config is None:
        raise ServeError("give a run config (its newest checkpoint is served) or --model DIR")
    checkpoints = config.run.directory / "checkpoints"
    chosen = step if step is not None else latest_checkpoint(checkpoints)
    if chosen is not None and (checkpoint_dir(checkpoints, chosen) / "config.json").is_file():
        return checkpoint_dir(checkpoints, chosen)
    if step is None and config.model.path is not None:
        return Path(config.model.path)
    raise ServeError(
        f"no checkpoint {chosen if step is not None else ''} in {checkpoints}: train first, or give --model"
    )
