"""One malicious worker per attack class, each rejected by the check that should catch it; honest files pass."""

import dataclasses

import pytest
import torch
from integration.spine.spine_helpers import tiny_config

from swarmrl.configs.engine import TorchEngineConfig
from swarmrl.configs.validator import ValidatorConfig
from swarmrl.generation.batch import generate_batch
from swarmrl.identity import Identity
from swarmrl.inference.engine import SamplingParams
from swarmrl.inference.prefill import prefill
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.launch.prepare import prepare_run
from swarmrl.models import Vocabulary, build_tiny_model, load_model, load_tokenizer
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts import RolloutHeader, RolloutLimits, write_rollouts
from swarmrl.rollouts.assignment import BatchSpec, assigned_prompts, batch_seed
from swarmrl.tasks.registry import build_tasks
from swarmrl.toploc import build_proofs_batch
from swarmrl.validator.rollout_checks import SeenFiles, ValidationContext, validate_file

NODE = Identity.from_seed(b"\x21" * 32)
MODEL_MISMATCH = {"toploc", "seeded_sampling", "logprobs"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("validator")
    config = tiny_config(root, "v", "sft.steps=80", "contract.async_level=1", "contract.prompts_per_batch=4")
    rundir = prepare_run(config)
    start = rundir.checkpoints / "step_0"
    tokenizer, model = load_tokenizer(start), load_model(start)
    return config, tokenizer, model, build_tasks(config.tasks), root


@pytest.fixture()
def context(world, tmp_path):
    config, tokenizer, model, tasks, _ = world
    return ValidationContext(
        config=config,
        settings=ValidatorConfig(),
        tasks=tasks,
        tokenizer=tokenizer,
        policy=lambda step: model,
        task_seed=lambda node, step, batch: batch_seed(config.run.id, node, step, batch),
        seen=SeenFiles(tmp_path / "seen.sqlite"),
        limits=RolloutLimits(
            max_completion_tokens=config.contract.max_new_tokens, vocab_size=model.config.vocab_size
        ),
    )


def honest_rows(world, *, step=0, batch=0, model=None, temperature=None, assigned_batch=None):
    config, tokenizer, policy, tasks, _ = world
    contract = config.contract
    spec = BatchSpec.local(
        config.run.id,
        NODE.node_id,
        step,
        batch if assigned_batch is None else assigned_batch,
        contract.prompts_per_batch,
        contract.group_size,
        contract.seed,
    )
    prompts = assigned_prompts(spec, tasks, prompt_format(tokenizer, config.prompt), config.tasks)
    params = SamplingParams(
        max_new_tokens=contract.max_new_tokens, temperature=temperature or contract.temperature
    )
    return generate_batch(TorchEngine(model or policy, policy_step=0), spec, prompts, params)


def submit(world, tmp_path, rows, *, batch=0, policy_step=0, name="f.parquet"):
    header = RolloutHeader(world[0].run.id, NODE.node_id, policy_step, batch)
    rows = [dataclasses.replace(r, policy_step=policy_step) for r in rows]
    return write_rollouts(tmp_path / name, header, rows, NODE)


def reprove(world, rows):
    """What a careful cheater does after editing tokens: real-model proofs and logprobs for the new tokens."""
    config, tokenizer, model, _, _ = world
    results = prefill(
        model,
        [r.prompt_ids for r in rows],
        [r.completion_ids for r in rows],
        temperature=config.contract.temperature,
    )
    proofs = build_proofs_batch([res.hidden_states for res in results])
    return [
        dataclasses.replace(r, proofs=p, logprobs=res.logprobs.tolist())
        for r, p, res in zip(rows, proofs, results, strict=True)
    ]


def test_honest_file_is_accepted_with_trusted_rewards(world, context, tmp_path):
    verdict = validate_file(submit(world, tmp_path, honest_rows(world)), 0, context, node_id=NODE.node_id)
    assert verdict.accepted, verdict.reason
    assert len(verdict.scored_rows) == 4 * world[0].contract.group_size


def same_vocabulary(world) -> Vocabulary:
    tokenizer, model = world[1], world[2]
    return Vocabulary(
        model.config.vocab_size, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    )


def test_different_model(world, context, tmp_path):
    config = world[0]
    other = build_tiny_model(config.model.tiny.model_copy(update={"seed": 99}), same_vocabulary(world))
    verdict = validate_file(submit(world, tmp_path, honest_rows(world, model=other)), 0, context)
    assert verdict.failed_check == "toploc", verdict.reason


def test_int8_quantised_weights(world, context, tmp_path):
    # Weight-only int8 (per output row, symmetric): what a worker saving memory and time would run.
    quantised = load_model(world[4] / "v" / "checkpoints" / "step_0")
    with torch.no_grad():
        for module in quantised.modules():
            if isinstance(module, torch.nn.Linear):
                scale = module.weight.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127
                module.weight.copy_((module.weight / scale).round().clamp(-127, 127) * scale)
    verdict = validate_file(submit(world, tmp_path, honest_rows(world, model=quantised)), 0, context)
    assert verdict.failed_check in MODEL_MISMATCH, verdict.reason


def test_cheap_model_tokens_with_real_proofs(world, context, tmp_path):
    config, tokenizer = world[0], world[1]
    cheap = build_tiny_model(
        config.model.tiny.model_copy(update={"seed": 7, "num_layers": 1}), same_vocabulary(world)
    )
    rows = reprove(world, honest_rows(world, model=cheap))
    rows = [
        dataclasses.replace(
            r, finish_reason="eos" if r.completion_ids[-1] == tokenizer.eos_token_id else "length"
        )
        for r in rows
    ]
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check == "seeded_sampling", verdict.reason  # its tokens are not the seeded picks


def test_altered_prompt(world, context, tmp_path):
    rows = honest_rows(world)
    rows[3] = dataclasses.replace(rows[3], prompt_ids=rows[3].prompt_ids[:-1] + [rows[3].prompt_ids[-1] + 1])
    verdict = validate_file(submit(world, tmp_path, reprove(world, rows)), 0, context)
    assert verdict.failed_check == "assigned_prompts", verdict.reason


def test_forged_reward_changes_nothing(world, context, tmp_path):
    rows = honest_rows(world)
    forged = validate_file(
        submit(world, tmp_path, [dataclasses.replace(r, claimed_reward=1.0) for r in rows]), 0, context
    )
    # The same rows without the claim, judged by a validator that has not seen the forged file.
    fresh = dataclasses.replace(context, seen=SeenFiles(tmp_path / "seen-honest.sqlite"))
    honest = validate_file(submit(world, tmp_path, rows, name="h.parquet"), 0, fresh)
    assert forged.accepted and honest.accepted
    trusted = [r.reward for r in honest.scored_rows]
    assert any(reward != 1.0 for reward in trusted), "the forged claim must differ from some trusted reward"
    assert [r.reward for r in forged.scored_rows] == trusted
    assert all(r.reward == r.task_reward + r.length_term for r in forged.scored_rows)


def test_replayed_and_duplicated_files(world, context, tmp_path):
    path = submit(world, tmp_path, honest_rows(world))
    assert validate_file(path, 0, context).accepted
    replay = validate_file(path, 0, context)
    assert replay.failed_check == "duplicate" and "same file" in replay.reason
    again = submit(
        world,
        tmp_path,
        [dataclasses.replace(r, claimed_reward=0.5) for r in honest_rows(world)],
        name="g.parquet",
    )
    assert validate_file(again, 0, context).failed_check == "duplicate"


def test_policy_older_than_the_async_window(world, context, tmp_path):
    verdict = validate_file(submit(world, tmp_path, honest_rows(world, step=3), policy_step=0), 3, context)
    assert verdict.failed_check == "async_window", verdict.reason


def test_prompts_not_the_assigned_ones(world, context, tmp_path):
    rows = honest_rows(world, assigned_batch=7)  # answers the prompts of another batch, claims batch 0
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check == "assigned_prompts", verdict.reason


def test_wrong_temperature(world, context, tmp_path):
    verdict = validate_file(submit(world, tmp_path, honest_rows(world, temperature=0.5)), 0, context)
    assert verdict.failed_check == "sampling_params", verdict.reason


def test_early_eos_forced(world, context, tmp_path):
    eos = world[1].eos_token_id
    rows = [
        dataclasses.replace(r, completion_ids=[r.completion_ids[0], eos], finish_reason="eos")
        for r in honest_rows(world)
    ]
    verdict = validate_file(submit(world, tmp_path, reprove(world, rows)), 0, context)
    assert verdict.failed_check == "seeded_sampling", verdict.reason  # the eos is not the seeded pick


def test_two_tokens_swapped(world, context, tmp_path):
    rows = honest_rows(world)
    row = next(
        i
        for i, r in enumerate(rows)
        if len(r.completion_ids) >= 4 and r.completion_ids[0] != r.completion_ids[1]
    )
    ids = list(rows[row].completion_ids)
    ids[0], ids[1] = ids[1], ids[0]
    rows[row] = dataclasses.replace(rows[row], completion_ids=ids)
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check in MODEL_MISMATCH, verdict.reason


def test_sign_flipped_activations(world, context, tmp_path):
    config, _, model, _, _ = world
    rows = honest_rows(world)
    results = prefill(
        model,
        [r.prompt_ids for r in rows],
        [r.completion_ids for r in rows],
        temperature=config.contract.temperature,
    )
    flipped = build_proofs_batch([-res.hidden_states for res in results])
    rows = [dataclasses.replace(r, proofs=p) for r, p in zip(rows, flipped, strict=True)]
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check == "toploc", verdict.reason


def test_file_signed_by_someone_else(world, context, tmp_path):
    verdict = validate_file(submit(world, tmp_path, honest_rows(world)), 0, context, node_id="ab" * 32)
    assert verdict.failed_check == "node"


def test_tokens_outside_the_policy_vocabulary(world, context, tmp_path):
    rows = honest_rows(world)
    rows[0] = dataclasses.replace(
        rows[0], completion_ids=[world[2].config.vocab_size, *rows[0].completion_ids[1:]]
    )
    verdict = validate_file(submit(world, tmp_path, rows), 0, context)
    assert verdict.failed_check == "schema_and_signature" and "outside" in verdict.reason


@pytest.mark.slow
def test_no_false_rejects_over_512_honest_rollouts(world, context, tmp_path):
    """Workers differ in batch size and thread count; the validator runs its own prefill: all accepted."""
    config, tokenizer, model, tasks, _ = world
    contract = config.contract
    params = SamplingParams(max_new_tokens=contract.max_new_tokens, temperature=contract.temperature)
    accepted = 0
    threads_before = torch.get_num_threads()
    try:
        for batch in range(32):
            torch.set_num_threads(1 + batch % 2)
            engine = TorchEngine(
                model, TorchEngineConfig(max_batch_size=(1, 5, 64)[batch % 3]), policy_step=0
            )
            spec = BatchSpec.local(
                config.run.id,
                NODE.node_id,
                0,
                batch,
                contract.prompts_per_batch,
                contract.group_size,
                contract.seed,
            )
            prompts = assigned_prompts(spec, tasks, prompt_format(tokenizer, config.prompt), config.tasks)
            rows = generate_batch(engine, spec, prompts, params)
            torch.set_num_threads(threads_before)
            verdict = validate_file(
                submit(world, tmp_path, rows, batch=batch, name=f"b{batch}.parquet"), 0, context
            )
            assert verdict.accepted, f"batch {batch}: {verdict.failed_check}: {verdict.reason}"
            accepted += len(rows)
    finally:
        torch.set_num_threads(threads_before)
    assert accepted == 512


def test_a_local_runs_proofless_file_is_refused(world, context, tmp_path):
    """A file written the way a local run writes it (`contract.local_proofs` off): no proofs, and the signed
    header says so. A validator refuses it before any compute."""
    rows = [dataclasses.replace(r, proofs=[]) for r in honest_rows(world)]
    header = RolloutHeader(world[0].run.id, NODE.node_id, 0, 0, proofs=False)
    path = write_rollouts(tmp_path / "local.parquet", header, rows, NODE)
    verdict = validate_file(path, 0, context, node_id=NODE.node_id)
    assert verdict.failed_check == "schema_and_signature", verdict.reason
    assert "written without TOPLOC proofs" in verdict.reason
