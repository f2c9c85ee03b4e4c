"""The code sandbox's bubblewrap command line: namespaces, what is mounted where, the environment.

A read-only root holds /usr (and the /lib*, /bin links) and the dynamic linker cache; the interpreter at
/opt/python, the allowed packages at /sandbox/site and the sandbox scripts (with their compiled copies) at
/sandbox. Nothing there names the host: the interpreter and the packages are bound from a private staging copy
(`sandbox_stage`: hard links, its build paths rewritten) and run as /opt/python/bin/python3.X, the scripts are
written into the sandbox's own root from memory (`--file`), and the session passes this command line through a
memfd (`--args`), so the sandbox's pid 1 shows `bwrap --args N` and no host path. What /proc/self/mountinfo
still shows of the host is the staging copy's neutral name ("sandbox-XXXX" under the system temp dir), as the
source of those two binds. A system interpreter (prefix /usr) runs where it is.
"""

from __future__ import annotations

import functools
import os
import py_compile
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from swarmrl.tasks.sandbox_stage import (
    PYTHON_DIR,
    SITE_DIR,
    base_site_dirs,
    stage_interpreter,
    stage_packages,
)

SCRIPTS = ("sandbox_child.py", "sandbox_wire.py", "sandbox_rich.py", "sandbox_records.py", "sandbox_calls.py")
HERE = Path(__file__).resolve().parent
SANDBOX_DIR = "/sandbox"
WORKDIR = "/tmp/work"
ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": WORKDIR,
    "TMPDIR": "/tmp",
    # BLAS pools start one thread per core at import; each is a task that RLIMIT_NPROC counts.
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
# Imported rather than run as a script, so that the compiled copies are used.
SERVER_MAIN = f"import sys; sys.path.insert(0, {SANDBOX_DIR!r}); import sandbox_child; sandbox_child.main()"


@dataclass(frozen=True)
class BwrapLayout:
    args: tuple[str, ...]  # namespaces, mounts, /proc, /dev, environment
    files: tuple[tuple[str, bytes], ...] = ()  # (path inside, content): written by bwrap from memfds
    import_paths: tuple[str, ...] = ()
    interpreter: str = ""  # the Python that runs the server, as the sandbox sees it


def bwrap_layout(allowed: tuple[str, ...], as_root: bool) -> BwrapLayout:
    """Everything of the command line but the per-session parts (the /tmp size, seccomp, info fd)."""
    mounts = _Mounts()
    mounts.system()
    interpreter = os.path.realpath(sys.executable)
    env = dict(ENV)
    staged_python = stage_interpreter()
    if staged_python is None:  # a system interpreter under /usr: already where a neutral one would be
        prefix = os.path.realpath(sys.base_prefix)
        mounts.bind(prefix)
        if not interpreter.startswith(prefix + os.sep):
            mounts.bind(interpreter)
        for hidden in base_site_dirs(prefix):
            if mounts.covers(hidden):
                mounts.mask(hidden)
    else:
        mounts.bind(staged_python.folder, PYTHON_DIR)
        interpreter = staged_python.executable
        if staged_python.library_path:
            env["LD_LIBRARY_PATH"] = staged_python.library_path
    staged = stage_packages(allowed)
    if staged is not None:
        mounts.bind(staged, SITE_DIR)
    files = script_files()
    for directory in sorted({os.path.dirname(path) for path, _ in files}):
        mounts.directory(directory)
    args = [*_namespace_args(as_root), *mounts.args]
    # The session adds the size-capped /tmp (the limit is per config), then makes / read-only.
    # /dev is a tmpfs the sandbox user may own (user-namespace mode): empty and read-only like / itself.
    args += ["--proc", "/proc", "--dev", "/dev", "--size", "4096", "--tmpfs", "/dev/shm"]
    args += ["--remount-ro", "/dev/shm", "--remount-ro", "/dev"]
    args += ["--hostname", "sandbox", "--chdir", "/tmp", "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    return BwrapLayout(tuple(args), files, (SITE_DIR,) if staged is not None else (), interpreter)


def _namespace_args(as_root: bool) -> list[str]:
    args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if as_root:
        # Privileged bwrap, then setpriv drops to a private uid: it needs these three until then.
        return [*args, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    return [*args, "--unshare-user", "--disable-userns"]


@functools.cache
def script_files() -> tuple[tuple[str, bytes], ...]:
    """The sandbox scripts and their compiled copies as they appear inside. The compiled copies (unchecked-
    hash pycs, valid whatever the files' mtimes) save their compilation in every sandbox start and name
    /sandbox, not this checkout, as their source."""
    files = []
    with tempfile.TemporaryDirectory(prefix="swarmrl-sandbox-pyc-") as scratch:
        for script in SCRIPTS:
            inside = f"{SANDBOX_DIR}/{script}"
            files.append((inside, (HERE / script).read_bytes()))
            compiled = os.path.join(scratch, f"{script}.pyc")
            try:
                py_compile.compile(
                    str(HERE / script),
                    cfile=compiled,
                    dfile=inside,
                    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                    doraise=True,
                )
            except (OSError, py_compile.PyCompileError):
                continue  # the sandbox compiles that script itself
            stem = script.removesuffix(".py")
            pyc = f"{SANDBOX_DIR}/__pycache__/{stem}.{sys.implementation.cache_tag}.pyc"
            files.append((pyc, Path(compiled).read_bytes()))
    return tuple(files)


class _Mounts:
    """bwrap mount arguments; parents of bind targets are created 0755 (bwrap would copy a host 0700)."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self._dirs: set[str] = {"/"}
        self._bound: list[str] = []

    def system(self) -> None:
        self.bind("/usr")
        for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(name):
                self.args += ["--symlink", os.readlink(name), name]
            elif os.path.isdir(name):
                self.bind(name)
        if os.path.exists("/etc/ld.so.cache"):
            self.bind("/etc/ld.so.cache")

    def bind(self, source: str, target: str | None = None) -> None:
        target = target or source
        if self.covers(target):
            return
        self._parents(target)
        self._bound.append(target)
        self.args += ["--ro-bind", source, target]

    def directory(self, path: str) -> None:
        self._parents(path + "/")

    def covers(self, path: str) -> bool:
        """Whether `path` lies inside something already bound at the same place."""
        return any(path == bound or path.startswith(bound + os.sep) for bound in self._bound)

    def mask(self, path: str) -> None:
        self.args += ["--size", "4096", "--tmpfs", path, "--remount-ro", path]

    def _parents(self, target: str) -> None:
        parent = os.path.dirname(target)
        if parent in self._dirs:
            return
        self._parents(parent)
        self._dirs.add(parent)
        self.args += ["--perms", "0755", "--dir", parent]
