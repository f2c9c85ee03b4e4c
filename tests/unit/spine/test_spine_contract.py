"""The run's contract: one section, one default per field, a digest that changes with any value, a refusal that
names each differing field with both values, and the old places of its fields refused with their new one."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from swarmrl.configs import ConfigError, RunConfig, load_config, load_run_config
from swarmrl.configs.contract import MOVED_FIELDS, ContractMismatch, ContractSection
from swarmrl.coordinator.errors import ConflictError
from swarmrl.coordinator.rules.contract import require_contract
from swarmrl.coordinator.store.db import Run

SRC = Path(__file__).resolve().parents[3] / "src" / "swarmrl"
# Names that mean the run's contract wherever they appear (temperature, top_p, max_new_tokens and seed also name an
# engine's neutral sampling defaults and other sections' own seeds).
CONTRACT_ONLY = {"async_level", "prompts_per_batch", "group_size", "local_proofs"}
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


def _defaults(path: Path) -> list[str]:
    """`file:line name` for every parameter or annotated attribute named in CONTRACT_ONLY given a default."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            positional = node.args.posonlyargs + node.args.args
            defaulted = positional[len(positional) - len(node.args.defaults) :]
            pairs = zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)
            defaulted += [arg for arg, default in pairs if default is not None]
            found += [f"{path}:{node.lineno} {arg.arg}" for arg in defaulted if arg.arg in CONTRACT_ONLY]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            if node.target.id in CONTRACT_ONLY and "mapped_column" not in ast.unparse(node.value):
                found.append(f"{path}:{node.lineno} {node.target.id}")
    return found


def test_no_module_but_the_contract_gives_its_fields_a_default():
    """The five copies of `async_level = 2` (and the others like them) stay gone: one default, in the section."""
    own = SRC / "configs" / "contract.py"
    copies = [hit for path in SRC.rglob("*.py") if path != own for hit in _defaults(path)]
    assert copies == []


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


def test_the_coordinator_refuses_another_digest_and_a_run_without_a_contract():
    contract = ContractSection()
    run = Run(run_id="r", contract=contract.model_dump(mode="json"))
    require_contract(run, contract.sha256())
    with pytest.raises(ConflictError) as refused:
        require_contract(run, ContractSection(seed=1).sha256())
    assert refused.value.kind == "contract_mismatch"
    with pytest.raises(ConflictError) as refused:
        require_contract(Run(run_id="old", contract=None), contract.sha256())
    assert refused.value.kind == "no_contract" and "admin create-run --config" in refused.value.detail
