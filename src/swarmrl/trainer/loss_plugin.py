"""Objectives from your own package (`[loss.objective] kind = "plugin"`): the function an entry names, checked
against the source the run pinned. Only the trainer runs a loss; the pin is what lets a resumed run, or a
trainer given other code, notice that its loss changed. Imports no torch: `--dry-run` pins through here."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

from swarmrl.configs.loss import LOSS_ENTRY_POINT_GROUP, PluginObjective
from swarmrl.entrypoints import EntryError, LoadedEntry, check_pin, load_entry, resolve_entry_point

WHAT = "loss objective"


def load_objective_plugin(entry: str) -> LoadedEntry:
    """The function `entry` names ("package.module:function", or an entry point of the `swarmrl.losses` group);
    EntryError naming it when it is missing or cannot be called as `terms(batch, objective)`."""
    target = entry if ":" in entry else resolve_entry_point(entry, LOSS_ENTRY_POINT_GROUP, WHAT)
    loaded = load_entry(target, WHAT)
    if not callable(loaded.value):
        raise EntryError(f"{WHAT} {entry!r} is not callable")
    try:
        inspect.signature(loaded.value).bind(None, None)
    except TypeError as exc:
        raise EntryError(f"{WHAT} {entry!r} cannot be called as terms(batch, objective): {exc}") from exc
    except ValueError:  # a builtin without a signature to read: the first call says whether it fits
        pass
    return loaded


@functools.lru_cache(maxsize=16)
def _pinned(entry: str, source_hash: str | None) -> Callable[..., object]:
    loaded = load_objective_plugin(entry)
    check_pin(loaded, source_hash, WHAT)
    return loaded.value  # type: ignore[return-value]


def pinned_objective_function(config: PluginObjective) -> Callable[..., object]:
    """The plugin's function, once its source matches the hash the run recorded (imported once per process)."""
    return _pinned(config.entry, config.source_hash)
