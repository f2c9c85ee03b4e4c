"""Start role processes, watch them, stop them by PID: the local supervisor behind `demo` and `rl`.

Each process writes its log to `<log_dir>/<name>.log` and, when it fails, its one-line reason to a pipe this
supervisor holds (`swarmrl.cli.failures`): so a failure is reported with its reason even when the log could not
be written (a full disk) or says nothing useful in its last lines.
"""

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
    """A role process failed; carries its name, exit code and the tail of its log. `exit_code`: what the
    launcher exits with, 2 when the process stopped on a failure a person can fix (its message is one line)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# Set in a role process's environment (see swarmrl.cli.failures): where to write its failure line, and that
# its console is a log file (so the traceback of an expected failure belongs there too).
FAILURE_FD_ENV = "SWARMRL_FAILURE_FD"
EXPECTED_FAILURE_EXIT = 2  # a role process that stopped on a failure a person can fix (swarmrl.cli.failures)
TRACEBACKS_ENV = "SWARMRL_LOG_TRACEBACKS"


@dataclass
class RoleProcess:
    name: str
    popen: subprocess.Popen
    log_path: Path
    failure_fd: int | None = None  # read end of the process's failure pipe
    last_reason: str = ""  # the last line read from it

    def tail(self, lines: int = 20, max_bytes: int = 64 * 1024) -> str:
        """The last lines of the log ("" when it is not a readable regular file: a log that could not be
        created, or one redirected to a device)."""
        try:
            if not self.log_path.is_file():
                return ""
            with self.log_path.open("rb") as log:
                log.seek(max(0, self.log_path.stat().st_size - max_bytes))
                text = log.read(max_bytes).decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def reason(self) -> str:
        """The last failure line the process wrote to its pipe ("" when it wrote none)."""
        if self.failure_fd is None:
            return self.last_reason
        chunks = []
        try:
            while chunk := os.read(self.failure_fd, 65536):
                chunks.append(chunk)
        except BlockingIOError:
            pass
        lines = b"".join(chunks).decode(errors="replace").strip().splitlines()
        if lines:
            self.last_reason = lines[-1]
        return self.last_reason

    def failure(self) -> str:
        """What a failed process's supervisor prints: its reason; for an expected failure (exit code 2) where
        its log has the details, else the log's last lines (a crash's traceback), when there are any."""
        head = f"{self.name} exited with code {self.popen.returncode}"
        reason, tail = self.reason(), self.tail()
        if reason:
            head += f": {reason}"
        if not tail:
            return f"{head}\n(its log {self.log_path} is empty or could not be written)"
        if reason and self.popen.returncode == EXPECTED_FAILURE_EXIT:
            return f"{head} (details in {self.log_path})"
        return f"{head}\nlast lines of its log ({self.log_path}):\n{tail}"

    def error(self) -> LaunchError:
        """The launcher's error for this failed process: exit code 2 and one line for an expected failure."""
        message = self.failure()
        expected = self.popen.returncode == EXPECTED_FAILURE_EXIT and bool(self.last_reason)
        return LaunchError(message, EXPECTED_FAILURE_EXIT if expected else 1)

    def close(self) -> None:
        if self.failure_fd is not None:
            os.close(self.failure_fd)
            self.failure_fd = None


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
        module: str = "swarmrl.cli",
    ) -> RoleProcess:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log_file = log_path.open("ab")
        preexec = (lambda: os.sched_setaffinity(0, cpu_cores)) if cpu_cores else None
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        reporting = {FAILURE_FD_ENV: str(write_end), TRACEBACKS_ENV: "1"}
        try:
            popen = subprocess.Popen(
                [*self.prefix(name), sys.executable, "-m", module, *args],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=preexec,
                pass_fds=(write_end,),
                env={**os.environ, **(env or {}), **reporting},
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
            log_file.close()
        process = RoleProcess(name, popen, log_path, read_end)
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
                raise broken.error()
            if poll is not None:
                poll()
            time.sleep(interval)
        if process.popen.returncode != 0:
            raise process.error()

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
            process.close()
