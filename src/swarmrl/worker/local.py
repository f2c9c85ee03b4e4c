"""The local worker: trades rollouts for checkpoints with the trainer through the run directory.

A file for training step k needs a policy no older than k - async_level. Each file goes to the step that
needs it soonest (`next_step`): the lowest open step in the window the newest policy may serve that has fewer
files than a step uses, else the step the trainer is collecting now. A worker that kept writing for one step
until the trainer closed it would, running ahead, fill a future step with files the trainer never reads.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from swarmrl.config import RunConfig
from swarmrl.devices import resolve_device
from swarmrl.identity import Identity
from swarmrl.inference.engine import InferenceEngine, SamplingParams
from swarmrl.inference.factory import build_engine
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts.assignment import BatchSpec
from swarmrl.rundir import RunDir
from swarmrl.steps import checkpoint_dir, latest_checkpoint
from swarmrl.tasks.registry import build_tasks
from swarmrl.tasks.task import TaskSource
from swarmrl.worker.rollout import write_batch

log = logging.getLogger(__name__)


class WorkerStopped(Exception):
    """The run asked its processes to stop while this worker was waiting."""


def wait_for_policy(rundir: RunDir, minimum_step: int, poll_seconds: float = 0.05) -> int:
    """Block until a checkpoint of at least `minimum_step` exists; returns the newest one."""
    while True:
        newest = latest_checkpoint(rundir.checkpoints)
        if newest is not None and newest >= minimum_step:
            return newest
        if rundir.should_stop():
            raise WorkerStopped(f"stopped while waiting for policy step {minimum_step}")
        time.sleep(poll_seconds)


@dataclass(frozen=True)
class BatchWriter:
    """Local worker `index` of a run: writes the signed rollout file of (step, batch index) with an engine.

    Shared by the worker processes and the engine of a colocated run, so both write the same files.
    """

    config: RunConfig
    rundir: RunDir
    index: int
    identity: Identity
    tokenizer: Any
    stop_token_ids: tuple[int, ...]
    tasks: TaskSource
    params: SamplingParams

    @classmethod
    def for_run(cls, config: RunConfig, index: int) -> BatchWriter:
        rundir = RunDir(config.run.directory)
        tokenizer = load_tokenizer(checkpoint_dir(rundir.checkpoints, 0))
        return cls(
            config,
            rundir,
            index,
            Identity.load_or_create(worker_key_path(rundir, index)),
            tokenizer,
            prompt_format(tokenizer, config.prompt).stop_token_ids,
            build_tasks(config.tasks),
            SamplingParams(
                max_new_tokens=config.worker.max_new_tokens,
                temperature=config.worker.temperature,
                top_p=config.worker.top_p,
            ),
        )

    def path(self, step: int, batch_index: int) -> Path:
        return self.rundir.rollouts(step) / f"w{self.index}-b{batch_index:04d}.parquet"

    def next_batch_index(self, step: int) -> int:
        """One past this worker's last file for `step` (files survive a restart, so indices are not reused)."""
        mine = self.rundir.rollouts(step).glob(f"w{self.index}-b*.parquet")
        return 1 + max((int(p.stem.rsplit("-b", 1)[1]) for p in mine), default=-1)

    def write(self, engine: InferenceEngine, step: int, batch_index: int) -> Path:
        config = self.config
        spec = BatchSpec.local(
            config.run.id,
            self.identity.node_id,
            step,
            batch_index,
            config.worker.prompts_per_batch,
            config.worker.group_size,
            config.run.seed,
        )
        path = self.path(step, batch_index)
        write_batch(engine, spec, self.tasks, self.tokenizer, config, self.params, path, self.identity)
        return path


def run_local_worker(config: RunConfig, index: int) -> int:
    """Produce rollouts until the run stops or the last training step is served; returns files written."""
    torch.set_num_threads(config.worker.torch_threads)
    device = resolve_device(config.worker.device)  # a missing GPU is refused before any work
    writer = BatchWriter.for_run(config, index)
    rundir = writer.rundir
    engine: InferenceEngine | None = None
    files = 0
    first_open = 0
    try:
        while not rundir.should_stop():
            first_open = first_open_step(rundir, config.trainer.steps, first_open)
            if first_open >= config.trainer.steps:
                break
            policy = wait_for_policy(rundir, first_open - config.worker.async_level)
            if engine is None:
                engine = build_engine(
                    config.engine,
                    load_model(checkpoint_dir(rundir.checkpoints, policy), device=device),
                    eos_token_id=writer.stop_token_ids,
                    policy_step=policy,
                )
            elif policy > engine.policy_step:
                engine.load_weights(checkpoint_dir(rundir.checkpoints, policy), policy_step=policy)
            step = next_step(rundir, config, first_open, engine.policy_step)
            writer.write(engine, step, writer.next_batch_index(step))
            files += 1
    except WorkerStopped:
        pass
    return files


def first_open_step(rundir: RunDir, total_steps: int, start: int = 0) -> int:
    """The first step from `start` on that the trainer has not marked complete (steps never reopen)."""
    step = start
    while step < total_steps and rundir.is_complete(step):
        step += 1
    return step


def next_step(rundir: RunDir, config: RunConfig, first_open: int, policy_step: int) -> int:
    """The step a file made now with policy `policy_step` should go to (see the module docstring).

    A step uses as many files as the last completed one took (a step's informative share varies slowly);
    before any step completes, as many as its prompts fill.
    """
    last = min(config.trainer.steps - 1, policy_step + config.worker.async_level)
    wanted = files_per_step(rundir, first_open, config)
    for step in range(first_open, last + 1):
        if not rundir.is_complete(step) and len(step_files(rundir, step)) < wanted:
            return step
    return first_open


def files_per_step(rundir: RunDir, first_open: int, config: RunConfig) -> int:
    if first_open > 0:
        try:
            summary = json.loads(rundir.complete_marker(first_open - 1).read_text())
            return max(1, len(summary["outcomes"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a marker from an older layout: fall back to the prompts' count
    return -(-config.trainer.prompts_per_step // config.worker.prompts_per_batch)


def step_files(rundir: RunDir, step: int) -> list[Path]:
    directory = rundir.rollouts(step)
    return list(directory.glob("*.parquet")) if directory.is_dir() else []


def worker_key_path(rundir: RunDir, index: int) -> Path:
    return rundir.root / "keys" / f"worker-{index}.pem"
