"""Multi-turn rollouts on the inference engine, and the rollout rows they become.

Each round sends every running row's whole sequence so far (prompt, model turns, environment turns) to the
engine as one batch of requests with its own token budget: the paged engine prefills the environment's
tokens with the rest of the prefix and continuous batching runs the rows together, while rows whose
episode ended, or whose tool is still to run, are simply not in the batch. Every turn of a row samples from
its own seed (the row's sample seed and the turn number), so a rollout is a function of its assignment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from swarmrl.envs.base import Environment
from swarmrl.envs.errors import EnvError
from swarmrl.envs.trajectory import (
    GenerateBatch,
    Generation,
    RolloutLimits,
    Trajectory,
    TurnCodec,
    run_episodes,
)
from swarmrl.inference.engine import GenerationRequest, InferenceEngine, SamplingParams
from swarmrl.rollouts import RolloutRow
from swarmrl.rollouts.assignment import sample_seed
from swarmrl.toploc import build_proofs_batch

if TYPE_CHECKING:  # the worker module imports the validator's side of the run; only its types are needed
    from swarmrl.rollouts.assignment import AssignedPrompt, BatchSpec


def turn_seed(sample_seed: int, turn: int) -> int:
    """The seed of one model turn: a hash of the row's seed and the turn, in int64 like every sample seed."""
    digest = hashlib.blake2b(f"{sample_seed}:{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def engine_generator(
    engine: InferenceEngine, params: SamplingParams, sample_seeds: list[int]
) -> GenerateBatch:
    """A `GenerateBatch` over `engine`: row r's n-th turn samples with turn_seed(sample_seeds[r], n)."""
    turns = [0] * len(sample_seeds)

    def generate(rows: list[int], prefixes: list[list[int]], budgets: list[int]) -> list[Generation]:
        requests = []
        for row, prefix, budget in zip(rows, prefixes, budgets, strict=True):
            seed = turn_seed(sample_seeds[row], turns[row])
            requests.append(GenerationRequest(prefix, seed, min(budget, params.max_new_tokens)))
            turns[row] += 1
        return [
            Generation(list(g.completion_ids), list(g.logprobs), g.finish_reason, g.hidden_states)
            for g in engine.generate(requests, params)
        ]

    return generate


def trajectory_row(
    trajectory: Trajectory,
    *,
    policy_step: int,
    task_id: str,
    prompt_index: int,
    group_id: int,
    sample_seed: int,
    temperature: float,
) -> RolloutRow:
    """The rollout row of a finished episode: completion mask set, TOPLOC proofs over the model's tokens."""
    ids = trajectory.completion_ids
    last = trajectory.segments[-1]
    finish = "eos" if last.model and trajectory.end_reason != "length" else "length"
    proofs: list[bytes] = []
    if trajectory.model_hidden_states:
        (proofs,) = build_proofs_batch([torch.cat(trajectory.model_hidden_states)])
    return RolloutRow(
        prompt_ids=list(trajectory.prompt_ids),
        completion_ids=ids,
        policy_step=policy_step,
        task_id=task_id,
        prompt_index=prompt_index,
        group_id=group_id,
        sample_seed=sample_seed,
        temperature=temperature,
        target_length=-1,
        logprobs=trajectory.completion_logprobs,
        finish_reason=finish,
        proofs=proofs,
        claimed_reward=trajectory.reward,
        completion_mask=trajectory.completion_mask,
    )


def generate_env_batch(
    engine: InferenceEngine,
    spec: BatchSpec,
    prompts: list[AssignedPrompt],
    params: SamplingParams,
    make_env: Callable[[], Environment],
    codec: TurnCodec,
    limits: RolloutLimits,
    concurrency: int = 1,
) -> list[RolloutRow]:
    """`worker.rollout.generate_batch` for a multi-turn run: group_size episodes per assigned prompt, all
    advanced together (`concurrency` environment steps at once), each row's first turn the assigned prompt
    ids (the environment must agree)."""
    episodes = [(prompt, g) for prompt in prompts for g in range(spec.group_size)]
    seeds = [sample_seed(spec.seed, prompt.slot, g) for prompt, g in episodes]
    trajectories = run_episodes(
        [make_env() for _ in episodes],
        [prompt.task for prompt, _ in episodes],
        seeds,
        engine_generator(engine, params, seeds),
        codec,
        limits,
        concurrency=concurrency,
    )
    rows = []
    for (prompt, _), seed, trajectory in zip(episodes, seeds, trajectories, strict=True):
        if trajectory.prompt_ids != prompt.prompt_ids:
            raise EnvError(
                f"task {prompt.task.task_id}: the environment's first turn is not the assigned prompt"
            )
        rows.append(
            trajectory_row(
                trajectory,
                policy_step=engine.policy_step,
                task_id=prompt.task.task_id,
                prompt_index=prompt.task_index,
                group_id=prompt.slot,
                sample_seed=seed,
                temperature=params.temperature,
            )
        )
    return rows
