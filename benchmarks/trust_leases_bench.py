"""Trust earned only by accepted work (issue 57, attacks 3 to 6): honest steps per minute under each attack, and an
honest newcomer's time to its first accepted file, against the attack-free anchor of the same run.

The swarm's timing is simulated in-process on a fake clock (a real demo swarm per arm is too heavy for 2 cores):
one real coordinator (`ClockedCoordinator`: the real service, its SQLite database and HTTP, its clock moved by
this script) and actors that act every `--tick` simulated seconds. Three long-standing honest workers (1, 1 and
3 s a unit, proven and trusted in a warm-up) lease, generate for their unit's time and deliver; the script is
the validator (an honest file is accepted, junk soft-rejected as a policy outside the async window, the red
team's junk) and the trainer (it opens the next step each time `--demand` files were accepted). Every actor
heartbeats every 5 s. Demo-swarm lease settings (`configs/demo-swarm.toml`): 3 s a unit assumed, 6 s target,
10 s grace.

Arms, each with `--keys` attacker keys (one run each), in a fresh coordinator, after the same warm-up:
- anchor: no attacker.
- junk (3): keys proven by one honest file each lease and submit junk at once, every `--poll` seconds.
- defect (4): keys proven by one honest file each lease all they may and deliver nothing.
- squat (5): fresh keys poll for units and hold them (half first submit one junk file: "measured", woken first).
  Once a pool unit lapsed or was rejected, each unit of the unproven pool needs a proof-of-work ticket: the
  keys share `--attacker-cores` cores of hashing (0 by default: keys, no compute, as the red team had), and the
  newcomer solves its own on one core. A ticket is solved for real at BENCH_BITS and costs the simulated
  seconds one core of this machine takes at the coordinator's default bits (`--ticket-s`, measured at start).
- inflate (6): keys proven by one honest file each hold every unit to its deadline, then submit junk.
- squat+allow-list: the squat arm with the coordinator's `worker_allow_list` naming the honest keys only.

In every arm an honest newcomer (1 s a unit) joins when the measured window opens and asks every tick (after
`--newcomer-load` seconds, its first policy's fetch and load; 0 by default; `--pool-ticket-bits 0` turns
tickets off).
Printed per arm: steps/min over the window and its ratio to the anchor (goal >= 0.9), the newcomer's seconds to
its first accepted file and its ratio to the anchor's (goal <= 2 with 100 squatting keys), the attacker keys
refused for standing, the units they held at the end, and the longest deadline any attacker unit got.

    PYTHONPATH=src .venv/bin/python benchmarks/trust_leases_bench.py [--keys 4,100] [--window 120]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import POOL_TICKET_DOMAIN
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.identity import Identity
from swarmrl.tickets import solve_ticket
from swarmrl_lab.coordinator_double import ClockedCoordinator

BEAT_S = 5.0
BENCH_BITS = 10  # what the coordinator checks here; what a ticket costs is --ticket-s of simulated time
CONFIG = dict(
    default_step_units=8,
    lease_slack_units=1,
    lease_ahead_steps=0,
    lease_initial_unit_s=3.0,
    lease_target_s=6.0,
    lease_grace_s=10.0,
    uploads_per_hour=10_000_000,
    requests_per_minute=10_000_000,
)


@dataclass
class Sim:
    """The world and its clock, the trainer's count of files towards the next step, and the steps it opened."""

    world: ClockedCoordinator
    demand: int
    ticket_s: float  # simulated seconds one core takes to solve a ticket at the coordinator's default bits
    attacker_cores: float = 0.0
    hashed: float = 0.0  # tickets the attackers' cores have solved and not spent
    files: int = 0
    opened: list[float] = field(default_factory=list)

    @property
    def now(self) -> float:
        return self.world.clock()

    def accepted(self) -> None:
        self.files += 1
        if self.files >= self.demand:
            self.files -= self.demand
            step = self.world.admin.reads.run_state("r").current_step + 1
            self.world.trainer.publish_step("r", step, units=self.demand)
            self.opened.append(self.now)

    def deliver(self, node, unit, *, good: bool) -> bool:
        """Upload and submit the unit's file; the validator accepts it or rejects it as junk. False: refused."""
        data = f"{node.node_id} {unit.step} {unit.batch_index} {self.now} {random.random()}".encode()
        try:
            submission = node.upload_and_submit("r", unit.step, unit.batch_index, data, 1, 1)
        except CoordinatorError:
            return False  # lapsed, stale or voided: the unit is lost
        if good:
            self.world.validator.post_verdict(submission.id, accept=True, check="all", rows=1, tokens=1)
            self.accepted()
        else:
            self.world.validator.post_verdict(
                submission.id, accept=False, check="async_window", reason="stale"
            )
        return good


@dataclass
class Actor:
    node: object
    beat_at: float = 0.0
    out: str | None = None  # the refusal that ended it
    ticket: object = None  # solved for its next unit of the unproven pool
    tickets: int = 0

    def beat(self, sim: Sim) -> None:
        if sim.now >= self.beat_at:
            self.node.heartbeat("r")
            self.beat_at = sim.now + BEAT_S

    def lease(self, sim: Sim) -> list:
        try:
            units = list(self.node.lease_work("r", pool_ticket=self.ticket).units)
        except CoordinatorError as exc:
            if exc.kind == "pool_ticket_needed":
                self.ticket = None
                self.need_ticket(sim)
            elif exc.kind != "step_full":
                self.out = exc.kind
            return []
        if units:
            self.ticket = None
        return units

    def need_ticket(self, sim: Sim) -> None:
        raise NotImplementedError

    def solve(self) -> None:
        self.ticket = self.node.solve_pool_ticket("r")
        self.tickets += 1


@dataclass
class Honest(Actor):
    seconds: float = 1.0
    ready_at: float = 0.0  # until then it fetches and loads its first policy: it heartbeats, leases nothing
    units: list = field(default_factory=list)
    busy_until: float = 0.0
    first_accepted: float | None = None

    def need_ticket(self, sim: Sim) -> None:
        """It hashes on its own core, busy until then."""
        self.solve()
        self.ready_at = sim.now + sim.ticket_s

    def act(self, sim: Sim) -> None:
        self.beat(sim)
        if sim.now < self.ready_at:
            return
        if not self.units:
            self.units = self.lease(sim)
            self.busy_until = sim.now + self.seconds
        elif sim.now >= self.busy_until:
            if sim.deliver(self.node, self.units.pop(0), good=True) and self.first_accepted is None:
                self.first_accepted = sim.now
            self.busy_until = sim.now + self.seconds


@dataclass
class Attacker(Actor):
    how: str = "defect"
    poll_s: float = 2.0
    next_at: float = 0.0
    units: list = field(default_factory=list)
    junked: bool = False
    longest_deadline: float = 0.0

    def need_ticket(self, sim: Sim) -> None:
        """A ticket from the attackers' shared cores, if they have solved one."""
        if sim.hashed >= 1.0:
            sim.hashed -= 1.0
            self.solve()

    def act(self, sim: Sim) -> None:
        if self.out is not None:
            return
        self.beat(sim)
        if self.how == "inflate" and self.units:
            if sim.now >= self.units[0].expires_at - 1.0:  # held to its deadline, then junk
                sim.deliver(self.node, self.units.pop(0), good=False)
            return
        if sim.now < self.next_at:
            return
        self.next_at = sim.now + self.poll_s
        self.units = self.lease(sim)
        for unit in self.units:
            self.longest_deadline = max(self.longest_deadline, unit.expires_at - sim.now)
        if self.how == "junk" or (self.how == "squat-junk" and not self.junked):
            for unit in self.units:
                sim.deliver(self.node, unit, good=False)
            self.junked, self.units = True, []


def prove(sim: Sim, node) -> None:
    """One honest file, judged and accepted: the key is proven (opening steps as they fill)."""
    while True:
        try:
            (unit, *_) = node.lease_work("r", max_units=1).units
            break
        except CoordinatorError as exc:
            assert exc.kind == "step_full", exc
            sim.world.trainer.publish_step(
                "r", sim.world.admin.reads.run_state("r").current_step + 1, units=8
            )
    sim.deliver(node, unit, good=True)


def run_arm(arm: str, keys: int, args, root: Path) -> dict:
    honest_ids = [Identity.generate() for _ in range(4)]  # three workers and the newcomer
    config = dict(CONFIG, lease_pool_ticket_bits=BENCH_BITS if args.pool_ticket_bits else 0)
    if arm == "squat+allow-list":
        config["worker_allow_list"] = [i.node_id for i in honest_ids]
    world = ClockedCoordinator(root / f"{arm}-{keys}", CoordinatorConfig(**config))
    try:
        sim = Sim(world, demand=args.demand, ticket_s=args.ticket_s, attacker_cores=args.attacker_cores)
        workers = [
            Honest(world.node(identity=ident), seconds=s)
            for ident, s in zip(honest_ids, (1.0, 1.0, 3.0), strict=False)
        ]
        while len(sim.opened) < args.warmup_steps:
            tick(sim, workers, args.tick)
        attackers: list[Attacker] = []
        if arm != "anchor":
            how = arm.split("+")[0]
            for i in range(keys):
                try:
                    node = world.node()
                except CoordinatorError as exc:
                    assert exc.kind == "not_allowed", exc
                    continue
                if how in ("junk", "defect", "inflate"):
                    prove(sim, node)
                kind = "squat-junk" if how == "squat" and i % 2 == 0 else how
                attackers.append(Attacker(node, how=kind, poll_s=args.poll, next_at=sim.now))
        for worker in workers:
            worker.beat_at = 0.0
        newcomer = Honest(
            world.node(identity=honest_ids[3]), seconds=1.0, ready_at=sim.now + args.newcomer_load
        )
        if newcomer.node.pool_ticket_challenge(
            "r"
        ).required:  # solved while its policy loads, as a worker does
            newcomer.solve()
            newcomer.ready_at = max(newcomer.ready_at, sim.now + sim.ticket_s)
        start, steps_before = sim.now, len(sim.opened)
        wall = time.monotonic()
        while sim.now - start < args.window:
            tick(sim, [*workers, newcomer, *attackers], args.tick)
        steps = len(sim.opened) - steps_before
        held = sum(
            w.held for w in world.admin.reads.work("r") if w.node_id in {a.node.node_id for a in attackers}
        )
        return {
            "arm": arm,
            "keys": keys if arm != "anchor" else 0,
            "steps_per_min": steps / (args.window / 60.0),
            "newcomer_s": None if newcomer.first_accepted is None else newcomer.first_accepted - start,
            "refused": sum(1 for a in attackers if a.out == "poor_standing"),
            "held": held,
            "longest_deadline": max((a.longest_deadline for a in attackers), default=0.0),
            "tickets": sum(a.tickets for a in attackers),
            "wall_s": time.monotonic() - wall,
        }
    finally:
        world.close()


def tick(sim: Sim, actors: list, seconds: float) -> None:
    """Every actor acts once, in a fresh random order (no one wins every race), then the clock moves on."""
    for actor in random.sample(actors, len(actors)):
        actor.act(sim)
    sim.hashed += sim.attacker_cores * seconds / sim.ticket_s
    sim.world.clock.advance(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", default="4,100", help="attacker key counts, comma-separated")
    parser.add_argument("--window", type=float, default=120.0, help="measured simulated seconds per arm")
    parser.add_argument("--tick", type=float, default=0.5, help="simulated seconds between actions")
    parser.add_argument("--poll", type=float, default=2.0, help="attackers' simulated seconds between polls")
    parser.add_argument("--demand", type=int, default=8, help="files a step trains on")
    parser.add_argument("--warmup-steps", type=int, default=12, help="steps before attackers join")
    parser.add_argument("--arms", default="junk,defect,squat,inflate,squat+allow-list")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--newcomer-load",
        type=float,
        default=0.0,
        help="simulated seconds the newcomer takes to fetch and load its first policy before it leases (issue "
        "57's anchor in the demo swarm: 19-26 s); its time to a first accepted file counts them",
    )
    parser.add_argument(
        "--attacker-cores",
        type=float,
        default=0.0,
        help="cores of hashing the attacker keys share for pool tickets (0: keys without compute)",
    )
    parser.add_argument(
        "--pool-ticket-bits",
        type=int,
        default=CoordinatorConfig().lease_pool_ticket_bits,
        help="the tickets' difficulty whose cost --ticket-s is measured at (0: no tickets, the rule off)",
    )
    parser.add_argument(
        "--ticket-s", type=float, default=None, help="simulated seconds per ticket (default: measured here)"
    )
    args = parser.parse_args()
    if args.ticket_s is None:
        args.ticket_s = ticket_seconds(args.pool_ticket_bits) if args.pool_ticket_bits else 1.0
    print(
        f"a pool ticket of {args.pool_ticket_bits} bits: {args.ticket_s:.2f} s of one core here", flush=True
    )
    random.seed(args.seed)
    counts = [int(k) for k in args.keys.split(",")]
    print(
        f"{'arm':<18}{'keys':>5}{'steps/min':>11}{'ratio':>7}{'newcomer s':>12}{'ratio':>7}"
        f"{'refused':>9}{'held':>6}{'max deadline s':>16}{'tickets':>9}{'wall s':>8}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="trust-bench-") as tmp:
        anchor = run_arm("anchor", 0, args, Path(tmp))
        print_row(anchor, anchor)
        for arm in args.arms.split(","):
            for keys in counts:
                print_row(run_arm(arm, keys, args, Path(tmp)), anchor)


def ticket_seconds(bits: int, samples: int = 5) -> float:
    """Median seconds this machine's one core takes to solve a ticket of `bits` (each a different challenge)."""
    times = []
    for i in range(samples):
        started = time.perf_counter()
        solve_ticket(POOL_TICKET_DOMAIN, ("r", "node", f"0-{i}"), bits)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def print_row(row: dict, anchor: dict) -> None:
    ratio = row["steps_per_min"] / anchor["steps_per_min"]
    came = row["newcomer_s"]
    came_ratio = "-" if came is None or not anchor["newcomer_s"] else f"{came / anchor['newcomer_s']:.2f}"
    print(
        f"{row['arm']:<18}{row['keys']:>5}{row['steps_per_min']:>11.1f}{ratio:>7.2f}"
        f"{'never' if came is None else f'{came:.1f}':>12}{came_ratio:>7}{row['refused']:>9}{row['held']:>6}"
        f"{row['longest_deadline']:>16.1f}{row['tickets']:>9}{row['wall_s']:>8.0f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
