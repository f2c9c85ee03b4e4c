"""Which prompts a node must answer, and with which sampling seeds: pure functions of public values.

A worker cannot cherry-pick easy prompts or lucky seeds, because the validator recomputes both from
(run id, node id, step, batch index).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from swarmrl.tasks.length_reward import add_length_instruction, sample_target_length

if TYPE_CHECKING:
    from swarmrl.configs.tasks import TasksConfig
    from swarmrl.models.prompting import PromptFormat
    from swarmrl.tasks.task import Task, TaskSource

_SEED_MASK = (1 << 63) - 1


def _hash_to_int(*parts: object) -> int:
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") & _SEED_MASK


def batch_seed(run_id: str, node_id: str, step: int, batch_index: int) -> int:
    return _hash_to_int("batch", run_id, node_id, step, batch_index)


def assigned_prompt_indices(seed: int, num_prompts: int, num_tasks: int) -> list[int]:
    """Distinct task indices when the source is large enough, else drawn with replacement."""
    if num_tasks < 1:
        raise ValueError("no tasks to assign")
    rng = np.random.default_rng(seed)
    replace = num_prompts > num_tasks
    return [int(i) for i in rng.choice(num_tasks, size=num_prompts, replace=replace)]


def sample_seed(seed: int, prompt_slot: int, completion: int) -> int:
    """The per-completion seed of the seeded sampler (Gumbel-max), one per (prompt slot, completion)."""
    return _hash_to_int("sample", seed, prompt_slot, completion)


@dataclass(frozen=True)
class BatchSpec:
    """Everything that fixes a batch's prompts and seeds; the validator rebuilds it from the same values.

    `seed` is the task seed of (run, node, step, batch index): `rollouts.assignment.batch_seed` in a local
    run, the coordinator's `task_seed` (keyed by a run secret) in a swarm.
    """

    run_id: str
    node_id: str
    step: int
    batch_index: int
    prompts_per_batch: int
    group_size: int
    run_seed: int
    seed: int

    @classmethod
    def local(
        cls,
        run_id: str,
        node_id: str,
        step: int,
        batch_index: int,
        prompts_per_batch: int,
        group_size: int,
        run_seed: int,
    ) -> BatchSpec:
        seed = batch_seed(run_id, node_id, step, batch_index)
        return cls(run_id, node_id, step, batch_index, prompts_per_batch, group_size, run_seed, seed)


@dataclass(frozen=True)
class AssignedPrompt:
    slot: int
    task_index: int
    task: Task
    target_length: int  # -1 when no length target
    prompt_ids: list[int]


def assigned_prompts(
    spec: BatchSpec,
    tasks: TaskSource,
    prompt: PromptFormat,
    tasks_config: TasksConfig,
) -> list[AssignedPrompt]:
    """The prompts of a batch, exactly as the node must send them to its model."""
    prompts = []
    indices = assigned_prompt_indices(spec.seed, spec.prompts_per_batch, len(tasks))
    for slot, index in enumerate(indices):
        task = tasks[index]
        question, target = task.prompt, -1
        length = tasks_config.length
        if length.mode != "none":
            target = sample_target_length(length.targets, spec.run_seed, spec.seed, slot)
            question = add_length_instruction(question, target, length.prompt_suffix)
        prompts.append(AssignedPrompt(slot, index, task, target, prompt.ids(question, task.messages)))
    return prompts
