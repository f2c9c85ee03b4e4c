"""The run's contract: one section, one default per field, a digest that changes with any value, a refusal that
names each differing field with both values, and the old places of its fields refused with their new one."""

from __future__ import annotations

import json

import pytest

from swarmrl.configs import ConfigError, RunConfig, load_config, load_run_config
from swarmrl.configs.contract import MOVED_FIELDS, ContractMismatch, ContractSection

CHANGED = {
    "seed": 1,
    "async_level": 3,
    "prompts_per_batch": 4,
    "group_size": 2,
    "max_new_tokens": 32,
    "temperature": 0.7,
    "top_p": 0.9,
    "local_proofs": True,
}


def test_every_contract_field_has_one_definition_and_is_gone_from_its_old_section():
    config = RunConfig()
    assert set(CHANGED) == set(ContractSection.model_fields)  # a new field gets a case here
    for section, names in MOVED_FIELDS.items():
        assert not set(names) & set(type(getattr(config, section)).model_fields), section
    for name, field in ContractSection.model_fields.items():
        assert field.description and not field.is_required(), name


def test_the_digest_is_the_same_for_the_same_contract_and_changes_with_every_field():
    contract = ContractSection()
    assert (
        contract.sha256() == ContractSection.model_validate(json.loads(contract.model_dump_json())).sha256()
    )
    digests = {ContractSection(**{name: value}).sha256() for name, value in CHANGED.items()}
    assert len(digests) == len(CHANGED) and contract.sha256() not in digests


def test_a_toml_config_and_the_run_directorys_json_give_the_same_digest(tmp_path):
    (tmp_path / "run.toml").write_text("[run]\nname = 'r'\n[contract]\ntemperature = 0.5\nasync_level = 0\n")
    written = load_config(tmp_path / "run.toml")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.json").write_text(written.dump_json())
    assert load_run_config(tmp_path / "r").contract.sha256() == written.contract.sha256()


def test_a_mismatch_is_one_line_naming_each_field_and_both_values():
    mine, run = ContractSection(async_level=8, top_p=0.9), ContractSection()
    line = str(ContractMismatch("demo", mine, run))
    assert "\n" not in line
    assert "contract.async_level is 8 here, 2 in the run" in line
    assert "contract.top_p is 0.9 here, 1.0 in the run" in line
    assert "group_size" not in line


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"worker": {"async_level": 3}}, "worker.async_level moved to contract.async_level"),
        (
            {"worker": {"num_workers": 1, "temperature": 0.5}},
            "worker.temperature moved to contract.temperature",
        ),
        ({"run": {"name": "r", "seed": 4}}, "run.seed moved to contract.seed"),
    ],
)
def test_a_contract_field_in_its_old_section_is_refused_with_its_new_place(data, named):
    with pytest.raises(ConfigError, match=named):
        RunConfig.model_validate(data)


def test_an_override_of_an_old_place_is_refused_too():
    with pytest.raises(ConfigError, match="worker.group_size moved to contract.group_size"):
        load_config(None, ["worker.group_size=4"])
    assert load_config(None, ["contract.group_size=4"]).contract.group_size == 4


def test_a_unit_too_large_for_the_coordinator_is_refused_when_the_config_loads():
    with pytest.raises(ConfigError, match="rows in one file"):
        load_config(None, ["contract.prompts_per_batch=2147483647", "contract.group_size=2"])
