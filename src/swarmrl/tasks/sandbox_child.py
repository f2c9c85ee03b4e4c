"""Bootstrap of one sandboxed Python run, executed as a script (`python -I -B sandbox_child.py`). The parent
imports it only for `hidden_interpreter_dirs` (standard library only, no side effects on import).

Reads a marshal payload from the trusted parent on stdin, then, in order: (namespaces mode, still root inside
fresh net/pid/mount/ipc namespaces) gives itself a private tmpfs for every world-writable scratch directory,
makes `/` read-only, and re-exposes the interpreter's files if they sit under a directory other users cannot
traverse; writes the program into a fresh work dir; applies rlimits; drops to the payload's private uid (so
RLIMIT_NPROC holds); installs an audit hook that refuses process creation, sockets, ctypes and writes outside
the work dir; and runs the program in this interpreter. Setup success is reported by writing one byte to the
payload's status fd and closing it, so a program cannot pose as a setup failure; a setup failure exits with
code 97 before that byte is written.
"""

import marshal
import os
import resource
import stat
import sys

SETUP_FAILED = 97
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC = 1, 2, 4, 32, 4096, 8192, 16384
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
WORKDIR_IN_NAMESPACE = "/tmp/sandbox"


def _fail(message):
    sys.stderr.write(f"sandbox setup failed: {message}\n")
    sys.stderr.flush()
    os._exit(SETUP_FAILED)


def _mount(libc, source, target, fstype, flags, data):
    import ctypes

    if (
        libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        )
        != 0
    ):
        errno = ctypes.get_errno()
        _fail(f"mount {source} on {target} (flags {flags}): {os.strerror(errno)}")


def _blocked_ancestors(paths):
    """Map each directory that others cannot traverse to the children of it that `paths` need."""
    blocked = {}
    for path in paths:
        parts = os.path.realpath(path).split(os.sep)[1:]
        current = ""
        for depth, part in enumerate(parts[:-1]):
            current = f"{current}/{part}"
            if not os.stat(current).st_mode & stat.S_IXOTH:
                blocked.setdefault(current, set()).add(f"{current}/{parts[depth + 1]}")
                break
    return blocked


def _interpreter_paths():
    paths = [sys.executable, os.path.realpath(sys.executable), sys.prefix, sys.base_prefix]
    return paths + [p for p in sys.path if p and os.path.exists(p)]


def hidden_interpreter_dirs():
    """Directories that other users cannot traverse but the interpreter needs (e.g. a pyenv under /root)."""
    return _blocked_ancestors(_interpreter_paths())


def _private_filesystem(needed_paths):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    blocked = _blocked_ancestors(needed_paths)
    # Stage the interpreter's directories before hiding their parents: a bind mount keeps them reachable.
    _mount(libc, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=256m,mode=1777")
    staging = "/tmp/.reveal"
    os.mkdir(staging, 0o700)
    staged = []
    for index, (parent, children) in enumerate(sorted(blocked.items())):
        for child_index, child in enumerate(sorted(children)):
            stage = f"{staging}/{index}_{child_index}"
            os.mkdir(stage)
            _mount(libc, child, stage, None, MS_BIND | MS_REC, None)
            staged.append((parent, child, stage))
    for parent in blocked:
        _mount(libc, "tmpfs", parent, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for _parent, child, stage in staged:
        os.makedirs(child, exist_ok=True)
        _mount(libc, stage, child, None, MS_MOVE, None)
    _mount(libc, "none", "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
    for scratch in SCRATCH_DIRS[1:]:
        if os.path.isdir(scratch) and not os.path.islink(scratch):
            _mount(libc, "tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777")


def _apply_limits(limits, drop_to_uid):
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"], limits["cpu_seconds"] + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["max_file_bytes"], limits["max_file_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    if drop_to_uid is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_processes"], limits["max_processes"]))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))


def _drop_privileges(uid, workdir):
    for root, dirs, files in os.walk(workdir):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, uid)
    os.chown(workdir, uid, uid)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


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
BLOCKED_MODULES = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "cffi", "_cffi_backend", "_imp"})
# Functions that act on other processes without an audit event; removed from their modules before the program
# runs (they matter when the sandbox still runs as root, i.e. prelude isolation without a private uid).
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


def _install_guard(workdir):
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


def _setup(payload):
    """Everything before the untrusted program runs; returns the work dir (the process's cwd)."""
    if payload["mode"] == "namespaces":
        _private_filesystem(_interpreter_paths())
        workdir = WORKDIR_IN_NAMESPACE
        os.mkdir(workdir, 0o700)
    else:
        workdir = payload["workdir"]
    for name, content in payload["files"].items():
        with open(os.path.join(workdir, name), "w", encoding="utf-8") as handle:
            handle.write(content)
    stdin_path = os.path.join(workdir, ".stdin")
    with open(stdin_path, "w", encoding="utf-8") as handle:
        handle.write(payload["stdin"])
    stdin_fd = os.open(stdin_path, os.O_RDONLY)
    os.dup2(stdin_fd, 0)
    os.close(stdin_fd)
    os.remove(stdin_path)
    uid = payload["uid"]
    _apply_limits(payload["limits"], uid)
    if uid is not None:
        _drop_privileges(uid, workdir)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update({"HOME": workdir, "TMPDIR": workdir, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    return workdir


def _run_main(path, predefined):
    """Run the main file as __main__, like runpy.run_path but without importing runpy / importlib.util."""
    with open(path, encoding="utf-8") as handle:
        code = compile(handle.read(), path, "exec")
    module = type(sys)("__main__")
    module.__dict__.update(predefined)
    predefined.clear()  # the main file may pop secrets (the harness nonce); leave no second copy behind
    module.__file__ = path
    sys.modules["__main__"] = module
    exec(code, module.__dict__)


def main():
    payload = marshal.loads(sys.stdin.buffer.read())
    try:
        workdir = _setup(payload)
    except Exception as exc:  # noqa: BLE001 — any setup problem is reported as such, never as a test failure
        _fail(f"{type(exc).__name__}: {exc}")
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 — fd 0 lives as long as the process
    sys.argv = [payload["main"]]
    sys.path.insert(0, workdir)
    if payload["guard"]:
        _install_guard(workdir)
    os.write(payload["status_fd"], b"1")
    os.close(payload["status_fd"])
    _run_main(payload["main"], payload.pop("globals"))


if __name__ == "__main__":
    main()
