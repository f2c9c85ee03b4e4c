"""Run N islands on this machine: each an ordinary local run directory with its own trainer and workers,
all joined to one torchft lighthouse that decides every merge's membership.

<run>/checkpoints/step_0          the shared starting policy (SFT, cached as for `swarmrl demo`)
<run>/islands/island-<i>/         island i's run directory (its own rollouts, checkpoints, merges.jsonl;
                                  with [islands] workers = "swarm", also its swarm's coordinator/, swarm/, keys/)
<run>/islands_result.json         what `swarmrl demo --islands` measured
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from swarmrl.configs import RunConfig
from swarmrl.configs.islands import IslandsConfig
from swarmrl.launch.prepare import prepare_run
from swarmrl.launch.processes import LaunchError, ProcessGroup, RoleProcess
from swarmrl.launch.swarm import Swarm, start_swarm, stop_swarm
from swarmrl.layout import local_workers
from swarmrl.rundir import RunDir, write_json_atomic
from swarmrl.steps import checkpoint_dir


def island_config(config: RunConfig, island: int) -> RunConfig:
    """Island i's config: its own directory under <run>/islands and its own seed (different prompts and
    samples per island); everything else, the `[islands]` section included, is the run's. The run id is a
    single URL path segment, as a swarm island's coordinator routes by it."""
    data = config.model_dump(mode="json")
    data["run"].update(
        root=str(config.run.directory / "islands"),
        name=f"island-{island}",
        run_id=f"{config.run.id}.island-{island}",
    )
    data["contract"]["seed"] = config.contract.seed + 1009 * island
    return RunConfig.model_validate(data)


def prepare_islands(config: RunConfig, progress=None) -> tuple[RunDir, list[RunDir]]:
    """The shared step_0 (SFT as `prepare_run` makes it) copied into each island's run directory."""
    base = prepare_run(config, progress)
    settings: IslandsConfig = config.islands
    islands = []
    for index in range(settings.count):
        island = island_config(config, index)
        rundir = RunDir(island.run.directory)
        rundir.root.mkdir(parents=True, exist_ok=True)
        write_json_atomic(rundir.root / "config.json", island.model_dump(mode="json"))
        rundir.stop_file.unlink(missing_ok=True)
        start = checkpoint_dir(rundir.checkpoints, 0)
        if not (start / "config.json").is_file():
            shutil.copytree(checkpoint_dir(base.checkpoints, 0), start)
        islands.append(rundir)
    return base, islands


class IslandsNetwork:
    """Where the islands' processes run and how they reach each other: here every one on this machine's
    loopback. `swarmrl_lab.wan.islands` puts each island, and the lighthouse, on a machine of an emulated
    region instead."""

    def prefix(self, island: int) -> list[str]:
        """The command prefix island `island`'s processes run under."""
        return []

    def host(self, island: int) -> str:
        """The address at which the other islands reach island `island`'s merge servers."""
        return "127.0.0.1"

    def env(self) -> dict[str, str]:
        """What an island's processes add to their environment."""
        return {}

    def lighthouse_host(self) -> str:
        return "127.0.0.1"

    def lighthouse_seat(self) -> contextlib.AbstractContextManager[object]:
        """The context the lighthouse's server is created in (its sockets live where it is created)."""
        return contextlib.nullcontext()


@dataclass
class IslandFleet:
    """The islands' processes and their lighthouse; every process started here is stopped here by PID."""

    config: RunConfig
    islands: list[RunDir]
    network: IslandsNetwork = field(default_factory=IslandsNetwork)
    lighthouse: Any = None  # torchft's LighthouseServer (torchft is untyped)
    lighthouse_url: str = ""
    groups: dict[int, ProcessGroup] = field(default_factory=dict)
    trainers: dict[int, RoleProcess] = field(default_factory=dict)
    swarms: dict[int, Swarm] = field(default_factory=dict)

    def __enter__(self) -> IslandFleet:
        # torchft's Rust side logs every quorum request at INFO; keep the console to the live table.
        os.environ.setdefault("RUST_LOG", "warn")
        from torchft.coordination import LighthouseServer

        settings: IslandsConfig = self.config.islands
        host = self.network.lighthouse_host()
        with self.network.lighthouse_seat():
            self.lighthouse = LighthouseServer(
                bind=f"{host}:0",
                min_replicas=1,
                join_timeout_ms=int(1000 * settings.join_timeout_s),
                heartbeat_timeout_ms=int(1000 * settings.heartbeat_timeout_s),
            )
        # The server names this machine's hostname, which another namespace may resolve elsewhere.
        port = self.lighthouse.address().rsplit(":", 1)[1]
        self.lighthouse_url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc) -> None:
        for index in list(self.groups):
            self._stop(index)
        if self.lighthouse is not None:
            self.lighthouse.shutdown()

    def start(self, index: int) -> None:
        rundir = self.islands[index]
        rundir.stop_file.unlink(missing_ok=True)
        trainer = ["island-trainer", "--run-dir", str(rundir.root), "--island", str(index)]
        trainer += ["--lighthouse", self.lighthouse_url, "--host", self.network.host(index)]
        if self.config.islands.workers == "swarm":
            swarm = start_swarm(island_config(self.config, index), rundir, trainer_command=trainer)
            self.swarms[index], self.groups[index] = swarm, swarm.group
            self.trainers[index] = swarm.roles["trainer"]
            return
        group = ProcessGroup(rundir.root / "logs", prefix=lambda _name: self.network.prefix(index))
        self.groups[index] = group
        env = self.network.env()
        self.trainers[index] = group.start("trainer", trainer, env=env)
        # A colocated island's trainer generates its own rollouts (the merge runs before each push to its engine).
        for worker in range(0 if self.config.trainer.colocate else local_workers(self.config)):
            args = ["worker", "--run-dir", str(rundir.root), "--index", str(worker)]
            group.start(f"worker-{worker}", args, env=env)

    def _stop(self, index: int) -> None:
        self.trainers.pop(index, None)
        swarm = self.swarms.pop(index, None)
        if swarm is not None:
            stop_swarm(swarm)
            self.groups.pop(index)
            return
        self.islands[index].stop_file.touch()
        self.groups.pop(index).stop()

    def _check_alive(self, index: int) -> None:
        """A swarm island tolerates what its swarm does (a banned cheater exits); any other exit is a failure."""
        if index in self.swarms:
            try:
                self.swarms[index].check_alive()
            except LaunchError as exc:
                raise LaunchError(f"island {index}: {exc}") from exc
            return
        broken = self.groups[index].failed()
        if broken is not None:
            raise LaunchError(f"island {index}: {broken.failure()}")

    def kill(self, index: int) -> None:
        """SIGKILL an island's trainer and workers (a machine lost without warning)."""
        group = self.groups.pop(index)
        for process in group.processes:
            if process.popen.poll() is None:
                process.popen.kill()
            process.popen.wait(timeout=10)
        self.trainers.pop(index)
        self.swarms.pop(index, None)

    def wait(self, poll: Callable[[], None] | None = None, timeout_s: float | None = None) -> None:
        """Until every running island's trainer has finished; an island's failing process raises."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.trainers:
            for index in list(self.trainers):
                self._check_alive(index)
                if self.trainers[index].popen.poll() == 0:
                    self._stop(index)
            if poll is not None:
                poll()
            if deadline is not None and time.monotonic() > deadline:
                raise LaunchError(f"islands {sorted(self.trainers)} still running after {timeout_s} s")
            time.sleep(0.5)
