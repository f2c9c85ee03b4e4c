"""The local worker: trades rollouts for checkpoints with the trainer through the run directory.

For training step k it needs a policy no older than k - async_level; it blocks until the trainer has
written one, produces batches for step k until the trainer marks step k complete, then moves on to k+1.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from swarmrl.configs import RunConfig, load_run_config
from swarmrl.configs.devices import check_device
from swarmrl.devices import resolve_device
from swarmrl.generation.writer import BatchWriter
from swarmrl.inference.engine import InferenceEngine
from swarmrl.inference.factory import build_engine, engine_model
from swarmrl.rundir import RunDir
from swarmrl.steps import checkpoint_dir, latest_checkpoint

log = logging.getLogger(__name__)


class WorkerStopped(Exception):
    """The run asked its processes to stop while this worker was waiting."""


POLL_SECONDS = 0.05


def wait_for_policy(rundir: RunDir, minimum_step: int, poll_seconds: float = POLL_SECONDS) -> int:
    """Block until a checkpoint of at least `minimum_step` exists; returns the newest one."""
    while True:
        newest = latest_checkpoint(rundir.checkpoints)
        if newest is not None and newest >= minimum_step:
            return newest
        if rundir.should_stop():
            raise WorkerStopped(f"stopped while waiting for policy step {minimum_step}")
        time.sleep(poll_seconds)


def run_local_worker(config: RunConfig, index: int) -> int:
    """Produce rollouts until the run stops or the last training step is served; returns files written."""
    torch.set_num_threads(config.worker.torch_threads)
    device = resolve_device(config.worker.device)  # a missing GPU is refused before any work
    writer = BatchWriter.for_run(config, index)
    rundir = writer.rundir
    engine: InferenceEngine | None = None
    files = 0
    step = _first_open_step(rundir, config.trainer.steps)
    try:
        while step < config.trainer.steps:
            policy = wait_for_policy(rundir, step - config.contract.async_level)
            if engine is None:
                engine = build_engine(
                    config.engine,
                    engine_model(config.engine, checkpoint_dir(rundir.checkpoints, policy), device=device),
                    eos_token_id=writer.stop_token_ids,
                    policy_step=policy,
                )
            elif policy > engine.policy_step:
                engine.load_weights(checkpoint_dir(rundir.checkpoints, policy), policy_step=policy)
            batch_index = 0
            # Keep producing until the trainer has enough informative groups for this step (it gives up, and
            # says why, when a step needs more files than it allows), but no file it has not asked for.
            while not rundir.is_complete(step) and not rundir.should_stop():
                prompts = rundir.next_file_prompts(step, full=config.contract.prompts_per_batch)
                if prompts is not None:
                    writer.write(engine, step, batch_index, prompts=prompts)
                    files += 1
                    batch_index += 1
                else:
                    time.sleep(POLL_SECONDS)
                # A newer policy may have landed meanwhile; later batches should use it.
                newest = latest_checkpoint(rundir.checkpoints)
                if newest is not None and newest > engine.policy_step:
                    engine.load_weights(checkpoint_dir(rundir.checkpoints, newest), policy_step=newest)
            if rundir.should_stop():
                break
            step += 1
    except WorkerStopped:
        pass
    return files


def _first_open_step(rundir: RunDir, total_steps: int) -> int:
    """After a restart, resume at the first step the trainer has not marked complete."""
    step = 0
    while step < total_steps and rundir.is_complete(step):
        step += 1
    return step


def worker_of_run_dir(run_dir: Path, index: int, device: str | None = None) -> int:
    """`swarmrl worker --run-dir`: local worker `index` of the run prepared there; `device` (the CLI's --device)
    overrides the run config's `worker.device`."""
    config = load_run_config(run_dir)
    if device is not None:
        config.worker.device = check_device(device)
    return run_local_worker(config, index)
