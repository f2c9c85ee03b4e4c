"""cgroup memory and process-count limits for one sandbox, where this process may create cgroups.

RLIMIT_AS bounds each process's address space but not what a sandbox holds in memfds, pipes or tmpfs; a
memory cgroup bounds all of it together (swap included), and a pids cgroup bounds its processes. Used when
a writable hierarchy offers the controllers: cgroup v1 `memory` and `pids` hierarchies (each mounted on its
own, as on this kind of machine), or a cgroup v2 group whose `cgroup.subtree_control` already enables
`memory` and `pids` for its children (a delegated group). Otherwise the sandbox runs without and the
isolation description says so.

The sandbox's processes are moved in right after bwrap reports its child, before the sandbox server reads
its setup, so nothing of the solution ever runs outside: a process forked before the move is found through
its parent's children list, one forked after it inherits the group. Each process keeps a pool of groups
(removed at exit; groups of killed processes are swept by the next one).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

PREFIX = "swarmrl-sandbox-"


@dataclass(frozen=True)
class CgroupParents:
    """Where this process creates sandbox groups: one dir per controller (v1) or one shared dir (v2)."""

    version: int
    memory: str
    pids: str


@functools.cache
def cgroup_parents() -> CgroupParents | None:
    """The writable parents for sandbox groups, or None when cgroup limits are not available here."""
    try:
        mounts = _cgroup_mounts()
        own = _own_cgroups()
    except OSError:
        return None
    memory, pids = mounts.get("memory"), mounts.get("pids")
    if memory and pids and "memory" in own and "pids" in own:
        parents = CgroupParents(1, memory + own["memory"], pids + own["pids"])
        if _can_create(parents.memory) and _can_create(parents.pids):
            return parents
    unified = mounts.get("")
    if unified and "" in own:
        parent = unified + own[""]
        try:
            enabled = Path(parent, "cgroup.subtree_control").read_text().split()
        except OSError:
            return None
        if {"memory", "pids"} <= set(enabled) and _can_create(parent):
            return CgroupParents(2, parent, parent)
    return None


class SandboxCgroup:
    """A memory + pids group for one sandbox at a time (see `acquire`)."""

    def __init__(self, parents: CgroupParents) -> None:
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self.parents = parents
        self.memory_dir = os.path.join(parents.memory, name)
        self.pids_dir = os.path.join(parents.pids, name)
        self.dirs = sorted({self.memory_dir, self.pids_dir})
        for path in self.dirs:
            os.mkdir(path)

    def limit(self, memory_bytes: int, max_processes: int) -> None:
        if self.parents.version == 1:
            self._limit_v1(memory_bytes)
        else:
            _write(self.memory_dir, "memory.max", memory_bytes)
            _write(self.memory_dir, "memory.swap.max", 0)
        _write(self.pids_dir, "pids.max", max_processes)

    def _limit_v1(self, memory_bytes: int) -> None:
        # v1 refuses any write that leaves memory+swap below memory alone (EINVAL): a reused group whose limit
        # goes up takes the memsw limit first, one whose limit goes down takes it last.
        current = int(Path(self.memory_dir, "memory.limit_in_bytes").read_text())
        if memory_bytes > current:
            self._limit_swap_v1(memory_bytes)
        _write(self.memory_dir, "memory.limit_in_bytes", memory_bytes)
        self._limit_swap_v1(memory_bytes)

    def _limit_swap_v1(self, memory_bytes: int) -> None:
        with contextlib.suppress(FileNotFoundError):  # swap accounting may be compiled out
            _write(self.memory_dir, "memory.memsw.limit_in_bytes", memory_bytes)

    def adopt(self, pid: int) -> None:
        """Move `pid` and all its descendants into the group. Whatever a moved process forks afterwards is
        born inside, so listing the descendants again after each round of moves, until a listing finds none
        left outside, leaves nothing behind (two listings when nothing forks meanwhile)."""
        moved: set[int] = set()
        pending = [pid]
        while pending:
            for current in pending:
                with contextlib.suppress(ProcessLookupError):  # exited meanwhile: nothing left to move
                    for path in self.dirs:
                        _write(path, "cgroup.procs", current)
                moved.add(current)
            pending = [child for child in _descendants(pid) if child not in moved]

    def empty(self) -> bool:
        # pids.current, not cgroup.procs: an exited task is charged until it is reaped (a sandbox's pid 1 is
        # reparented to the host's init when bwrap is killed, and reaped a little later).
        return Path(self.pids_dir, "pids.current").read_text().strip() == "0" and not (
            Path(self.memory_dir, "cgroup.procs").read_text().strip()
        )

    def remove(self) -> None:
        for path in self.dirs:
            _remove(path, wait_seconds=1.0)


# Groups are reused: creating and removing one costs more than a sandbox start (the last processes of a
# killed sandbox take milliseconds to leave). A group goes back to the pool when its sandbox is killed and is
# handed out again only once empty, so two sandboxes never share one. A sandbox started while every pooled
# group is still draining gets a new group rather than waiting for one (back-to-back tool runs would
# otherwise each wait out the previous sandbox's exit); only a pool already holding `_POOL_LIMIT` groups
# waits, so a group that never drains cannot make the pool grow without bound.
_FREE: list[SandboxCgroup] = []
_LOCK = threading.Lock()
_POOL_LIMIT = 8


def acquire(parents: CgroupParents, memory_bytes: int, max_processes: int) -> SandboxCgroup:
    """An empty group with these limits, reused from this process's pool or new."""
    _sweep(parents)
    with _LOCK:
        free = [group for group in _FREE if group.parents == parents]
        for group in free:
            _FREE.remove(group)
    chosen = next((group for group in free if _is_empty(group)), None)
    if chosen is None and len(free) >= _POOL_LIMIT:
        chosen = next((group for group in free if _wait_empty(group, wait_seconds=0.5)), None)
    for group in free:
        if group is not chosen:
            release(group)
    chosen = chosen or SandboxCgroup(parents)
    chosen.limit(memory_bytes, max_processes)
    return chosen


def release(group: SandboxCgroup) -> None:
    with _LOCK:
        _FREE.append(group)


@atexit.register
def _remove_pool() -> None:
    with _LOCK:
        groups, _FREE[:] = list(_FREE), []
    for group in groups:
        group.remove()


def _is_empty(group: SandboxCgroup) -> bool:
    try:
        return group.empty()
    except OSError:  # removed under us: never hand it out
        return False


def _wait_empty(group: SandboxCgroup, wait_seconds: float) -> bool:
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            if group.empty():
                return True
        except OSError:
            return False
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)


def _cgroup_mounts() -> dict[str, str]:
    """Controller name ('' for the v2 hierarchy) -> mount point, from the mount table."""
    found: dict[str, str] = {}
    for mount in psutil.disk_partitions(all=True):
        if mount.fstype == "cgroup2":
            found.setdefault("", mount.mountpoint)
        elif mount.fstype == "cgroup":
            for option in mount.opts.split(","):
                found.setdefault(option, mount.mountpoint)
    return found


def _own_cgroups() -> dict[str, str]:
    """Controller name ('' for v2) -> this process's group path, from /proc/self/cgroup (psutil reads no
    cgroup membership)."""
    found: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            found[name] = path.rstrip("/")
    return found


def _can_create(parent: str) -> bool:
    probe = os.path.join(parent, f"{PREFIX}probe-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    _remove(probe, wait_seconds=0.5)
    return True


def _descendants(pid: int) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _write(directory: str, name: str, value: int) -> None:
    with open(os.path.join(directory, name), "w") as handle:
        handle.write(str(value))


def _remove(path: str, wait_seconds: float) -> None:
    """rmdir, retrying while the last processes of a killed sandbox finish exiting."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return  # left for _sweep
            time.sleep(0.01)


_SWEPT: set[CgroupParents] = set()


def _sweep(parents: CgroupParents) -> None:
    """Remove empty sandbox groups that an earlier, killed judge process left behind (once per process)."""
    if parents in _SWEPT:
        return
    _SWEPT.add(parents)
    for parent in {parents.memory, parents.pids}:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            owner = name[len(PREFIX) :].split("-", 1)[0]
            if name.startswith(PREFIX) and owner.isdigit() and not psutil.pid_exists(int(owner)):
                _remove(os.path.join(parent, name), wait_seconds=0)
