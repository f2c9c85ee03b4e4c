"""A run pins the code of yours that it judges and trains with: the source hash of each reward function, of a
plugin environment and of a plugin loss objective, recorded in its config when it is prepared (and by
`--dry-run`), so that every trusted node can refuse to judge with other code and a resumed run can refuse to
train with another loss. Importing each one here also refuses a missing one before anything starts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmrl.configs import RunConfig
from swarmrl.configs.envs import PluginEnvConfig
from swarmrl.configs.loss import PluginObjective
from swarmrl.entrypoints import EntryError, LoadedEntry, check_pin
from swarmrl.envs.plugin import WHAT as ENVIRONMENT
from swarmrl.envs.plugin import load_plugin
from swarmrl.tasks.reward_functions import WHAT as REWARD_FUNCTION
from swarmrl.tasks.reward_functions import pin_reward_functions
from swarmrl.trainer.loss_plugin import WHAT as LOSS_OBJECTIVE
from swarmrl.trainer.loss_plugin import load_objective_plugin


def pin_run_code(config: RunConfig, prepared: Path | None = None) -> None:
    """Record in `config` the source hash of every reward function, of a plugin environment and of a plugin loss
    objective; EntryError naming the first that cannot be imported, or whose code differs from a hash the
    config already holds.

    `prepared`: the config.json a run directory was prepared with. A resumed run whose code changed is
    refused: its trainer would score new steps by other rules, or train them with another loss, than the steps
    it already trained on.
    """
    config.tasks.reward_function_hashes = pin_reward_functions(config.tasks)
    if isinstance(config.env, PluginEnvConfig):
        _pin(config.env, load_plugin, ENVIRONMENT)
    if isinstance(config.loss.objective, PluginObjective):
        _pin(config.loss.objective, load_objective_plugin, LOSS_OBJECTIVE)
    if prepared is not None and prepared.is_file():
        _same_code(_pins(json.loads(prepared.read_text())), _pins(config.model_dump(mode="json")), prepared)


def _pin(plugin: PluginEnvConfig | PluginObjective, load: Callable[[str], LoadedEntry], what: str) -> None:
    loaded = load(plugin.entry)
    if plugin.source_hash is not None:
        check_pin(loaded, plugin.source_hash, what)
    plugin.source_hash = loaded.source_hash


def _pins(config: dict[str, Any]) -> dict[str, str]:
    """{"<kind> <entry>": source hash} of a config as JSON (read loosely: an older run's config is fine)."""
    pins = {
        f"{REWARD_FUNCTION} {entry!r}": digest
        for entry, digest in config.get("tasks", {}).get("reward_function_hashes", {}).items()
    }
    plugins = (
        (ENVIRONMENT, config.get("env")),
        (LOSS_OBJECTIVE, (config.get("loss") or {}).get("objective")),
    )
    for what, plugin in plugins:
        if isinstance(plugin, dict) and plugin.get("kind") == "plugin" and plugin.get("source_hash"):
            pins[f"{what} {plugin['entry']!r}"] = plugin["source_hash"]
    return pins


def _same_code(before: dict[str, str], now: dict[str, str], prepared: Path) -> None:
    for name, digest in before.items():
        if name in now and now[name] != digest:
            raise EntryError(
                f"{name}: its source (sha256 {now[name][:12]}…) differs from the one {prepared.parent} was "
                f"prepared with (sha256 {digest[:12]}…); restore that code, or start a new run (run.name)"
            )
