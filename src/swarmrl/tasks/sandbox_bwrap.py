"""The code sandbox's bubblewrap command line: namespaces, what is mounted where, the environment.

A read-only root holds /usr (and the /lib*, /bin links), the dynamic linker cache and the base interpreter's
prefix with its site-packages masked; the allowed packages appear at /sandbox/site and the two sandbox scripts
(with their compiled copies) at /sandbox. Nothing there names the host: the scripts are written into the
sandbox's own root from memory (`--file`), the packages are bound from a private staging copy (hard links)
whose compiled files name /sandbox/site instead of the venv, and the session passes this command line through
a memfd (`--args`), so the sandbox's pid 1 shows `bwrap --args N` and no host path. The only host paths left
in /proc/self/mountinfo are the interpreter's prefix, which Python reports inside anyway (sys.prefix,
sysconfig), and the staging directory's name under the system temp dir.
"""

from __future__ import annotations

import atexit
import functools
import importlib.metadata
import importlib.util
import marshal
import os
import py_compile
import shutil
import sys
import sysconfig
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path

from swarmrl.tasks.errors import SandboxError

SCRIPTS = ("sandbox_child.py", "sandbox_wire.py", "sandbox_rich.py", "sandbox_calls.py")
HERE = Path(__file__).resolve().parent
SANDBOX_DIR = "/sandbox"
SITE_DIR = "/sandbox/site"
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
_PYC_HEADER_BYTES = 16


@dataclass(frozen=True)
class BwrapLayout:
    args: tuple[str, ...]  # namespaces, mounts, /proc, /dev, environment
    files: tuple[tuple[str, bytes], ...] = ()  # (path inside, content): written by bwrap from memfds
    import_paths: tuple[str, ...] = ()


def bwrap_layout(allowed: tuple[str, ...], as_root: bool) -> BwrapLayout:
    """Everything of the command line but the per-session parts (the /tmp size, seccomp, info fd)."""
    mounts = _Mounts()
    mounts.system()
    interpreter = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    mounts.bind(prefix)
    if not interpreter.startswith(prefix + os.sep):
        mounts.bind(interpreter)
    for hidden in _base_site_dirs(prefix):
        if mounts.covers(hidden):
            mounts.mask(hidden)
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
    for name, value in ENV.items():
        args += ["--setenv", name, value]
    return BwrapLayout(tuple(args), files, (SITE_DIR,) if staged is not None else ())


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


@functools.cache
def stage_packages(allowed: tuple[str, ...]) -> str | None:
    """A private copy of the allowed packages' files (hard links where the filesystem allows, copies where
    not), for this process's sandboxes; None when nothing is allowed. Compiled files are rewritten to name
    /sandbox/site as their source: pip's copies name the venv they were installed into."""
    entries = package_entries(allowed)
    if not entries:
        return None
    stage = tempfile.mkdtemp(prefix="sandbox-site-")
    atexit.register(shutil.rmtree, stage, True)
    os.chmod(stage, 0o755)  # readable by the sandbox's private uid
    try:
        for location, entry in entries:
            source, target = location / entry, os.path.join(stage, entry)
            if source.is_dir():
                shutil.copytree(source, target, copy_function=_link_or_copy, symlinks=True)
                _relocate_compiled(stage, target)
            else:
                _link_or_copy(str(source), target)
    except OSError as exc:
        raise SandboxError(f"cannot stage the allowed packages for the sandbox: {exc}") from exc
    return stage


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _relocate_compiled(stage: str, tree: str) -> None:
    """Rewrite every .pyc under `tree` (as a new file, never the linked original) so that its code objects
    name their source where the sandbox sees it; a .pyc that does not load is dropped (Python then compiles
    the source itself)."""
    for directory, _, names in os.walk(tree):
        for name in names:
            if not name.endswith(".pyc"):
                continue
            path = os.path.join(directory, name)
            with open(path, "rb") as handle:
                data = handle.read()
            os.unlink(path)
            try:
                code = marshal.loads(data[_PYC_HEADER_BYTES:])
                source = importlib.util.source_from_cache(path)
            except (EOFError, ValueError, TypeError):
                continue
            if isinstance(code, types.CodeType):
                inside = SITE_DIR + source[len(stage) :]
                with open(path, "wb") as handle:
                    handle.write(data[:_PYC_HEADER_BYTES] + marshal.dumps(_renamed(code, inside)))


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def package_entries(allowed: tuple[str, ...]) -> list[tuple[Path, str]]:
    """(site dir, top-level file or dir) for every file of the distributions that provide `allowed`."""
    providers = importlib.metadata.packages_distributions()
    entries: set[tuple[Path, str]] = set()
    for name in allowed:
        if name not in providers:
            raise SandboxError(f"allowed package {name!r} is not installed in this environment")
        for dist_name in providers[name]:
            dist = importlib.metadata.distribution(dist_name)
            location = Path(str(dist.locate_file(""))).resolve()
            for file in dist.files or ():
                top = file.parts[0]
                if top not in ("..", "") and (location / top).exists():
                    entries.add((location, top))
    return sorted(entries)


def _base_site_dirs(prefix: str) -> list[str]:
    """The base interpreter's own site-packages under every install scheme (Debian's dist-packages too):
    whatever pip or apt put there, test data included, stays out of the sandbox."""
    found = set()
    for scheme in sysconfig.get_scheme_names():
        for key in ("purelib", "platlib"):
            try:
                path = sysconfig.get_path(key, scheme, vars={"base": prefix, "platbase": prefix})
            except KeyError:
                continue
            if path and os.path.isdir(path):
                found.add(os.path.realpath(path))
    return sorted(found)


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
