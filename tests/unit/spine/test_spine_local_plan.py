"""The local layout: `worker.num_workers = "auto"` (a worker per CPU core but the trainer's, one for GPU workers),
`trainer.generate_while_waiting = "auto"` (the trainer generates whenever it would wait, on the CPU) and
`trainer.borrow_idle_cores = "auto"` (the trainer trains on the workers' cores while they wait, on the CPU)."""

from pathlib import Path

import pytest

from swarmrl.configs import ConfigError, load_config
from swarmrl.layout import available_cores, borrowed_cores, local_workers, trainer_generates

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.toml"


def config(*overrides: str):
    # trainer.device 'cpu' rather than the demo's 'auto', so a GPU machine runs the same cases
    return load_config(DEMO, ["trainer.device='cpu'", *overrides])


def test_auto_leaves_the_trainer_a_core():
    assert config().worker.num_workers == "auto"  # what `make demo` runs
    assert local_workers(config(), cores=2) == 1
    assert local_workers(config(), cores=8) == 7
    assert local_workers(config(), cores=1) == 0  # the trainer generates alone
    assert local_workers(config("trainer.generate_while_waiting=false"), cores=1) == 1
    assert local_workers(config("worker.num_workers=3"), cores=2) == 3
    assert local_workers(config("trainer.colocate=true"), cores=8) == 0


def test_the_trainer_generates_while_waiting_in_local_cpu_runs_only():
    assert trainer_generates(config())  # trainer and workers on the CPU
    assert not trainer_generates(config(), distributed=True)
    assert not trainer_generates(config("worker.device='cuda'"))
    assert not trainer_generates(config("trainer.lora.enabled=true"))
    assert not trainer_generates(config("trainer.generate_while_waiting=false"))
    assert trainer_generates(config("trainer.colocate=true", "trainer.generate_while_waiting=false"))


def test_the_trainer_borrows_the_run_s_cores_in_local_cpu_runs_only():
    cores = len(available_cores())
    assert borrowed_cores(config()) == cores
    assert borrowed_cores(config(), distributed=True) == 1
    assert borrowed_cores(config("worker.device='cuda'")) == 1
    assert borrowed_cores(config("trainer.borrow_idle_cores=false")) == 1
    assert borrowed_cores(config("trainer.colocate=true")) == 1  # no worker to borrow from
    assert borrowed_cores(config("worker.device='cuda'", "trainer.borrow_idle_cores=true")) == cores


def test_gpu_workers_are_one():
    assert local_workers(config("worker.device='cuda'"), cores=16) == 1


@pytest.mark.parametrize("value", ["0", "'many'"])
def test_a_bad_worker_count_is_refused(value):
    with pytest.raises(ConfigError, match="num_workers"):
        config(f"worker.num_workers={value}")
