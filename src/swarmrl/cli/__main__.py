"""`python -m swarmrl.cli ...`: what launchers and tests run (the same app as the `swarmrl` script)."""

from swarmrl.cli import app

app()
