"""A relay in a chain reports its place in the tree and what it holds, and its heartbeat carries that report to
a coordinator (real clock, real HTTP on 127.0.0.1), where the run summary shows it as a relay."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from shardcast_testkit import TRAINER, relay_holds, start_origin, start_relay, wait_until, write_checkpoint

from swarmrl.configs.contract import ContractSection
from swarmrl.coordinator.client import AdminClient
from swarmrl.coordinator.server.app import create_app
from swarmrl.shardcast import fetch_checkpoint
from swarmrl.shardcast.coordinator_report import report_forever
from swarmrl_lab.coordinator_double import serve_in_thread


def test_a_chained_relay_reports_its_upstream_versions_and_traffic(tmp_path):
    root = tmp_path / "ckpt"
    origin, origin_server = start_origin(root)
    servers = [origin_server]
    app = create_app(db_url=f"sqlite:///{tmp_path / 'c.db'}", storage=tmp_path / "store", admin_token="t")
    coordinator = serve_in_thread(app)
    try:
        manifest = origin.publish(write_checkpoint(root, 1, 500_000), 1)
        first, first_server = start_relay([origin_server.url], tmp_path / "relay1")
        servers.append(first_server)
        second, second_server = start_relay([first_server.url], tmp_path / "relay2")
        servers.append(second_server)
        wait_until(lambda: relay_holds(second, 1))
        fetch_checkpoint([second_server.url], 1, tmp_path / "worker", TRAINER.node_id)

        status = second.status(second_server.url)
        total = sum(s.length for s in manifest.all_shards)
        assert (status["url"], status["upstreams"]) == (second_server.url, [first_server.url])
        (held,) = status["versions"]
        assert (held["version"], held["complete"], held["bytes"]) == (1, True, total)
        assert held["seconds"] > 0
        assert status["served_bytes"] >= 500_000  # the worker's fetch at least

        with AdminClient.at(coordinator.url, admin_token="t") as admin:
            admin.create_run("r", TRAINER.node_id, ContractSection())

            async def report_until_shown():
                task = asyncio.create_task(
                    report_forever(
                        second,
                        second_server.url,
                        coordinator.url,
                        "r",
                        tmp_path / "relay.pem",
                        ContractSection(),
                    )
                )
                try:
                    for _ in range(200):  # bounded: 10 s
                        summary = await asyncio.to_thread(admin.reads.summary, "r")
                        if summary.relays:
                            return summary
                        await asyncio.sleep(0.05)
                    raise AssertionError("the relay's report never reached the summary")
                finally:
                    task.cancel()

            summary = asyncio.run(report_until_shown())
        (relay,) = summary.relays
        assert (relay.url, relay.upstreams, relay.health) == (
            second_server.url,
            [first_server.url],
            "healthy",
        )
        assert [(v.version, v.complete, v.bytes) for v in relay.versions] == [(1, True, total)]
        assert [n.role for n in summary.nodes] == ["relay"]
    finally:
        coordinator.stop()
        app.state.engine.dispose()
        for server in reversed(servers):
            server.stop()


def test_reporting_needs_the_run_config_and_the_key():
    from typer.testing import CliRunner

    from swarmrl.cli import app

    args = ["relay", "--upstream", "http://127.0.0.1:1", "--trainer-public-key", TRAINER.node_id]
    result = CliRunner().invoke(app, [*args, "--coordinator", "http://127.0.0.1:2", "--run-id", "r"])
    assert result.exit_code == 2 and "--coordinator needs --config and --key" in result.output


def test_a_relay_given_another_runs_contract_is_refused_at_join_and_stops(tmp_path):
    """The relay's config says async_level 8, the run was created with 2: the relay process stops with one line
    naming the field and both values (exit 2), and the run has no member."""
    app = create_app(db_url=f"sqlite:///{tmp_path / 'c.db'}", storage=tmp_path / "store", admin_token="t")
    coordinator = serve_in_thread(app)
    try:
        with AdminClient.at(coordinator.url, admin_token="t") as admin:
            admin.create_run("r", TRAINER.node_id, ContractSection(async_level=2))
            (tmp_path / "run.toml").write_text("[run]\nname = 'r'\n[contract]\nasync_level = 8\n")
            args = ["relay", "--upstream", "http://127.0.0.1:1", "--trainer-public-key", TRAINER.node_id]
            args += ["--data-dir", str(tmp_path / "relay"), "--coordinator", coordinator.url]
            args += ["--config", str(tmp_path / "run.toml"), "--key", str(tmp_path / "relay.pem")]
            relay = subprocess.run(
                [sys.executable, "-m", "swarmrl.cli", *args], capture_output=True, text=True, timeout=60
            )
            assert relay.returncode == 2, relay.stderr
            (line,) = relay.stderr.strip().splitlines()
            assert "contract.async_level is 8 here, 2 in the run" in line
            assert admin.reads.nodes("r") == []
    finally:
        coordinator.stop()
        app.state.engine.dispose()
