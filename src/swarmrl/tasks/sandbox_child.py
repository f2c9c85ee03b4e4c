"""The code sandbox's server: run as a script (`python -I -S -B sandbox_child.py`) inside the OS sandbox.

It speaks `sandbox_wire` frames with the trusted side, requests on fd 0 and replies on fd 1. The first
request is the setup (the solution's source, the work dir, rlimits, extra import paths); the server applies
the rlimits to itself (every process of the sandbox inherits them) and answers ("ready",). Then, one reply
per request:

    ("run", stdin_text)                 -> ("ran", exit_status, stdout_text, stderr_tail, stdout_truncated)
    ("call", name, args, kwargs)        -> ("returned", value) | ("raised", type_name, message) | ("failed", why)
    ("invoke", op, target, name, args, kwargs) -> see `sandbox_calls`

The server itself never runs the solution: each "run" is a fresh fork that installs the audit-hook guard and
executes the program as `__main__` with its stdin and stdout on memfds (so `os._exit`, closed streams or a
crash end that run only); calls go to one forked solution process that loads the solution once and answers
them in order (`sandbox_calls`). Every process that runs the solution has `exit()` and `quit()`, which the
`-S` interpreter lacks (they come from `site`). Nothing in here is trusted by the other side: replies are plain data that the trusted side
decodes strictly and judges itself, so a solution that takes over this process gains nothing.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's dir off sys.path

import builtins  # noqa: E402
import resource  # noqa: E402

import sandbox_wire  # noqa: E402

STDERR_TAIL = 2000
RUN_REQUEST = b'["t","run",'  # how sandbox_wire writes the tuple ("run", stdin)


def read_exact(fd, count):
    chunks = []
    while count:
        chunk = os.read(fd, min(count, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def read_frame(fd, max_bytes):
    """(header + body) of the next frame, None at EOF or when it exceeds `max_bytes`."""
    header = read_exact(fd, sandbox_wire.HEADER_BYTES)
    if header is None:
        return None
    length = sandbox_wire.frame_length(header)
    if length > max_bytes:
        return None
    body = read_exact(fd, length)
    return None if body is None else header + body


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def apply_limits(limits):
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"], limits["cpu_seconds"] + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["max_file_bytes"], limits["max_file_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_processes"], limits["max_processes"]))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))


BLOCKED_EVENTS = frozenset(
    {
        "os.system",
        "os.exec",
        "os.spawn",
        "os.posix_spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "os.chroot",
        "subprocess.Popen",
        "pty.spawn",
        "signal.pthread_kill",
        "sys._current_frames",
        "resource.prlimit",
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.call_function",
        "ctypes.cdata",
        "ctypes.addressof",
        "ctypes.string_at",
        "ctypes.wstring_at",
    }
)
BLOCKED_MODULES = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "cffi", "_cffi_backend"})
# Functions that act on other processes without an audit event; removed from their modules before the program
# runs.
STRIPPED_ATTRIBUTES = {
    "os": (
        "pidfd_open",
        "sched_setaffinity",
        "sched_setscheduler",
        "sched_setparam",
        "setpriority",
        "setpgid",
        "kill",
        "killpg",
        "fork",
        "forkpty",
        "system",
    ),
    "signal": ("pidfd_send_signal", "pthread_kill"),
}
STRIPPED_ATTRIBUTES["posix"] = STRIPPED_ATTRIBUTES["os"]
# Events whose listed argument positions are paths that get written, created or removed.
WRITE_PATH_ARGS = {
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "os.rename": (0, 1),
    "os.link": (0, 1),
    "os.symlink": (1,),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.utime": (0,),
    "os.setxattr": (0,),
    "os.removexattr": (0,),
    "shutil.rmtree": (0,),
    "shutil.move": (0, 1),
    "shutil.copyfile": (1,),
    "shutil.copytree": (1,),
    "os.mkfifo": (0,),
    "os.mknod": (0,),
}


def install_guard(workdir):
    """The audit hook: an extra in-process filter (no process creation, sockets, ctypes, writes outside the
    work dir). Python code can subvert it (it is not a security boundary); the OS sandbox around this
    process is."""
    root = os.path.realpath(workdir)
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    realpath, join, fsdecode = os.path.realpath, os.path.join, os.fsdecode

    def inside(path):
        if isinstance(path, int):
            return True
        try:
            full = realpath(join(root, fsdecode(path)))
        except (TypeError, ValueError):
            return False
        return full == root or full.startswith(root + os.sep)

    def hook(event, args):
        if event in BLOCKED_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & write_flags
            )
            if writing and not inside(path):
                raise PermissionError(f"sandbox: writing {path!r} outside the work dir is not allowed")
        elif event in WRITE_PATH_ARGS:
            for position in WRITE_PATH_ARGS[event]:
                if position < len(args) and not inside(args[position]):
                    raise PermissionError(f"sandbox: {event} on {args[position]!r} is not allowed")
        elif event == "import" and args[0].split(".")[0] in BLOCKED_MODULES:
            raise ImportError(f"sandbox: importing {args[0]} is not allowed")

    for name in list(sys.modules):
        if name.split(".")[0] in BLOCKED_MODULES or name == "subprocess":
            del sys.modules[name]
    import posix
    import signal

    for module in (os, posix, signal):
        for attribute in STRIPPED_ATTRIBUTES[module.__name__]:
            if hasattr(module, attribute):
                delattr(module, attribute)
    sys.addaudithook(hook)


def become_solution_process(keep_fds, stdio_fds, setup):
    """In a fresh fork: only `stdio_fds` as 0/1/2 and `keep_fds` stay open, the guard is installed."""
    for target, fd in enumerate(stdio_fds):
        os.dup2(fd, target)
    keep = sorted(set(keep_fds))
    low = 3
    for fd in keep:
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)
    # sys.stdin/stdout/stderr (UTF-8 under -X utf8, never used by the server) now reach the new fds 0/1/2.
    sys.argv = ["solution.py"]
    os.chdir(setup["workdir"])
    install_exit()
    if setup["guard"]:
        install_guard(setup["workdir"])


def install_exit():
    """`exit()` and `quit()` as `site` defines them: raise SystemExit with the code."""

    def exit(code=None):  # noqa: A001 — the builtin it stands for
        raise SystemExit(code)

    # typeshed types them as site's Quitter; the -S interpreter has neither.
    builtins.exit = builtins.quit = exit  # type: ignore[assignment]


def exit_code_of(exit_request):
    code = exit_request.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    sys.stderr.write(f"{code}\n")
    return 1


class Server:
    def __init__(self, setup):
        self.setup = setup
        self.max_frame = setup["limits"]["max_frame_bytes"]
        self.max_output = setup["limits"]["max_output_bytes"]
        self.caller: tuple[int, int, int] | None = (
            None  # (pid, request fd, reply fd) of the solution process serving calls
        )
        self.caller_dead = None

    def serve(self):
        while True:
            frame = read_frame(0, self.max_frame)
            if frame is None:
                return
            body = frame[sandbox_wire.HEADER_BYTES :]
            # Only "run" is the server's own; every other request (calls, with their references and records,
            # which only the solution process can resolve) is relayed unread.
            if body.startswith(RUN_REQUEST):
                reply = sandbox_wire.encode(self.run(sandbox_wire.decode(body)[1]))
            else:
                reply = self.relay(frame)
            write_all(1, reply)

    def run(self, stdin_text):
        fds = [os.memfd_create(name) for name in ("stdin", "stdout", "stderr")]
        write_all(fds[0], stdin_text.encode("utf-8", errors="surrogatepass"))
        os.lseek(fds[0], 0, os.SEEK_SET)
        pid = os.fork()
        if pid == 0:
            self.run_program(fds)
        for fd in fds[:1]:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        try:
            os.killpg(pid, 9)  # whatever the program left running in its process group
        except OSError:
            pass
        os.lseek(fds[1], 0, os.SEEK_SET)
        stdout = os.read(fds[1], self.max_output + 1)
        size = os.lseek(fds[2], 0, os.SEEK_END)
        os.lseek(fds[2], max(0, size - STDERR_TAIL), os.SEEK_SET)
        stderr = os.read(fds[2], STDERR_TAIL)
        for fd in fds[1:]:
            os.close(fd)
        return (
            "ran",
            os.waitstatus_to_exitcode(status),
            stdout[: self.max_output].decode("utf-8", errors="replace"),
            stderr.decode("utf-8", errors="replace"),
            len(stdout) > self.max_output,
        )

    def run_program(self, fds):
        """In the fork: the program as `__main__`; never returns (the fork must not go on serving)."""
        code = 1
        try:
            os.setpgid(0, 0)
            become_solution_process((), fds, self.setup)
            namespace = {"__name__": "__main__", "__builtins__": __builtins__, "__file__": "solution.py"}
            try:
                exec(compile(self.setup["solution"], "solution.py", "exec"), namespace)
                code = 0
            except SystemExit as exc:
                code = exit_code_of(exc)
            except BaseException as exc:  # noqa: BLE001 — the program failed; say why on its stderr
                sys.stderr.write(f"{describe(exc)}\n")
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001, S110 — nothing more can be reported
                pass
            os._exit(code)

    def relay(self, frame):
        """Forward a call request to the solution process and its reply back, byte for byte."""
        if self.caller is None and self.caller_dead is None:
            self.start_caller()
        if self.caller is not None:  # else it died, saying why in caller_dead
            pid, request_fd, reply_fd = self.caller
            try:
                write_all(request_fd, frame)
                reply = read_frame(reply_fd, self.max_frame)
            except OSError:
                reply = None
            if reply is not None:
                return reply
            os.kill(pid, 9)
            _, status = os.waitpid(pid, 0)
            self.caller_dead = f"the solution process ended (status {os.waitstatus_to_exitcode(status)})"
            self.caller = None
        return sandbox_wire.encode(("failed", self.caller_dead))

    def start_caller(self):
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                null = os.open(os.devnull, os.O_RDWR)
                become_solution_process((request_read, reply_write), (null, null, null), self.setup)
                serve_calls(self.setup["solution"], request_read, reply_write, self.setup["limits"])
                code = 0
            finally:
                os._exit(code)
        os.close(request_read)
        os.close(reply_write)
        self.caller = (pid, request_write, reply_read)


def serve_calls(source, request_fd, reply_fd, limits):
    """The solution process: load the solution once, then answer call requests until EOF."""
    import sandbox_calls

    namespace = {"__name__": "solution", "__builtins__": __builtins__, "__file__": "solution.py"}
    load_error = None
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 — SystemExit included: a solution that exits has no functions
        load_error = f"loading the solution raised {describe(exc)}"
    calls = sandbox_calls.Calls(namespace, load_error, limits["max_output_bytes"])
    while True:
        frame = read_frame(request_fd, limits["max_frame_bytes"])
        if frame is None:
            return
        try:
            records = calls.record_class if calls.records else None
            request = sandbox_wire.decode(frame[sandbox_wire.HEADER_BYTES :], refs=True, records=records)
            reply = calls.answer(request) if type(request) is tuple and request else ("failed", "no request")
        except sandbox_wire.WireError as exc:
            reply = ("failed", f"malformed request: {exc}")
        try:
            data = sandbox_wire.encode(reply, rich=reply[0] != "returned", records=calls.records)
        except BaseException as exc:  # noqa: BLE001 — a hostile value can raise anything while it is read
            data = sandbox_wire.encode(("failed", f"the result is not plain data: {describe(exc)}"))
        write_all(reply_fd, data)


def describe(exc):
    return f"{type(exc).__name__}: {safe_str(exc)}"


def safe_str(exc):
    try:
        return str(exc)[:1000]
    except BaseException:  # noqa: BLE001 — a hostile __str__
        return "<unprintable>"


def main():
    os.closerange(3, 1 << 16)  # nothing inherited beyond stdin/stdout/stderr reaches the solution
    frame = read_frame(0, 64 << 20)
    if frame is None:
        sys.exit("sandbox setup failed: no setup frame")
    setup = sandbox_wire.decode(frame[sandbox_wire.HEADER_BYTES :])
    apply_limits(setup["limits"])
    os.makedirs(setup["workdir"], exist_ok=True)
    os.chdir(setup["workdir"])
    sys.path[:0] = setup["paths"]
    write_all(1, sandbox_wire.encode(("ready",)))
    Server(setup).serve()


if __name__ == "__main__":
    main()
