"""`swarmrl tasks submit | status`: a pack's author and a run's coordinator.

`submit` uploads a signed pack (a directory, archived on the fly, or its .tar.gz) to a run that takes packs,
with the proof-of-work ticket the run asks for; `--wait` then follows its admission until validators decide it
and prints their report. `status` prints where a pack stands: each check with its figures, what the run
measured of it, its author's credit. A pack the coordinator refuses, or cannot read, is one line and exit 2.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

CoordinatorUrl = Annotated[
    str, typer.Option("--coordinator", help="the run's coordinator, e.g. http://host:8700")
]
RunId = Annotated[str, typer.Option("--run-id", help="the run to submit to")]
DECIDED = ("admitted", "refused", "retired")
REFUSED_EXIT = 1


def submit_pack(
    pack: Annotated[Path, typer.Argument(help="the signed pack: a directory or its .tar.gz")],
    coordinator: CoordinatorUrl,
    key: Annotated[Path, typer.Option("--key", help="the author's private key (the manifest's author)")],
    run_id: RunId,
    wait: Annotated[bool, typer.Option("--wait", help="follow its admission until it is decided")] = False,
    wait_seconds: Annotated[float, typer.Option(help="how long --wait follows it")] = 3600.0,
    poll_seconds: Annotated[float, typer.Option(help="how often --wait asks")] = 5.0,
) -> None:
    """Submit a signed task pack to a run; with --wait, print the validators' report once it is decided."""
    from swarmrl.coordinator.errors import CoordinatorError
    from swarmrl.coordinator.pack_client import PackClient
    from swarmrl.identity import Identity
    from swarmrl.tasks.packs.errors import PackError

    identity = Identity.load(key)
    archive, digest, label = _archive(pack, identity.node_id)
    with PackClient.at(coordinator, identity) as client:
        try:
            bits = client.pack_policy(run_id).policy["budget"]["ticket_bits"]
            typer.echo(f"{label}: solving the run's proof-of-work ticket ({bits} bits)…", err=True)
            info = client.submit_pack(run_id, archive, _ticket(run_id, digest, identity.node_id, bits))
        except CoordinatorError as exc:
            if exc.status == 0:
                raise
            raise PackError(f"{label}: the coordinator refused it: {exc.kind}: {exc.detail}") from exc
        typer.echo(
            f"submitted {label} to run {run_id}: pack {info.id}, {info.status}; follow it with "
            f"`swarmrl tasks status {info.id} --coordinator {coordinator} --run-id {run_id}`"
        )
        if wait:
            _follow(client, run_id, info.id, wait_seconds, poll_seconds)


def _archive(pack: Path, author: str) -> tuple[bytes, str, str]:
    """The archive's bytes, digest and label; refused here when it is not signed by `author`."""
    from swarmrl.configs.task_packs import PackLimitsConfig
    from swarmrl.tasks.packs.errors import PackError
    from swarmrl.tasks.packs.files import archive_bytes, read_pack_files
    from swarmrl.tasks.packs.pack import pack_from_files

    limits = PackLimitsConfig()
    files = read_pack_files(pack, limits)
    loaded = pack_from_files(files, limits)
    if loaded.manifest.author != author:
        raise PackError(
            f"{pack}: its author is {loaded.manifest.author[:16]}…, not this key ({author[:16]}…)"
        )
    data = (
        pack.read_bytes()
        if pack.is_file()
        else archive_bytes(files, f"{loaded.manifest.name}-{loaded.manifest.version}")
    )
    return data, loaded.digest, loaded.manifest.label


def _ticket(run_id: str, digest: str, author: str, bits: int) -> str:
    from swarmrl.tasks.packs.ticket import solve_ticket

    return solve_ticket(run_id, digest, author, bits)


def _follow(client, run_id: str, pack_id: int, wait_seconds: float, poll_seconds: float) -> None:
    deadline = time.monotonic() + wait_seconds
    detail = client.pack(run_id, pack_id)
    while detail.status not in DECIDED and time.monotonic() < deadline:
        time.sleep(poll_seconds)
        detail = client.pack(run_id, pack_id)
    typer.echo(describe(detail))
    if detail.status == "refused":
        raise typer.Exit(REFUSED_EXIT)


def pack_status(
    pack: Annotated[str, typer.Argument(help="the pack: its id in the run, or its digest")],
    coordinator: CoordinatorUrl,
    run_id: RunId,
    json_output: Annotated[bool, typer.Option("--json", help="print it as JSON")] = False,
) -> None:
    """Where a submitted pack stands: its admission report, what the run measured of it, its author's credit."""
    from swarmrl.coordinator.errors import CoordinatorError
    from swarmrl.coordinator.pack_client import PackClient
    from swarmrl.tasks.packs.errors import PackError

    with PackClient.at(coordinator) as client:
        try:
            detail = client.pack(run_id, int(pack)) if pack.isdigit() else _by_digest(client, run_id, pack)
        except CoordinatorError as exc:
            if exc.status == 0:
                raise
            raise PackError(f"pack {pack}: {exc.kind}: {exc.detail}") from exc
    typer.echo(detail.model_dump_json(indent=2) if json_output else describe(detail))


def _by_digest(client, run_id: str, digest: str):
    from swarmrl.tasks.packs.errors import PackError

    found = client.packs(run_id, digest=digest)
    if not found:
        raise PackError(f"run {run_id} has no pack {digest}")
    return client.pack(run_id, found[0].id)


def describe(detail) -> str:
    """A pack as its author reads it: the validators' report, then where it stands in the run."""
    from swarmrl.tasks.packs.report import render

    lines = [render(detail.report)] if detail.report is not None else [f"{detail.label}: not checked yet"]
    state = f"pack {detail.id} ({detail.label}): {detail.status}"
    if detail.reason:
        state += f" — {detail.reason}"
    lines.append(state)
    lines.append(
        f"  admission: {detail.admission_seconds:.1f} validator-seconds ({detail.lane or 'not leased yet'}) · "
        f"in the run: {detail.completions} completions judged, {detail.failed} failed, "
        f"{detail.disagreements} disagreements, {detail.groups_kept} of {detail.groups_seen} groups informative, "
        f"{detail.rows_trained} rows trained · credit: {detail.credit.pending_rows} rows pending, "
        f"{detail.credit.unlocked_rows} unlocked, {detail.credit.wiped_rows} wiped"
    )
    return "\n".join(lines)
