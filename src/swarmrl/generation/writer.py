"""Local worker `index` of a run writing the signed rollout file of (step, batch index) into the run directory.

Shared by the worker processes of a local run and the engine of a colocated run, so both write the same files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmrl.configs import RunConfig
from swarmrl.generation.batch import write_batch
from swarmrl.identity import Identity
from swarmrl.inference.engine import InferenceEngine, SamplingParams
from swarmrl.models import load_tokenizer
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts.assignment import BatchSpec
from swarmrl.rundir import RunDir
from swarmrl.steps import checkpoint_dir
from swarmrl.tasks.registry import build_tasks
from swarmrl.tasks.task import TaskSource


@dataclass(frozen=True)
class BatchWriter:
    """Writes the signed rollout file of (step, batch index) with an engine, as local worker `index`."""

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
                max_new_tokens=config.contract.max_new_tokens,
                temperature=config.contract.temperature,
                top_p=config.contract.top_p,
            ),
        )

    def path(self, step: int, batch_index: int) -> Path:
        return self.rundir.rollouts(step) / f"w{self.index}-b{batch_index:04d}.parquet"

    def write(self, engine: InferenceEngine, step: int, batch_index: int, prompts: int | None = None) -> Path:
        """The file of (step, batch index): `prompts` prompts (default `contract.prompts_per_batch`)."""
        config = self.config
        spec = BatchSpec.local(
            config.run.id,
            self.identity.node_id,
            step,
            batch_index,
            prompts or config.contract.prompts_per_batch,
            config.contract.group_size,
            config.contract.seed,
        )
        path = self.path(step, batch_index)
        write_batch(
            engine,
            spec,
            self.tasks,
            self.tokenizer,
            config,
            self.params,
            path,
            self.identity,
            proofs=config.contract.local_proofs,
        )
        return path


def worker_key_path(rundir: RunDir, index: int) -> Path:
    return rundir.root / "keys" / f"worker-{index}.pem"
