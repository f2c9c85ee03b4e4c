"""The code sandbox, trusted side: where untrusted solutions run, and the session that talks to them.

Isolation (`CodeRewardConfig.isolation`):
- `bwrap` — the OS boundary, bubblewrap: a read-only root holding only /usr (and the /lib*, /bin links), the
  dynamic linker cache, a staged copy of the interpreter (at /opt/python, no site-packages), the configured
  allowed packages and the sandbox scripts, laid out by `sandbox_bwrap` so that nothing there (mount table,
  pid 1's command line, environment, compiled files, sys.prefix) names the host's install, the venv or the
  project; a fresh /proc and minimal /dev; a private size-capped tmpfs /tmp (the
  work dir); new pid, ipc, uts, net (no network, not even the host's loopback) and cgroup namespaces; a new
  session (no terminal injection); killed with its parent; no inherited fds; a cleared environment; no
  capabilities; a seccomp filter (`sandbox_seccomp`). Run by root, bwrap keeps its privileged mode and
  `setpriv` drops the sandbox to a random private uid/gid with no groups and an empty bounding set, so
  file permissions are a second layer and RLIMIT_NPROC counts that sandbox alone; run by another user, bwrap
  creates a user namespace (further user namespaces disabled) and the sandbox keeps that unprivileged uid.
- `none` — no OS isolation: the audit hook and rlimits only. Python's audit hooks are not a security
  boundary, so this needs `unsafe_no_os_isolation = true` and is announced with a warning.
`auto` picks bwrap when a probe run proves it works here, and otherwise refuses with what is missing, unless
the unsafe flag allows `none`. In every mode the sandbox's server (`sandbox_child`) sets rlimits (CPU, address
space, file size, open files, processes, no core dumps) and installs the audit hook in every process that runs
the solution, and this side enforces a wall-clock deadline and kills the whole process group at the end.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn

from prometheus_client import Gauge

from swarmrl.configs.tasks import CodeRewardConfig
from swarmrl.tasks import sandbox_cgroup, sandbox_wire
from swarmrl.tasks.errors import SandboxError
from swarmrl.tasks.sandbox_bwrap import ENV, HERE, SCRIPTS, SERVER_MAIN, WORKDIR, bwrap_layout
from swarmrl.tasks.sandbox_cgroup import SandboxCgroup, cgroup_parents
from swarmrl.tasks.sandbox_invoke import OPS, MalformedReply, Reply, parse_reply
from swarmrl.tasks.sandbox_seccomp import seccomp_bpf
from swarmrl.tasks.sandbox_stage import package_entries

logger = logging.getLogger(__name__)

ISOLATION_MODES = ("bwrap", "none")
ISOLATION_GAUGE = Gauge(
    "swarmrl_code_sandbox_isolation",
    "Isolation of the code-reward sandbox in this process: 1 for the mode in use (bwrap = OS boundary, "
    "none = audit hook and rlimits only, unsafe)",
    ["mode"],
)
_PRIVATE_UID_BASE = 1 << 30  # far above any real account; one random uid per sandbox
_SETUP_FRAME_LIMIT = 64 << 20


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 1 << 30
    max_processes: int = 16
    max_output_bytes: int = 1 << 20
    max_file_bytes: int = 16 << 20
    tmpfs_bytes: int = 64 << 20

    @classmethod
    def from_config(cls, config: CodeRewardConfig) -> SandboxLimits:
        return cls(
            config.timeout_seconds,
            config.cpu_seconds,
            config.memory_mb << 20,
            config.max_processes,
            config.max_output_bytes,
            config.max_file_bytes,
            config.tmpfs_mb << 20,
        )

    @property
    def max_frame_bytes(self) -> int:
        # A reply carries at most max_output_bytes of text, which ASCII-escaping can grow up to 6x.
        return 6 * self.max_output_bytes + (64 << 10)


@dataclass(frozen=True)
class SandboxPlan:
    """Everything a process needs to start sandboxes (picklable: judges in worker processes get a copy)."""

    mode: str
    command: tuple[str, ...]  # the interpreter running the server script, as seen inside the sandbox
    bwrap_args: tuple[str, ...] = ()  # mounts and namespaces (bwrap mode)
    files: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)  # written inside by bwrap
    import_paths: tuple[str, ...] = ()  # where the allowed packages are, inside the sandbox
    private_uid: bool = False
    cgroups: bool = False  # memory + pids cgroup per session
    seccomp: bytes = field(default=b"", repr=False)
    description: str = ""


@dataclass(frozen=True)
class RunOutcome:
    exit_status: int
    stdout: str
    stderr: str
    stdout_truncated: bool

    @property
    def succeeded(self) -> bool:
        return self.exit_status == 0 and not self.stdout_truncated


class SessionBroken(BaseException):  # noqa: N818 — a state, not an error of the caller
    """The sandbox timed out, died, or answered something that is not a well-formed reply: whatever was
    being asked fails. A BaseException so that test code's `except Exception` cannot swallow it."""


class SandboxSession:
    """One sandboxed interpreter serving one solution: requests are answered in order within one deadline."""

    def __init__(
        self, plan: SandboxPlan, limits: SandboxLimits, solution: str, *, guard: bool = True
    ) -> None:
        self.plan = plan
        self.limits = limits
        self.deadline = time.monotonic() + limits.wall_seconds
        self._scratch = tempfile.mkdtemp(prefix="swarmrl-sandbox-") if plan.mode == "none" else None
        setup = {
            "solution": solution,
            "workdir": self._scratch or WORKDIR,
            "paths": list(plan.import_paths),
            "guard": guard,
            "limits": {
                "cpu_seconds": limits.cpu_seconds,
                "memory_bytes": limits.memory_bytes,
                "max_processes": limits.max_processes,
                "max_file_bytes": limits.max_file_bytes,
                "max_output_bytes": limits.max_output_bytes,
                "max_frame_bytes": limits.max_frame_bytes,
            },
        }
        self._pending = sandbox_wire.encode(setup)
        self._ready = False
        self._failed: str | None = None
        self._stderr = bytearray()
        self._buffer = bytearray()
        self._cgroup: SandboxCgroup | None = None
        self._init_pidfd: int | None = None
        # The task's own classes whose objects travel by value (set with the "records" operation).
        self.record_types: dict[str, type] = {}
        _collect_retired()
        try:
            self.process = self._start()
        except BaseException:
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)
            raise

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, stdin: str) -> RunOutcome:
        """The solution as a program with this stdin (a fresh process per run)."""
        reply = self.request(("run", stdin))
        if not (
            len(reply) == 5
            and reply[0] == "ran"
            and type(reply[1]) is int
            and type(reply[2]) is str
            and type(reply[3]) is str
            and type(reply[4]) is bool
        ):
            raise SessionBroken(f"malformed run reply {_brief(reply)}")
        return RunOutcome(reply[1], reply[2], reply[3], reply[4])

    def call(self, name: str, args: tuple, kwargs: dict[str, Any]) -> tuple:
        """("returned", value) or ("raised", type name, message) from calling the solution's `name`."""
        reply = self.request(("call", name, tuple(args), dict(kwargs)))
        if len(reply) == 2 and reply[0] == "returned":
            return reply
        if len(reply) == 3 and reply[0] == "raised" and type(reply[1]) is str and type(reply[2]) is str:
            return reply
        raise SessionBroken(_failure(reply, f"calling {name}"))

    def invoke(
        self, op: str, target: str | int | None, name: str | None = None, args: tuple = (), kwargs=None
    ) -> Reply:
        """One operation on the solution (`sandbox_calls`): call a global or a held object, call a method,
        read an attribute, apply a builtin, list the solution's names. Arguments may hold `sandbox_wire.Ref`s
        to held objects. SessionBroken when the sandbox fails, or says the operation cannot be done."""
        if op not in OPS:
            raise ValueError(f"unknown operation {op!r}")
        reply = self.request(("invoke", op, target, name, tuple(args), dict(kwargs or {})))
        try:
            return parse_reply(reply, tuple(self.record_types.values()))
        except MalformedReply as exc:
            raise SessionBroken(f"{op} {target!r}: {exc}") from None

    def request(self, message: tuple) -> tuple:
        if self._failed is not None:  # replies may be out of step now: the session stays broken
            raise SessionBroken(self._failed)
        try:
            frame = sandbox_wire.encode(message, records=self.record_types)
        except sandbox_wire.WireError as exc:
            raise SessionBroken(f"the request holds a value that is not plain data: {exc}") from None
        self._pending += frame
        if not self._ready:
            ready = self._reply(setup=True)
            if ready != ("ready",):
                raise SandboxError(f"sandbox setup answered {_brief(ready)}")
            self._ready = True
        try:
            return self._reply(setup=False)
        except SessionBroken as exc:
            self._failed = str(exc)
            raise

    def close(self) -> None:
        self._end(self.process)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _end(self, process: subprocess.Popen) -> None:
        """SIGKILL the sandbox: its pid 1, which makes the kernel kill its whole pid namespace (in mode none:
        the server's process group). bwrap then reaps that child and exits by itself; it is collected, and
        the cgroup handed back, at a later session start (killed first, bwrap would leave its child to the
        host's init, charged to the sandbox's pids cgroup until reaped there)."""
        if self._init_pidfd is None:
            self._kill(process)
            return
        try:
            signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(self._init_pidfd)
        self._init_pidfd = None
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        with _RETIRED_LOCK:
            _RETIRED.append((time.monotonic(), process, self._cgroup))
        self._cgroup = None

    @staticmethod
    def _kill(process: subprocess.Popen) -> None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        process.wait()

    @property
    def stderr_tail(self) -> str:
        return self._stderr.decode(errors="replace")

    def _start(self) -> subprocess.Popen:
        if self.plan.mode != "bwrap":
            return self._popen(list(self.plan.command), ())
        info_read, info_write = os.pipe()  # bwrap reports its child (the sandbox's pid 1) here
        fds: list[int] = [info_write]
        try:
            seccomp_fd = _memfd("sandbox-seccomp", self.plan.seccomp)
            fds.append(seccomp_fd)
            files: list[str] = []
            for path, content in self.plan.files:
                fds.append(_memfd("sandbox-file", content))
                files += ["--perms", "0444", "--file", str(fds[-1]), path]
            argv = [
                *self.plan.bwrap_args,
                *("--perms", "1777", "--size", str(self.limits.tmpfs_bytes), "--tmpfs", "/tmp"),
                *files,
                *("--remount-ro", "/", "--seccomp", str(seccomp_fd), "--info-fd", str(info_write)),
            ]
            # Options through a memfd: the sandbox's pid 1 (bwrap) shows no host path in /proc/1/cmdline.
            fds.append(_memfd("sandbox-args", b"".join(arg.encode() + b"\0" for arg in argv)))
            command = ["bwrap", "--args", str(fds[-1]), "--", *self._drop_privileges(), *self.plan.command]
            process = self._popen(command, tuple(fds))
            os.close(fds.pop(0))
            self._hold_sandbox_init(process, info_read)
            return process
        finally:
            for fd in (info_read, *fds):
                os.close(fd)

    def _drop_privileges(self) -> list[str]:
        if not self.plan.private_uid:
            return []
        uid = _PRIVATE_UID_BASE + secrets.randbelow(1 << 24)
        return [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ]

    def _popen(self, argv: list[str], pass_fds: tuple[int, ...]) -> subprocess.Popen:
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=pass_fds,
                start_new_session=True,
                cwd=self._scratch or "/",
                env=ENV if self.plan.mode == "bwrap" else {**ENV, "HOME": self._scratch or "/"},
            )
        except OSError as exc:
            raise SandboxError(f"cannot start the sandbox: {exc}") from exc
        assert process.stdin is not None  # a pipe
        os.set_blocking(process.stdin.fileno(), False)
        return process

    def _hold_sandbox_init(self, process: subprocess.Popen, info_fd: int) -> None:
        """Take a pidfd on the sandbox's pid 1 (killing it ends every process in the sandbox, whatever
        became of bwrap) and, with cgroups, move it and whatever it forked so far into a fresh memory + pids
        group before the server reads its setup: the solution never runs outside the group."""
        info = b""
        with selectors.DefaultSelector() as selector:
            selector.register(info_fd, selectors.EVENT_READ)
            while selector.select(max(0.0, self.deadline - time.monotonic())):
                chunk = os.read(info_fd, 4096)
                if not chunk:
                    break
                info += chunk
        try:
            child = int(json.loads(info)["child-pid"])
            self._init_pidfd = os.pidfd_open(child)
        except (ValueError, KeyError, TypeError, OSError):
            self._kill(process)
            raise SandboxError(f"bwrap reported no sandbox process: {info[:200]!r}") from None
        if not self.plan.cgroups:
            return
        parents = cgroup_parents()
        try:
            if parents is None:
                raise OSError("the cgroup hierarchy is no longer writable")
            self._cgroup = sandbox_cgroup.acquire(
                parents, self.limits.memory_bytes, self.limits.max_processes + 1
            )
            self._cgroup.adopt(child)
        except OSError as exc:
            self._end(process)
            raise SandboxError(f"cannot limit the sandbox with cgroups: {exc}") from exc

    def _reply(self, setup: bool) -> tuple:
        """Write what is pending and read one reply frame before the deadline."""
        stdin, stdout, stderr = self.process.stdin, self.process.stdout, self.process.stderr
        assert (
            stdin is not None and stdout is not None and stderr is not None
        )  # `_start` made all three pipes
        header = sandbox_wire.HEADER_BYTES
        needed: int | None = None
        with selectors.DefaultSelector() as selector:
            if self._pending:
                selector.register(stdin, selectors.EVENT_WRITE)
            selector.register(stdout, selectors.EVENT_READ)
            selector.register(stderr, selectors.EVENT_READ)
            while True:
                if needed is None and len(self._buffer) >= header:
                    needed = header + sandbox_wire.frame_length(bytes(self._buffer[:header]))
                    limit = _SETUP_FRAME_LIMIT if setup else self.limits.max_frame_bytes
                    if needed - header > limit:
                        raise SessionBroken(f"a reply of {needed - header} bytes is over the limit")
                if needed is not None and len(self._buffer) >= needed:
                    body = bytes(self._buffer[header:needed])
                    del self._buffer[:needed]
                    records = self.record_types.get if self.record_types else None
                    try:
                        reply = sandbox_wire.decode(body, records=records)
                    except sandbox_wire.WireError as exc:
                        raise SessionBroken(f"undecodable reply: {exc}") from None
                    if type(reply) is not tuple or not reply:
                        raise SessionBroken(f"malformed reply {_brief(reply)}")
                    return reply
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    self._broken(setup, f"timed out after {self.limits.wall_seconds:g} s")
                events = selector.select(timeout=min(remaining, 1.0))
                for key, _ in events:
                    if key.fileobj is stdin:
                        try:
                            written = os.write(key.fd, self._pending[: 1 << 16])
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:
                            self._broken(setup, "the sandbox closed its input")
                        self._pending = self._pending[written:]
                        if not self._pending:
                            selector.unregister(stdin)
                        continue
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        if key.fileobj is stdout:
                            self._broken(setup, "the sandbox exited")
                        selector.unregister(key.fileobj)
                    elif key.fileobj is stdout:
                        self._buffer += data
                    elif len(self._stderr) < 8192:
                        self._stderr += data[: 8192 - len(self._stderr)]

    def _broken(self, setup: bool, why: str) -> NoReturn:
        if setup:
            # The solution has not run yet: this is the sandbox failing, not a wrong answer.
            raise SandboxError(f"sandbox setup failed ({self.plan.mode}): {why}: {self.stderr_tail[-2000:]}")
        raise SessionBroken(why)


# Killed sandboxes whose bwrap has not exited yet: (when killed, bwrap, cgroup to hand back).
_RETIRED: list[tuple[float, subprocess.Popen, SandboxCgroup | None]] = []
_RETIRED_LOCK = threading.Lock()


def _collect_retired(wait: bool = False) -> None:
    """Reap killed sandboxes' bwrap processes that are done (all of them if `wait`), returning their
    cgroups to the pool; one still there after 2 s is killed outright."""
    with _RETIRED_LOCK:
        retired, _RETIRED[:] = list(_RETIRED), []
    keep = []
    for killed_at, process, group in retired:
        if process.poll() is None and (wait or time.monotonic() - killed_at > 2.0):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=2)
            SandboxSession._kill(process)
        if process.returncode is None:
            keep.append((killed_at, process, group))
        elif group is not None:
            sandbox_cgroup.release(group)
    with _RETIRED_LOCK:
        _RETIRED.extend(keep)


atexit.register(_collect_retired, True)


def _memfd(name: str, content: bytes) -> int:
    fd = os.memfd_create(name)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _failure(reply: tuple, doing: str) -> str:
    if len(reply) == 2 and reply[0] == "failed" and type(reply[1]) is str:
        return f"{doing} failed: {reply[1][:500]}"
    return f"{doing}: malformed reply {_brief(reply)}"


# ---- building the plan -------------------------------------------------------------------------------


def sandbox_plan(config: CodeRewardConfig) -> SandboxPlan:
    """The isolation to use for this config on this machine (probed once per process and config)."""
    return _plan(config.isolation, config.unsafe_no_os_isolation, tuple(config.allowed_packages))


@functools.cache
def _plan(isolation: str, unsafe: bool, allowed: tuple[str, ...]) -> SandboxPlan:
    if isolation not in ("auto", *ISOLATION_MODES):
        raise SandboxError(f"unknown isolation mode {isolation!r}")
    if isolation == "none":
        if not unsafe:
            raise SandboxError(
                "isolation 'none' runs untrusted code without OS isolation: it needs "
                "unsafe_no_os_isolation = true"
            )
        return _none_plan(allowed)
    plan = _bwrap_plan(allowed) if shutil.which("bwrap") else None
    problem = bwrap_problem(plan)
    if problem is None and plan is not None:
        return plan
    if isolation == "auto" and unsafe:
        return _none_plan(allowed)
    raise SandboxError(
        f"no OS isolation for the code sandbox: {problem}. The code reward runs untrusted code and refuses "
        "to run it unisolated; set unsafe_no_os_isolation = true only on a machine you are prepared to lose."
    )


def bwrap_problem(plan: SandboxPlan | None) -> str | None:
    """Why bubblewrap isolation does not work here (None when a probe run of `plan` proves it does)."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux (this is {sys.platform})"
    if plan is None or shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian/Ubuntu: `apt-get install -y bubblewrap`)"
    if plan.private_uid and shutil.which("setpriv") is None:
        return "setpriv is missing, needed to drop root to a private uid (Debian/Ubuntu: util-linux)"
    try:
        with SandboxSession(plan, SandboxLimits(wall_seconds=30), _PROBE) as session:
            outcome = session.run("")
    except (SandboxError, SessionBroken) as exc:
        hint = ""
        if "Operation not permitted" in str(exc) or "setting up uid map" in str(exc):
            hint = (
                " (unprivileged user namespaces are disabled: `sysctl kernel.unprivileged_userns_clone=1`, "
                "or on Ubuntu >= 23.10 allow bwrap in AppArmor / `sysctl "
                "kernel.apparmor_restrict_unprivileged_userns=0`)"
            )
        return f"bubblewrap fails here: {exc}{hint}"
    report = dict(line.split("=", 1) for line in outcome.stdout.split() if "=" in line)
    if not outcome.succeeded or report.get("seccomp") != "2" or report.get("net") != "none":
        return f"a bubblewrap probe run did not come out isolated: {outcome.stdout!r} {outcome.stderr!r}"
    if os.geteuid() == 0 and report.get("uid") == "0":
        return "a bubblewrap probe run still ran as root"
    return None


# The probe reports what the sandbox looks like from inside: uid, seccomp mode, network interfaces but lo.
_PROBE = """
import os
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
links = [line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:]]
print(f"uid={os.getuid()} seccomp={status['Seccomp'].strip()} net={','.join(set(links) - {'lo'}) or 'none'}")
"""


def _none_plan(allowed: tuple[str, ...]) -> SandboxPlan:
    paths = sorted({str(location) for location, _ in package_entries(allowed)})
    return SandboxPlan(
        mode="none",
        command=(os.path.realpath(sys.executable), "-I", "-S", "-B", "-X", "utf8", str(HERE / SCRIPTS[0])),
        import_paths=tuple(paths),
        description="none: audit hook and rlimits only (UNSAFE: no OS isolation)",
    )


def _bwrap_plan(allowed: tuple[str, ...]) -> SandboxPlan:
    root = os.geteuid() == 0
    layout = bwrap_layout(allowed, as_root=root)
    cgroups = cgroup_parents()
    return SandboxPlan(
        mode="bwrap",
        command=(layout.interpreter, "-I", "-S", "-B", "-X", "utf8", "-c", SERVER_MAIN),
        bwrap_args=layout.args,
        files=layout.files,
        import_paths=layout.import_paths,
        private_uid=root,
        cgroups=cgroups is not None,
        seccomp=seccomp_bpf(),
        description="bwrap: namespaces (pid, net, ipc, uts, mount), read-only minimal root, seccomp, "
        + ("private uid" if root else "unprivileged user namespace")
        + (
            f", cgroup v{cgroups.version} memory+pids limits"
            if cgroups
            else ", no cgroup limits (none writable)"
        ),
    )


def announce_isolation(plan: SandboxPlan) -> None:
    """Log the mode (a warning when unsafe) and export it as a gauge; called at every reward-service start."""
    for mode in ISOLATION_MODES:
        ISOLATION_GAUGE.labels(mode=mode).set(1.0 if plan.mode == mode else 0.0)
    if plan.mode == "none":
        logger.warning(
            "code sandbox isolation: %s — untrusted completions can reach this machine", plan.description
        )
    else:
        logger.info("code sandbox isolation: %s", plan.description)
