"""Multi-turn rows at the validator: environment tokens are context (no proofs, no logprob check, no loss),
every row is replayed by the run's environment, and a run without one refuses multi-turn rows."""

import dataclasses

import pytest
import torch
from adversarial.validator.test_validator_attacks import NODE, context, honest_rows, submit, world  # noqa: F401

from swarmrl.envs import EnvStep, ReplayMismatch, replay
from swarmrl.envs import RolloutLimits as EnvLimits
from swarmrl.envs.engine_rollout import generate_env_batch
from swarmrl.inference.engine import SamplingParams
from swarmrl.inference.prefill import prefill
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts.assignment import BatchSpec, assigned_prompts
from swarmrl.toploc import build_proofs_batch
from swarmrl.validator.rollout_checks import validate_file


def as_multi_turn(kit, rows):
    """Rows whose tokens 1..2 stand for an environment turn (rows of 4+ tokens; shorter ones stay single-turn):
    proofs over model tokens only, env logprobs 0."""
    config, _, model, _, _ = kit
    masks = [
        [1, 0, 0] + [1] * (len(r.completion_ids) - 3) if len(r.completion_ids) >= 4 else [] for r in rows
    ]
    assert any(masks)
    results = prefill(
        model,
        [r.prompt_ids for r in rows],
        [r.completion_ids for r in rows],
        temperature=config.worker.temperature,
    )
    proofs = build_proofs_batch(
        [
            res.hidden_states[torch.tensor(m or [1] * len(res.logprobs), dtype=torch.bool)]
            for res, m in zip(results, masks, strict=True)
        ]
    )
    return [
        dataclasses.replace(
            r,
            completion_mask=m,
            proofs=p,
            logprobs=[
                lp if bit else 0.0 for lp, bit in zip(r.logprobs, m or [1] * len(r.logprobs), strict=True)
            ],
        )
        for r, m, p in zip(rows, masks, proofs, strict=True)
    ]


@pytest.mark.slow
def test_multi_turn_rows_are_refused_by_a_run_without_an_environment(world, context, tmp_path):  # noqa: F811
    rows = as_multi_turn(world, honest_rows(world))
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check == "env_replay", verdict.reason


class Again:
    """Answers every model turn with "?" until the turn limit: a text environment to replay."""

    def reset(self, task, seed):
        return task.task_id

    def step(self, model_turn):
        return EnvStep("?", 0.25, False)


class RowCodec:
    """First turn = the prompt ids the assignment gives the task; environment turns as plain text."""

    def __init__(self, tokenizer, prompts, stops):
        self.tokenizer, self.prompts, self.stop_token_ids = tokenizer, prompts, stops

    def first_ids(self, task_id):
        return list(self.prompts[task_id])

    def env_ids(self, message):
        return self.tokenizer(message, add_special_tokens=False).input_ids

    def model_text(self, ids):
        return self.tokenizer.decode(list(ids))


def engine_multi_turn_rows(kit):
    """Honest multi-turn rows from the worker's batch function: assigned prompts, two turns, per-turn seeds."""
    config, tokenizer, model, tasks, _ = kit
    worker = config.worker
    spec = BatchSpec.local(
        config.run.id, NODE.node_id, 0, 0, worker.prompts_per_batch, worker.group_size, config.run.seed
    )
    fmt = prompt_format(tokenizer, config.prompt)
    prompts = assigned_prompts(spec, tasks, fmt, config.tasks)
    codec = RowCodec(tokenizer, {p.task.task_id: p.prompt_ids for p in prompts}, fmt.stop_token_ids)
    params = SamplingParams(max_new_tokens=worker.max_new_tokens, temperature=worker.temperature)
    limits = EnvLimits(max_turns=2, max_tokens=worker.max_new_tokens)
    rows = generate_env_batch(TorchEngine(model, policy_step=0), spec, prompts, params, Again, codec, limits)
    assert any(0 in r.completion_mask for r in rows)

    def env_replay(row):
        task = tasks[row.prompt_index]
        return replay(
            Again(),
            task,
            row.sample_seed,
            row.prompt_ids,
            row.completion_ids,
            row.model_mask,
            row.logprobs,
            codec,
            limits,
        ).reward

    return rows, env_replay


def test_engine_multi_turn_rows_pass_every_check_with_seeded_replay(world, context, tmp_path):  # noqa: F811
    rows, env_replay = engine_multi_turn_rows(world)
    context.env_replay = env_replay
    assert context.settings.seeded_replay
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.accepted, verdict.reason
    assert "env_replay" in verdict.passed and "seeded_sampling" in verdict.passed
    assert {r.task_reward for r in verdict.scored_rows if 0 in r.completion_mask} == {0.25}


def test_an_edited_env_token_fails_the_replay_by_name(world, context, tmp_path):  # noqa: F811
    rows, env_replay = engine_multi_turn_rows(world)
    i = next(k for k, r in enumerate(rows) if 0 in r.completion_mask)
    ids = list(rows[i].completion_ids)
    ids[rows[i].completion_mask.index(0)] += 1
    rows[i] = dataclasses.replace(rows[i], completion_ids=ids)
    context.env_replay = env_replay
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check == "env_replay" and "env_turn_edited" in verdict.reason, verdict.reason


def test_a_row_whose_replay_differs_is_rejected_by_name(world, context, tmp_path):  # noqa: F811
    rows = as_multi_turn(world, honest_rows(world))

    def replay(row):
        raise ReplayMismatch("env_turn_edited", "the environment turn after model turn 1 differs")

    context.env_replay = replay
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check == "env_replay" and "env_turn_edited" in verdict.reason


def test_proofs_over_env_tokens_do_not_verify(world, context, tmp_path):  # noqa: F811
    # A worker claiming environment positions as model output must prove them too; proofs that cover
    # the whole completion do not match the model-token count once the mask says otherwise.
    honest = honest_rows(world)
    rows = [
        dataclasses.replace(m, proofs=h.proofs)
        for m, h in zip(as_multi_turn(world, honest), honest, strict=True)
    ]
    context.env_replay = lambda row: 1.0
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check in {"schema_and_signature", "toploc"}, verdict.reason
