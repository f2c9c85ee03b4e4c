"""Code a run names as "package.module:attribute" (your reward functions, your environment class): import it,
and pin the source it runs so that every trusted node can tell it judges with the same code.

A pin is the sha256 of the source files the object comes from: the module named, and the module that defines
the object when that is another one (a function re-exported from a library). A node whose files differ from
the pin the run recorded refuses to judge, naming the entry, rather than scoring work by other rules.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from swarmrl.errors import UserError


class EntryError(UserError):
    """Named code cannot be imported, is not what it must be, or differs from the code the run pinned."""


@dataclass(frozen=True)
class LoadedEntry:
    entry: str  # "package.module:attribute", as the config names it (an entry point's target when resolved)
    value: object
    source_hash: str
    files: tuple[Path, ...]


def resolve_entry_point(name: str, group: str, what: str) -> str:
    """The "module:attribute" that the installed entry point `name` of `group` points at."""
    found = importlib.metadata.entry_points(group=group, name=name)
    if not found:
        raise EntryError(
            f"{what} {name!r}: no installed package declares it in the entry-point group {group!r}"
        )
    return next(iter(found)).value.replace(" ", "")


def load_entry(entry: str, what: str) -> LoadedEntry:
    """Import `entry` ("package.module:attribute"); EntryError naming `what` and the entry when it cannot be."""
    module_name, sep, attribute = entry.partition(":")
    if not sep or not module_name or not attribute:
        raise EntryError(f"{what} {entry!r} is not of the form 'package.module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 — importing user code raises whatever that code raises
        raise EntryError(
            f"{what} {entry!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc})"
        ) from exc
    value: object = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise EntryError(f"{what} {entry!r}: {module_name!r} has no {attribute!r}")
        value = getattr(value, part)
    files = _source_files(module, value, entry, what)
    return LoadedEntry(entry, value, _digest(files), files)


def check_pin(loaded: LoadedEntry, pinned: str | None, what: str) -> None:
    """Refuse code that differs from the pin a run recorded (or a run that recorded none for it)."""
    if pinned is None:
        raise EntryError(
            f"{what} {loaded.entry!r} has no source hash in this config: give the run's config.json "
            "(prepared by `swarmrl rl`, `sft` or `demo`), which records it"
        )
    if pinned != loaded.source_hash:
        where = ", ".join(str(path) for path in loaded.files)
        raise EntryError(
            f"{what} {loaded.entry!r}: the source here ({where}, sha256 {loaded.source_hash[:12]}…) differs "
            f"from the one the run pinned (sha256 {pinned[:12]}…); install the run's version to judge its work"
        )


def _source_files(module: ModuleType, value: object, entry: str, what: str) -> tuple[Path, ...]:
    modules = [module]
    defining = sys.modules.get(getattr(value, "__module__", None) or "")
    if defining is not None and defining is not module:
        modules.append(defining)
    files = []
    for each in modules:
        path = getattr(each, "__file__", None)
        if path is None or not Path(path).is_file():
            raise EntryError(f"{what} {entry!r}: module {each.__name__!r} has no source file to pin")
        files.append(Path(path).resolve())
    return tuple(files)


def _digest(files: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for path in files:
        data = path.read_bytes()
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()
