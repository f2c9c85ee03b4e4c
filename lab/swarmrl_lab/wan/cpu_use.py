"""How much CPU the processes of one arm of `demo --wan` used, by role.

Every node of the demo runs on this one machine, so an arm's steps per minute follow the CPU its processes
need per step as much as its network: a WAN arm that spends more CPU (the link proxies that emulate the paths,
the churned nodes starting again) runs slower on a machine whose cores are all busy, whatever its links. The
report puts each arm's CPU beside its throughput so a reader can tell the two apart.

`CpuUse` samples, about once a second, the CPU time (user + system) of every process descended from the demo,
and charges each to the role it descends from: a role's process (restarted ones included), a link proxy, or
the demo itself. `used_between` then gives what each role used over the window steps_per_min measures. It
also samples the machine's steal time (a hypervisor running other guests on these CPUs). The trainer and the
validators do the same work in both arms, so their CPU on one arm over the other (`same_work_ratio`) is how
much slower the machine itself ran it: a ratio of steps/min is comparable only where that is near 1.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

SAMPLE_S = 1.0
DEMO = "demo"  # the demo's own process and whatever it runs that no role started (ip, nft)


@dataclass(frozen=True)
class ProcessTimes:
    parent: int
    cpu_s: float  # user + system since the process started


def process_table() -> dict[int, ProcessTimes]:
    """Every process of the machine now (one that exits while it is read is left out, one whose times this
    user may not read counts none)."""
    table = {}
    for process in psutil.process_iter(["ppid", "cpu_times"]):
        times = process.info["cpu_times"]
        table[process.pid] = ProcessTimes(
            parent=process.info["ppid"], cpu_s=times.user + times.system if times is not None else 0.0
        )
    return table


def steal_s() -> float | None:
    """Seconds of steal time summed over every CPU, None where the platform does not count it."""
    return getattr(psutil.cpu_times(), "steal", None)


def role_of(pid: int, table: dict[int, ProcessTimes], roots: dict[int, str], demo_pid: int) -> str | None:
    """The role `pid` runs for: the first of its ancestors (itself included) that is a role's process, else
    the demo when it descends from the demo, else None (not the demo's)."""
    seen = set()
    while pid not in seen:
        if pid in roots:
            return roots[pid]
        if pid == demo_pid:
            return DEMO
        seen.add(pid)
        parent = table.get(pid)
        if parent is None:
            return None
        pid = parent.parent
    return None


def cpu_at(samples: list[tuple[float, float]], at: float) -> float:
    """CPU seconds a process had used at `at`: its last sample then, or 0 before its first (a process first
    seen later was started later, within one sample period)."""
    used = 0.0
    for when, cpu_s in samples:
        if when > at:
            break
        used = cpu_s
    return used


@dataclass
class CpuUse:
    """Samples the CPU time of the demo's processes in a thread; `roots` gives, at each sample, the pid of
    each role's process (a restarted role has a new one)."""

    roots: Callable[[], dict[int, str]]
    demo_pid: int = field(default_factory=os.getpid)
    period_s: float = SAMPLE_S
    samples: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # pid → (unix time, cpu s)
    roles: dict[int, str] = field(default_factory=dict)  # pid → its role, as first seen
    steal: list[tuple[float, float]] = field(default_factory=list)  # (unix time, the machine's steal s)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="cpu-use", daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop sampling (the thread first: nothing changes the samples after this) and take a last sample."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
        self.sample()

    def _run(self) -> None:
        while True:
            self.sample()
            if self.stop.wait(self.period_s):
                return

    def sample(self) -> None:
        now, table, roots = time.time(), process_table(), self.roots()
        for pid, times in table.items():
            role = self.roles.get(pid) or role_of(pid, table, roots, self.demo_pid)
            if role is None:
                continue
            self.roles[pid] = role
            self.samples.setdefault(pid, []).append((now, times.cpu_s))
        steal = steal_s()
        if steal is not None:  # not counted here: the figure is left out
            self.steal.append((now, steal))

    def used_between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds each role's processes used from `start` to `end` (unix times)."""
        used: defaultdict[str, float] = defaultdict(float)
        for pid, samples in self.samples.items():
            used[self.roles[pid]] += max(0.0, cpu_at(samples, end) - cpu_at(samples, start))
        return dict(used)


def role_group(role: str) -> str:
    """worker-3 → workers, validator-0 → validators, link-us → link proxies; trainer, coordinator, demo as
    they are."""
    if role.startswith("link"):
        return "link proxies"
    base = role.split("-", 1)[0]
    return base + "s" if base in ("worker", "relay", "validator", "cheater") else base


def cpu_figures(use: CpuUse, start: float, end: float, cores: int) -> dict:
    """core_s: CPU seconds every process of the arm used over [start, end]; by_role: the same per role group;
    cores_busy: core_s over the window and the machine's cores (1.0: every core busy all the time); steal_s:
    the machine's steal time over the window (None unless it was sampled before the window opened); same_work_s:
    the trainer's and validators' share of core_s."""
    by_role: defaultdict[str, float] = defaultdict(float)
    for role, seconds in use.used_between(start, end).items():
        by_role[role_group(role)] += seconds
    total = sum(by_role.values())
    window = end - start
    return {
        "core_s": total,
        "by_role": dict(sorted(by_role.items(), key=lambda kv: -kv[1])),
        "cores_busy": total / (window * cores) if window > 0 and cores > 0 else None,
        "steal_s": cpu_at(use.steal, end) - cpu_at(use.steal, start)
        if use.steal and use.steal[0][0] <= start
        else None,
        "same_work_s": same_work_s(by_role),
    }


def same_work_s(by_role: dict[str, float]) -> float:
    """CPU seconds of the trainer and the validators: the same steps trained and files judged in either arm."""
    return by_role.get("trainer", 0.0) + by_role.get("validators", 0.0)


def same_work_ratio(arm: dict, baseline: dict) -> float | None:
    """`same_work_s` of one arm's `cpu` figures over another's: above 1, the machine ran `arm` slower."""
    return arm["same_work_s"] / baseline["same_work_s"] if baseline["same_work_s"] > 0 else None
