"""What the command line does with a failure.

An expected failure — a mistake the person can fix or the world refusing: a config error, a missing model
directory, a dataset without the columns a task needs, a GPU the machine lacks, a port in use, a full disk, a
coordinator that does not answer — is ONE line on stderr and exit code 2. Its traceback goes to the log: at
debug level (on the console with `-v`), and always when a launcher started this process, whose output *is* its
log file. Anything else is a bug and keeps its traceback.

A process started by a launcher (`demo`, `rl`) also writes its last failure line to the pipe the launcher gave
it (`SWARMRL_FAILURE_FD`), so the launcher can print it even when the log cannot be written (a full disk).
"""

from __future__ import annotations

import errno
import logging
import os

import typer

from swarmrl.launch.processes import EXPECTED_FAILURE_EXIT as EXIT_USER_ERROR
from swarmrl.launch.processes import FAILURE_FD_ENV, TRACEBACKS_ENV

log = logging.getLogger("swarmrl.cli")


_failure_fd: int | None = None


def take_failure_pipe() -> None:
    """Keep the launcher's pipe (if this process was given one) and hide it from this process's own children,
    which have no such descriptor."""
    global _failure_fd
    value = os.environ.pop(FAILURE_FD_ENV, None)
    if value is not None and value.isdigit():
        _failure_fd = int(value)


def report_to_launcher(line: str) -> None:
    """One line to the launcher's pipe; best effort (the launcher may be gone)."""
    if _failure_fd is None:
        return
    try:
        os.write(_failure_fd, (line.replace("\n", " ")[:2000] + "\n").encode(errors="replace"))
    except OSError:
        pass


def expected_failure(exc: BaseException) -> str | None:
    """The one line for an expected failure; None for anything else (a bug: keep its traceback)."""
    from swarmrl.configs import ConfigError
    from swarmrl.coordinator.errors import CoordinatorError
    from swarmrl.devices import DeviceUnavailable
    from swarmrl.errors import UserError, is_disk_full

    if isinstance(exc, ConfigError):
        return f"config error: {exc}"
    if isinstance(exc, UserError | DeviceUnavailable):
        return str(exc)
    if isinstance(exc, CoordinatorError) and exc.status == 0:
        return str(exc.detail)
    if isinstance(exc, OSError) and (line := _os_failure(exc)) is not None:
        return line
    if is_disk_full(exc):  # a library's own wrapping of ENOSPC (safetensors, torch)
        return f"no space left on the device: {exc}"
    return None


def _os_failure(exc: OSError) -> str | None:
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left on the device{where}: free some space or choose another directory"
    if exc.errno == errno.EADDRINUSE:
        return f"address already in use: {exc.strerror or exc}"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"permission denied{where}: {exc.strerror}"
    if exc.errno == errno.ENOENT and exc.filename:
        return f"no such file or directory: {exc.filename}"
    return None


def fail(exc: Exception) -> None:
    """At the boundary of a command: an expected failure becomes one line and exit code 2; anything else goes
    on as it is (its traceback printed), after the launcher's pipe heard of it."""
    line = expected_failure(exc)
    report_to_launcher(line or f"{type(exc).__name__}: {exc}")
    if line is None:
        return
    if os.environ.get(TRACEBACKS_ENV):
        # This process's console is its log file: one record, in the log's format, with the traceback.
        log.error("%s", line, exc_info=exc)
    else:
        log.debug("%s", line, exc_info=exc)  # shown with -v
        typer.echo(f"error: {line}", err=True)
    raise typer.Exit(EXIT_USER_ERROR) from exc
