"""docs/cross-machine.md's recipe, run as written, on two network namespaces joined by a veth pair.

Each machine's working directory holds the recipe's run config (examples/cross-machine/run.toml, trained for
two steps here) and its data, and A's the reward functions too. Machine A (10.213.0.1) runs its block — keys,
coordinator, run, SFT, trainer with its origin on every interface, validator — and machine B (10.213.0.2) runs its block: a relay mirroring A's origin and a worker fetching
through it. Each line of the two `bash` blocks is run as it is written (bash, in the machine's namespace and
working directory, `swarmrl` on the PATH); a line ending in `&` is a service started in the background and
stopped by PID at the end; `NAME=$(...)` keeps its output for the lines after it, as a shell would, and
`TRAINER_KEY`, the one value a person copies from A to B, is handed over. The run must then train its steps
on B's rollouts, judged by A's validator, and drain. The addresses exist only inside the test's namespaces,
and each namespace has its own ports, so the recipe's ports are used as written. Needs root (`ip netns`);
without it the test fails and says so (deselect with `-m "not netns"`). Both namespaces are deleted at the end.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from polling import wait_for

from swarmrl_lab.wan import netns
from swarmrl_lab.wan.errors import WanError

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.swarm, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[3]
SRC = REPO / "src"
RECIPE = REPO / "docs" / "cross-machine.md"
ADDRESSES = {"A": "10.213.0.1", "B": "10.213.0.2"}
STEPS = 2
# The recipe's own run config, its data on both machines and its reward functions on A alone (B's worker never
# scores). The test trains it for STEPS steps instead of the config's 20.
RUN_TOML = REPO / "examples" / "cross-machine" / "run.toml"
DATA = REPO / "examples" / "byo" / "data" / "sums.jsonl"
REWARDS = REPO / "examples" / "byo" / "byo_example"


def set_up(directory: Path, side: str) -> None:
    config = re.sub(r"(?m)^steps = 20$", f"steps = {STEPS}", RUN_TOML.read_text())
    assert f"steps = {STEPS}" in config
    (directory / "run.toml").write_text(config)
    shutil.copy(DATA, directory / "sums.jsonl")
    if side == "A":
        shutil.copytree(REWARDS, directory / "byo_example")


def recipe_blocks(text: str) -> dict[str, list[str]]:
    """Machine letter → the lines of its ```bash block (continuations joined, comment-only lines dropped)."""
    blocks = {}
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        first, *_ = block.splitlines()
        found = re.match(r"# machine (\w)\b", first)
        if found:
            joined = re.sub(r"\\\n\s*", "", block)
            lines = [line.split("  #")[0].strip() for line in joined.splitlines()]
            blocks[found.group(1)] = [line for line in lines if line and not line.startswith("#")]
    return blocks


class Machines:
    """Two namespaces ("A", "B") joined by a veth pair, and the processes started in them."""

    def __init__(self, tag: str, work: Path, env: dict[str, str]) -> None:
        self.names = {side: f"swrl{tag}{side.lower()}" for side in ADDRESSES}
        self.dirs = {side: work / side for side in ADDRESSES}
        self.env = env
        self.processes: list[tuple[str, subprocess.Popen]] = []

    def create(self) -> None:
        """The WAN emulator's own helpers (swarmrl_lab.wan.netns): each veth end is made inside its namespace."""
        try:
            netns.check_available()
            for side in ADDRESSES:
                netns.add_namespace(self.names[side])
            netns.veth(self.names["A"], "eth0", self.names["B"], "eth0")
            for side, address in ADDRESSES.items():
                netns.address(self.names[side], "eth0", f"{address}/24")
        except WanError as exc:
            pytest.fail(
                f"{exc}: this test needs root and network namespaces (ip netns); deselect it with "
                '-m "not netns" where they are unavailable'
            )

    def shell(self, side: str, line: str) -> list[str]:
        return ["ip", "netns", "exec", self.names[side], "bash", "-c", line]

    def run(self, side: str, line: str) -> None:
        """One recipe line, as a shell runs it: `export`, `NAME=$(...)`, `... &` or a command that must succeed."""
        if line.endswith("&"):
            name = f"{side}-{line.split()[1]}"
            log = (self.dirs[side] / f"{name}.log").open("w")
            command = self.shell(side, "exec " + line.removesuffix("&"))
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.dirs[side]
            )
            self.processes.append((name, process))
            return
        if exported := re.fullmatch(r"export (\w+)=(\S+)", line):
            # Expanded as the shell would, in the machine's working directory ($PWD).
            value = subprocess.run(
                ["bash", "-c", f"printf %s {exported.group(2)}"],
                capture_output=True, text=True, env=self.env, cwd=self.dirs[side], timeout=10, check=True,
            ).stdout  # fmt: skip
            self.env[exported.group(1)] = value
            return
        assigned = re.fullmatch(r"(\w+)=\$\((.*)\)", line)
        command = self.shell(side, assigned.group(2) if assigned else line)
        result = subprocess.run(
            command, capture_output=True, text=True, env=self.env, cwd=self.dirs[side], timeout=600
        )
        assert result.returncode == 0, (
            f"machine {side}: `{line}` failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        )
        if assigned:
            self.env[assigned.group(1)] = result.stdout.strip()

    def process(self, name: str) -> subprocess.Popen:
        return next(process for label, process in self.processes if label == name)

    def log(self, name: str) -> str:
        side = name.split("-")[0]
        return (self.dirs[side] / f"{name}.log").read_text()[-3000:]

    def destroy(self) -> None:
        for _, process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process in reversed(self.processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for ns in self.names.values():
            # Deleting a namespace also deletes the veth end inside it (and with it the peer).
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def _environment(bin_dir: Path) -> dict[str, str]:
    """`swarmrl` on the PATH (this checkout's), the machines' addresses, plain log lines."""
    bin_dir.mkdir()
    shim = bin_dir / "swarmrl"
    # As an installed swarmrl: importable whatever PYTHONPATH the recipe sets.
    src = shlex.quote(str(SRC))
    shim.write_text(
        f'#!/bin/sh\nPYTHONPATH={src}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} -m swarmrl.cli "$@"\n'
    )
    shim.chmod(0o755)
    keep = {k: v for k, v in os.environ.items() if not k.startswith("SWARMRL_")}
    return {
        **keep,
        **ADDRESSES,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        "SWARMRL_LOG_FORMAT": "plain",
    }


def test_the_cross_machine_recipe_runs_as_written(tmp_path):
    blocks = recipe_blocks(RECIPE.read_text())
    assert set(blocks) == {"A", "B"} and all(blocks.values()), blocks
    machines = Machines(str(os.getpid() % 100000), tmp_path, _environment(tmp_path / "bin"))
    for side, directory in machines.dirs.items():
        directory.mkdir()
        set_up(directory, side)
    try:
        machines.create()
        for line in blocks["A"]:
            machines.run("A", line)
        assert len(machines.env["TRAINER_KEY"]) == 64  # what the person copies to machine B
        for line in blocks["B"]:
            machines.run("B", line)

        trainer, worker = machines.process("A-trainer"), machines.process("B-worker")
        wait_for(lambda: trainer.poll() is not None, 600, "the trainer to finish its steps")
        assert trainer.returncode == 0, machines.log("A-trainer")
        wait_for(lambda: worker.poll() is not None, 120, "the worker to leave the drained run")
        assert worker.returncode == 0, machines.log("B-worker")
        metrics = (machines.dirs["A"] / "runs" / "R" / "metrics.jsonl").read_text().splitlines()
        assert len([json.loads(line) for line in metrics]) == STEPS
        status = subprocess.run(
            machines.shell("B", f"swarmrl status --coordinator http://{ADDRESSES['A']}:8700 --json"),
            capture_output=True, text=True, env=machines.env, timeout=60,
        )  # fmt: skip
        summary = json.loads(status.stdout)
        assert summary["run"]["status"] in ("draining", "drained"), summary["run"]
        assert summary["trained_step"] == STEPS  # `status` says how far the finished run trained
        assert summary["submissions"]["accepted"] >= STEPS  # B's files, judged on A
        # B's relay and worker joined with the contract of run.toml, the one the run was created with.
        assert {"relay", "worker"} <= {node["role"] for node in summary["nodes"]}
        # B's worker fetched every policy through B's relay, which mirrored them from A's origin.
        assert (machines.dirs["B"] / "relay" / "step_0" / "model.safetensors").is_file()
        assert "policy step 0 loaded" in machines.log("B-worker")
        # The validator read run.toml and judged with the reward functions the trainer pinned.
        assert "checked against the trainer's once its policy arrives" in machines.log("A-validator")
        assert not (machines.dirs["B"] / "byo_example").exists()
        for name in ("A-coordinator", "A-validator", "B-relay"):
            assert "Traceback" not in machines.log(name), machines.log(name)
    finally:
        machines.destroy()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    assert not any(ns in listed for ns in machines.names.values())
