"""A demo swarm under 100 free identities (issue 29): what honest workers still get done, what the sybils earn.

Two arms of the same run, `configs/demo-swarm.toml` (coordinator, trainer + origin, a relay, two validators,
three honest workers one of them 3× slower, a half-model cheater) in spot-check mode
(`spot_check_fraction` 0.25, `spot_check_probation_files` 4), shorter: `--steps` policy steps.

- anchor: the swarm alone.
- sybils: the same swarm plus `--sybils` fresh identities (register, join, heartbeat) that, from the moment
  the trainer opens step `--attack-from`, poll for leases every `--poll-s` seconds and do with each unit they
  get one of three things, in turn: hoard it (open a 100 MiB upload slot and never send a byte), submit 300
  random bytes claiming a plausible unit, or submit 300 random bytes claiming 2**53 rows and tokens.

Printed per arm: honest workers' accepted files per minute over the measured window (from the opening of step
`--attack-from` to the trainer's last step, in both arms; the figure the goal is on), the window's length,
honest files accepted, units the sybils held, sybil credit (pending + unlocked tokens), sybil rows trained,
sybils banned, step_full refusals; then the ratio sybils/anchor (goal ≥ 0.90) and whether sybil credit and
garbage rows trained are 0.

Also printed per arm: the sybils' lease polls per second over the window (the attack as it actually ran) and
the CPU seconds each role spent in the window, so what the sybils cost the coordinator can be told apart from
what their own clients took from the honest processes on the same cores.

`--sybils-apart` runs the sybils in a process of their own at the idle scheduling class (SCHED_IDLE): their
clients' CPU (signing, HTTP) stands in for the attackers' own machines and, at the scheduler's lowest weight,
takes mostly cycles the swarm leaves free, while every request they send is still paid for by this swarm's
coordinator (the poll rate printed says whether the attack still ran at full pace). Without it they are threads
of this process, sharing the cores with the swarm as equals.

    PYTHONPATH=src .venv/bin/python benchmarks/sybil_bench.py [--steps 40] [--sybils 100] [--sybils-apart]
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import os
import random
import resource
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from swarmrl.configs import RunConfig, load_config
from swarmrl.configs.contract import ContractSection
from swarmrl.coordinator.client import NodeClient, PublicReads
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.transport import SHORT_RETRY
from swarmrl.identity import Identity
from swarmrl.launch.prepare import prepare_run
from swarmrl.launch.swarm import Swarm, start_swarm, stop_swarm, supervise
from swarmrl.retry import NO_RETRY

REPO = Path(__file__).resolve().parents[1]
HUGE = 2**53
MIB = 1024 * 1024


@dataclass
class Sybils:
    """Free identities hoarding, polling and submitting garbage, each on its own schedule, until stopped."""

    url: str
    run_id: str
    count: int
    poll_s: float
    contract: ContractSection  # the run's: sybils join with it (a free identity knows the run's config)
    stop: threading.Event = field(default_factory=threading.Event)
    node_ids: list[str] = field(default_factory=list)
    units_held: int = 0
    polls: int = 0  # lease requests sent
    refusals: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count_refusal(self, kind: str) -> None:
        with self.lock:
            self.refusals[kind] = self.refusals.get(kind, 0) + 1

    def play(self, index: int) -> None:
        identity = Identity.generate()
        with NodeClient.at(self.url, identity, retry=NO_RETRY, timeout_s=10.0) as client:
            try:
                client.register({"role": "sybil"})
                client.join(self.run_id, self.contract)
            except CoordinatorError as exc:
                self.count_refusal(exc.kind)
                return
            with self.lock:
                self.node_ids.append(identity.node_id)
            moves = 0
            rng = random.Random(index)
            self.stop.wait(rng.uniform(0, self.poll_s))  # not all at once
            while not self.stop.is_set():
                try:
                    client.heartbeat(self.run_id)
                    with self.lock:
                        self.polls += 1
                    lease = client.lease_work(self.run_id)
                    with self.lock:
                        self.units_held += len(lease.units)
                    for unit in lease.units:
                        self._misuse(client, unit, moves % 3)
                        moves += 1
                except CoordinatorError as exc:
                    self.count_refusal(exc.kind)
                    if exc.kind in ("banned", "ejected", "poor_standing", "not_member"):
                        return
                self.stop.wait(self.poll_s)

    def _misuse(self, client: NodeClient, unit, how: int) -> None:
        garbage = os.urandom(300)
        if how == 0:  # hoard: promise 100 MiB, send nothing
            client.request_upload(self.run_id, unit.step, unit.batch_index, "ab" * 32, 100 * MIB)
        elif how == 1:  # plausible claims, garbage bytes
            rows = self.contract.rows_per_batch
            client.upload_and_submit(self.run_id, unit.step, unit.batch_index, garbage, rows, rows)
        else:  # absurd claims
            client.upload_and_submit(self.run_id, unit.step, unit.batch_index, garbage, HUGE, HUGE)

    def attack(self) -> ThreadPoolExecutor:
        pool = ThreadPoolExecutor(self.count)
        for index in range(self.count):
            pool.submit(self.play, index)
        return pool

    def outcome(self) -> tuple[list[str], int, int, dict[str, int]]:
        with self.lock:
            return list(self.node_ids), self.units_held, self.polls, dict(self.refusals)


def attack_apart(
    url: str, run_id: str, count: int, poll_s: float, contract: ContractSection, stop, outcome
) -> None:
    """The sybils in a process of their own, at the idle scheduling class, until `stop` is set."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    sybils = Sybils(url, run_id, count, poll_s, contract)
    pool = sybils.attack()
    stop.wait()
    sybils.stop.set()
    pool.shutdown(wait=True)
    outcome.put(sybils.outcome())


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its reaped children, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(ticks) for ticks in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def role_group(name: str) -> str:
    return name.rstrip("0123456789").rstrip("-")


@dataclass
class CpuMeter:
    """CPU seconds of each role group over a window: the swarm's processes are sampled every half second (a
    process that exits keeps its last sample), with this process (its sybil threads included) and the sybils'
    own process."""

    swarm: Swarm
    attacker_pid: int | None
    first: dict[int, tuple[str, float]] = field(default_factory=dict)
    last: dict[int, tuple[str, float]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        pids = {role.popen.pid: role_group(name) for name, role in self.swarm.roles.items()}
        if self.attacker_pid is not None:
            pids[self.attacker_pid] = "sybils"
        for pid, group in pids.items():
            try:
                seconds = cpu_seconds(pid)
            except (OSError, IndexError, ValueError):  # exited and reaped
                continue
            self.first.setdefault(pid, (group, seconds))
            self.last[pid] = (group, seconds)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.first.setdefault(0, ("bench", usage.ru_utime + usage.ru_stime))
        self.last[0] = ("bench", usage.ru_utime + usage.ru_stime)

    def __enter__(self) -> CpuMeter:
        self.sample()
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            self.sample()

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.sample()

    def by_group(self) -> dict[str, float]:
        groups: dict[str, float] = {}
        for pid, (group, seconds) in self.last.items():
            groups[group] = groups.get(group, 0.0) + seconds - self.first[pid][1]
        return groups


@dataclass
class Arm:
    name: str
    window_s: float
    honest_accepted: int
    honest_rejected: int
    honest_audited: int  # honest files the spot-check draw skipped and the trainer audited and credited
    sybil_units: int = 0
    sybil_credit: int = 0
    sybil_rows_trained: int = 0
    sybils_banned: int = 0
    sybils: int = 0
    sybil_polls: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU seconds of each role over the window

    @property
    def files_per_min(self) -> float:
        return 60.0 * self.honest_accepted / self.window_s


def config_for(root: Path, name: str, steps: int) -> RunConfig:
    return load_config(
        REPO / "configs" / "demo-swarm.toml",
        [
            f"run.root='{root}'",
            f"run.name='{name}'",
            f"trainer.steps={steps}",
            "coordinator.spot_check_fraction=0.25",
            "coordinator.spot_check_probation_files=4",
        ],
    )


def honest_ids(swarm: Swarm) -> set[str]:
    return {node_id for node_id, name in swarm.node_names().items() if name.startswith("worker-")}


def wait_for_step(swarm: Swarm, client: PublicReads, step: int, timeout_s: float) -> float:
    """When the trainer published `step` (the attack starts there in one arm, the window in both)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        swarm.check_alive()
        published = [s.published_at for s in client.steps(swarm.config.run.id) if s.step == step]
        if published:
            return published[0]
        time.sleep(0.5)
    raise RuntimeError(f"the trainer did not publish step {step} in time")


def run_arm(
    root: Path, name: str, steps: int, attack_from: int, sybil_count: int, poll_s: float, apart: bool
) -> Arm:
    config = config_for(root, name, steps)
    if config.run.directory.exists():
        shutil.rmtree(config.run.directory)
    swarm = start_swarm(config, prepare_run(config))
    sybils = Sybils(swarm.coordinator_url, config.run.id, sybil_count, poll_s, config.contract)
    spawn = multiprocessing.get_context("spawn")
    stop_apart, outcome_apart = spawn.Event(), spawn.Queue()
    attacker = spawn.Process(
        target=attack_apart,
        args=(sybils.url, sybils.run_id, sybils.count, poll_s, sybils.contract, stop_apart, outcome_apart),
        daemon=True,
    )
    pool: ThreadPoolExecutor | None = None
    try:
        with PublicReads.at(swarm.coordinator_url, retry=SHORT_RETRY) as client:
            started = wait_for_step(swarm, client, attack_from, timeout_s=900)
            if sybil_count and apart:
                attacker.start()
            elif sybil_count:
                pool = sybils.attack()
            with CpuMeter(swarm, attacker.pid) as meter:
                supervise(swarm, Console(file=io.StringIO(), width=160), timeout_s=900, interval_s=2.0)
            cpu = meter.by_group()
            if attacker.pid is not None:
                stop_apart.set()
                outcome = outcome_apart.get(timeout=120)
            else:
                sybils.stop.set()
                outcome = sybils.outcome()
            return measure(swarm, client, name, started, outcome, cpu)
    finally:
        sybils.stop.set()
        stop_apart.set()
        if pool is not None:
            pool.shutdown(wait=True)
        if attacker.pid is not None:
            attacker.join(timeout=60)
        stop_swarm(swarm)


def measure(
    swarm: Swarm,
    client: PublicReads,
    name: str,
    started: float,
    outcome: tuple[list[str], int, int, dict[str, int]],
    cpu_s: dict[str, float],
) -> Arm:
    run_id = swarm.config.run.id
    last_step = max(s.published_at for s in client.steps(run_id))
    honest = honest_ids(swarm)
    submissions = client.every_page("submissions", run_id)
    accepted = [
        s
        for s in submissions
        if s.node_id in honest and s.status == "accepted" and started <= s.submitted_at <= last_step
    ]
    rejected = sum(s.node_id in honest and s.status == "rejected" for s in submissions)
    trainer = client.run_state(run_id).trainer_public_key
    audited = sum(
        v.validator_key == trainer and v.accepted
        for v in client.every_page("verdicts", run_id)
        if v.node_id in honest
    )
    node_ids, units_held, polls, refusals = outcome
    sybil_ids = set(node_ids)
    credit = sum(
        b.pending_tokens + b.unlocked_tokens for b in client.ledger(run_id).balances if b.node_id in sybil_ids
    )
    trained = sum(w.trained_rows for w in client.every_page("work", run_id) if w.node_id in sybil_ids)
    banned = sum(client.node(node_id).banned for node_id in sybil_ids)
    return Arm(
        name,
        last_step - started,
        len(accepted),
        rejected,
        audited,
        units_held,
        credit,
        trained,
        banned,
        len(sybil_ids),
        polls,
        refusals,
        cpu_s,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--attack-from", type=int, default=5, help="the sybils arrive when this step opens")
    parser.add_argument("--sybils", type=int, default=100)
    parser.add_argument(
        "--poll-s", type=float, default=3.0, help="seconds between one sybil's lease requests"
    )
    parser.add_argument(
        "--sybils-apart",
        action="store_true",
        help="run the sybils in their own process at the idle scheduling class (see above)",
    )
    parser.add_argument("--root", type=Path, default=Path("runs/sybil-bench"))
    args = parser.parse_args()
    arms = [
        run_arm(args.root, "anchor", args.steps, args.attack_from, 0, args.poll_s, False),
        run_arm(
            args.root, "sybils", args.steps, args.attack_from, args.sybils, args.poll_s, args.sybils_apart
        ),
    ]
    for arm in arms:
        print(
            f"{arm.name:>7}: honest accepted files/min {arm.files_per_min:6.2f} ({arm.honest_accepted} files in "
            f"{arm.window_s:.0f} s; {arm.honest_audited} of the run's audited by the trainer, "
            f"{arm.honest_rejected} rejected) · sybils {arm.sybils}: units held {arm.sybil_units}, credit "
            f"{arm.sybil_credit} tokens, rows trained {arm.sybil_rows_trained}, banned {arm.sybils_banned} · "
            f"refusals {dict(sorted(arm.refusals.items()))}"
        )
        print(
            f"{'':>7}  sybil lease polls/s {arm.sybil_polls / arm.window_s:.1f} · CPU s in the window: "
            + ", ".join(f"{group} {seconds:.1f}" for group, seconds in sorted(arm.cpu_s.items()))
        )
    anchor, attacked = arms
    ratio = attacked.files_per_min / anchor.files_per_min
    print(
        f"ratio sybils/anchor {ratio:.3f} (goal >= 0.90: {'met' if ratio >= 0.9 else 'MISSED'}) · sybil credit "
        f"{attacked.sybil_credit} (goal 0) · garbage rows trained {attacked.sybil_rows_trained} (goal 0)"
    )


if __name__ == "__main__":
    main()
