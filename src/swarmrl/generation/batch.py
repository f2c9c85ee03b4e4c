"""One rollout batch: the assigned prompts, G seeded completions each, TOPLOC proofs, as rollout rows.

A local run, whose files no validator reads, may leave the proofs out (`contract.local_proofs = false`): the
file's header then says so, and every validator refuses it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from swarmrl.configs import RunConfig
from swarmrl.identity import Identity
from swarmrl.inference.engine import GenerationRequest, InferenceEngine, SamplingParams
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts import RolloutHeader, RolloutRow, write_rollouts
from swarmrl.rollouts.assignment import AssignedPrompt, BatchSpec, assigned_prompts, sample_seed
from swarmrl.tasks.task import TaskSource
from swarmrl.toploc import build_proofs_batch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def generate_batch(
    engine: InferenceEngine,
    spec: BatchSpec,
    prompts: list[AssignedPrompt],
    params: SamplingParams,
    *,
    proofs: bool = True,
) -> list[RolloutRow]:
    requests = [
        GenerationRequest(prompt.prompt_ids, sample_seed(spec.seed, prompt.slot, g))
        for prompt in prompts
        for g in range(spec.group_size)
    ]
    generations = engine.generate(requests, params)
    committed = (
        build_proofs_batch([generation.hidden_states for generation in generations])
        if proofs
        else [[] for _ in generations]
    )
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
                proofs=committed[i],
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
    *,
    proofs: bool = True,
) -> list[RolloutRow]:
    """Generate the batch `spec` assigns with the engine's policy and write it to `path`, signed. Without
    `proofs` (a local run's single-turn batch) no TOPLOC proof is built and the header says so; multi-turn
    batches always carry theirs."""
    fmt = prompt_format(tokenizer, config.prompt)
    prompts = assigned_prompts(spec, tasks, fmt, config.tasks)
    if config.env is None:
        rows = generate_batch(engine, spec, prompts, params, proofs=proofs)
    else:  # the environment layer is only needed by multi-turn runs
        from swarmrl.envs.build import generate_config_env_batch

        rows = generate_config_env_batch(engine, spec, prompts, params, config, fmt)
        proofs = True
    header = RolloutHeader(spec.run_id, spec.node_id, engine.policy_step, spec.batch_index, proofs=proofs)
    write_rollouts(path, header, rows, identity)
    return rows
