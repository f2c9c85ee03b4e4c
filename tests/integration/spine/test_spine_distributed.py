"""The trainer's FSDP2 path: 2 gloo ranks under torchrun train like one process on the whole batch."""

import subprocess
import sys

import torch
from safetensors.torch import load_file

from swarmrl.launch.roles import trainer_role
from swarmrl.trainer.checkpoint import checkpoint_dir

from .conftest import STEPS


def test_two_gloo_ranks_match_one_process(run_copy):
    single = run_copy("single")
    trainer_role(single.run.directory)

    ddp = run_copy("ddp")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "swarmrl.cli",
            "trainer",
            "--run-dir",
            str(ddp.run.directory),
        ],
        capture_output=True,
        timeout=420,
        env={"OMP_NUM_THREADS": "1", **__import__("os").environ},
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    one = load_file(checkpoint_dir(single.run.directory / "checkpoints", STEPS) / "model.safetensors")
    two = load_file(checkpoint_dir(ddp.run.directory / "checkpoints", STEPS) / "model.safetensors")
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-5, msg=name)
