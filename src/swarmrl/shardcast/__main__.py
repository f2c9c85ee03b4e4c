"""`python -m swarmrl.shardcast {origin,relay,publish,fetch}`: the CLI functions without the main app."""

import typer

from swarmrl.shardcast.cli import fetch, origin, publish, relay

app = typer.Typer(add_completion=False, no_args_is_help=True)
for command in (origin, relay, publish, fetch):
    app.command()(command)

if __name__ == "__main__":
    app()
