"""Option checks shared by the top-level CLI and the role CLIs (light: no role code is imported)."""

from __future__ import annotations

import typer

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
