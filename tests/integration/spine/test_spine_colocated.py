"""One GPU, both roles (`trainer.colocate`): the trainer's process generates its own rollouts with an engine that
gets every policy in place from the trainer and never reads a checkpoint.

On CPU with a tiny SFT'd model: a 3-step run killed after step 2 and resumed; with async_level 0 every step
must be generated with exactly its own policy, which only holds if every push reached the engine.
"""

from __future__ import annotations

import json

import pytest
import torch

from swarmrl.configs import ConfigError
from swarmrl.inference.live_weights import LiveWeights
from swarmrl.launch.prepare import prepare_run
from swarmrl.models import load_model
from swarmrl.rollouts import RolloutLimits, read_rollouts
from swarmrl.rundir import RunDir
from swarmrl.steps import checkpoint_dir, list_checkpoints
from swarmrl.trainer import role as roles
from swarmrl.trainer import train

from .spine_helpers import tiny_config

STEPS = 3


# On a GPU the trainer and the paged engine (flex attention, CUDA graphs) share it, the engine in bf16 with
# half the device; elsewhere both run on the CPU in fp32.
_ON_CUDA = [
    "model.dtype='bfloat16'",
    "trainer.precision='bf16'",
    "engine.gpu_memory_fraction=0.5",
]


@pytest.fixture(
    scope="module",
    params=[
        "default",
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
            ],
        ),
    ],
)
def colocated_config(request, tmp_path_factory, shared_sft):
    torch.set_num_threads(1)
    config = tiny_config(
        tmp_path_factory.mktemp("colocated"),
        "colocated",
        *(_ON_CUDA if request.param == "cuda" else []),
        "trainer.colocate=true",
        f"trainer.steps={STEPS}",
        "trainer.prompts_per_step=4",
        "trainer.optimizer_steps_per_policy_step=1",
        "trainer.keep_checkpoints=1",
        "trainer.max_files_per_step=40",
        "contract.async_level=0",
        "engine.kind='paged'",
    )
    shared_sft(config)
    prepare_run(config)
    return config


def test_a_colocated_run_trains_resumes_and_never_reads_a_checkpoint_into_its_engine(
    colocated_config, monkeypatch
):
    config, rundir = colocated_config, RunDir(colocated_config.run.directory)
    pushes: list[int] = []
    engines: list[LiveWeights] = []
    trainer_loads: list[str] = []
    update_weights, load_model_for_trainer = LiveWeights.update_weights, train.load_model

    def spy_update(self, weights, step):
        pushes.append(step)
        engines.append(self)
        return update_weights(self, weights, step)

    def refuse(*args, **kwargs):
        raise AssertionError("the colocated engine read a checkpoint")

    def spy_trainer_load(path, *args):
        trainer_loads.append(str(path))
        return load_model_for_trainer(path, *args)

    monkeypatch.setattr(LiveWeights, "update_weights", spy_update)
    monkeypatch.setattr(LiveWeights, "load_weights", refuse)
    monkeypatch.setattr("swarmrl.models.checkpoint.read_checkpoint", refuse)
    monkeypatch.setattr("swarmrl.worker.local.engine_model", refuse)
    monkeypatch.setattr(train, "load_model", spy_trainer_load)

    assert roles.trainer_role(rundir.root, stop_after_steps=2) == 2
    assert engines[0].model.device == train.train_device(config.trainer.device)  # the trainer's device
    assert pushes == [0, 1, 2]
    assert roles.trainer_role(rundir.root) == STEPS
    # The resumed trainer hands its engine the policy it resumed from before generating anything.
    assert pushes == [0, 1, 2, 2, 3]
    assert trainer_loads == [str(checkpoint_dir(rundir.checkpoints, s)) for s in (0, 2)]  # the trainer's own

    records = rundir.read_metrics()
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(r["policy_lag"] == 0 and r["refused_files"] == 0 and r["stale_rows"] == 0 for r in records)
    # A local run's files carry no TOPLOC proofs (no validator reads them) and say so.
    limits = RolloutLimits.for_contract(config.contract, 10**6).model_copy(update={"require_proofs": False})
    for step in range(STEPS):
        assert rundir.is_complete(step)
        files = sorted(rundir.rollouts(step).glob("*.parquet"))
        headers = [read_rollouts(f, limits)[0] for f in files]
        assert headers and all(h.policy_step == step and not h.proofs for h in headers)
        summary = json.loads(rundir.complete_marker(step).read_text())
        assert set(summary["outcomes"].values()) == {"trained"}

    # Checkpoints are still written for resume (keep_checkpoints=1 keeps the newest and step_0), and the
    # engine's last policy is exactly the last checkpoint in the engine's dtype.
    assert list_checkpoints(rundir.checkpoints) == [0, STEPS]
    assert (rundir.trainer_state / f"step_{STEPS}.pt").is_file()
    saved = load_model(checkpoint_dir(rundir.checkpoints, STEPS), config.model.dtype)
    engine = dict(engines[-1].model.named_parameters())
    assert engines[-1].policy_step == STEPS
    for name, param in saved.named_parameters():
        assert torch.equal(engine[name], param), name
    start = load_model(checkpoint_dir(rundir.checkpoints, 0), config.model.dtype)
    assert any(not torch.equal(engine[n], p) for n, p in start.named_parameters())


def test_colocate_refuses_a_swarm_trainer(colocated_config) -> None:
    with pytest.raises(ConfigError, match="colocate is a local run"):
        roles.trainer_role(colocated_config.run.directory, coordinator_url="http://127.0.0.1:9")
