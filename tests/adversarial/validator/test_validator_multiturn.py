"""Multi-turn rows at the validator: environment tokens are context (no proofs, no logprob check, no loss),
every row is replayed by the run's environment, and a run without one refuses multi-turn rows."""

import dataclasses

import torch
from adversarial.validator.test_validator_attacks import context, honest_rows, submit, world  # noqa: F401

from swarmrl.envs import ReplayMismatch
from swarmrl.inference.prefill import prefill
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


def test_multi_turn_rows_are_refused_by_a_run_without_an_environment(world, context, tmp_path):  # noqa: F811
    rows = as_multi_turn(world, honest_rows(world))
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check == "env_replay", verdict.reason


def test_replayed_rows_are_accepted_with_the_replays_reward(world, context, tmp_path):  # noqa: F811
    rows = as_multi_turn(world, honest_rows(world))
    seen = []
    context.env_replay = lambda row: seen.append(row.completion_mask) or 0.75
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.accepted, verdict.reason
    assert len(seen) == len(rows) and any(m[:3] == [1, 0, 0] for m in seen)
    assert {r.task_reward for r in verdict.scored_rows} == {0.75}
    assert {r.length_term for r in verdict.scored_rows} == {0.0}


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
