"""A worker node and a validator register the device they run on; the coordinator's node info, the run summary
and `swarmrl status` show it. A GPU the machine lacks is refused before the node registers at all. A worker
asks for work only once it holds a policy. A worker or validator whose [contract] is not the run's is refused
when it starts, with the fields that differ and both values named."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import pytest
import torch
from polling import wait_for

from swarmrl.configs import load_config
from swarmrl.configs.contract import ContractMismatch
from swarmrl.coordinator.client import AdminClient
from swarmrl.coordinator.server.app import create_app
from swarmrl.coordinator.status import summary_view
from swarmrl.devices import DeviceUnavailable
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl.validator.node import ValidatorOptions, ValidatorStopped, run_validator_node
from swarmrl.worker.feed import NodeOptions
from swarmrl.worker.node import run_node
from swarmrl_lab.coordinator_double import serve_in_thread

REPO = Path(__file__).resolve().parents[3]
ADMIN = "admin-secret"
RUN = "devices"


@pytest.fixture
def coordinator(tmp_path):
    """A coordinator on the real clock (the nodes sign with it) with one open run and one admitted validator."""
    app = create_app(db_url=f"sqlite:///{tmp_path / 'c.db'}", storage=tmp_path / "store", admin_token=ADMIN)
    server = serve_in_thread(app)
    admin = AdminClient.at(server.url, admin_token=ADMIN, retry=NO_RETRY)
    validator_key = tmp_path / "validator.pem"
    admin.create_run(RUN, Identity.generate().node_id, node_config().contract)  # the nodes' own
    admin.add_validator(RUN, Identity.load_or_create(validator_key).node_id)
    try:
        yield server.url, admin, validator_key
    finally:
        admin.close()
        server.stop()
        app.state.engine.dispose()


def node_config(*overrides: str):
    return load_config(REPO / "configs" / "demo.toml", [f"run.run_id='{RUN}'", *overrides])


def stopped_node(url: str, tmp_path: Path, name: str) -> NodeOptions:
    """Options of a node asked to stop before its first lease: it registers, joins and leaves its loop."""
    options = NodeOptions(url, RUN, tmp_path / f"{name}.pem", [url], tmp_path / name)
    options.stop.set()
    return options


def test_a_worker_node_registers_its_configured_device(coordinator, tmp_path):
    url, admin, _ = coordinator
    options = stopped_node(url, tmp_path, "worker")
    assert run_node(node_config("worker.device='cpu'", "worker.torch_threads=2"), options) == 0
    node_id = Identity.load(options.key).node_id

    assert admin.reads.node(node_id).hardware == {"device": "cpu", "torch_threads": 2}
    summary = admin.reads.summary(RUN)
    [row] = [n for n in summary.nodes if n.node_id == node_id]
    assert (row.role, row.device) == ("worker", "cpu")
    table = summary_view(summary, url).renderables[1]
    device_column = next(c for c in table.columns if c.header == "device")
    assert list(device_column.cells) == ["cpu"]


def test_auto_resolves_to_the_device_the_machine_has(coordinator, tmp_path):
    url, admin, _ = coordinator
    options = stopped_node(url, tmp_path, "worker")
    run_node(node_config("worker.device='auto'"), options)
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert admin.reads.node(Identity.load(options.key).node_id).hardware["device"] == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_worker_asking_for_a_missing_gpu_never_registers(coordinator, tmp_path):
    url, admin, _ = coordinator
    options = stopped_node(url, tmp_path, "worker")
    with pytest.raises(DeviceUnavailable, match="cuda:0"):
        run_node(node_config("worker.device='cuda'"), options)
    # Refused before it made its identity, let alone registered or joined.
    assert not options.key.exists()
    assert admin.reads.summary(RUN).nodes_total == 0


def test_a_validator_registers_its_device_and_the_summary_shows_it(coordinator, tmp_path):
    url, admin, validator_key = coordinator
    # No checkpoint has been announced, so a validator asked to stop gives up before judging anything; by
    # then it has registered. Its "relay" is the coordinator, which announces no version.
    options = ValidatorOptions(url, RUN, validator_key, [url], tmp_path / "validator", device="cpu")
    options.stop.set()
    with pytest.raises(ValidatorStopped):
        run_validator_node(node_config(), options)
    node_id = Identity.load(validator_key).node_id

    assert admin.reads.node(node_id).hardware["device"] == "cpu"
    [validator] = admin.reads.summary(RUN).backlog.validators
    assert (validator.node_id, validator.device) == (node_id, "cpu")


def test_a_worker_with_another_contract_is_refused_at_join(coordinator, tmp_path):
    url, admin, _ = coordinator
    options = stopped_node(url, tmp_path, "worker")
    with pytest.raises(ContractMismatch, match="contract.async_level is 8 here, 2 in the run"):
        run_node(node_config("contract.async_level=8"), options)
    assert admin.reads.nodes(RUN) == []  # registered, never a member: it leases nothing


def test_a_validator_with_another_contract_is_refused_before_it_judges(coordinator, tmp_path):
    url, admin, validator_key = coordinator
    options = ValidatorOptions(url, RUN, validator_key, [url], tmp_path / "validator", device="cpu")
    options.stop.set()  # were it let through, it would stop before judging (ValidatorStopped)
    with pytest.raises(ContractMismatch, match="contract.temperature is 0.7 here, 1.0 in the run"):
        run_validator_node(node_config("contract.temperature=0.7"), options)


@pytest.mark.slow
def test_a_worker_leases_no_unit_before_it_holds_a_policy(coordinator, tmp_path):
    """A lease's deadline runs from the lease: a node that leased before its first download and engine build
    (minutes on a slow link) lost that unit to the deadline, its work refused at submission (issue 35)."""
    url, admin, _ = coordinator
    relay = socket.create_server(("127.0.0.1", 0))  # hangs up on every request: no policy to fetch
    asked: list[int] = []

    def hang_up() -> None:
        with contextlib.suppress(OSError):
            while True:
                relay.accept()[0].close()
                asked.append(1)

    threading.Thread(target=hang_up, daemon=True).start()
    relay_url = f"http://127.0.0.1:{relay.getsockname()[1]}"
    options = NodeOptions(url, RUN, tmp_path / "worker.pem", [relay_url], tmp_path / "worker")
    node = threading.Thread(target=run_node, args=(node_config(), options), daemon=True)
    node.start()
    try:
        # The policy feed starts beside the join: either may come first.
        wait_for(lambda: asked, 60, "the worker to ask its relay for a policy")
        wait_for(lambda: admin.reads.summary(RUN).nodes_total == 1, 60, "the worker to register and join")
        assert admin.reads.units(RUN) == []  # ... and, before it holds a policy, leased nothing
    finally:
        options.stop.set()
        node.join(timeout=30)
        relay.close()
    assert not node.is_alive()
