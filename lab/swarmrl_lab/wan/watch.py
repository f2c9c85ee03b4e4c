"""What `demo --wan` records while a swarm runs, and the churn it causes.

`Holdings` polls the run directory (every machine of the emulation shares this machine's file system): when
the trainer published each checkpoint (its signed manifest's `created_at`, and how many bytes a full copy and
a delta are), and when each worker and relay first held each version. `Churn` kills (SIGKILL) and restarts
the workers and relays its seeded draw picked, each once the run reaches its drawn step, down for a drawn
time. `SwarmWatch` is the `SwarmObserver` of one arm of the demo: it runs both, samples the CPU its processes use
(`CpuUse`) and, once the run has drained, reads from the coordinator what became of each file.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from swarmrl.configs.wan import ChurnConfig
from swarmrl.coordinator.api import SubmissionInfo
from swarmrl.launch.swarm import Swarm, SwarmSnapshot
from swarmrl.shardcast.layout import META_DIR, manifest_path
from swarmrl.shardcast.manifest import SignedManifest
from swarmrl.steps import parse_step_dir_name
from swarmrl_lab.wan.cpu_use import CpuUse

log = logging.getLogger(__name__)
POLL_S = 0.2


@dataclass
class Published:
    step: int
    at: float  # unix seconds (the manifest's created_at)
    full_bytes: int
    delta_bytes: int | None  # what a holder of the previous version downloads


@dataclass
class Holdings:
    """When each checkpoint was published and when each worker and relay first held it (unix seconds)."""

    checkpoints: Path
    workers: dict[str, Path]  # name → its checkpoints directory
    relays: dict[str, Path]  # name → its data directory
    published: dict[int, Published] = field(default_factory=dict)
    held: dict[str, dict[int, float]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="wan-holdings", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        while not self.stop.wait(POLL_S):
            self.scan()

    def scan(self) -> None:
        for directory, step in _versions(self.checkpoints):
            if step not in self.published and (found := _published(directory, step)) is not None:
                self.published[step] = found
        for name, root in self.workers.items():
            seen = self.held.setdefault(name, {})
            for directory, step in _versions(root):
                if step not in seen:
                    seen[step] = _mtime(manifest_path(directory))
        for name, root in self.relays.items():
            seen = self.held.setdefault(name, {})
            for directory, step in _versions(root):
                if step not in seen and _relay_complete(directory):
                    seen[step] = _mtime(directory / META_DIR / "verified.json")


def _versions(root: Path) -> list[tuple[Path, int]]:
    try:
        children = list(root.iterdir())
    except OSError:
        return []
    found = [(child, parse_step_dir_name(child.name)) for child in children]
    return [(child, step) for child, step in found if step is not None and manifest_path(child).is_file()]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def _manifest(directory: Path):
    try:
        return SignedManifest.model_validate_json(manifest_path(directory).read_bytes()).manifest
    except (OSError, ValueError):
        return None  # still being written: the next scan reads it


def _published(directory: Path, step: int) -> Published | None:
    manifest = _manifest(directory)
    if manifest is None:
        return None
    delta = sum(e.payload_size for e in manifest.delta.entries) if manifest.delta else None
    return Published(step, manifest.created_at, manifest.total_size, delta)


def _relay_complete(directory: Path) -> bool:
    manifest = _manifest(directory)
    try:
        verified = json.loads((directory / META_DIR / "verified.json").read_text())
    except (OSError, ValueError):
        return False
    return manifest is not None and len(verified) == len(manifest.all_shards)


@dataclass
class Outage:
    role: str
    at_step: int
    down_s: float
    killed_at: float | None = None
    restarted_at: float | None = None


def churn_plan(churn: ChurnConfig, workers: list[str], relays: list[str], steps: int) -> list[Outage]:
    """Which nodes go down, at which step, for how long: a seeded draw."""
    rng = random.Random(churn.seed)
    last = steps - 1 - churn.last_step_margin
    if last < churn.first_step:
        return []
    chosen = rng.sample(workers, round(churn.worker_fraction * len(workers)))
    chosen += rng.sample(relays, min(churn.relays, len(relays)))
    return [Outage(role, rng.randint(churn.first_step, last), rng.uniform(*churn.down_s)) for role in chosen]


@dataclass
class SwarmWatch:
    """The observer of one arm of `demo --wan` (see the module docstring); churn only where asked."""

    churn: ChurnConfig | None = None
    links: dict[int, str] = field(default_factory=dict)  # pid → name of each link proxy (the WAN arm's)
    holdings: Holdings | None = None
    cpu: CpuUse | None = None
    outages: list[Outage] = field(default_factory=list)
    submissions: list[SubmissionInfo] = field(default_factory=list)
    node_ids: dict[str, str] = field(default_factory=dict)  # role → node id
    work: dict[str, dict[str, int]] = field(default_factory=dict)  # worker → its work.json counts

    def started(self, swarm: Swarm) -> None:
        workers = sorted(name for name in swarm.roles if name.startswith("worker-"))
        relays = sorted(name for name in swarm.roles if name.startswith("relay-"))
        self.holdings = Holdings(
            swarm.rundir.checkpoints,
            {name: swarm.swarm_dir / name / "checkpoints" for name in workers},
            {name: swarm.swarm_dir / name for name in relays},
        )
        self.holdings.start()
        self.cpu = CpuUse(
            lambda: {**self.links, **{r.popen.pid: name for name, r in list(swarm.roles.items())}}
        )
        self.cpu.start()
        if self.churn is not None:
            self.outages = churn_plan(self.churn, workers, relays, swarm.config.trainer.steps)

    def poll(self, swarm: Swarm, state: SwarmSnapshot | None) -> None:
        if state is None:
            return
        now = time.time()
        for outage in self.outages:
            if outage.killed_at is None and state.step >= outage.at_step and state.run_status == "open":
                log.info("churn: killing %s at step %d for %.1fs", outage.role, state.step, outage.down_s)
                swarm.kill(outage.role)
                outage.killed_at = time.time()
            elif outage.killed_at is not None and outage.restarted_at is None:
                if now >= outage.killed_at + outage.down_s:
                    swarm.restart(outage.role)
                    outage.restarted_at = time.time()

    def finished(self, swarm: Swarm, state: SwarmSnapshot) -> None:
        assert self.holdings is not None and self.cpu is not None
        self.holdings.stop.set()
        self.holdings.scan()
        self.cpu.close()
        run_id = swarm.config.run.id
        with swarm.admin() as client:
            self.submissions = client.reads.every_page("submissions", run_id)
        self.node_ids = {name: node_id for node_id, name in swarm.node_names().items()}
        for name in self.holdings.workers:
            book = swarm.swarm_dir / name / "work.json"
            self.work[name] = json.loads(book.read_text()) if book.exists() else {}
