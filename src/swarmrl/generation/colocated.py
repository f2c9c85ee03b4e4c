"""The worker half of a colocated run (`trainer.colocate`): one engine in the trainer's process, on its device.

The same source serves a trainer that generates beside worker processes (`trainer.generate_while_waiting`):
it offers the workers' files first and generates a batch itself only when it has read them all and the
step still needs groups, so the trainer's core generates instead of idling.

The trainer's rollout feed asks its source for step k's files; this source answers by generating them, one
batch at a time with the engine's current policy, written and signed as local worker 0 writes them. The feed
then reads, scores and filters them as it does any worker's: the same untrusted-file checks, rewards computed
on the trusted side, rows older than `k - async_level` refused. Generation and training alternate in the one
process (two jobs on one GPU gain little from overlapping), so step k is generated with policy k; the
trainer pushes every policy into the engine in place (`push_weights`), so the engine never reads a
checkpoint, not even the first one: its model is built from the architecture alone.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from swarmrl.configs import RunConfig
from swarmrl.generation.writer import BatchWriter
from swarmrl.inference.engine import LiveEngine
from swarmrl.inference.factory import build_engine
from swarmrl.models import model_skeleton
from swarmrl.rundir import RunDir, RunDirSource
from swarmrl.steps import checkpoint_dir

log = logging.getLogger(__name__)

# The engine is built before the trainer hands it a policy: no step is fresh enough for it until then.
NO_POLICY = -1


class ColocatedPolicyError(RuntimeError):
    """The colocated engine would generate a step with a policy the step may not use."""


class ColocatedSource:
    """A `RolloutSource` that generates each file it offers; steps are closed in the run directory."""

    def __init__(
        self,
        writer: BatchWriter,
        engine: LiveEngine,
        async_level: int,
        *,
        groups_per_step: int,
        prompts_per_file: int,
        whole_files: bool = False,
    ) -> None:
        self.writer = writer
        self.engine = engine
        self.async_level = async_level
        self.files = RunDirSource(writer.rundir, groups_per_step, prompts_per_file, whole_files)

    def open_step(self, step: int) -> None:
        self.files.open_step(step)

    def new_files(self, step: int, seen: set[str], prompts_wanted: int) -> list[Path]:
        # Files a run killed mid-step left behind are used before anything new is generated.
        pending = self.files.new_files(step, seen, prompts_wanted)
        if pending:
            return pending
        oldest = max(step - self.async_level, 0)
        if self.engine.policy_step < oldest:
            raise ColocatedPolicyError(
                f"step {step} needs a policy of step {oldest} or newer (async_level {self.async_level}); "
                f"the engine holds {self._held()}"
            )
        batch_index = 0
        while self.writer.path(step, batch_index).exists():
            batch_index += 1
        prompts = self.files.file_prompts(prompts_wanted)
        return [self.writer.write(self.engine, step, batch_index, prompts=prompts)]

    def wait_for_files(self, step: int, seconds: float) -> None:
        self.files.wait_for_files(step, seconds)

    def close_step(self, step: int, summary: dict[str, Any], next_prompts: int) -> None:
        self.files.close_step(step, summary, next_prompts)

    def should_stop(self) -> bool:
        return self.files.should_stop()

    def workers_idle(self) -> bool:
        return self.files.workers_idle()

    def _held(self) -> str:
        step = self.engine.policy_step
        return "no policy yet" if step == NO_POLICY else f"policy {step}"


def colocated_engine(config: RunConfig, writer: BatchWriter, device: torch.device) -> LiveEngine:
    """The engine of `config.engine` on `device`, its weights empty until the trainer pushes a policy.

    It is built before the trainer loads its model, so on CUDA `engine.gpu_memory_fraction` is the engine's
    own share of the device (weights, activation peak, KV cache) and the trainer's model, optimizer state and
    activations are allocated later in what the fraction leaves.
    """
    architecture = checkpoint_dir(RunDir(config.run.directory).checkpoints, 0)
    model = model_skeleton(architecture, config.model.dtype, device, config.model.attn_implementation)
    return build_engine(config.engine, model, eos_token_id=writer.stop_token_ids, policy_step=NO_POLICY)


def colocated_source(config: RunConfig, device: torch.device, *, index: int = 0) -> ColocatedSource:
    """The trainer's engine and source. `index`: the local worker it writes as — 0 when colocated (no worker
    processes), the number of worker processes when it generates beside them (`generate_while_waiting`)."""
    writer = BatchWriter.for_run(config, index)
    engine = colocated_engine(config, writer, device)
    return ColocatedSource(
        writer,
        engine,
        config.contract.async_level,
        groups_per_step=config.trainer.prompts_per_step,
        prompts_per_file=config.contract.prompts_per_batch,
        whole_files=config.contract.local_proofs,
    )
