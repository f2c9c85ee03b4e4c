"""Multi-turn rows at the validator: environment tokens are context (no proofs, no logprob check, no loss),
every row is replayed by the run's environment, and a run without one refuses multi-turn rows."""

import dataclasses
import hashlib
import time

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
        temperature=config.contract.temperature,
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
    # Honest engine rows, so every check on the model's tokens passes and the refusal is the replay's.
    rows, _ = engine_multi_turn_rows(world)
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check == "env_replay" and "no environment" in verdict.reason, verdict.reason


class Again:
    """Answers every model turn with "?" until the turn limit: a text environment to replay."""

    def reset(self, task, seed):
        return task.task_id

    def step(self, model_turn):
        return EnvStep("?", 0.25, False)


class Liar(Again):
    """A worker's forged environment: every turn answers "!" where the real one answers "?"."""

    def step(self, model_turn):
        return EnvStep("!", 0.25, False)


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


def engine_multi_turn_rows(kit, env=Again, replayed=Again):
    """Multi-turn rows from the worker's batch function: assigned prompts, two turns, per-turn seeds, the
    environment turns from `env` (the real one, `Again`, unless a forger's); and the validator's replay of the
    real environment (`replayed`: `Again` or a subclass that watches it)."""
    config, tokenizer, model, tasks, _ = kit
    contract = config.contract
    spec = BatchSpec.local(
        config.run.id, NODE.node_id, 0, 0, contract.prompts_per_batch, contract.group_size, contract.seed
    )
    fmt = prompt_format(tokenizer, config.prompt)
    prompts = assigned_prompts(spec, tasks, fmt, config.tasks)
    codec = RowCodec(tokenizer, {p.task.task_id: p.prompt_ids for p in prompts}, fmt.stop_token_ids)
    params = SamplingParams(max_new_tokens=contract.max_new_tokens, temperature=contract.temperature)
    limits = EnvLimits(max_turns=2, max_tokens=contract.max_new_tokens)
    rows = generate_env_batch(TorchEngine(model, policy_step=0), spec, prompts, params, env, codec, limits)
    assert any(0 in r.completion_mask for r in rows)

    def env_replay(row):
        task = tasks[row.prompt_index]
        return replay(
            replayed(),
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
    # An edited tool output under proofs of the unedited context is caught by the proofs already; here the
    # forger generated honestly on top of its own forged environment turns, so only the replay can tell.
    rows, env_replay = engine_multi_turn_rows(world, env=Liar)
    assert any(0 in r.completion_mask for r in rows)
    context.env_replay = env_replay
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check == "env_replay" and "env_turn_edited" in verdict.reason, verdict.reason


def test_a_row_whose_replay_differs_is_rejected_by_name(world, context, tmp_path):  # noqa: F811
    rows, _ = engine_multi_turn_rows(world)

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
    assert verdict.failed_check == "toploc", verdict.reason


class Counted(Again):
    """The real environment, counting its tool runs (one per model turn it answers)."""

    runs = 0

    def step(self, model_turn):
        Counted.runs += 1
        return super().step(model_turn)


def counted_replay(kit):
    """Honest multi-turn rows, and the validator's replay through `Counted`, so the test sees every tool run."""
    Counted.runs = 0
    return engine_multi_turn_rows(kit, replayed=Counted)


def test_a_forged_multi_turn_file_is_rejected_before_any_tool_runs(world, context, tmp_path):  # noqa: F811
    # The forger edits a tool output and keeps the proofs of the real context: the model checks, which all
    # run before the replay, turn the file away without a single tool run.
    rows, env_replay = counted_replay(world)
    i = next(k for k, r in enumerate(rows) if 0 in r.completion_mask)
    ids = list(rows[i].completion_ids)
    ids[rows[i].completion_mask.index(0)] += 1
    rows[i] = dataclasses.replace(rows[i], completion_ids=ids)
    context.env_replay = env_replay
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check in {"toploc", "logprobs", "seeded_sampling"}, verdict.reason
    assert Counted.runs == 0
    assert "env_replay" not in verdict.passed


def test_the_replay_runs_only_after_every_model_check(world, context, tmp_path):  # noqa: F811
    rows, env_replay = counted_replay(world)
    context.env_replay = env_replay
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.accepted, verdict.reason
    assert Counted.runs > 0
    passed = verdict.passed
    assert passed.index("env_replay") > max(passed.index(c) for c in ("prefill", "toploc", "seeded_sampling"))


def test_a_file_over_its_time_budget_is_rejected_by_name(world, context, tmp_path):  # noqa: F811
    context.settings = context.settings.model_copy(update={"max_file_seconds": 1e-6})
    verdict = validate_file(submit(world, tmp_path, honest_rows(world)), 0, context)
    assert verdict.failed_check == "time_budget" and "budget" in verdict.reason, verdict.reason
    assert verdict.passed == ["schema_and_signature"]


def test_a_slow_replay_is_cut_at_the_budget(world, context, tmp_path):  # noqa: F811
    rows, fast = engine_multi_turn_rows(world)
    path = submit(world, tmp_path, rows)
    context.env_replay = fast
    started = time.monotonic()
    assert validate_file(path, 0, context).accepted
    model_checks = time.monotonic() - started
    context.seen.forget(hashlib.sha256(path.read_bytes()).hexdigest())

    replays = []

    def slow(row):
        replays.append(row)
        time.sleep(0.5)
        return fast(row)

    # Room for the model checks (timed above) and about two rows of a replay that needs one per row.
    budget = 2 * model_checks + 1.0
    assert len(rows) * 0.5 > 3 * budget, "the replay must need far more than the budget"
    context.env_replay = slow
    context.settings = context.settings.model_copy(update={"max_file_seconds": budget})
    started = time.monotonic()
    verdict = validate_file(path, 0, context)
    elapsed = time.monotonic() - started
    assert verdict.failed_check == "time_budget" and "still replaying" in verdict.reason, verdict.reason
    assert "seeded_sampling" in verdict.passed and len(replays) < len(rows)
    assert elapsed < budget + 1.0  # the row in flight finishes (0.5 s), nothing more
