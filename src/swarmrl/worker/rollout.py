"""One rollout batch: the assigned prompts, G seeded completions each, TOPLOC proofs, as rollout rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from swarmrl.config import RunConfig
from swarmrl.identity import Identity
from swarmrl.inference.engine import GenerationRequest, InferenceEngine, SamplingParams
from swarmrl.models.prompting import PromptFormat, prompt_format
from swarmrl.rollouts import RolloutHeader, RolloutRow, write_rollouts
from swarmrl.rollouts.assignment import BatchSpec, assigned_prompt_indices, sample_seed
from swarmrl.tasks.config import TasksConfig
from swarmrl.tasks.length_reward import add_length_instruction, sample_target_length
from swarmrl.tasks.task import Task, TaskSource
from swarmrl.toploc import build_proofs_batch


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
        prompts.append(AssignedPrompt(slot, index, task, target, prompt.ids(question)))
    return prompts


def generate_batch(
    engine: InferenceEngine,
    spec: BatchSpec,
    prompts: list[AssignedPrompt],
    params: SamplingParams,
) -> list[RolloutRow]:
    requests = [
        GenerationRequest(prompt.prompt_ids, sample_seed(spec.seed, prompt.slot, g))
        for prompt in prompts
        for g in range(spec.group_size)
    ]
    generations = engine.generate(requests, params)
    proofs = build_proofs_batch([generation.hidden_states for generation in generations])
    rows = []
    for i, generation in enumerate(generations):
        prompt = prompts[i // spec.group_size]
        rows.append(
            RolloutRow(
                prompt_ids=list(generation.prompt_ids),
                completion_ids=list(generation.completion_ids),
                policy_step=engine.policy_step,
                task_id=prompt.task.task_id,
                prompt_index=prompt.task_index,
                group_id=prompt.slot,
                sample_seed=generation.seed,
                temperature=params.temperature,
                target_length=prompt.target_length,
                logprobs=list(generation.logprobs),
                finish_reason=generation.finish_reason,
                proofs=proofs[i],
            )
        )
    return rows


def write_batch(
    engine: InferenceEngine,
    spec: BatchSpec,
    tasks: TaskSource,
    tokenizer: PreTrainedTokenizerBase,
    config: RunConfig,
    params: SamplingParams,
    path: Path,
    identity: Identity,
) -> list[RolloutRow]:
    """Generate the batch `spec` assigns with the engine's policy and write it to `path`, signed."""
    fmt = prompt_format(tokenizer, config.prompt)
    prompts = assigned_prompts(spec, tasks, fmt, config.tasks)
    if config.env is None:
        rows = generate_batch(engine, spec, prompts, params)
    else:  # the environment layer is only needed by multi-turn runs
        from swarmrl.envs.build import generate_config_env_batch

        rows = generate_config_env_batch(engine, spec, prompts, params, config, fmt)
    header = RolloutHeader(spec.run_id, spec.node_id, engine.policy_step, spec.batch_index)
    write_rollouts(path, header, rows, identity)
    return rows
