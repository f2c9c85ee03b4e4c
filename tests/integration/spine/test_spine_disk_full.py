"""A full disk under a run is one line naming the path, exit code 2, from the launcher's preflight and from a
role process that meets it mid-run; never a silent exit or a log cut mid-traceback.

Each case runs in its own mount namespace (`unshare -m`) on a small tmpfs the test fills; it needs root, as
the network-namespace tests do (deselect with -m "not netns" where it is unavailable).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from integration.spine.spine_helpers import tiny_config

from swarmrl.launch.prepare import prepare_run

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(300)]

SRC = Path(__file__).resolve().parents[3] / "src"


def on_a_full_tmpfs(mount: Path, *commands: list[str]) -> subprocess.CompletedProcess:
    """Mount a 100 MiB tmpfs at `mount` in a private mount namespace, run `commands[:-1]` (the setup), fill
    the tmpfs to the last byte, then run the last command; returns that command's result."""
    *setup, last = commands
    script = " && ".join(
        [
            f"mount -t tmpfs -o size=100m tmpfs {shlex.quote(str(mount))}",
            *(shlex.join(command) for command in setup),
            f"(dd if=/dev/zero of={shlex.quote(str(mount / 'filler'))} bs=1M 2>/dev/null || true)",
            shlex.join(last),
        ]
    )
    env = {**os.environ, "PYTHONPATH": str(SRC), "SWARMRL_LOG_FORMAT": "plain"}
    result = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=280
    )
    if "unshare failed" in result.stderr or "mount:" in result.stderr:
        pytest.fail(f"needs root for a private tmpfs: {result.stderr[-500:]}")
    return result


def test_a_full_disk_is_named_by_the_preflight_and_by_a_role_process_that_meets_it(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    config = tiny_config(mount, "full", "sft.steps=2")
    config_file = tmp_path / "run.json"
    config_file.write_text(config.dump_json())
    # The run prepared once, here (tokenizer, model, SFT: what `swarmrl sft` writes, without a process that
    # spends most of its 13 s importing), then moved aside: each tmpfs mounted over `mount` gets a copy of it.
    prepared = tmp_path / "prepared"
    shutil.move(prepare_run(config).root, prepared)
    shutil.rmtree(mount / ".cache")
    assert not any(mount.iterdir())
    setup = ["cp", "-a", str(prepared), str(mount / "full")]
    cli = [sys.executable, "-m", "swarmrl.cli"]
    worker = on_a_full_tmpfs(mount, setup, [*cli, "worker", "--run-dir", str(mount / "full"), "--index", "0"])
    assert worker.returncode == 2, worker.stderr[-3000:]
    assert "Traceback" not in worker.stderr
    assert f"error: no space left on the device holding {mount / 'full'}" in worker.stderr, worker.stderr
    launcher = on_a_full_tmpfs(mount, setup, [*cli, "rl", str(config_file)])
    assert launcher.returncode == 2, launcher.stderr[-3000:]
    assert f"FAIL  run root: {mount / 'full'} has 0.0 MiB free" in launcher.stderr
