"""A local run with [trainer.lora]: the trainer writes adapter checkpoints, a worker generates from the merged
policy, and the validator's TOPLOC check passes on its own merge of the same adapter (and fails on the base);
a stopped LoRA run resumes to the adapters of an uninterrupted one."""

import dataclasses

import pytest
import torch
from safetensors.torch import load_file

from swarmrl.configs.trainer import LoraSection
from swarmrl.launch.prepare import prepare_run
from swarmrl.models import load_model
from swarmrl.models.adapter import ADAPTER_WEIGHTS, is_adapter_checkpoint
from swarmrl.rollouts import read_rollouts
from swarmrl.steps import checkpoint_dir, list_checkpoints
from swarmrl.trainer.role import trainer_role
from swarmrl.validator.rollout_checks import SeenFiles, validate_file
from swarmrl.validator.service import judge_pending, local_context

from .conftest import STEPS
from .spine_helpers import tiny_config, train_beside_a_worker


@pytest.mark.slow
def test_lora_run_publishes_adapters_that_workers_and_validators_merge_alike(tmp_path):
    torch.set_num_threads(1)
    config = tiny_config(
        tmp_path,
        "lora",
        "sft.steps=0",
        "trainer.steps=2",
        "trainer.lr=5e-2",
        "trainer.warmup_steps=0",
        "trainer.lora.enabled=true",
        "trainer.lora.r=4",
        # Step 1's rollouts must come from policy 1: the worker has to merge the first adapter.
        "contract.async_level=0",
        "contract.local_proofs=true",  # validators judge the files below, and they require proofs
    )
    rundir = prepare_run(config)
    assert train_beside_a_worker(rundir, tmp_path / "worker.log") == 2
    checkpoints = rundir.checkpoints
    assert list_checkpoints(checkpoints) == [0, 1, 2]
    assert not is_adapter_checkpoint(checkpoint_dir(checkpoints, 0))
    assert all(is_adapter_checkpoint(checkpoint_dir(checkpoints, step)) for step in (1, 2))
    assert not list(checkpoint_dir(checkpoints, 2).glob("model*.safetensors"))

    step_one = sorted(rundir.rollouts(1).glob("*.parquet"))
    assert step_one, (tmp_path / "worker.log").read_text()[-2000:]
    assert {read_rollouts(p, require_signature=False)[0].policy_step for p in step_one} == {1}

    context = local_context(rundir.root)
    judged = judge_pending(rundir.root / "rollouts", rundir.root / "accepted", context)
    assert judged and all(j.verdict.accepted for j in judged), [
        (j.path.name, j.verdict.failed_check, j.verdict.reason) for j in judged if not j.verdict.accepted
    ]

    # The adapter matters: a validator that forgot to merge it rejects the same file on its proofs.
    base = load_model(checkpoint_dir(checkpoints, 0), config.model.dtype).eval()
    unmerged = dataclasses.replace(
        context, policy=lambda step: base, seen=SeenFiles(tmp_path / "second-validator.sqlite")
    )
    verdict = validate_file(step_one[0], 1, unmerged)
    assert not verdict.accepted and "toploc" in verdict.failed_check, verdict


def test_a_stopped_lora_run_resumes_to_the_same_adapters(run_copy):
    def lora_copy(name: str):
        config = run_copy(name)
        config.trainer.lora = LoraSection(enabled=True, r=4)
        (config.run.directory / "config.json").write_text(config.model_dump_json(indent=2))
        return config

    straight, stopped = lora_copy("straight"), lora_copy("stopped")
    assert trainer_role(straight.run.directory) == STEPS
    assert trainer_role(stopped.run.directory, stop_after_steps=2) == 2
    assert trainer_role(stopped.run.directory) == STEPS

    def final(config):
        return load_file(checkpoint_dir(config.run.directory / "checkpoints", STEPS) / ADAPTER_WEIGHTS)

    want, got = final(straight), final(stopped)
    assert want.keys() == got.keys() and want
    assert all(torch.equal(want[name], got[name]) for name in want)
