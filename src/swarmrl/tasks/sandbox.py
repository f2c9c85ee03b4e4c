"""Run an untrusted Python program in a sandboxed subprocess and collect what it printed.

Layers (SPEC §3: time, memory, no network, no writes outside a temp dir), strongest first:
- `namespaces` isolation (needs root or CAP_SYS_ADMIN and the `unshare` tool; probed once): fresh network
  namespace (no interfaces but a downed loopback), PID namespace (the program is PID 1's child; when the run
  ends or is killed every process in it dies), mount namespace with private tmpfs scratch dirs and `/`
  read-only, IPC/UTS namespaces, and a random private uid so RLIMIT_NPROC is enforced (it is not for root);
- `prelude` isolation: no namespaces; still a private uid (so RLIMIT_NPROC holds and no other process can be
  signalled) when running as root and the interpreter lives in directories other users can traverse; otherwise
  the program runs as the caller's user and only the layers below stand between it and the machine;
- rlimits always: RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE=0;
- an audit hook always (`sys.addaudithook`, which Python code cannot remove): no fork/exec/system/spawn, no
  sockets, no ctypes, no writes/removals outside the work dir; un-audited process-targeting functions
  (pidfd_open, sched_setaffinity, setpriority, ...) are deleted from their modules. This in-process layer is
  a strong filter, not a boundary: a program that digs through interpreter internals could rebuild what was
  deleted, which is why namespace isolation is the default where it works;
- from the caller: a wall-clock deadline, a cap on stdout+stderr, and SIGKILL to the whole process group.
"""

from __future__ import annotations

import functools
import marshal
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmrl.tasks.config import CodeRewardConfig
from swarmrl.tasks.errors import SandboxError

_CHILD = str(Path(__file__).with_name("sandbox_child.py"))
_UID_BASE = 1_000_000
_UNSHARE_FLAGS = ("--net", "--pid", "--mount", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc")


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 1 << 30
    max_processes: int = 8
    max_output_bytes: int = 1 << 20
    max_file_bytes: int = 16 << 20

    @classmethod
    def from_config(cls, config: CodeRewardConfig) -> SandboxLimits:
        return cls(
            config.timeout_seconds,
            config.cpu_seconds,
            config.memory_mb << 20,
            config.max_processes,
            config.max_output_bytes,
            config.max_file_bytes,
        )


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    output_limited: bool
    seconds: float

    @property
    def succeeded(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.output_limited


def run_python(
    files: dict[str, str],
    main: str = "main.py",
    *,
    stdin: str = "",
    limits: SandboxLimits | None = None,
    isolation: str = "auto",
    guard: bool = True,
    main_globals: dict[str, Any] | None = None,
) -> SandboxResult:
    """Run `files[main]` (with the other files beside it) in a fresh sandbox.

    `main_globals` (plain data: str, int, float, bool, None, list, dict) are predefined in the main file's
    module namespace.
    `guard=False` leaves out the in-process audit hook; only for tests that prove the OS layers hold alone.
    Raises SandboxError when the sandbox cannot be set up; anything the program does is in the result.
    """
    limits = limits or SandboxLimits()
    if main not in files or any("/" in name or name.startswith(".") for name in files):
        raise SandboxError("files must be plain names and include the main file")
    mode = resolve_isolation(isolation)
    if not guard and mode != "namespaces":
        raise SandboxError("the audit-hook guard may only be left out under namespace isolation")
    scratch = None if mode == "namespaces" else tempfile.mkdtemp(prefix="swarmrl-sandbox-")
    try:
        return _run(files, main, stdin, limits, mode, guard, scratch, main_globals or {})
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _run(
    files: dict[str, str],
    main: str,
    stdin: str,
    limits: SandboxLimits,
    mode: str,
    guard: bool,
    scratch: str | None,
    main_globals: dict[str, Any],
) -> SandboxResult:
    status_read, status_write = os.pipe()
    private_uid = mode == "namespaces" or _private_uid_without_namespaces()
    uid = _UID_BASE + secrets.randbelow(1 << 24) if private_uid else None
    # marshal, not json: the child then starts without importing json (and re, enum), ~20 ms per run.
    payload = marshal.dumps(
        {
            "mode": mode,
            "workdir": scratch,
            "uid": uid,
            "files": files,
            "main": main,
            "stdin": stdin,
            "guard": guard,
            "status_fd": status_write,
            "globals": main_globals,
            "limits": {
                "cpu_seconds": limits.cpu_seconds,
                "memory_bytes": limits.memory_bytes,
                "max_processes": limits.max_processes,
                "max_file_bytes": limits.max_file_bytes,
            },
        }
    )
    argv = [sys.executable, "-I", "-B", _CHILD]
    if mode == "namespaces":
        argv = ["unshare", *_UNSHARE_FLAGS, "--", *argv]
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(status_write,),
            start_new_session=True,
            cwd=scratch or "/",
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
        )
    except OSError as exc:
        os.close(status_read)
        raise SandboxError(f"cannot start the sandbox: {exc}") from exc
    finally:
        os.close(status_write)
    try:
        stdout, stderr, timed_out, limited = _communicate(
            process, payload, started + limits.wall_seconds, limits.max_output_bytes
        )
    finally:
        _kill_group(process)
        setup_ok = _read_status(status_read)
    if not setup_ok:
        # The program never ran: an infrastructure failure, not a wrong answer; it must not score 0 silently.
        reason = "timed out" if timed_out else f"exit code {process.returncode}"
        raise SandboxError(
            f"sandbox setup failed ({mode}, {reason}): {stderr[-2000:].decode(errors='replace')}"
        )
    return SandboxResult(
        process.returncode,
        stdout.decode(errors="replace"),
        stderr.decode(errors="replace"),
        timed_out,
        limited,
        time.monotonic() - started,
    )


def _communicate(
    process: subprocess.Popen, payload: bytes, deadline: float, max_output: int
) -> tuple[bytes, bytes, bool, bool]:
    """Feed stdin and drain both pipes without blocking; stop at the deadline or the output cap."""
    chunks: dict[int, list[bytes]] = {process.stdout.fileno(): [], process.stderr.fileno(): []}
    total = 0
    pending = memoryview(payload)
    with selectors.DefaultSelector() as selector:
        os.set_blocking(process.stdin.fileno(), False)
        selector.register(process.stdin, selectors.EVENT_WRITE)
        selector.register(process.stdout, selectors.EVENT_READ)
        selector.register(process.stderr, selectors.EVENT_READ)
        open_readers = 2
        while open_readers:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return (
                    b"".join(chunks[process.stdout.fileno()]),
                    b"".join(chunks[process.stderr.fileno()]),
                    True,
                    False,
                )
            for key, _ in selector.select(timeout=min(remaining, 0.5)):
                if key.fileobj is process.stdin:
                    try:
                        pending = pending[os.write(key.fd, pending[:65536]) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(process.stdin)
                        process.stdin.close()
                    continue
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                    open_readers -= 1
                    continue
                chunks[key.fd].append(data)
                total += len(data)
                if total > max_output:
                    return (
                        b"".join(chunks[process.stdout.fileno()])[:max_output],
                        b"".join(chunks[process.stderr.fileno()])[:max_output],
                        False,
                        True,
                    )
    try:
        process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return (
            b"".join(chunks[process.stdout.fileno()]),
            b"".join(chunks[process.stderr.fileno()]),
            True,
            False,
        )
    return b"".join(chunks[process.stdout.fileno()]), b"".join(chunks[process.stderr.fileno()]), False, False


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the session's process group (unshare, the interpreter, anything it forked) and reap."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None and not stream.closed:
            stream.close()
    process.wait()


def _read_status(fd: int) -> bool:
    try:
        os.set_blocking(fd, False)
        return os.read(fd, 1) == b"1"
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@functools.cache
def _private_uid_without_namespaces() -> bool:
    """Prelude isolation can still drop to a private uid when we are root and every directory the interpreter
    needs is traversable by other users (true for /usr, /opt or a venv outside a private home)."""
    from swarmrl.tasks import sandbox_child

    return os.geteuid() == 0 and not sandbox_child.hidden_interpreter_dirs()


@functools.cache
def _namespaces_work() -> bool:
    if shutil.which("unshare") is None or not sys.platform.startswith("linux"):
        return False
    try:
        result = _run(
            {"main.py": "import os\nprint(os.getuid())"},
            "main.py",
            "",
            SandboxLimits(wall_seconds=30),
            "namespaces",
            True,
            None,
            {},
        )
    except SandboxError:
        return False
    return result.succeeded and result.stdout.strip() not in ("", "0")


def resolve_isolation(requested: str) -> str:
    """'namespaces' or 'prelude' for this machine; 'auto' picks namespaces when a probe run works."""
    if requested == "prelude":
        return "prelude"
    if requested == "namespaces":
        if not _namespaces_work():
            raise SandboxError("namespace isolation requested but unavailable (needs root and unshare)")
        return "namespaces"
    if requested == "auto":
        return "namespaces" if _namespaces_work() else "prelude"
    raise SandboxError(f"unknown isolation mode {requested!r}")
