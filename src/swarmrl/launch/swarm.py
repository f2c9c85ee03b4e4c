"""`swarmrl demo --swarm`: the whole INTELLECT-2 flow on this machine, every role its own process on 127.0.0.1.

    coordinator (FastAPI, SQLite in the run directory)
      ▲ signed requests: register, heartbeat, work leases, uploads, submissions, validation leases, verdicts
    trainer ── shardcast origin ──► relay ──► workers (honest, slow, cheating) ──► uploads ──► validators
      ▲                                                                                       │ verdicts
      └──────────────────────────── accepted submissions ◄──── coordinator ◄──────────────────┘

When the trainer has closed its last step the run drains: no new work is leased, and the validators judge
every file submitted before the swarm stops. Everything a run leaves is under `<run>/`: `coordinator/`
(database and uploaded files), `swarm/<node>/` (each node's own checkpoints, rollouts, `work.json` and
verdicts), `accepted/` (what the trainer read), `logs/`, `swarm_result.json`.
"""

from __future__ import annotations

import functools
import json
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from rich.console import Console
from rich.table import Table

from swarmrl.configs import RunConfig
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.cli import ADMIN_TOKEN_ENV
from swarmrl.coordinator.client import AdminClient, PublicReads
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.pack_client import PackClient
from swarmrl.coordinator.transport import SHORT_RETRY
from swarmrl.identity import Identity
from swarmrl.launch.processes import LaunchError, ProcessGroup, RoleProcess
from swarmrl.launch.progress import plain_lines, sft_progress, waiting
from swarmrl.launch.report import live_table
from swarmrl.retry import NO_RETRY
from swarmrl.rundir import RunDir, write_json_atomic
from swarmrl.steps import BASE_STEP
from swarmrl.trainer.role import origin_url_file

NODE_EJECTED_EXIT = 3  # `swarmrl worker` exits with this when the coordinator bans it
# The slow and cheating workers are the lab's (lab/swarmrl_lab/cheat_worker.py), run by module name: swarmrl
# itself never imports the lab, which node operators do not install (the demo launcher checks it is there).
LAB_WORKER_MODULE, LAB_WORKER_COMMAND = "swarmrl_lab.cheat_worker", "cheat-worker"


@dataclass
class SwarmNetwork:
    """Where a swarm's roles run and the URLs they reach each other by. This default puts every role on this
    machine's 127.0.0.1 with ports the OS picks; `demo --wan` puts each on a machine of an emulated region
    (`swarmrl_lab.wan.demo`)."""

    bind_host: str = "127.0.0.1"  # what the coordinator binds
    coordinator_port: int = 0

    def prefix(self, role: str) -> list[str]:
        """The command a role's program runs under."""
        return []

    def coordinator_url(self, port: int) -> str:
        return f"http://127.0.0.1:{port}"

    def relay_args(self, index: int) -> list[str]:
        """Where relay `index` listens and the URL it advertises (default: 127.0.0.1, an OS-chosen port)."""
        return []


def wait_for_file(path: Path, process: RoleProcess, timeout_s: float = 180.0) -> str:
    """The text of a file a starting process writes (its port or URL); bounded, and fails if it dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text().strip()
        if process.popen.poll() is not None:
            raise process.error()
        time.sleep(0.1)
    raise LaunchError(f"{process.name} did not write {path} within {timeout_s:.0f}s:\n{process.tail()}")


@dataclass
class Swarm:
    """The processes of a swarm run and how to reach them; `restart(name)` brings one role back."""

    config: RunConfig
    rundir: RunDir
    group: ProcessGroup
    admin_token: str = field(default_factory=lambda: secrets.token_hex(16))
    coordinator_url: str = ""
    coordinator_port: int = 0
    relay_urls: list[str] = field(default_factory=list)
    roles: dict[str, RoleProcess] = field(default_factory=dict)
    starters: dict[str, Callable[[], RoleProcess]] = field(default_factory=dict)
    cheaters: set[str] = field(default_factory=set)
    killed: set[str] = field(default_factory=set)  # stopped on purpose (fault tests): not a failure
    network: SwarmNetwork = field(default_factory=SwarmNetwork)

    @property
    def swarm_dir(self) -> Path:
        return self.rundir.root / "swarm"

    def key(self, name: str) -> Path:
        return self.rundir.root / "keys" / f"{name}.pem"

    def identity(self, name: str) -> Identity:
        return Identity.load_or_create(self.key(name))

    def admin(self) -> AdminClient:
        return AdminClient.at(self.coordinator_url, admin_token=self.admin_token)

    def start(self, name: str, starter: Callable[[], RoleProcess]) -> RoleProcess:
        self.starters[name] = starter
        self.roles[name] = starter()
        return self.roles[name]

    def kill(self, name: str) -> None:
        """SIGKILL, as a crash or a pulled plug would."""
        self.killed.add(name)
        process = self.roles[name].popen
        process.kill()
        process.wait(timeout=10)

    def restart(self, name: str) -> RoleProcess:
        if self.roles[name].popen.poll() is None:
            self.kill(name)
        self.killed.discard(name)
        self.roles[name] = self.starters[name]()
        return self.roles[name]

    @property
    def validators(self) -> list[str]:
        return [name for name in self.roles if name.startswith("validator")]

    def node_names(self) -> dict[str, str]:
        """node id → role name, for every key of this swarm."""
        return {self.identity(name).node_id: name for name in self.roles if self.key(name).exists()}

    def check_alive(self) -> None:
        """Raise if a role that must keep running died (a banned cheater may exit)."""
        for name, role in self.roles.items():
            code = role.popen.poll()
            if (
                code in (None, 0)
                or name in self.killed
                or (name in self.cheaters and code == NODE_EJECTED_EXIT)
            ):
                continue
            raise role.error()


def start_swarm(
    config: RunConfig,
    rundir: RunDir,
    on_coordinator: Callable[[str], None] | None = None,
    trainer_command: list[str] | None = None,
    network: SwarmNetwork | None = None,
) -> Swarm:
    """Start coordinator, trainer (origin), relays, validator and workers; returns once all are launched.
    `on_coordinator` gets the coordinator's URL as soon as it answers, before the other roles start;
    `trainer_command` replaces `trainer --run-dir <run>` (a trainer island's command, say); `network` places
    the roles (default: all on 127.0.0.1)."""
    config.metrics.check_installed()
    network = network or SwarmNetwork()
    swarm = Swarm(config, rundir, ProcessGroup(rundir.root / "logs", prefix=network.prefix), network=network)
    swarm.swarm_dir.mkdir(parents=True, exist_ok=True)
    config_file = str(rundir.root / "config.json")
    _start_coordinator(swarm)
    if on_coordinator is not None:
        on_coordinator(swarm.coordinator_url)
    trainer = swarm.identity("trainer")
    validators = validator_names(config.swarm.validators)
    _open_run(swarm, trainer.node_id, validators)

    trainer_args = trainer_command or ["trainer", "--run-dir", str(rundir.root)]
    trainer_args = [*trainer_args, "--coordinator", swarm.coordinator_url, "--key", str(swarm.key("trainer"))]
    origin_url_file(rundir).unlink(missing_ok=True)
    process = swarm.start("trainer", _starter(swarm, "trainer", trainer_args))
    origin_url = wait_for_file(origin_url_file(rundir), process)
    # A restarted trainer or relay takes the port it had: the nodes downstream keep their URLs.
    swarm.starters["trainer"] = _starter(
        swarm, "trainer", [*trainer_args, "--origin-port", _port(origin_url)]
    )

    _start_relays(swarm, origin_url, trainer.node_id)

    def node_args(role: str, name: str) -> list[str]:
        args = [
            role,
            "--coordinator",
            swarm.coordinator_url,
            "--run-id",
            config.run.id,
            "--config",
            config_file,
        ]
        args += ["--key", str(swarm.key(name)), "--work-dir", str(swarm.swarm_dir / name)]
        for url in swarm.relay_urls:
            args += ["--relay", url]
        return args

    for name in validators:
        # A validator is the operator's own node: it may fetch from the origin too, so losing the relay near it
        # does not leave it fetching each new policy over long links while files wait for their verdicts.
        args = [*node_args("validator", name), "--relay", origin_url]
        swarm.start(name, _starter(swarm, name, args))

    def lab_worker(name: str, misbehaviour: list[str]) -> Callable[[], RoleProcess]:
        args = [LAB_WORKER_COMMAND, *node_args("worker", name)[1:], *misbehaviour]
        return _starter(swarm, name, args, module=LAB_WORKER_MODULE)

    for index in range(config.swarm.honest_workers):
        name = f"worker-{index}"
        if index < config.swarm.slow_workers:
            swarm.start(name, lab_worker(name, ["--slowdown", str(config.swarm.slowdown)]))
        else:
            swarm.start(name, _starter(swarm, name, node_args("worker", name)))
    for index in range(config.swarm.cheating_workers):
        name = f"cheater-{index}"
        swarm.cheaters.add(name)
        swarm.start(name, lab_worker(name, ["--cheat", "half-layers"]))
    return swarm


def _start_relays(swarm: Swarm, origin_url: str, trainer_key: str) -> None:
    """The swarm's relays, each mirroring the origin and reporting to the coordinator; returns once each has
    written the URL it serves (a restarted relay takes the same port)."""
    config = swarm.config
    for index, name in enumerate(relay_names(config.swarm.relays)):
        url_file = swarm.swarm_dir / f"{name}.url"
        url_file.unlink(missing_ok=True)
        relay_args = ["relay", "--upstream", origin_url, "--trainer-public-key", trainer_key]
        relay_args += ["--data-dir", str(swarm.swarm_dir / name), "--url-file", str(url_file)]
        relay_args += swarm.network.relay_args(index)
        if config.trainer.lora.enabled:  # every adapter is merged onto step 0: relays keep serving it
            relay_args += ["--pin", str(BASE_STEP)]
        relay_args += [
            "--coordinator",
            swarm.coordinator_url,
            "--config",
            str(swarm.rundir.root / "config.json"),
            "--key",
            str(swarm.key(name)),
        ]
        process = swarm.start(name, _starter(swarm, name, relay_args))
        swarm.relay_urls.append(wait_for_file(url_file, process))
        swarm.starters[name] = _starter(swarm, name, [*relay_args, "--port", _port(swarm.relay_urls[-1])])


def _open_run(swarm: Swarm, trainer_key: str, validators: list[str]) -> None:
    """The run on the coordinator with the config's contract (kept as it is when it exists: a restarted demo),
    its validators and, when its [tasks.community] accepts task packs, their policy."""
    config = swarm.config
    with swarm.admin() as admin:
        try:
            admin.create_run(config.run.id, trainer_key, config.contract)
        except CoordinatorError as exc:
            if exc.status != 409:
                raise
        for name in validators:
            admin.add_validator(config.run.id, swarm.identity(name).node_id)
        if config.tasks.community.accept:
            PackClient(admin.transport).set_pack_policy(config.run.id, config.tasks.community)


def validator_names(count: int) -> list[str]:
    return ["validator"] if count == 1 else [f"validator-{i}" for i in range(count)]


def relay_names(count: int) -> list[str]:
    """The relays' role names, which also name their key files (the operator's relays are read from them)."""
    return [f"relay-{i}" for i in range(count)]


def _starter(
    swarm: Swarm, name: str, args: list[str], module: str = "swarmrl.cli"
) -> Callable[[], RoleProcess]:
    return lambda: swarm.group.start(name, args, module=module)


def _port(url: str) -> str:
    return str(urlsplit(url).port)


def _start_coordinator(swarm: Swarm) -> None:
    """On restart the coordinator takes the port it had, so nodes find it again at the same URL."""
    directory = swarm.rundir.root / "coordinator"
    port_file = directory / "port"
    settings_file = directory / "coordinator.json"

    def start() -> RoleProcess:
        port_file.unlink(missing_ok=True)
        args = ["coordinator", "--db-url", f"sqlite:///{directory / 'coordinator.sqlite'}"]
        args += ["--host", swarm.network.bind_host, "--port", str(swarm.coordinator_port)]
        args += ["--port-file", str(port_file)]
        args += ["--storage-dir", str(directory / "storage"), "--config", str(settings_file)]
        return swarm.group.start("coordinator", args, env={ADMIN_TOKEN_ENV: swarm.admin_token})

    directory.mkdir(parents=True, exist_ok=True)
    settings_file.write_text(operator_settings(swarm).model_dump_json(indent=2))
    swarm.coordinator_port = swarm.network.coordinator_port
    process = swarm.start("coordinator", start)
    swarm.coordinator_port = int(wait_for_file(port_file, process))
    swarm.coordinator_url = swarm.network.coordinator_url(swarm.coordinator_port)
    _wait_healthy(swarm, process)


def operator_settings(swarm: Swarm) -> CoordinatorConfig:
    """The run's [coordinator] settings with the swarm's own relays named as the operator's (unless the config
    names them): what the relays panel, the tree and the nodes table show first whatever keys join."""
    settings = swarm.config.coordinator
    if settings.operator_relays:
        return settings
    relays = [swarm.identity(name).node_id for name in relay_names(swarm.config.swarm.relays)]
    return settings.model_copy(update={"operator_relays": relays})


def restart_coordinator(swarm: Swarm) -> None:
    process = swarm.restart("coordinator")
    wait_for_file(swarm.rundir.root / "coordinator" / "port", process)
    _wait_healthy(swarm, process)


def _wait_healthy(swarm: Swarm, process: RoleProcess, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    with PublicReads.at(swarm.coordinator_url, retry=NO_RETRY, timeout_s=2.0) as client:
        while time.monotonic() < deadline:
            try:
                client.transport.request("GET", "/healthz", signed=False)
                return
            except CoordinatorError:
                if process.popen.poll() is not None:
                    raise LaunchError(f"coordinator exited:\n{process.tail()}") from None
                time.sleep(0.2)
    raise LaunchError("coordinator did not answer /healthz")


@dataclass
class NodeRecord:
    """One worker as the coordinator counts it (units, files, rows), plus what the worker says it generated."""

    name: str
    node_id: str
    leased: int = 0
    expired: int = 0
    generated: int = 0
    generated_rows: int = 0
    judged: int = 0
    accepted: int = 0
    accepted_rows: int = 0
    rejected: int = 0
    voided: int = 0
    pending: int = 0
    trained: int = 0
    trained_rows: int = 0
    stale_rows: int = 0
    unread_rows: int = 0  # accepted, and no step read the file (the run ended first)
    remainder_rows: int = 0  # the rest of a file a step stopped reading when it was full
    credited_rows: int = 0
    credited_tokens: int = 0
    wiped_tokens: int = 0
    worker_generated_files: int = 0  # from the worker's own work.json
    worker_generated_rows: int = 0
    banned: bool = False
    health: str = "-"


@dataclass
class SwarmSnapshot:
    step: int
    rewards: list[float]
    nodes: dict[str, NodeRecord]
    reject_checks: dict[str, list[str]]  # role name → the checks that rejected its files
    judged_by: dict[str, list[int]] = field(default_factory=dict)  # validator → submissions it judged
    run_status: str = "open"

    @property
    def reward(self) -> float | None:
        return self.rewards[-1] if self.rewards else None


def snapshot(swarm: Swarm) -> SwarmSnapshot:
    """What the coordinator's public read endpoints, the trainer's metrics and the nodes' own files say now."""
    run_id = swarm.config.run.id
    names = swarm.node_names()
    nodes = {
        name: NodeRecord(name, node_id)
        for node_id, name in names.items()
        if name.startswith(("worker-", "cheater-"))
    }
    by_id = {record.node_id: record for record in nodes.values()}
    reject_checks: dict[str, list[str]] = {name: [] for name in nodes}
    with PublicReads.at(swarm.coordinator_url, retry=SHORT_RETRY) as client:
        run = client.run_state(run_id)
        submissions = client.every_page("submissions", run_id)
        for submission in submissions:
            record = by_id.get(submission.node_id)
            if record is None:
                continue
            record.pending += submission.status == "pending"
            if submission.status == "accepted":
                record.credited_rows += submission.rows
                if submission.use_outcome == "stale":
                    record.stale_rows += submission.rows
                elif submission.use_outcome is None:
                    record.unread_rows += submission.rows
                elif submission.use_outcome == "trained":
                    record.remainder_rows += submission.rows - (submission.used_rows or 0)
        verdicts = client.every_page("verdicts", run_id)
        for verdict in verdicts:
            record = by_id.get(verdict.node_id)
            if record is not None and not verdict.accepted:
                reject_checks[record.name].append(verdict.check)
        for work in client.every_page("work", run_id):
            record = by_id.get(work.node_id)
            if record is not None:
                for name in (
                    "leased",
                    "expired",
                    "generated",
                    "generated_rows",
                    "judged",
                    "accepted",
                    "accepted_rows",
                    "rejected",
                    "voided",
                    "trained",
                    "trained_rows",
                ):
                    setattr(record, name, getattr(work, name))
        for balance in client.ledger(run_id).balances:
            record = by_id.get(balance.node_id)
            if record is not None:
                record.credited_tokens = balance.pending_tokens + balance.unlocked_tokens
                record.wiped_tokens = balance.wiped_tokens
        for member in client.nodes(run_id):
            if member.node_id in by_id:
                by_id[member.node_id].health = f"{member.status}/{member.health}"
        for record in nodes.values():
            try:
                record.banned = client.node(record.node_id).banned
            except CoordinatorError:
                record.banned = False
    for record in nodes.values():
        log_book = swarm.swarm_dir / record.name / "work.json"
        if log_book.exists():
            counts = json.loads(log_book.read_text())
            record.worker_generated_files = counts.get("generated_files", 0)
            record.worker_generated_rows = counts.get("generated_rows", 0)
    judged_by = {
        name: sorted(int(p.stem) for p in (swarm.swarm_dir / name / "verdicts").glob("*.json"))
        for name in swarm.validators
    }
    rewards = [m["sampled_reward"] for m in swarm.rundir.read_metrics() if "sampled_reward" in m]
    return SwarmSnapshot(run.current_step, rewards, nodes, reject_checks, judged_by, run.status)


def swarm_table(state: SwarmSnapshot | None) -> Table:
    if state is None:
        return Table(title="starting the swarm…")
    reward = "-" if state.reward is None else f"{state.reward:.3f}"
    first = "-" if not state.rewards else f"{state.rewards[0]:.3f}"
    table = Table(title=f"step {state.step} ({state.run_status}) · sampled reward {first} → {reward}")
    columns = ("node", "state", "leased", "expired", "generated", "judged", "accepted", "rejected", "pending")
    for column in (*columns, "trained", "credited tokens", "wiped", "banned"):
        table.add_column(column, justify="right")
    for record in state.nodes.values():
        table.add_row(
            record.name,
            record.health,
            *(
                str(getattr(record, name))
                for name in ("leased", "expired", "generated", "judged", "accepted", "rejected", "pending")
            ),
            str(record.trained),
            str(record.credited_tokens),
            str(record.wiped_tokens),
            "[red]yes[/red]" if record.banned else "no",
        )
    return table


def swarm_line(state: SwarmSnapshot) -> str:
    """The live table's title and its totals on one line, for output that is not a terminal."""
    reward = "-" if state.reward is None else f"{state.reward:.3f}"
    first = "-" if not state.rewards else f"{state.rewards[0]:.3f}"
    totals = {
        name: sum(getattr(r, name) for r in state.nodes.values())
        for name in ("generated", "accepted", "rejected", "pending")
    }
    banned = [r.name for r in state.nodes.values() if r.banned]
    return (
        f"step {state.step} ({state.run_status}) · sampled reward {first} → {reward} · files "
        + ", ".join(f"{n} {v}" for n, v in totals.items())
        + f" · banned: {', '.join(banned) or 'none'}"
    )


def supervise(
    swarm: Swarm,
    console: Console,
    timeout_s: float,
    interval_s: float = 2.0,
    drain_timeout_s: float = 300.0,
    on_poll: Callable[[SwarmSnapshot | None], None] | None = None,
) -> SwarmSnapshot:
    """Show the live table until the trainer finishes and the run has drained (every submitted file judged);
    raise if a needed role dies or time runs out. `on_poll` sees each snapshot (None: none yet)."""
    deadline = time.monotonic() + timeout_s
    state = None
    with live_table(console, swarm_table(None), refresh_per_second=1) as live, plain_lines(console) as lines:
        lines.state("waiting for the coordinator's first summary")
        while swarm.roles["trainer"].popen.poll() is None or (state is None or state.run_status != "drained"):
            swarm.check_alive()
            if swarm.roles["trainer"].popen.poll() is not None:
                # The trainer is done: the validators finish judging what was submitted, within bounds.
                deadline = min(deadline, time.monotonic() + drain_timeout_s)
            if time.monotonic() > deadline:
                raise LaunchError(f"the swarm did not finish (and drain) within {timeout_s:.0f}s")
            try:
                shown, state = state, snapshot(swarm)
                live.update(swarm_table(state))
                lines.state(swarm_line(state))
                if shown is None or shown.step != state.step:
                    lines.note(swarm_line(state))  # off a terminal: a line per step, and every 5 s
            except CoordinatorError:
                pass  # a restarting coordinator: the next poll will see it again
            if on_poll is not None:
                on_poll(state)
            time.sleep(interval_s)
        swarm.check_alive()
        state = snapshot(swarm)
        live.update(swarm_table(state))
    return state


def stop_swarm(swarm: Swarm) -> None:
    swarm.rundir.stop_file.touch()
    swarm.group.stop()


# What `make demo-swarm` must show of honest work (issue 14): judged and credited, and trained on.
CREDITED_GOAL = 0.95
TRAINED_GOAL = 0.85


@dataclass
class SwarmResult:
    snapshot: SwarmSnapshot
    seconds: float

    @property
    def honest(self) -> list[NodeRecord]:
        return [r for r in self.snapshot.nodes.values() if r.name.startswith("worker-")]

    @property
    def cheaters(self) -> list[NodeRecord]:
        return [r for r in self.snapshot.nodes.values() if r.name.startswith("cheater-")]

    def judged_twice(self) -> list[int]:
        """Submissions more than one validator judged (each validator's own verdict records)."""
        seen: dict[int, int] = {}
        for ids in self.snapshot.judged_by.values():
            for submission_id in ids:
                seen[submission_id] = seen.get(submission_id, 0) + 1
        return sorted(i for i, n in seen.items() if n > 1)

    def honest_work(self) -> dict[str, float]:
        """Honest completions, from generated (the workers' own count) to trained, and where the rest went."""
        total = {
            key: sum(getattr(r, key) for r in self.honest)
            for key in (
                "worker_generated_rows",
                "generated_rows",
                "credited_rows",
                "trained_rows",
                "stale_rows",
                "remainder_rows",
                "unread_rows",
                "rejected",
                "expired",
            )
        }
        generated = total["worker_generated_rows"] or 1
        return {
            "generated": total["worker_generated_rows"],
            "submitted": total["generated_rows"],
            "judged_and_credited": total["credited_rows"],
            "trained": total["trained_rows"],
            "not_trained_stale": total["stale_rows"],
            "not_trained_over_full": total["credited_rows"] - total["trained_rows"] - total["stale_rows"],
            "over_full_remainder_of_a_file": total["remainder_rows"],
            "over_full_unread_at_the_end": total["unread_rows"],
            "never_submitted": total["worker_generated_rows"] - total["generated_rows"],
            "credited_fraction": total["credited_rows"] / generated,
            "trained_fraction": total["trained_rows"] / generated,
            "honest_files_rejected": total["rejected"],
            "units_expired": total["expired"],
        }

    def failures(self) -> list[str]:
        """The demo's goals this run missed (empty: all met)."""
        work = self.honest_work()
        missed = []
        if work["honest_files_rejected"]:
            missed.append(f"{work['honest_files_rejected']} honest file(s) rejected")
        if not all(r.banned for r in self.cheaters):
            missed.append("a cheater was not banned")
        if self.judged_twice():
            missed.append(f"judged by two validators: {self.judged_twice()}")
        if work["credited_fraction"] < CREDITED_GOAL:
            missed.append(
                f"{work['credited_fraction']:.1%} of honest completions credited (goal {CREDITED_GOAL:.0%})"
            )
        if work["trained_fraction"] < TRAINED_GOAL:
            missed.append(
                f"{work['trained_fraction']:.1%} of honest completions trained on (goal {TRAINED_GOAL:.0%})"
            )
        return missed


def announce_dashboard(console: Console, coordinator_url: str) -> None:
    console.print(
        f"[bold]live dashboard: {coordinator_url}/dashboard[/bold] · "
        f"in a terminal: swarmrl status --coordinator {coordinator_url} --watch 2"
    )


class SwarmObserver(Protocol):
    """What watches a demo swarm besides its table (`demo --wan`: churn and measurements)."""

    def started(self, swarm: Swarm) -> None: ...

    def poll(self, swarm: Swarm, state: SwarmSnapshot | None) -> None: ...

    def finished(self, swarm: Swarm, state: SwarmSnapshot) -> None:
        """The run has drained; every role is still up."""


def run_swarm_demo(
    config: RunConfig,
    console: Console | None = None,
    timeout_s: float = 3600.0,
    network: SwarmNetwork | None = None,
    observer: SwarmObserver | None = None,
) -> SwarmResult:
    """Prepare (SFT, cached), start every role, show the live table until the trainer finishes and the run has
    drained, stop all, and write `swarm_result.json`."""
    from swarmrl.launch.prepare import prepare_run

    console = console or Console()
    if not console.is_terminal:
        console.width = max(console.width, 150)  # a log file gets the whole table, not a squeezed one
    started = time.monotonic()
    if config.run.directory.exists():
        shutil.rmtree(config.run.directory)
    with sft_progress(console, config.sft.steps if config.model.path is None else 0) as progress:
        rundir = prepare_run(config, progress=progress)
    console.print(f"run directory: {rundir.root}")
    with waiting(console, "starting the swarm: coordinator, relays, trainer, validators, workers"):
        swarm = start_swarm(
            config, rundir, on_coordinator=lambda url: announce_dashboard(console, url), network=network
        )
    try:
        console.print(f"coordinator {swarm.coordinator_url} · relays {', '.join(swarm.relay_urls)}")
        if observer is not None:
            observer.started(swarm)
        poll = None if observer is None else functools.partial(observer.poll, swarm)
        state = supervise(swarm, console, timeout_s, on_poll=poll)
        if observer is not None:
            observer.finished(swarm, state)
    finally:
        stop_swarm(swarm)
    result = SwarmResult(state, time.monotonic() - started)
    work = result.honest_work()
    banned = [r.name for r in result.cheaters if r.banned]
    console.print(
        f"sampled reward {state.rewards[0]:.3f} → {state.rewards[-1]:.3f} over {len(state.rewards)} steps · "
        f"honest completions: {work['generated']} generated, {work['credited_fraction']:.1%} judged and "
        f"credited, {work['trained_fraction']:.1%} trained on (not trained: {work['not_trained_stale']} stale, "
        f"{work['not_trained_over_full']} over-full: {work['over_full_remainder_of_a_file']} the rest of a file read "
        f"when its step filled, {work['over_full_unread_at_the_end']} unread at the end) · "
        f"honest files rejected: {work['honest_files_rejected']} · "
        f"judged twice: {len(result.judged_twice())} · cheaters banned: {len(banned)}/{len(result.cheaters)} "
        f"(rejected by {sorted({c for r in result.cheaters for c in state.reject_checks[r.name]})}) · "
        f"{result.seconds:.0f}s"
    )
    for failure in result.failures():
        console.print(f"[red]goal missed:[/red] {failure}")
    write_json_atomic(
        rundir.root / "swarm_result.json",
        {
            "seconds": result.seconds,
            "rewards": state.rewards,
            "honest_work": work,
            "judged_by": {name: len(ids) for name, ids in state.judged_by.items()},
            "judged_twice": result.judged_twice(),
            "goals_missed": result.failures(),
            "nodes": [asdict(r) for r in state.nodes.values()],
            "reject_checks": state.reject_checks,
        },
    )
    return result
