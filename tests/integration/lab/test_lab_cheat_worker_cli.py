"""The lab's misbehaving worker runs through swarmrl's own command line (its options, errors and exit codes)."""

from __future__ import annotations

import subprocess
import sys


def test_the_command_runs_through_swarmrls_cli_and_refuses_a_local_run_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "swarmrl_lab.cheat_worker", "cheat-worker", "--cheat", "half-layers"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "--coordinator" in done.stderr and "swarm node only" in done.stderr
