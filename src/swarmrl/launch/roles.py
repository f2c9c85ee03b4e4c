"""Each role of a local run, built from the run directory alone (what `swarmrl trainer|worker --run-dir` run)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoConfig

from swarmrl.launch.prepare import load_run_config
from swarmrl.models import load_tokenizer
from swarmrl.rollouts import RolloutLimits
from swarmrl.rundir import RunDir
from swarmrl.tasks.registry import build_tasks
from swarmrl.trainer.checkpoint import checkpoint_dir
from swarmrl.trainer.data import LocalRolloutFeed
from swarmrl.trainer.train import run_trainer
from swarmrl.validator.scoring import score_rows
from swarmrl.worker.local import run_local_worker


def rollout_limits(config, vocab_size: int) -> RolloutLimits:
    return RolloutLimits(
        max_rows=config.worker.prompts_per_batch * config.worker.group_size,
        max_completion_tokens=config.worker.max_new_tokens,
        vocab_size=vocab_size,
    )


def policy_vocab_size(checkpoint: Path) -> int:
    """Token ids must index the model's embedding; the tokenizer may know more ids than the model has."""
    return AutoConfig.from_pretrained(checkpoint, local_files_only=True).vocab_size


def trainer_role(run_dir: Path, *, stop_after_steps: int | None = None, threads: int = 1) -> int:
    """Train a local run; under torchrun (WORLD_SIZE > 1) each rank joins a gloo/NCCL process group."""
    torch.set_num_threads(threads)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    config = load_run_config(run_dir)
    rundir = RunDir(run_dir)
    tokenizer = load_tokenizer(checkpoint_dir(rundir.checkpoints, 0))
    scorer = functools.partial(
        score_rows,
        tasks=build_tasks(config.tasks),
        tokenizer=tokenizer,
        tasks_config=config.tasks,
        group_size=config.worker.group_size,
        advantage=config.trainer.advantage,
    )
    feed = LocalRolloutFeed(
        rundir,
        scorer,
        async_level=config.worker.async_level,
        group_size=config.worker.group_size,
        limits=rollout_limits(config, policy_vocab_size(checkpoint_dir(rundir.checkpoints, 0))),
        max_files=config.trainer.max_files_per_step,
    )

    def collect(step: int):
        return feed.collect(step, config.trainer.prompts_per_step, config.trainer.max_wait_seconds)

    try:
        return run_trainer(config, collect, stop_after_steps=stop_after_steps)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def worker_role(run_dir: Path, index: int) -> int:
    return run_local_worker(load_run_config(run_dir), index)
