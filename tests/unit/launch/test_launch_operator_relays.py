"""The swarm launcher names its own relays as the operator's to its coordinator (issue 57, attack 2): ground keys
that join as relays never push the real ones out of the relays panel, the tree or the nodes table."""

from __future__ import annotations

from swarmrl.configs import load_config
from swarmrl.coordinator.cli import load_config as load_coordinator_config
from swarmrl.identity import Identity
from swarmrl.launch.processes import ProcessGroup
from swarmrl.launch.swarm import Swarm, operator_settings
from swarmrl.rundir import RunDir

OTHER = "ab" * 32


def swarm_of(tmp_path, *overrides: str) -> Swarm:
    config = load_config("configs/demo-swarm.toml", [f"run.root='{tmp_path}'", *overrides])
    return Swarm(config, RunDir(tmp_path / "run"), ProcessGroup(tmp_path / "logs"))


def test_the_swarms_relays_are_the_operators_and_their_keys_are_the_ones_the_relays_load(tmp_path):
    swarm = swarm_of(tmp_path, "swarm.relays=2", "coordinator.lease_target_s=7.5")
    settings = operator_settings(swarm)
    ids = [Identity.load_or_create(swarm.key(f"relay-{i}")).node_id for i in range(2)]
    assert settings.operator_relays == ids and len(set(ids)) == 2
    assert settings.lease_target_s == 7.5  # the rest of the run's [coordinator] kept
    written = tmp_path / "coordinator.json"
    written.write_text(settings.model_dump_json())
    assert load_coordinator_config(written) == settings  # what the coordinator reads back


def test_relays_the_config_names_are_kept(tmp_path):
    swarm = swarm_of(tmp_path, f"coordinator.operator_relays=['{OTHER}']")
    assert operator_settings(swarm).operator_relays == [OTHER]
