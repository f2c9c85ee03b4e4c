"""`worker.num_workers = "auto"`: one worker process per CPU core but the trainer's, one for GPU workers."""

from pathlib import Path

import pytest

from swarmrl.configs import ConfigError, load_config
from swarmrl.launch.plan import local_workers

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.toml"


def config(*overrides: str):
    return load_config(DEMO, list(overrides))


def test_auto_leaves_the_trainer_a_core():
    assert config().worker.num_workers == "auto"  # what `make demo` runs
    assert local_workers(config(), cores=2) == 1
    assert local_workers(config(), cores=8) == 7
    assert local_workers(config(), cores=1) == 1
    assert local_workers(config("worker.num_workers=3"), cores=2) == 3


def test_gpu_workers_are_one():
    assert local_workers(config("worker.device='cuda'"), cores=16) == 1


@pytest.mark.parametrize("value", ["0", "'many'"])
def test_a_bad_worker_count_is_refused(value):
    with pytest.raises(ConfigError, match="num_workers"):
        config(f"worker.num_workers={value}")
