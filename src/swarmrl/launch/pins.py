"""A run pins the code of yours that it judges with: the source hash of each reward function and of a plugin
environment, recorded in its config when it is prepared (and by `--dry-run`), so that every trusted node can
refuse to judge with other code. Importing each one here also refuses a missing one before anything starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swarmrl.configs import RunConfig
from swarmrl.configs.envs import PluginEnvConfig
from swarmrl.entrypoints import EntryError, check_pin
from swarmrl.envs.plugin import WHAT as ENVIRONMENT
from swarmrl.envs.plugin import load_plugin
from swarmrl.tasks.reward_functions import WHAT as REWARD_FUNCTION
from swarmrl.tasks.reward_functions import pin_reward_functions


def pin_run_code(config: RunConfig, prepared: Path | None = None) -> None:
    """Record in `config` the source hash of every reward function and of a plugin environment; EntryError
    naming the first that cannot be imported, or whose code differs from a hash the config already holds.

    `prepared`: the config.json a run directory was prepared with. A resumed run whose code changed is
    refused: its trainer would score new steps by other rules than the steps it already trained on.
    """
    config.tasks.reward_function_hashes = pin_reward_functions(config.tasks)
    if isinstance(config.env, PluginEnvConfig):
        loaded = load_plugin(config.env.entry)
        if config.env.source_hash is not None:
            check_pin(loaded, config.env.source_hash, ENVIRONMENT)
        config.env.source_hash = loaded.source_hash
    if prepared is not None and prepared.is_file():
        _same_code(_pins(json.loads(prepared.read_text())), _pins(config.model_dump(mode="json")), prepared)


def _pins(config: dict[str, Any]) -> dict[str, str]:
    """{"<kind> <entry>": source hash} of a config as JSON (read loosely: an older run's config is fine)."""
    pins = {
        f"{REWARD_FUNCTION} {entry!r}": digest
        for entry, digest in config.get("tasks", {}).get("reward_function_hashes", {}).items()
    }
    env = config.get("env") or {}
    if env.get("kind") == "plugin" and env.get("source_hash"):
        pins[f"{ENVIRONMENT} {env['entry']!r}"] = env["source_hash"]
    return pins


def _same_code(before: dict[str, str], now: dict[str, str], prepared: Path) -> None:
    for name, digest in before.items():
        if name in now and now[name] != digest:
            raise EntryError(
                f"{name}: its source (sha256 {now[name][:12]}…) differs from the one {prepared.parent} was "
                f"prepared with (sha256 {digest[:12]}…); restore that code, or start a new run (run.name)"
            )
