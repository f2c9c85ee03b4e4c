"""`swarmrl admin ...` against a live coordinator: create a run, add a validator, ban and unban, bad token."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmrl.cli import app
from swarmrl.configs import load_config
from swarmrl.coordinator.client import NodeClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.server.app import create_app
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl_lab.coordinator_double import leased_submit, serve_in_thread

TOKEN = "operator-token"


@pytest.fixture
def coordinator(tmp_path):
    server = serve_in_thread(
        create_app(db_url=f"sqlite:///{tmp_path / 'c.db'}", storage=tmp_path / "s", admin_token=TOKEN)
    )
    try:
        yield server.url
    finally:
        server.stop()


def admin(url: str, *args: str, token: str = TOKEN):
    return CliRunner().invoke(app, ["admin", *args, "--coordinator", url], env={"SWARMRL_ADMIN_TOKEN": token})


def run_toml(tmp_path: Path, text: str = "[run]\nname = 'r1'\n") -> str:
    (tmp_path / "run.toml").write_text(text)
    return str(tmp_path / "run.toml")


def test_operator_sets_up_a_run_and_bans_a_node(coordinator, tmp_path):
    trainer = Identity.generate()
    trainer.save(tmp_path / "trainer.pem")
    validator = Identity.generate()
    created = admin(
        coordinator,
        "create-run",
        "--config",
        run_toml(tmp_path),
        "--trainer-key",
        str(tmp_path / "trainer.pem"),
    )
    assert created.exit_code == 0, created.output
    state = json.loads(created.output)
    assert (
        state["trainer_public_key"] == trainer.node_id and state["async_level"] == 2 and state["run_secret"]
    )
    added = admin(coordinator, "add-validator", "--run-id", "r1", "--validator-key", validator.node_id)
    assert added.exit_code == 0, added.output

    worker = NodeClient.at(coordinator, Identity.generate(), retry=NO_RETRY)
    worker.register({})
    assert admin(coordinator, "ban", worker.node_id, "--reason", "forged proofs").exit_code == 0
    assert worker.reads.node(worker.node_id).banned
    assert admin(coordinator, "unban", worker.node_id).exit_code == 0
    assert not worker.reads.node(worker.node_id).banned


def test_a_wrong_token_is_refused_with_a_clear_error(coordinator, tmp_path):
    config = run_toml(tmp_path)
    result = admin(coordinator, "create-run", "--config", config, "--trainer-key", "ab" * 32, token="guess")
    assert result.exit_code == 2  # an expected failure: one line, exit code 2
    assert "admin_token_invalid" in result.output


def test_a_run_is_opened_from_the_run_config_and_a_keygen_key_file(coordinator, tmp_path):
    made = CliRunner().invoke(app, ["keygen", "--out", str(tmp_path / "trainer.pem")])
    trainer_key = made.stdout.strip().splitlines()[-1]
    run_toml(tmp_path, "[run]\nname = 'R'\n[contract]\nasync_level = 1\n")
    created = admin(
        coordinator,
        "create-run",
        "--config",
        str(tmp_path / "run.toml"),
        "--trainer-key",
        str(tmp_path / "trainer.pem"),
    )
    assert created.exit_code == 0, created.output
    state = json.loads(created.stdout)
    assert (state["run_id"], state["trainer_public_key"], state["async_level"]) == ("R", trainer_key, 1)
    added = admin(
        coordinator, "add-validator", "--config", str(tmp_path / "run.toml"), "--validator-key", trainer_key
    )
    assert added.exit_code == 0, added.output


def test_a_key_that_is_neither_a_file_nor_hex_is_refused_before_the_coordinator_is_asked(
    coordinator, tmp_path
):
    result = admin(coordinator, "create-run", "--config", run_toml(tmp_path), "--trainer-key", "trainer.pem")
    assert result.exit_code == 2
    assert "neither a key file nor a 64-digit hex public key" in result.output
    assert "swarmrl keygen --out trainer.pem" in result.output


def test_a_run_created_from_its_config_bounds_what_a_unit_may_claim(coordinator, tmp_path):
    """configs/demo-swarm.toml: 8 prompts × group 8 = 64 rows of at most 8 tokens (its [contract])."""
    config = Path(__file__).resolve().parents[3] / "configs" / "demo-swarm.toml"
    created = admin(coordinator, "create-run", "--trainer-key", "ab" * 32, "--config", str(config))
    assert created.exit_code == 0, created.output
    worker = NodeClient.at(coordinator, Identity.generate(), retry=NO_RETRY)
    worker.register({})
    worker.join("demo-swarm", load_config(config).contract)
    with pytest.raises(CoordinatorError) as refused:
        leased_submit(worker, "demo-swarm", b"one row too many", rows=65, tokens=65)
    assert (refused.value.kind, refused.value.detail) == (
        "claims_out_of_bounds",
        "claimed 65 rows; a unit's file holds 64",
    )
    bad = admin(
        coordinator, "create-run", "--run-id", "r4", "--trainer-key", "ab" * 32, "--config", "nope.toml"
    )
    assert bad.exit_code == 2 and "nope.toml: cannot read" in bad.output


def test_a_run_is_never_created_without_its_config(coordinator, tmp_path):
    """No bare default: the contract comes from the run config, so create-run without one is refused."""
    result = admin(coordinator, "create-run", "--run-id", "r5", "--trainer-key", "ab" * 32)
    assert result.exit_code == 2 and "--config" in result.output
    moved = run_toml(tmp_path, "[run]\nname = 'r6'\n[worker]\nasync_level = 1\n")
    result = admin(coordinator, "create-run", "--config", moved, "--trainer-key", "ab" * 32)
    assert result.exit_code == 2
    assert "worker.async_level moved to contract.async_level" in result.output
    assert NodeClient.at(coordinator, retry=NO_RETRY).reads.runs() == []
