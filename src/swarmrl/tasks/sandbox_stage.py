"""The sandbox's private copies of the interpreter and the allowed packages, staged once per process.

Both live in one staging folder with a neutral name ("sandbox-XXXX" under the system temp dir), made of hard
links where the filesystem allows and copies where not, and are bound read-only into every sandbox:

- the interpreter's prefix, without its site-packages, test suite, IDLE, tkinter, ensurepip and build
  configuration, appears at /opt/python: the sandbox runs /opt/python/bin/python3.X, so `sys.prefix`,
  `sys.executable`, pid 1's command line and the mount table name /opt/python, not the host's install (its
  `_sysconfigdata` is rewritten to say /opt/python too, as a new file: the linked original is never touched);
- the allowed packages appear at /sandbox/site; their compiled files are rewritten to name /sandbox/site as
  their source, since pip's copies name the venv they were installed into.

A system interpreter (prefix /usr) is not staged: /usr is bound as it is, which names nothing of the host.
"""

from __future__ import annotations

import atexit
import functools
import importlib.metadata
import importlib.util
import marshal
import os
import shutil
import sys
import sysconfig
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path

from swarmrl.tasks.errors import SandboxError

PYTHON_DIR = "/opt/python"
SITE_DIR = "/sandbox/site"
_PYC_HEADER_BYTES = 16
# Parts of the standard library's folder a sandboxed solution has no use for (and site-packages: no packages
# but the allowed ones).
_LEFT_OUT = frozenset(
    {"site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3"}
)


@dataclass(frozen=True)
class StagedInterpreter:
    folder: str  # the staged prefix on the host, bound at PYTHON_DIR
    executable: str  # the interpreter, as the sandbox sees it
    library_path: str | None  # LD_LIBRARY_PATH for a build that links its own libpython


@functools.cache
def staging_root() -> str:
    root = tempfile.mkdtemp(prefix="sandbox-")
    atexit.register(shutil.rmtree, root, True)
    os.chmod(root, 0o755)  # readable by the sandbox's private uid
    return root


@functools.cache
def stage_interpreter() -> StagedInterpreter | None:
    """The interpreter's prefix staged for /opt/python; None for a system interpreter under /usr."""
    prefix = os.path.realpath(sys.base_prefix)
    interpreter = os.path.realpath(sys.executable)
    if prefix in ("/", "/usr") or not interpreter.startswith(prefix + os.sep):
        return None
    folder = os.path.join(staging_root(), "python")
    library = os.path.join(prefix, "lib")
    stdlib = os.path.realpath(sysconfig.get_path("stdlib"))
    try:
        os.makedirs(os.path.join(folder, "bin"), mode=0o755)
        os.makedirs(os.path.join(folder, "lib"), mode=0o755)
        _link_or_copy(interpreter, os.path.join(folder, os.path.relpath(interpreter, prefix)))
        for name in os.listdir(library):
            if os.path.isfile(os.path.join(library, name)):
                _link_or_copy(os.path.join(library, name), os.path.join(folder, "lib", name))
        if not stdlib.startswith(prefix + os.sep):
            raise SandboxError(
                f"the standard library ({stdlib}) is not inside the interpreter's prefix {prefix}"
            )
        shutil.copytree(
            stdlib,
            os.path.join(folder, os.path.relpath(stdlib, prefix)),
            copy_function=_link_or_copy,
            symlinks=True,
            ignore=_left_out,
        )
        _rewrite_sysconfigdata(folder, prefix)
    except OSError as exc:
        raise SandboxError(f"cannot stage the interpreter for the sandbox: {exc}") from exc
    links_libpython = any(name.startswith("libpython") for name in os.listdir(os.path.join(folder, "lib")))
    return StagedInterpreter(
        folder,
        PYTHON_DIR + interpreter[len(prefix) :],
        f"{PYTHON_DIR}/lib" if links_libpython else None,
    )


def _left_out(directory: str, names: list[str]) -> set[str]:
    return {name for name in names if name in _LEFT_OUT or name.startswith("config-")}


def _rewrite_sysconfigdata(folder: str, prefix: str) -> None:
    """The build's configuration, naming /opt/python instead of the host's prefix (a new file, and no stale
    compiled copy of it)."""
    for directory, _, names in os.walk(folder):
        for name in names:
            if not name.startswith("_sysconfigdata") or "site-packages" in directory:
                continue
            path = os.path.join(directory, name)
            if name.endswith(".py"):
                text = Path(path).read_text(encoding="utf-8")
                os.unlink(path)
                Path(path).write_text(text.replace(prefix, PYTHON_DIR), encoding="utf-8")
            elif name.endswith(".pyc"):
                os.unlink(path)


@functools.cache
def stage_packages(allowed: tuple[str, ...]) -> str | None:
    """The allowed packages' files, staged for /sandbox/site; None when nothing is allowed."""
    entries = package_entries(allowed)
    if not entries:
        return None
    stage = os.path.join(staging_root(), "site")
    try:
        os.makedirs(stage, mode=0o755)
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


def base_site_dirs(prefix: str) -> list[str]:
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
