"""The loop one worker process runs: tiny causal LM on its byte shard, with DiLoCo or DDP between workers."""

from __future__ import annotations

import time

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LRScheduler

from swarmrl.configs.diloco import DiLoCoConfig, InnerOptimizerConfig
from swarmrl.diloco.codecs import make_codec
from swarmrl.diloco.communicators.base import Communicator
from swarmrl.diloco.communicators.throttled import SimulatedLink, ThrottledCommunicator
from swarmrl.diloco.data import BatchSampler, fixed_eval_batches, load_corpus_split
from swarmrl.diloco.ddp import attach_counting_hook
from swarmrl.diloco.model import build_tiny_causal_lm
from swarmrl.diloco.reports import WorkerReport
from swarmrl.diloco.wrapper import DiLoCo
from swarmrl.models.optim import build_optimizer


def make_inner_optimizer(
    model: torch.nn.Module, config: InnerOptimizerConfig, total_steps: int
) -> tuple[torch.optim.AdamW, LRScheduler]:
    """The same AdamW and schedule as the RL trainer's, decayed over `total_steps` when cosine."""
    return build_optimizer(
        model,
        config.lr,
        config.weight_decay,
        (config.beta1, config.beta2),
        config.warmup_steps,
        decay_steps=total_steps if config.schedule == "cosine" else None,
        min_lr_ratio=config.min_lr_ratio,
    )


def language_model_loss(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy; the model shifts labels internally."""
    return model(input_ids=batch, labels=batch).loss


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: list[torch.Tensor]) -> float:
    was_training = model.training
    model.eval()
    losses = [float(language_model_loss(model, batch)) for batch in batches]
    model.train(was_training)
    return sum(losses) / len(losses)


def wrap_communicator(config: DiLoCoConfig, communicator: Communicator) -> Communicator:
    if not config.throttle.enabled:
        return communicator
    link = SimulatedLink(config.throttle.bandwidth_mbit * 1e6, config.throttle.latency_ms / 1e3)
    return ThrottledCommunicator(communicator, link)


def train_worker(config: DiLoCoConfig, communicator: Communicator) -> WorkerReport:
    """Train on this worker's shard for `total_steps` inner steps; the communicator is already connected."""
    torch.set_num_threads(config.threads_per_worker)
    rank, world_size = communicator.rank, communicator.world_size
    split = load_corpus_split(config.data, rank, world_size)
    sampler = BatchSampler(
        split.train_tokens, config.data.seq_len, config.data.batch_size, config.data.seed + rank
    )
    eval_batches = fixed_eval_batches(
        split.eval_tokens, config.data.seq_len, config.data.batch_size, config.data.eval_batches
    )
    model = build_tiny_causal_lm(config.model)
    model.train()
    inner, schedule = make_inner_optimizer(model, config.inner, config.total_steps)
    communicator = wrap_communicator(config, communicator)
    eval_curve: list[tuple[int, float]] = []

    diloco: DiLoCo | None = None
    trained: torch.nn.Module = model
    if config.mode == "diloco":
        diloco = DiLoCo(
            model,
            inner,
            communicator,
            make_codec(config.codec, config.int8_clip_sigmas),
            inner_steps=config.inner_steps,
            outer_lr=config.outer.lr,
            outer_momentum=config.outer.momentum,
            n_fragments=config.fragments,
            overlap_steps=config.overlap_steps,
        )
    else:
        # Same seed on every rank, so DDP's initial broadcast is a no-op on values.
        trained = DistributedDataParallel(model)
        attach_counting_hook(trained, communicator)

    started = time.perf_counter()
    eval_seconds = 0.0
    for step in range(1, config.total_steps + 1):
        loss = language_model_loss(trained, sampler.next_batch())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.inner.grad_clip)
        if diloco is not None:
            diloco.step()
            diloco.zero_grad()
        else:
            inner.step()
            inner.zero_grad(set_to_none=True)
        schedule.step()
        if config.eval_every and step % config.eval_every == 0 and rank == 0:
            eval_started = time.perf_counter()
            eval_curve.append((step, evaluate(model, eval_batches)))
            eval_seconds += time.perf_counter() - eval_started
    if diloco is not None:
        diloco.close()
    wall = time.perf_counter() - started - eval_seconds

    if diloco is not None:
        waiting = diloco.seconds_waiting
        bytes_sent, peak, events = diloco.bytes_sent, diloco.peak_bytes_per_sync, len(diloco.sync_log)
    else:
        waiting = communicator.stats.seconds_in_collectives
        bytes_sent = communicator.stats.bytes_sent
        events = communicator.stats.collectives
        peak = bytes_sent // max(events, 1)
    return WorkerReport(
        rank=rank,
        eval_loss=evaluate(model, eval_batches),
        bytes_sent=bytes_sent,
        peak_bytes_per_sync=peak,
        sync_events=events,
        wall_seconds=wall,
        compute_seconds=max(wall - waiting, 0.0),
        eval_curve=eval_curve,
    )
