"""The trusted RL trainer: collect step k's rollouts, run GRPO, write checkpoint k+1, repeat.

Runs alone or as one rank of a torch.distributed job (torchrun; gloo on CPU): each rank trains on its
slice of the batch through FSDP2 (`fully_shard`) and rank 0 writes full checkpoints and metrics.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from swarmrl.configs import RunConfig
from swarmrl.configs.devices import InvalidDevice
from swarmrl.configs.trainer import TrainerSection
from swarmrl.devices import resolve_device
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.checkpoint import read_checkpoint
from swarmrl.models.logprobs import split_lm
from swarmrl.models.optim import build_optimizer
from swarmrl.progress_lines import step_line
from swarmrl.rollouts import ScoredRow
from swarmrl.rundir import RunDir
from swarmrl.steps import checkpoint_dir, latest_checkpoint
from swarmrl.trainer.attention import resolve_attention
from swarmrl.trainer.batch import StepBatch, plan_step
from swarmrl.trainer.checkpoint import (
    read_trainer_state,
    restore_scheduler_and_rng,
    save_checkpoint,
    save_trainer_state,
    saved_trainer_steps,
)
from swarmrl.trainer.core_share import CoreShare, decoder_layers
from swarmrl.trainer.data import CollectStats
from swarmrl.trainer.losses import policy_loss
from swarmrl.trainer.metrics import MetricsForward, MetricsSink
from swarmrl.trainer.objectives import build_objective
from swarmrl.trainer.online_eval import OnlineEvaluator
from swarmrl.trainer.parallel import (
    full_model_state,
    full_optimizer_state,
    is_distributed,
    load_optimizer_state,
    shard_model,
    to_float,
    world,
)
from swarmrl.trainer.policy import PackedPolicy
from swarmrl.trainer.sharded_load import load_sharded
from swarmrl.trainer.weight_sync import WeightSink, push_weights

log = logging.getLogger(__name__)

Collector = Callable[[int], tuple[list[ScoredRow], CollectStats]]
Publisher = Callable[[int], None]
# Called with (new step, model) after each policy step, before it is published; may change the weights in
# place (trainer islands merge here, so the checkpoint of a merge step is the merged policy).
# Runs after each policy step; the scalars it returns (if any) join that step's metrics record.
AfterStep = Callable[[int, torch.nn.Module], "dict[str, float] | None"]


# Metrics of `policy_loss` that are already normalised by the minibatch's global counts: they add up over
# micro-batches and ranks. The others are means over a micro-batch's tokens and are weighted by its share.
_ADDITIVE_METRICS = ("loss", "policy_loss", "entropy", "kl_ref")


def train_step(
    policy: PackedPolicy,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    step: StepBatch,
    config: RunConfig,
    ref_policy: PackedPolicy | None = None,
    device: torch.device | None = None,
) -> dict[str, float]:
    """One policy step: π_old recomputed once, then one optimizer step per minibatch, each accumulating the
    gradients of its micro-batches.

    With a single minibatch the weights are still π_old during its forward passes, so π_old is those passes'
    detached log-probabilities instead of a second forward.
    """
    device = device or train_device(config.trainer.device)
    loss_cfg = config.loss
    world_size = world()[1]
    temperature = step.temperature
    model_parameters = list(policy.model.parameters())
    policy.eval()
    with torch.no_grad():
        # π_old without dropout: the ratio must be exactly 1 before the first update.
        old = _score_all(policy, step, device) if len(step.minibatches) > 1 else None
        ref = _score_all(ref_policy, step, device) if ref_policy is not None else None
    policy.train()
    totals: dict[str, float] = {}
    for i, minibatch in enumerate(step.minibatches):
        optimizer.zero_grad(set_to_none=True)
        sums: dict[str, torch.Tensor] = {}
        for j, micro in enumerate(minibatch.micro_batches):
            micro = micro.to(device)
            logprobs, entropy = policy.score(micro, temperature, with_entropy=loss_cfg.entropy_coef > 0)
            out = policy_loss(
                logprobs,
                logprobs.detach() if old is None else old[i][j],
                micro.advantages,
                micro.loss_mask,
                config=loss_cfg,
                engine_logprobs=micro.engine_logprobs,
                ref_logprobs=ref[i][j] if ref is not None else None,
                entropy=entropy,
                sequence_ids=micro.sequence_ids,
                total_sequences=minibatch.total_sequences,
                total_tokens=minibatch.total_tokens,
            )
            # Each rank's loss is its share of the global sum; FSDP averages gradients over ranks.
            (out.loss * world_size).backward()
            share = micro.loss_mask.sum() / max(minibatch.total_tokens, 1)
            for key, value in {"loss": out.loss.detach(), **out.metrics}.items():
                weighted = value.float() * (1.0 if key in _ADDITIVE_METRICS else share)
                sums[key] = sums[key] + weighted if key in sums else weighted
        names = sorted(sums)
        reduced = torch.stack([sums[k] for k in names])
        if is_distributed():
            dist.all_reduce(reduced)
        grad_norm = torch.nn.utils.clip_grad_norm_(model_parameters, config.trainer.max_grad_norm)
        optimizer.step()
        scheduler.step()
        for key, value in zip(names, reduced.tolist(), strict=True):
            totals[key] = totals.get(key, 0.0) + value / len(step.minibatches)
        totals["grad_norm"] = totals.get("grad_norm", 0.0) + to_float(grad_norm) / len(step.minibatches)
    totals["lr"] = scheduler.get_last_lr()[0]
    totals["packed_rows"] = float(step.packed_rows)
    totals["pack_length"] = float(step.pack_length)
    totals["padding_fraction"] = step.padding_fraction
    return totals


def _score_all(policy: PackedPolicy, step: StepBatch, device: torch.device) -> list[list[torch.Tensor]]:
    """Detached log-probabilities of every micro-batch of the step, in the step's layout."""
    return [
        [policy.score(micro.to(device), step.temperature)[0] for micro in minibatch.micro_batches]
        for minibatch in step.minibatches
    ]


def plan_policy_step(
    rows: list[ScoredRow], trainer: TrainerSection, policy: PackedPolicy, pad_token_id: int
) -> StepBatch:
    """This rank's micro-batches of a policy step, packed for the policy's attention backend."""
    rank, world_size = world()
    # FlexAttention skips masked blocks, so rows as long as a micro-batch cost nothing extra; dense masks
    # grow with the square of the row, so they keep rows short by default.
    pack_length = trainer.pack_length or (trainer.micro_batch_tokens if policy.attention == "flex" else None)
    return plan_step(
        rows,
        pad_token_id=pad_token_id,
        minibatches=trainer.optimizer_steps_per_policy_step,
        micro_batch_tokens=trainer.micro_batch_tokens,
        pack_length=pack_length,
        rank=rank,
        world=world_size,
    )


def build_policy(
    model: torch.nn.Module, trainer: TrainerSection, device: torch.device, *, for_training: bool = True
) -> PackedPolicy:
    """Wrap (and under torchrun shard) a model loaded in fp32 the way the trainer config asks."""
    bf16 = trainer.precision == "bf16"
    sharded = is_distributed()
    # A model built on meta by `sharded_load` is allocated on `device` after sharding, shard by shard.
    on_meta = any(p.is_meta for p in model.parameters())
    policy = PackedPolicy(
        model if on_meta else model.to(device),
        attention=resolve_attention(trainer.attention, device),
        chunk_tokens=trainer.logprob_chunk_tokens,
        autocast_dtype=torch.bfloat16 if bf16 and not sharded else None,
        activation_checkpointing=trainer.activation_checkpointing and for_training,
    )
    backbone, _ = split_lm(model)
    blocks = getattr(backbone, "layers", None)
    if sharded and blocks is None:
        raise TypeError(f"{type(backbone).__name__} has no .layers to shard block by block")
    return shard_model(policy, blocks or [], bf16=bf16)


def load_policy(
    checkpoint: Path, trainer: TrainerSection, device: torch.device, *, for_training: bool = True
) -> tuple[torch.nn.Module, PackedPolicy]:
    """(model, policy) from a checkpoint, with fp32 master weights whatever the inference dtype. Under
    torchrun each rank reads only its own shards (`sharded_load`); one process loads the whole model."""
    build = functools.partial(build_policy, trainer=trainer, device=device, for_training=for_training)
    if is_distributed():
        model, policy, stats = load_sharded(checkpoint, build, device)
        log.info("rank %d read %.1f%% of %s", world()[0], 100 * stats.fraction, checkpoint)
        return model, policy
    model = load_model(checkpoint, "float32")
    return model, build(model)


def train_device(setting: str) -> torch.device:
    """Where this rank trains (`trainer.device`): plain "cuda" and "auto" mean the rank's own GPU under
    torchrun (LOCAL_RANK), the first GPU of a single process."""
    if setting.startswith("cuda:") and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise InvalidDevice(
            f"trainer.device {setting!r} would put every torchrun rank on one GPU: use 'cuda' or 'auto'"
        )
    return resolve_device(setting, local_rank=int(os.environ.get("LOCAL_RANK", "0")))


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
        **stats.rewards.metrics(),
    }


def run_trainer(
    config: RunConfig,
    collect: Collector,
    publish: Publisher | None = None,
    *,
    stop_after_steps: int | None = None,
    weight_sink: WeightSink | None = None,
    after_step: AfterStep | None = None,
    forward_metrics: MetricsForward | None = None,
    core_share: CoreShare | None = None,
) -> int:
    """Train from the newest resumable state to `config.trainer.steps`; returns the last step written.

    `weight_sink` (an engine sharing this process and GPU) gets the policy training starts from, then each
    new policy in place before its checkpoint is written: it never needs to read a checkpoint. With
    `eval.every_steps`, rank 0 also scores policies on held-out tasks (`swarmrl.trainer.online_eval`).
    `forward_metrics` gets every metrics record's scalars too (rank 0). `core_share` sets the torch threads of
    each training pass (a local CPU run's trainer on its idle workers' cores); collecting runs on its own.
    """
    if config.trainer.lora.enabled and (weight_sink is not None or after_step is not None):
        raise ValueError(
            "[trainer.lora] trains adapters only; an in-process weight sink or an island merge would need "
            "the merged full weights every step"
        )
    build_objective(
        config.loss.objective
    )  # a plugin loss missing here, or other than the run pinned: refused now
    rank, world_size = world()
    rundir = RunDir(config.run.directory)
    torch.manual_seed(config.contract.seed)
    if latest_checkpoint(rundir.checkpoints) is None:
        raise FileNotFoundError(f"{rundir.checkpoints}: no step_0 checkpoint to start from")
    # Probe the saved state first: the model must come from the checkpoint the state belongs to.
    state_steps = saved_trainer_steps(rundir.trainer_state)
    step = state_steps[-1] if state_steps else 0
    policy = _load_policy_and_optimizer(config, rundir, step, resume=bool(state_steps))
    sink = (
        MetricsSink(config.metrics, rundir, config.model_dump(mode="json"), forward_metrics)
        if rank == 0
        else None
    )
    evaluator = None
    try:
        if sink is not None and config.eval.every_steps:
            evaluator = OnlineEvaluator(config, checkpoint_dir(rundir.checkpoints, step), step, sink.log)
            if step == 0:
                evaluator.policy_ready(0)  # the starting policy is the eval curve's first point
        collect = _on_own_threads(collect, core_share, policy.module.model) if core_share else collect
        last = _train_loop(
            config, policy, collect, publish, sink, step, stop_after_steps, weight_sink, after_step, evaluator
        )
        if evaluator is not None:
            evaluator.finish()
        return last
    finally:
        if evaluator is not None:
            evaluator.close()
        if sink is not None:
            sink.close()
        if core_share is not None:
            core_share.detach()


def _on_own_threads(collect: Collector, core_share: CoreShare, model: torch.nn.Module) -> Collector:
    """`collect` on the trainer's own torch threads (it reads files or generates beside busy workers); the
    training passes after it take the threads `core_share` sets before each decoder layer."""
    layers = decoder_layers(model)
    if layers is None:
        log.warning(
            "%s has no decoder layers to hook: the trainer keeps to its own threads", type(model).__name__
        )
        return collect
    core_share.attach(layers)

    def collect_on_own_threads(step: int):
        core_share.release()
        return collect(step)

    return collect_on_own_threads


def _load_policy_and_optimizer(config: RunConfig, rundir: RunDir, step: int, *, resume: bool) -> _Policy:
    """The policy of checkpoint `step` with fp32 master weights, its optimizer and scheduler (restored from
    the trainer state of `step` when resuming) and the KL reference policy when the loss needs one."""
    rank = world()[0]
    device = train_device(config.trainer.device)
    adapter = None
    if config.trainer.lora.enabled:
        from swarmrl.trainer.lora import load_lora_policy  # peft is the optional `lora` extra

        adapter = load_lora_policy(rundir.checkpoints, step, config.trainer.lora)
        model = adapter.get_base_model()  # the transformers model, adapters injected in place
        policy_module = build_policy(model, config.trainer, device)
    else:
        # Sharded straight from the checkpoint under torchrun; `trainer.precision` decides the compute dtype.
        model, policy_module = load_policy(checkpoint_dir(rundir.checkpoints, step), config.trainer, device)
    policy_module.train()
    optimizer, scheduler = build_optimizer(
        model,
        config.trainer.lr,
        config.trainer.weight_decay,
        config.trainer.betas,
        config.trainer.warmup_steps,
    )
    if resume:
        state = read_trainer_state(rundir.trainer_state, step)
        load_optimizer_state(model, optimizer, state["optimizer"] if rank == 0 else None)
        restore_scheduler_and_rng(state, scheduler)
        log.info("resumed at step %d", step)
    ref_policy = None
    if config.loss.kl_coef > 0:
        _, ref_policy = load_policy(
            checkpoint_dir(rundir.checkpoints, 0), config.trainer, device, for_training=False
        )
        ref_policy.eval()
    tokenizer = load_tokenizer(checkpoint_dir(rundir.checkpoints, 0))
    return _Policy(policy_module, tokenizer, optimizer, scheduler, ref_policy, adapter)


@dataclass
class _Policy:
    """What the loop updates and saves each step."""

    module: PackedPolicy  # what runs forward (the FSDP root when sharded); its .model is what is saved
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    ref_module: PackedPolicy | None
    adapter: Any = None  # the peft wrapper of a LoRA run: its checkpoints are the adapter alone


def _save_policy(
    rundir: RunDir, step: int, policy: _Policy, keep: int, weights: dict[str, torch.Tensor] | None
) -> None:
    """Checkpoint `step`: the full model, or in a LoRA run the adapter alone."""
    if policy.adapter is None:
        save_checkpoint(
            rundir.checkpoints, step, policy.module.model, policy.tokenizer, keep=keep, state_dict=weights
        )
        return
    from swarmrl.trainer.lora import save_adapter_checkpoint

    save_adapter_checkpoint(rundir.checkpoints, step, policy.adapter, keep=keep, full_state=weights)


def _policy_weights(rundir: RunDir, step: int, policy: _Policy, model, weights) -> dict[str, torch.Tensor]:
    """The full weights of policy `step`; a LoRA model's own state holds its adapters, so it is the saved
    checkpoint's, merged onto the base as workers merge it."""
    if policy.adapter is not None:
        return read_checkpoint(checkpoint_dir(rundir.checkpoints, step))
    return weights if weights is not None else model.state_dict()


def _train_loop(
    config: RunConfig,
    policy: _Policy,
    collect: Collector,
    publish: Publisher | None,
    sink: MetricsSink | None,
    step: int,
    stop_after_steps: int | None,
    weight_sink: WeightSink | None = None,
    after_step: AfterStep | None = None,
    evaluator: OnlineEvaluator | None = None,
) -> int:
    rank, world_size = world()
    rundir = RunDir(config.run.directory)
    model, tokenizer, optimizer, scheduler = (
        policy.module.model,
        policy.tokenizer,
        policy.optimizer,
        policy.scheduler,
    )
    steps_done = 0
    loop_started = time.monotonic()
    if weight_sink is not None:
        push_weights(model, weight_sink, step)
    while step < config.trainer.steps:
        rows, stats = _collect_on_rank0(collect, step, rank, world_size)
        started = time.monotonic()
        planned = plan_policy_step(rows, config.trainer, policy.module, tokenizer.pad_token_id)
        metrics = train_step(policy.module, optimizer, scheduler, planned, config, policy.ref_module)
        step += 1
        extra = after_step(step, model) if after_step is not None else None
        if weight_sink is not None:
            push_weights(model, weight_sink, step)
        weights = full_model_state(model)
        optimizer_state = full_optimizer_state(model, optimizer)
        if rank == 0:
            assert optimizer_state is not None  # rank 0 holds the full state
            _save_policy(rundir, step, policy, config.trainer.keep_checkpoints, weights)
            save_trainer_state(rundir.trainer_state, step, optimizer_state, scheduler, {"run": config.run.id})
            if publish is not None:
                publish(step)
            record = {"step": step, "time": time.time(), "train_seconds": time.monotonic() - started}
            record.update(batch_metrics(rows, stats))
            record.update(metrics)
            record.update(extra or {})
            assert sink is not None
            sink.log(record)
            if evaluator is not None:
                evaluator.policy_ready(step, _policy_weights(rundir, step, policy, model, weights))
            # The line `rl` prints off a terminal, and the task reward and dropped share besides.
            pace = (time.monotonic() - loop_started) / (steps_done + 1)
            log.info(
                "%s · task %.3f · dropped %.0f%%",
                step_line(record, config.trainer.steps, pace),
                record["task_reward"],
                100 * record["dropped_group_fraction"],
            )
        steps_done += 1
        if stop_after_steps is not None and steps_done >= stop_after_steps:
            break
    return step
