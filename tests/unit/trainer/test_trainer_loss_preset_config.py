"""Loss presets and optional metrics sinks, reached from a run's TOML file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from swarmrl.configs import ConfigError, RunConfig, load_config
from swarmrl.configs import metrics as config_module
from swarmrl.configs.loss import CISPOClip, GSPOClip, TwoSidedClip, loss_preset
from swarmrl.launch.demo import run_demo


def _load(tmp_path: Path, text: str, overrides: list[str] | None = None) -> RunConfig:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return load_config(path, overrides)


def test_a_preset_in_toml_is_the_published_recipe(tmp_path):
    config = _load(tmp_path, '[loss]\npreset = "gspo"\n')
    assert isinstance(config.loss.objective, GSPOClip)
    assert config.loss.normalisation == "sequence"
    expected = loss_preset("gspo", max_tokens=config.contract.max_new_tokens)
    assert config.loss.model_dump(exclude={"preset"}) == expected.model_dump(exclude={"preset"})


def test_fields_beside_a_preset_override_it_and_tables_merge_key_by_key(tmp_path):
    config = _load(
        tmp_path, '[loss]\npreset = "dr_grpo"\nnormalisation = "token"\n[loss.objective]\nepsilon_low = 0.1\n'
    )
    assert config.loss.normalisation == "token"
    assert isinstance(config.loss.objective, TwoSidedClip)
    assert config.loss.objective.epsilon_low == 0.1 and math.isinf(config.loss.objective.delta)


def test_a_table_of_another_kind_replaces_the_presets(tmp_path):
    config = _load(tmp_path, '[loss]\npreset = "dr_grpo"\n', ['loss.objective.kind="cispo"'])
    assert isinstance(config.loss.objective, CISPOClip)


def test_the_resolved_config_reloads_to_the_same_loss(tmp_path):
    config = _load(tmp_path, '[loss]\npreset = "dapo_clip_higher"\nentropy_coef = 0.001\n')
    again = RunConfig.model_validate_json(config.dump_json())
    assert again.loss == config.loss and again.loss.preset == "dapo_clip_higher"


def test_an_unknown_preset_is_a_config_error_naming_the_choices(tmp_path):
    with pytest.raises(ConfigError, match="unknown loss preset 'grpo_plus'.*dr_grpo"):
        _load(tmp_path, '[loss]\npreset = "grpo_plus"\n')


def test_a_missing_metrics_package_stops_the_demo_before_any_work(tmp_path, monkeypatch):
    real = config_module.find_spec
    monkeypatch.setattr(config_module, "find_spec", lambda name: None if name == "wandb" else real(name))
    config = _load(tmp_path, '[metrics]\nwandb_project = "p"\n', [f'run.root="{tmp_path}/runs"'])
    with pytest.raises(ConfigError, match=r"\[metrics\] asks for wandb, which is not installed"):
        run_demo(config)
    assert not (tmp_path / "runs").exists()
    config.metrics.wandb_project = None
    config.metrics.check_installed()  # nothing asked for: nothing to check
