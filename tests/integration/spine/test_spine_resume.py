"""Kill the trainer mid-run with SIGKILL, restart it: the final weights equal an uninterrupted run's."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from swarmrl.steps import checkpoint_dir
from swarmrl.trainer.role import trainer_role

from .conftest import STEPS


def final_weights(config):
    return load_file(checkpoint_dir(config.run.directory / "checkpoints", STEPS) / "model.safetensors")


def start_trainer(run_dir, log_path):
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "swarmrl.cli", "trainer", "--run-dir", str(run_dir)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.slow
def test_kill_and_resume_gives_the_same_weights(run_copy):
    straight = run_copy("straight")
    assert trainer_role(straight.run.directory) == STEPS

    killed = run_copy("killed")
    state = killed.run.directory / "trainer_state"
    log_path = killed.run.directory / "trainer-test.log"
    process = start_trainer(killed.run.directory, log_path)
    try:
        # Kill at the first saved state (step 1 of STEPS): the trainer keeps only its newest state file, so
        # waiting for a later one could miss it on a fast machine.
        deadline = time.monotonic() + 240
        while not any(state.glob("step_*.pt")):
            assert process.poll() is None, log_path.read_text()[-2000:]
            assert time.monotonic() < deadline, "trainer made no progress"
            time.sleep(0.005)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert not (state / f"step_{STEPS}.pt").exists(), "the trainer finished before it could be killed"

    resumed = start_trainer(killed.run.directory, log_path)
    try:
        resumed.wait(timeout=300)
    finally:
        if resumed.poll() is None:
            resumed.kill()
            resumed.wait(timeout=30)
    log = log_path.read_text()
    assert resumed.returncode == 0, log[-2000:]
    assert "resumed at step" in log

    expected, got = final_weights(straight), final_weights(killed)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    # The run really trained: the weights moved away from the starting policy.
    start = load_file(checkpoint_dir(straight.run.directory / "checkpoints", 0) / "model.safetensors")
    assert any(not torch.equal(start[n], expected[n]) for n in start)
