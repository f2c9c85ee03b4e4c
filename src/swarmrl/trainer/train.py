"""The trusted RL trainer: collect step k's rollouts, run GRPO, write checkpoint k+1, repeat.

Runs alone or as one rank of a torch.distributed job (torchrun; gloo on CPU): each rank trains on its
slice of the batch through FSDP2 (`fully_shard`) and rank 0 writes full checkpoints and metrics.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from swarmrl.config import RunConfig
from swarmrl.models import load_model, load_tokenizer
from swarmrl.rollouts import ScoredRow
from swarmrl.rundir import RunDir
from swarmrl.trainer.batch import TrainBatch, collate, token_logprobs
from swarmrl.trainer.checkpoint import (
    checkpoint_dir,
    latest_checkpoint,
    read_trainer_state,
    restore_scheduler_and_rng,
    save_checkpoint,
    save_trainer_state,
    saved_trainer_steps,
)
from swarmrl.trainer.data import CollectStats
from swarmrl.trainer.losses import policy_loss
from swarmrl.trainer.metrics import MetricsSink
from swarmrl.trainer.optim import build_optimizer
from swarmrl.trainer.parallel import (
    full_model_state,
    full_optimizer_state,
    load_optimizer_state,
    shard_model,
    to_float,
    world,
)

log = logging.getLogger(__name__)

Collector = Callable[[int], tuple[list[ScoredRow], CollectStats]]
Publisher = Callable[[int], None]


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    batch: TrainBatch,
    config: RunConfig,
    ref_model: torch.nn.Module | None = None,
) -> dict[str, float]:
    """One policy step: π_old recomputed once, then several optimizer steps over minibatches.

    With a single minibatch the weights are still π_old during the one forward pass, so π_old is that pass's
    detached log-probabilities instead of a second forward.
    """
    loss_cfg = config.loss
    num_minibatches = min(config.trainer.optimizer_steps_per_policy_step, len(batch))
    model.eval()
    with torch.no_grad():
        # π_old without dropout: the ratio must be exactly 1 before the first update.
        old_logprobs = token_logprobs(model, batch)[0] if num_minibatches > 1 else None
        ref_logprobs = token_logprobs(ref_model, batch)[0] if ref_model is not None else None
    model.train()
    order = torch.arange(len(batch), device=batch.input_ids.device).chunk(num_minibatches)
    totals: dict[str, float] = {}
    for index in order:
        minibatch = batch.select(index)
        logprobs, entropy = token_logprobs(model, minibatch, with_entropy=loss_cfg.entropy_coef > 0)
        out = policy_loss(
            logprobs,
            logprobs.detach() if old_logprobs is None else old_logprobs[index],
            minibatch.advantages,
            minibatch.completion_mask,
            config=loss_cfg,
            engine_logprobs=minibatch.engine_logprobs,
            ref_logprobs=ref_logprobs[index] if ref_logprobs is not None else None,
            entropy=entropy,
        )
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.trainer.max_grad_norm)
        optimizer.step()
        scheduler.step()
        step_metrics = {
            "loss": float(out.loss.detach()),
            "grad_norm": to_float(grad_norm),
            **{k: float(v) for k, v in out.metrics.items()},
        }
        for key, value in step_metrics.items():
            totals[key] = totals.get(key, 0.0) + value / len(order)
    totals["lr"] = scheduler.get_last_lr()[0]
    return totals


def train_device() -> torch.device:
    """This rank's GPU under torchrun (LOCAL_RANK), the only GPU of a single process, else the CPU."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


def _collect_on_rank0(
    collect: Collector, step: int, rank: int, world: int
) -> tuple[list[ScoredRow], CollectStats]:
    """Rank 0 reads the run directory; the other ranks receive the same rows so every rank agrees."""
    if world == 1:
        return collect(step)
    payload: list[Any] = [collect(step) if rank == 0 else None]
    dist.broadcast_object_list(payload, src=0)
    return payload[0]


def batch_metrics(rows: list[ScoredRow], stats: CollectStats) -> dict[str, float]:
    n = len(rows)
    return {
        "reward": sum(r.reward for r in rows) / n,
        "sampled_reward": stats.sampled_reward,
        "task_reward": sum(r.task_reward for r in rows) / n,
        "length_term": sum(r.length_term for r in rows) / n,
        "completion_tokens": sum(len(r.completion_ids) for r in rows) / n,
        "samples": float(n),
        "dropped_group_fraction": stats.dropped_fraction,
        "refused_files": float(stats.refused_files),
        "stale_rows": float(stats.stale_rows),
        "policy_lag": sum(stats.policy_lag) / max(1, len(stats.policy_lag)),
        "wait_seconds": stats.wait_seconds,
    }


def run_trainer(
    config: RunConfig,
    collect: Collector,
    publish: Publisher | None = None,
    *,
    stop_after_steps: int | None = None,
) -> int:
    """Train from the newest resumable state to `config.trainer.steps`; returns the last step written."""
    rank, world_size = world()
    rundir = RunDir(config.run.directory)
    torch.manual_seed(config.run.seed)
    if latest_checkpoint(rundir.checkpoints) is None:
        raise FileNotFoundError(f"{rundir.checkpoints}: no step_0 checkpoint to start from")
    tokenizer = load_tokenizer(checkpoint_dir(rundir.checkpoints, 0))
    # Probe the saved state first: the model must come from the checkpoint the state belongs to.
    state_steps = saved_trainer_steps(rundir.trainer_state)
    step = state_steps[-1] if state_steps else 0
    device = train_device()
    model = shard_model(load_model(checkpoint_dir(rundir.checkpoints, step), config.model.dtype).to(device))
    model.train()
    optimizer, scheduler = build_optimizer(
        model,
        config.trainer.lr,
        config.trainer.weight_decay,
        config.trainer.betas,
        config.trainer.warmup_steps,
    )
    if state_steps:
        state = read_trainer_state(rundir.trainer_state, step)
        load_optimizer_state(model, optimizer, state["optimizer"] if rank == 0 else None)
        restore_scheduler_and_rng(state, scheduler)
        log.info("resumed at step %d", step)
    ref_model = None
    if config.loss.kl_coef > 0:
        ref_model = shard_model(
            load_model(checkpoint_dir(rundir.checkpoints, 0), config.model.dtype).to(device)
        ).eval()
    policy = _Policy(model, tokenizer, optimizer, scheduler, ref_model)
    sink = MetricsSink(config.metrics, rundir, config.model_dump(mode="json")) if rank == 0 else None
    try:
        return _train_loop(config, policy, collect, publish, sink, step, stop_after_steps)
    finally:
        if sink is not None:
            sink.close()


@dataclass
class _Policy:
    """What the loop updates and saves each step."""

    model: torch.nn.Module
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    ref_model: torch.nn.Module | None


def _train_loop(
    config: RunConfig,
    policy: _Policy,
    collect: Collector,
    publish: Publisher | None,
    sink: MetricsSink | None,
    step: int,
    stop_after_steps: int | None,
) -> int:
    rank, world_size = world()
    rundir = RunDir(config.run.directory)
    model, tokenizer, optimizer, scheduler = (
        policy.model,
        policy.tokenizer,
        policy.optimizer,
        policy.scheduler,
    )
    steps_done = 0
    while step < config.trainer.steps:
        rows, stats = _collect_on_rank0(collect, step, rank, world_size)
        started = time.monotonic()
        shard = rows[rank::world_size]
        metrics = train_step(
            model,
            optimizer,
            scheduler,
            collate(shard, tokenizer.pad_token_id).to(train_device()),
            config,
            policy.ref_model,
        )
        step += 1
        weights = full_model_state(model)
        optimizer_state = full_optimizer_state(model, optimizer)
        if rank == 0:
            save_checkpoint(
                rundir.checkpoints,
                step,
                model,
                tokenizer,
                keep=config.trainer.keep_checkpoints,
                state_dict=weights,
            )
            save_trainer_state(rundir.trainer_state, step, optimizer_state, scheduler, {"run": config.run.id})
            if publish is not None:
                publish(step)
            record = {"step": step, "time": time.time(), "train_seconds": time.monotonic() - started}
            record.update(batch_metrics(rows, stats))
            record.update(metrics)
            assert sink is not None
            sink.log(record)
            log.info(
                "step %d reward %.3f task %.3f loss %.4f dropped %.0f%%",
                step,
                record["reward"],
                record["task_reward"],
                record["loss"],
                100 * record["dropped_group_fraction"],
            )
        steps_done += 1
        if stop_after_steps is not None and steps_done >= stop_after_steps:
            break
    return step
