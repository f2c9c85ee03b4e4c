"""`swarmrl keygen`: an Ed25519 node key for a trainer, validator, worker or relay."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from swarmrl.errors import UserError
from swarmrl.identity import Identity


def keygen(
    out: Annotated[Path, typer.Option(help="where the private key (PEM) goes; never overwritten")] = Path(
        "node.pem"
    ),
    show: Annotated[
        bool, typer.Option("--show", help="print the public key of the existing key at --out; make nothing")
    ] = False,
) -> None:
    """Make an Ed25519 node key (PEM) for a trainer, validator or worker; prints its hex public key.

    The hex key is what others are given (`admin create-run --trainer-key`, `relay --trainer-public-key`,
    `admin add-validator --validator-key`); those options take the key file too. Only the hex key goes to
    stdout, so `HEX=$(swarmrl keygen --out trainer.pem)` works in a script; stdout captured so, stderr shows the
    key too, for the person who gives it to the other machines."""
    if show:
        typer.echo(Identity.load(out).node_id)
        return
    if out.exists():
        raise UserError(
            f"{out} exists; keygen never overwrites a key (its public key: `swarmrl keygen --show --out {out}`)"
        )
    identity = Identity.generate()
    identity.save(out)
    # Captured (`HEX=$(swarmrl keygen ...)`), stdout is never seen: the person copying the key to another
    # machine reads it on stderr then.
    shown = "" if sys.stdout.isatty() else f" {identity.node_id}"
    typer.echo(f"wrote the private key to {out} (keep it secret); its public key:{shown}", err=True)
    typer.echo(identity.node_id)
