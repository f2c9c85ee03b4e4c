"""Environments from your own package (`[env] kind = "plugin"`): the class an entry names, checked against the
source the run pinned, built with the config's `options` for every episode."""

from __future__ import annotations

import functools

from swarmrl.configs.envs import ENV_ENTRY_POINT_GROUP, PluginEnvConfig
from swarmrl.entrypoints import LoadedEntry, check_pin, load_entry, resolve_entry_point
from swarmrl.envs.base import Environment
from swarmrl.envs.errors import EnvError

WHAT = "environment"


def load_plugin(entry: str) -> LoadedEntry:
    """The class `entry` names ("package.module:Class", or an entry point of the `swarmrl.envs` group)."""
    target = entry if ":" in entry else resolve_entry_point(entry, ENV_ENTRY_POINT_GROUP, WHAT)
    loaded = load_entry(target, WHAT)
    if not isinstance(loaded.value, type):
        raise EnvError(f"{WHAT} {entry!r} is not a class")
    return loaded


@functools.lru_cache(maxsize=16)
def _pinned_class(entry: str, source_hash: str | None) -> type:
    loaded = load_plugin(entry)
    check_pin(loaded, source_hash, WHAT)
    return loaded.value  # type: ignore[return-value]


def plugin_env(config: PluginEnvConfig) -> Environment:
    """A fresh environment of the plugin's class (one per concurrent episode)."""
    env_class = _pinned_class(config.entry, config.source_hash)
    try:
        env = env_class(**config.options)
    except TypeError as exc:
        raise EnvError(
            f"{WHAT} {config.entry!r} does not take the options {sorted(config.options)}: {exc}"
        ) from exc
    if not isinstance(env, Environment):
        raise EnvError(f"{WHAT} {config.entry!r} has no reset(task, seed) and step(model_turn) methods")
    return env
