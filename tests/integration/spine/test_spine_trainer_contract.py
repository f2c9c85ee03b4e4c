"""A swarm trainer whose run config's [contract] is not the one its run was created with stops before it serves
a checkpoint or opens a step, with the differing field and both values named."""

from __future__ import annotations

import pytest

from swarmrl.configs.contract import ContractMismatch
from swarmrl.coordinator.client import AdminClient
from swarmrl.coordinator.server.app import create_app
from swarmrl.identity import Identity
from swarmrl.rundir import RunDir
from swarmrl.trainer.role import origin_url_file, trainer_role
from swarmrl_lab.coordinator_double import serve_in_thread


def test_a_swarm_trainer_with_another_contract_is_refused_before_it_serves(run_copy, tmp_path):
    config = run_copy("contract")
    key = tmp_path / "trainer.pem"
    trainer = Identity.load_or_create(key)
    app = create_app(db_url=f"sqlite:///{tmp_path / 'c.db'}", storage=tmp_path / "store", admin_token="t")
    server = serve_in_thread(app)
    try:
        with AdminClient.at(server.url, admin_token="t") as admin:
            created_with = config.contract.model_copy(update={"group_size": 2})
            admin.create_run(config.run.id, trainer.node_id, created_with)
            with pytest.raises(ContractMismatch, match="contract.group_size is 4 here, 2 in the run"):
                trainer_role(config.run.directory, coordinator_url=server.url, key=key)
            assert not origin_url_file(RunDir(config.run.directory)).exists()  # no origin was started
            assert admin.reads.run_state(config.run.id).current_step == 0
    finally:
        server.stop()
        app.state.engine.dispose()
