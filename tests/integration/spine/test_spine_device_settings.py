"""The `device` setting: spelled right or refused by the config; resolved at startup, a missing GPU refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from swarmrl.cli import app
from swarmrl.configs import ConfigError, load_config
from swarmrl.configs.devices import InvalidDevice, check_device
from swarmrl.devices import DeviceUnavailable, hardware_of, resolve_device

REPO = Path(__file__).resolve().parents[3]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


def test_defaults_keep_workers_on_the_cpu_and_the_trainer_on_its_gpu_when_there_is_one():
    config = load_config()
    assert (config.worker.device, config.trainer.device) == ("cpu", "auto")


@pytest.mark.parametrize("setting", ["auto", "cpu", "cuda", "cuda:0", "cuda:7"])
def test_valid_settings_load(setting):
    config = load_config(None, [f"worker.device='{setting}'", f"trainer.device='{setting}'"])
    assert (config.worker.device, config.trainer.device) == (setting, setting)


@pytest.mark.parametrize("section", ["worker", "trainer"])
@pytest.mark.parametrize("setting", ["tpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "gpu", ""])
def test_a_misspelt_device_is_a_config_error_naming_it(section, setting):
    with pytest.raises(ConfigError, match=f"{section}.device") as info:
        load_config(None, [f"{section}.device='{setting}'"])
    assert repr(setting) in str(info.value)


def test_check_device_raises_its_own_type():
    with pytest.raises(InvalidDevice, match="'mps'"):
        check_device("mps")
    assert issubclass(InvalidDevice, ValueError)


def test_reading_a_config_does_not_need_torch_for_the_device():
    import subprocess
    import sys

    code = "import sys; from swarmrl.configs import load_config; load_config(None, ['worker.device=\"cuda:3\"']);"
    code += "print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"


def test_cpu_and_auto_without_cuda_resolve_to_the_cpu():
    assert resolve_device("cpu") == torch.device("cpu")
    expected = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    assert resolve_device("auto") == expected


@no_cuda
@pytest.mark.parametrize("setting", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_on_a_machine_without_it_is_unavailable(setting):
    with pytest.raises(DeviceUnavailable, match="no CUDA device visible") as info:
        resolve_device(setting)
    assert repr(setting) in str(info.value)


@no_cuda
def test_a_torchrun_rank_asks_for_its_own_gpu():
    with pytest.raises(DeviceUnavailable, match="cuda:2"):
        resolve_device("cuda", local_rank=2)
    assert resolve_device("auto", local_rank=2) == torch.device("cpu")


def test_hardware_declares_the_device():
    assert hardware_of(torch.device("cpu"), 3) == {"device": "cpu", "torch_threads": 3}


def test_the_cli_refuses_a_misspelt_device_before_starting():
    result = CliRunner().invoke(app, ["worker", "--run-dir", "/nonexistent", "--device", "tpu"])
    assert result.exit_code == 2
    assert "'tpu'" in result.output


@no_cuda
def test_the_validator_cli_refuses_a_missing_gpu_with_a_message(tmp_path):
    result = CliRunner().invoke(app, ["validator", "--run-dir", str(tmp_path), "--once", "--device", "cuda"])
    assert result.exit_code == 2
    assert "no CUDA device visible" in result.output


@no_cuda
@pytest.mark.parametrize("command", ["rl", "demo"])
def test_local_launchers_refuse_a_missing_gpu_before_any_work(tmp_path, command):
    result = CliRunner().invoke(
        app, [command, str(REPO / "configs" / "demo.toml"), f"run.root='{tmp_path}'", "trainer.device='cuda'"]
    )
    assert result.exit_code == 2, result.output
    assert "no CUDA device visible" in result.output
    assert not any(tmp_path.iterdir())  # no run directory, no SFT


def test_a_trainer_under_torchrun_may_not_pin_every_rank_to_one_gpu(monkeypatch):
    from swarmrl.trainer.train import train_device

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(InvalidDevice, match="every torchrun rank"):
        train_device("cuda:0")
    assert train_device("cpu") == torch.device("cpu")
