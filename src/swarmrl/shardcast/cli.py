"""Command-line entry points (plain typer-annotated functions; the main app registers them)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from aiohttp import web

from swarmrl.cli_options import (
    ADVERTISE_HELP,
    RunConfigFile,
    advertise_url_option,
    public_key_option,
    run_config_of,
)
from swarmrl.configs.shardcast import DEFAULT_SHARD_SIZE, ClientConfig, OriginConfig, RelayConfig
from swarmrl.httpserve import raise_open_file_limit
from swarmrl.httpserve.reach import loopback_warning
from swarmrl.identity import Identity
from swarmrl.rundir import write_text_atomic
from swarmrl.shardcast.client import fetch_checkpoint
from swarmrl.shardcast.errors import ShardcastError
from swarmrl.shardcast.origin import Origin
from swarmrl.shardcast.relay import Relay


async def _serve_until_signalled(
    start,
    name: str,
    bound_host: str,
    url_file: Path | None = None,
    advertise: str | None = None,
    beside: Callable[[str], Coroutine[Any, Any, None]] | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM; the URL peers are to open (`advertise`, else the bound one) is printed and
    written to `url_file`, and `beside(that url)` runs alongside (cancelled at the end; its failure ends the
    serving and is raised). A URL that only this machine can open, on a server bound for others, is warned
    about."""
    raise_open_file_limit()
    runner: web.AppRunner
    runner, url = await start()
    public = advertise or url
    print(f"{name} listening on {url}" + (f", advertised as {public}" if public != url else ""), flush=True)
    if (warning := loopback_warning(public, bound_host)) is not None:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    if url_file is not None:
        write_text_atomic(url_file, public)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    waits: list[asyncio.Task[Any]] = [asyncio.create_task(stop.wait())]
    if beside is not None:
        waits.append(asyncio.create_task(beside(public)))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
        await runner.cleanup()
        for waiting in waits:
            with contextlib.suppress(asyncio.CancelledError):
                await waiting


def relay(
    upstream: Annotated[list[str], typer.Option(help="origin or relay base URL to mirror (repeatable)")],
    trainer_public_key: Annotated[
        str, typer.Option(help="hex Ed25519 public key of the trainer", callback=public_key_option)
    ],
    host: Annotated[str, typer.Option(help="address to bind (0.0.0.0: every interface)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: OS picks)")] = 0,
    advertise: Annotated[
        str | None,
        typer.Option(
            help=f"{ADVERTISE_HELP} (printed and written to --url-file)", callback=advertise_url_option
        ),
    ] = None,
    data_dir: Annotated[Path, typer.Option(help="where mirrored versions are stored")] = Path(
        "shardcast-relay"
    ),
    keep: Annotated[int, typer.Option(help="newest versions kept")] = 5,
    gc_grace_s: Annotated[float, typer.Option(help="spare a version read this recently (seconds)")] = 60.0,
    url_file: Annotated[Path | None, typer.Option(help="write the URL served here once listening")] = None,
    pin: Annotated[
        list[int] | None,
        typer.Option(
            help="version mirrored however old and never deleted, e.g. a LoRA run's base (repeatable)"
        ),
    ] = None,
    coordinator: Annotated[
        str | None, typer.Option(help="report to this coordinator's dashboard (with --config and --key)")
    ] = None,
    run_config: RunConfigFile = None,
    run_id: Annotated[
        str | None, typer.Option(help="the run whose dashboard shows this relay (default: the config's)")
    ] = None,
    key: Annotated[Path | None, typer.Option(help="this relay's node key (created if missing)")] = None,
    cut_through: Annotated[
        bool,
        typer.Option(
            help="pass a shard on while it arrives (its last byte once it verified); off: verified shards only"
        ),
    ] = True,
    park_next: Annotated[
        bool,
        typer.Option(
            help="send the next version's delta requests upstream before it is published (held there until it "
            "is: its bytes leave with its announcement); off: requested once it is announced"
        ),
    ] = True,
) -> None:
    """Mirror checkpoints from upstream, verify every shard against the trainer's signature, serve them.

    With --coordinator it joins the run, presenting the run config's [contract], and reports to its dashboard."""
    logging.basicConfig(level=logging.INFO)
    config = RelayConfig(
        upstreams=upstream,
        host=host,
        port=port,
        data_dir=data_dir,
        keep_versions=keep,
        gc_grace_s=gc_grace_s,
        pinned_versions=pin or [],
        cut_through=cut_through,
        park_next=park_next,
    )
    server = Relay(config, trainer_public_key)
    beside = None
    if coordinator is not None:
        if run_config is None or key is None:
            raise typer.BadParameter("--coordinator needs --config and --key", param_hint="--coordinator")
        from swarmrl.shardcast.coordinator_report import report_forever

        run, run_name = run_config_of(run_config, run_id)

        def beside(url: str):
            return report_forever(server, url, coordinator, run_name, key, run.contract)

    asyncio.run(_serve_until_signalled(server.start, "relay", host, url_file, advertise, beside))


def origin(
    checkpoint_root: Annotated[Path, typer.Option(help="directory holding step_<k>/ checkpoints")],
    key: Annotated[Path, typer.Option(help="trainer's Ed25519 private key (PEM)")],
    host: Annotated[str, typer.Option(help="address to bind (0.0.0.0: every interface)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: OS picks)")] = 0,
    advertise: Annotated[
        str | None,
        typer.Option(
            help=f"{ADVERTISE_HELP} (printed and written to --url-file)", callback=advertise_url_option
        ),
    ] = None,
    run_id: Annotated[str, typer.Option(help="run id written into manifests")] = "swarmrl",
    url_file: Annotated[Path | None, typer.Option(help="write the URL served here once listening")] = None,
) -> None:
    """Serve every published version under the checkpoint root (rescanned for new ones)."""
    logging.basicConfig(level=logging.INFO)
    server = Origin(checkpoint_root, Identity.load(key), run_id, OriginConfig(host=host, port=port))
    asyncio.run(_serve_until_signalled(server.start, "origin", host, url_file, advertise))


def publish(
    checkpoint_dir: Annotated[Path, typer.Argument(help="the step_<k>/ directory the trainer wrote")],
    version: Annotated[int, typer.Option(help="trainer step")],
    key: Annotated[Path, typer.Option(help="trainer's Ed25519 private key (PEM)")],
    run_id: Annotated[str, typer.Option(help="run id written into the manifest")] = "swarmrl",
    shard_size_mib: Annotated[float, typer.Option(help="shard size in MiB")] = DEFAULT_SHARD_SIZE / 2**20,
    delta: Annotated[bool, typer.Option(help="also write a delta against the newest older sibling")] = True,
    hash_algorithm: Annotated[Literal["blake3", "sha256"], typer.Option(help="blake3 or sha256")] = "blake3",
) -> None:
    """Sign a checkpoint directory (and its delta) so a running `origin` serves it."""
    config = OriginConfig(shard_size=int(shard_size_mib * 2**20), delta=delta, hash_algorithm=hash_algorithm)
    publisher = Origin(checkpoint_dir.parent, Identity.load(key), run_id, config)
    manifest = publisher.publish(checkpoint_dir, version)
    print(f"published version {manifest.version}: {len(manifest.files)} files, {manifest.total_size} bytes")


def fetch(
    source: Annotated[list[str], typer.Option(help="origin or relay base URL (repeatable)")],
    dest: Annotated[Path, typer.Option(help="directory that receives step_<k>/")],
    trainer_public_key: Annotated[
        str, typer.Option(help="hex Ed25519 public key of the trainer", callback=public_key_option)
    ],
    run_id: Annotated[str, typer.Option(help="run the checkpoint must belong to (signed into its manifest)")],
    version: Annotated[int | None, typer.Option(help="version to fetch (default: newest verified)")] = None,
    concurrency: Annotated[int, typer.Option(help="shards downloaded at once")] = 8,
) -> None:
    """Download and verify one checkpoint version of one run; prints the installed directory."""
    try:
        path = fetch_checkpoint(
            source, version, dest, trainer_public_key, ClientConfig(concurrency=concurrency), run_id=run_id
        )
    except ShardcastError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    print(path)
