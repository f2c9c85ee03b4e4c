"""Start role processes, watch them, stop them by PID: the local supervisor behind `demo` and `rl`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class LaunchError(Exception):
    """A role process failed; carries its name, exit code and the tail of its log."""


@dataclass
class RoleProcess:
    name: str
    popen: subprocess.Popen
    log_path: Path

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class ProcessGroup:
    log_dir: Path
    processes: list[RoleProcess] = field(default_factory=list)
    # The command a role's program runs under (`ip netns exec NS` for a machine of an emulated network).
    prefix: Callable[[str], list[str]] = lambda name: []

    def start(
        self,
        name: str,
        args: Sequence[str],
        *,
        cpu_cores: set[int] | None = None,
        env: dict[str, str] | None = None,
    ) -> RoleProcess:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log_file = log_path.open("ab")
        preexec = (lambda: os.sched_setaffinity(0, cpu_cores)) if cpu_cores else None
        popen = subprocess.Popen(
            [*self.prefix(name), sys.executable, "-m", "swarmrl.cli", *args],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=preexec,
            env={**os.environ, **(env or {})},
        )
        log_file.close()
        process = RoleProcess(name, popen, log_path)
        self.processes.append(process)
        return process

    def failed(self) -> RoleProcess | None:
        for process in self.processes:
            code = process.popen.poll()
            if code not in (None, 0):
                return process
        return None

    def wait(
        self, process: RoleProcess, *, poll: Callable[[], None] | None = None, interval: float = 0.5
    ) -> None:
        """Wait for `process` to finish, calling `poll` meanwhile; raise if any process of the group fails."""
        while process.popen.poll() is None:
            broken = self.failed()
            if broken is not None:
                raise LaunchError(
                    f"{broken.name} exited with code {broken.popen.returncode}; last lines of its log:\n{broken.tail()}"
                )
            if poll is not None:
                poll()
            time.sleep(interval)
        if process.popen.returncode != 0:
            raise LaunchError(
                f"{process.name} exited with code {process.popen.returncode}; last lines of its log:\n{process.tail()}"
            )

    def stop(self, grace_seconds: float = 10.0) -> None:
        """SIGTERM every live process, then SIGKILL what is left after the grace period."""
        for process in self.processes:
            if process.popen.poll() is None:
                process.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        for process in self.processes:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                process.popen.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait(timeout=5)
