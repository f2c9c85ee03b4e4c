"""The README's cross-machine recipe on two network namespaces joined by a veth pair.

Machine A (10.213.0.1) runs the coordinator and the trainer, whose shardcast origin binds its veth address;
machine B (10.213.0.2) runs a relay with `--upstream http://10.213.0.1:8800` and fetches the trainer's
checkpoint through that relay, every shard checked against the trainer's signature. The addresses exist only
inside the test's own namespaces, and each namespace has its own ports, so the README's ports are used as
written. Needs root (`ip netns`); without it the test fails and says so (deselect with `-m "not netns"`).
Every process is stopped by PID and both namespaces are deleted in `finally`.
"""

from __future__ import annotations

import filecmp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from integration.spine.spine_helpers import tiny_config
from polling import wait_for

from swarmrl.identity import Identity
from swarmrl.wan import netns
from swarmrl.wan.errors import WanError

pytestmark = [
    pytest.mark.netns,
    pytest.mark.slow,
    pytest.mark.swarm,
    pytest.mark.timeout(420),
]

SRC = Path(__file__).resolve().parents[3] / "src"
TRAINER_IP, RELAY_IP = "10.213.0.1", "10.213.0.2"
ADMIN_TOKEN = "netns-test-admin-token"


class Machines:
    """Two namespaces ("a", "b") joined by a veth pair, and the processes started in them."""

    def __init__(self, tag: str, logs: Path) -> None:
        self.names = {"a": f"swrl{tag}a", "b": f"swrl{tag}b"}
        self.logs = logs
        self.processes: list[tuple[str, subprocess.Popen]] = []

    def create(self) -> None:
        """The WAN emulator's own helpers (swarmrl.wan.netns): each veth end is made inside its namespace."""
        try:
            netns.check_available()
            for side in "ab":
                netns.add_namespace(self.names[side])
            netns.veth(self.names["a"], "eth0", self.names["b"], "eth0")
            for side, address in (("a", TRAINER_IP), ("b", RELAY_IP)):
                netns.address(self.names[side], "eth0", f"{address}/24")
        except WanError as exc:
            pytest.fail(
                f"{exc}: this test needs root and network namespaces (ip netns); deselect it with "
                '-m "not netns" where they are unavailable'
            )

    def command(self, side: str, *args: str) -> list[str]:
        return [*netns.exec_prefix(self.names[side]), sys.executable, "-m", "swarmrl.cli", *args]

    def start(self, side: str, name: str, *args: str) -> subprocess.Popen:
        log = (self.logs / f"{name}.log").open("w")
        process = subprocess.Popen(
            self.command(side, *args), stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=self.logs
        )
        self.processes.append((name, process))
        return process

    def run(self, side: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(side, *args),
            capture_output=True,
            text=True,
            env=_env(),
            cwd=self.logs,
            timeout=timeout,
        )

    def tail(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text()[-3000:]

    def destroy(self) -> None:
        for _, process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process in reversed(self.processes):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for ns in self.names.values():
            netns.delete_namespaces(ns)  # its veth end goes with it (and with it the peer)


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        "SWARMRL_ADMIN_TOKEN": ADMIN_TOKEN,
        "SWARMRL_LOG_FORMAT": "plain",
    }


def _retry(attempt, timeout_s: float, what: str) -> subprocess.CompletedProcess:
    """Run `attempt` until it exits 0 (a server still starting, a relay still mirroring); bounded."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = attempt()
        if result.returncode == 0 or time.monotonic() > deadline:
            assert result.returncode == 0, (
                f"{what} never succeeded:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
            )
            return result
        time.sleep(1.0)


def test_readme_recipe_across_two_machines(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    # run.json: the run config file of the recipe (a resolved JSON config reads like run.toml).
    config = tiny_config(work / "runs", "R", "sft.steps=0", "trainer.max_wait_seconds=300")
    run_file = work / "run.json"
    run_file.write_text(config.dump_json())
    trainer_key = work / "trainer.pem"
    trainer_hex = Identity.load_or_create(trainer_key).node_id
    sft = subprocess.run(
        [sys.executable, "-m", "swarmrl.cli", "sft", f"@{run_file}"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=work,
        timeout=300,
    )
    assert sft.returncode == 0, sft.stderr[-3000:]
    run_dir = work / "runs" / "R"
    start_policy = run_dir / "checkpoints" / "step_0"
    assert (start_policy / "config.json").is_file()

    machines = Machines(str(os.getpid() % 100000), work)
    try:
        machines.create()
        coordinator_url = "http://127.0.0.1:8700"  # machine A's own loopback
        # Machine A: coordinator, run, trainer (its origin bound to the address machine B reaches).
        machines.start(
            "a", "coordinator", "coordinator", "--db-url", f"sqlite:///{work / 'c.db'}",
            "--host", "127.0.0.1", "--port", "8700", "--config", str(run_file),
            "--storage-dir", str(work / "storage"),
        )  # fmt: skip
        _retry(
            lambda: machines.run(
                "a", "admin", "create-run", "--coordinator", coordinator_url, "--run-id", "R",
                "--trainer-key", str(trainer_key), timeout=60,
            ),
            60,
            "admin create-run",
        )  # fmt: skip
        trainer = machines.start(
            "a", "trainer", "trainer", "--run-dir", str(run_dir), "--coordinator", coordinator_url,
            "--key", str(trainer_key), "--origin-host", TRAINER_IP, "--origin-port", "8800",
        )  # fmt: skip
        origin_url = run_dir / "swarm" / "origin.url"
        wait_for(lambda: origin_url.exists() or trainer.poll() is not None, 180, "the trainer's origin.url")
        assert trainer.poll() is None, machines.tail("trainer")
        assert origin_url.read_text() == f"http://{TRAINER_IP}:8800"

        # Machine B: a relay of the trainer's origin, and a node fetching through it.
        relay_url_file = work / "relay.url"
        relay = machines.start(
            "b", "relay", "relay", "--upstream", f"http://{TRAINER_IP}:8800", "--trainer-public-key",
            trainer_hex, "--host", "0.0.0.0", "--port", "8900", "--advertise", f"http://{RELAY_IP}:8900",
            "--data-dir", str(work / "relay-data"), "--url-file", str(relay_url_file),
        )  # fmt: skip
        wait_for(lambda: relay_url_file.exists() or relay.poll() is not None, 60, "the relay's url file")
        assert relay.poll() is None, machines.tail("relay")
        assert relay_url_file.read_text() == f"http://{RELAY_IP}:8900"
        dest = work / "node-b"
        fetched = _retry(
            lambda: machines.run(
                "b", "shardcast", "fetch", "--source", f"http://{RELAY_IP}:8900", "--dest", str(dest),
                "--trainer-public-key", trainer_hex, "--run-id", "R", "--version", "0", timeout=120,
            ),
            120,
            "fetching step 0 through the relay on machine B",
        )  # fmt: skip
        installed = Path(fetched.stdout.strip().splitlines()[-1])
        assert installed == dest / "step_0"
        files = sorted(p.name for p in start_policy.iterdir() if p.is_file())
        assert "model.safetensors" in files
        _, mismatch, errors = filecmp.cmpfiles(start_policy, installed, files, shallow=False)
        assert not mismatch and not errors, (mismatch, errors)
        # The relay mirrored it from the origin across the link (the node never reached machine A).
        assert (work / "relay-data" / "step_0" / "model.safetensors").is_file()
        assert trainer.poll() is None, machines.tail("trainer")
    finally:
        machines.destroy()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    assert not any(ns in listed for ns in machines.names.values())
