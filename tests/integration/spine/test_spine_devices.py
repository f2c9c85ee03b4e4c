"""The local loop with explicit devices: a trainer and a worker sharing a run directory, then the validator
judging what the worker wrote. On the CPU always; on a GPU (`-m gpu`) with the worker and validator on cuda."""

from __future__ import annotations

import shutil
import threading

import pytest
import torch

from swarmrl.rundir import RunDir
from swarmrl.trainer.role import trainer_role
from swarmrl.validator.rollout_checks import validate_file
from swarmrl.validator.service import local_context
from swarmrl.worker.local import worker_of_run_dir

STEPS = 2


def local_loop(run_copy, name: str, trainer_device: str, worker_device: str) -> RunDir:
    """Train STEPS steps on rollouts a local worker generates on `worker_device` (its --device); the run's
    config says `worker.device = "cpu"`, so the flag must win."""
    config = run_copy(name)
    config.trainer.steps = STEPS
    config.trainer.max_wait_seconds = (
        600  # the template's 10 s assumes pre-generated files, not a live worker
    )
    config.trainer.device = trainer_device
    config.worker.device = "cpu"
    config.contract.local_proofs = True  # the files are judged below, and a validator requires proofs
    rundir = RunDir(config.run.directory)
    shutil.rmtree(rundir.root / "rollouts")  # the worker has to produce every file the trainer uses
    (rundir.root / "config.json").write_text(config.model_dump_json(indent=2))
    written: list[int] = []
    worker = threading.Thread(
        target=lambda: written.append(worker_of_run_dir(rundir.root, 0, worker_device)), daemon=True
    )
    worker.start()
    try:
        assert trainer_role(rundir.root) == STEPS
    finally:
        rundir.stop_file.touch()
        worker.join(timeout=120)
    assert not worker.is_alive(), "the worker did not stop with the run"
    assert written and written[0] > 0
    return rundir


def judge_all(rundir: RunDir, device: torch.device) -> list[bool]:
    context = local_context(rundir.root, device=device)
    assert {p.device for p in context.policy(0).parameters()} == {device}
    return [
        validate_file(path, step, context).accepted
        for step in range(STEPS)
        for path in sorted(rundir.rollouts(step).glob("w0-*.parquet"))
    ]


def test_local_loop_with_explicit_cpu_devices(run_copy):
    rundir = local_loop(run_copy, "cpu", trainer_device="cpu", worker_device="cpu")
    verdicts = judge_all(rundir, torch.device("cpu"))
    assert verdicts and all(verdicts)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_worker_and_validator_on_cuda(run_copy):
    cuda = torch.device("cuda", 0)
    torch.cuda.reset_peak_memory_stats(cuda)
    # The trainer stays on the CPU, so any CUDA memory the loop used is the worker's.
    rundir = local_loop(run_copy, "cuda", trainer_device="cpu", worker_device="cuda")
    assert torch.cuda.max_memory_allocated(cuda) > 0
    verdicts = judge_all(rundir, cuda)
    assert verdicts and all(verdicts)
