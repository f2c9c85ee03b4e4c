import shutil

import pytest
import torch

from swarmrl.launch.prepare import prepare_run

from .spine_helpers import pregenerate, tiny_config

STEPS = 6


@pytest.fixture(scope="session")
def pregenerated_run(tmp_path_factory, shared_sft):
    """A prepared run (SFT'd tiny policy) with rollouts for 4 steps, to copy into each test's own run dir."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("spine")
    config = tiny_config(
        root,
        "template",
        f"trainer.steps={STEPS}",
        "contract.async_level=8",
        "trainer.prompts_per_step=4",
        "trainer.max_wait_seconds=10",
        "trainer.optimizer_steps_per_policy_step=1",
        "loss.normalisation='constant'",
    )
    shared_sft(config)
    prepare_run(config)
    pregenerate(config, STEPS, batches=4)
    return config


@pytest.fixture()
def run_copy(pregenerated_run, tmp_path):
    """Copies of the template run: (config, make(name) -> config of a fresh copy under tmp_path)."""

    def make(name: str):
        config = pregenerated_run.model_copy(deep=True)
        config.run.root = tmp_path
        config.run.name = name
        shutil.copytree(pregenerated_run.run.directory, config.run.directory)
        (config.run.directory / "config.json").write_text(config.model_dump_json(indent=2))
        return config

    return make
