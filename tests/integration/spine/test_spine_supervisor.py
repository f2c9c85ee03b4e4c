"""`swarmrl rl` stopped with SIGTERM (what `kill` and service managers send) stops its trainer and workers."""

import os
import signal
import subprocess
import sys
import time

import pytest

from swarmrl.layout import local_workers

from .conftest import STEPS


def children(pid: int) -> set[int]:
    try:
        return {int(p) for p in open(f"/proc/{pid}/task/{pid}/children").read().split()}
    except OSError:
        return set()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigterm_to_the_supervisor_stops_every_role_process(run_copy):
    config = run_copy("supervised")
    # Enough steps that the run is still going when the signal comes.
    config_path = config.run.directory / "supervised.json"
    config_path.write_text(
        config.model_copy(
            update={"trainer": config.trainer.model_copy(update={"steps": STEPS * 50})}
        ).model_dump_json()
    )
    log = (config.run.directory / "supervisor.log").open("wb")
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "swarmrl.cli", "rl", str(config_path)], stdout=log, stderr=subprocess.STDOUT
    )
    roles: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while len(roles) < 1 + local_workers(config):  # the trainer and every worker started
            assert supervisor.poll() is None, (config.run.directory / "supervisor.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the supervisor started no role processes"
            roles = children(supervisor.pid)
            time.sleep(0.05)
        supervisor.send_signal(signal.SIGTERM)
        supervisor.wait(timeout=60)
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in roles) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in roles if alive(pid)], "role processes outlived their supervisor"
        assert supervisor.returncode == 128 + signal.SIGTERM
    finally:
        for pid in [supervisor.pid, *roles]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        supervisor.wait(timeout=30)
        log.close()
