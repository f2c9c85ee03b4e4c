"""`swarmrl tasks check | sign | pack`: a task pack's author and a trusted node, offline.

A malformed pack (archive, manifest, signature, rows, references, verifier source) is one line and exit 2,
as every expected failure; a pack that loads gets the full report: exit 0 when no check failed, 1 when refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from swarmrl.configs.tasks import TasksConfig

REFUSED_EXIT = 1


def check_pack(
    pack: Annotated[Path, typer.Argument(help="the pack: a directory or a .tar.gz archive")],
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="a run config: its [tasks.community.admission] limits and thresholds, [tasks.code] sandbox, "
            "[tasks.extraction], solve_rate_band and held-out evals",
        ),
    ] = None,
    evals: Annotated[
        list[Path] | None,
        typer.Option(
            "--evals", help="held-out eval dataset (.jsonl/.parquet with a prompt column); repeatable"
        ),
    ] = None,
    admitted: Annotated[
        list[Path] | None, typer.Option("--admitted", help="an already admitted pack; repeatable")
    ] = None,
    salt: Annotated[
        int, typer.Option(help="seed of the row samples and the salted cheat (a validator keeps its own)")
    ] = 0,
    stop_early: Annotated[
        bool, typer.Option("--stop-early", help="stop at the first failed check, as a validator")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Run every admission check of a task pack here, offline, and print one report (exit 1 when refused)."""
    from swarmrl.tasks.packs.admission import AdmissionContext, check_pack
    from swarmrl.tasks.packs.held_out import held_out_index
    from swarmrl.tasks.packs.pack import load_pack
    from swarmrl.tasks.packs.report import render

    tasks = _tasks_config(config)
    admission = tasks.community.admission
    loaded = load_pack(pack, admission.limits)
    others = [load_pack(path, admission.limits) for path in admitted or []]
    index = held_out_index(
        admission.thresholds.near_duplicate_jaccard,
        tasks if config is not None else None,
        evals or [],
        others,
    )
    context = AdmissionContext(
        config=admission,
        code=tasks.code,
        extraction=tasks.extraction,
        held_out=index,
        band=tasks.solve_rate_band or (0.1, 0.8),
        salt=salt,
        stop_early=stop_early,
    )
    report = check_pack(loaded, context)
    typer.echo(report.model_dump_json(indent=2) if json_output else render(report))
    if report.verdict == "refused":
        raise typer.Exit(REFUSED_EXIT)


def sign_pack(
    pack: Annotated[Path, typer.Argument(help="the pack directory")],
    key: Annotated[
        Path, typer.Option("--key", help="the author's Ed25519 private key (PEM; `swarmrl keygen`)")
    ],
) -> None:
    """Sign a pack directory with its author's key (writes signature.json), then load it to check it."""
    from swarmrl.identity import Identity
    from swarmrl.tasks.packs.errors import PackError
    from swarmrl.tasks.packs.files import MANIFEST, SIGNATURE, read_pack_files
    from swarmrl.tasks.packs.manifest import parse_manifest
    from swarmrl.tasks.packs.pack import load_pack
    from swarmrl.tasks.packs.signing import signature_file

    if not pack.is_dir():
        raise PackError(f"{pack}: sign a pack directory (then `swarmrl tasks pack` archives it)")
    identity = Identity.load(key)
    limits = TasksConfig().community.admission.limits
    files = read_pack_files(pack, limits)
    manifest = parse_manifest(files.text(MANIFEST), f"{pack}/{MANIFEST}")
    if manifest.author != identity.node_id:
        raise PackError(f'{pack}/{MANIFEST}: author is not this key; set author = "{identity.node_id}"')
    (pack / SIGNATURE).write_bytes(signature_file(files, identity))
    loaded = load_pack(pack, limits)
    typer.echo(f"signed {loaded.manifest.label}: {len(loaded.rows)} rows, id {loaded.digest}")


def archive_pack(
    pack: Annotated[Path, typer.Argument(help="the signed pack directory")],
    out: Annotated[
        Path | None, typer.Option("--out", help="the archive; default NAME-VERSION.tar.gz here")
    ] = None,
) -> None:
    """Archive a signed pack directory as a reproducible .tar.gz (what gets submitted)."""
    from swarmrl.tasks.packs.files import read_pack_files, write_archive
    from swarmrl.tasks.packs.pack import load_pack, pack_from_files

    limits = TasksConfig().community.admission.limits
    files = read_pack_files(pack, limits)
    loaded = pack_from_files(files, limits)
    folder = f"{loaded.manifest.name}-{loaded.manifest.version}"
    target = out or Path(f"{folder}.tar.gz")
    write_archive(files, folder, target)
    again = load_pack(target, limits)
    typer.echo(f"wrote {target}: {target.stat().st_size} bytes, {len(again.rows)} rows, id {again.digest}")


def _tasks_config(path: Path | None) -> TasksConfig:
    if path is None:
        return TasksConfig()
    from swarmrl.configs import load_config

    return load_config(path).tasks
