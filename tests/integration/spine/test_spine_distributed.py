"""The trainer's FSDP2 path: 2 gloo ranks under torchrun train like one process on the whole batch."""

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from swarmrl.steps import checkpoint_dir
from swarmrl.trainer.role import trainer_role

from .conftest import STEPS


@pytest.mark.slow
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


@pytest.mark.slow
def test_two_gloo_ranks_in_bf16_mixed_precision_track_one_process(run_copy):
    """FSDP2's MixedPrecisionPolicy (bf16 gathers, fp32 reduce) with activation checkpointing under torchrun
    against bf16 autocast in one process: different casts of the same maths, so close, not equal."""
    runs = {}
    for name in ("single_bf16", "ddp_bf16"):
        config = run_copy(name)
        config.trainer.precision = "bf16"
        config.trainer.activation_checkpointing = True
        config.trainer.micro_batch_tokens = 64  # several micro-batches per step
        (config.run.directory / "config.json").write_text(config.model_dump_json(indent=2))
        runs[name] = config
    trainer_role(runs["single_bf16"].run.directory)
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m"]
        + ["swarmrl.cli", "trainer", "--run-dir", str(runs["ddp_bf16"].run.directory)],
        capture_output=True,
        timeout=420,
        env={"OMP_NUM_THREADS": "1", **__import__("os").environ},
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    start, one, two = (
        load_file(checkpoint_dir(runs[name].run.directory / "checkpoints", step) / "model.safetensors")
        for name, step in (("single_bf16", 0), ("single_bf16", STEPS), ("ddp_bf16", STEPS))
    )
    assert all(t.dtype == torch.float32 for t in two.values())  # fp32 master weights are what is saved
    gap = sum(float((two[k] - one[k]).norm()) ** 2 for k in one) ** 0.5
    update = sum(float((one[k] - start[k]).norm()) ** 2 for k in one) ** 0.5
    assert update > 0 and gap < 0.05 * update, (gap, update)
