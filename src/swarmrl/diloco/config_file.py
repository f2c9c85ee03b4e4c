"""A DiLoCo run's config read from TOML, with flat overrides (the `swarmrl diloco` commands)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from swarmrl.configs.diloco import DiLoCoConfig
from swarmrl.diloco.errors import DiLoCoConfigError


def load_diloco_config(path: Path, overrides: Mapping[str, object] | None = None) -> DiLoCoConfig:
    """Read a TOML file (its `[diloco]` table if present, else the whole file) and apply flat overrides."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise DiLoCoConfigError(f"cannot read config {path}: {exc}") from exc
    table = raw.get("diloco", raw)
    if not isinstance(table, dict):
        raise DiLoCoConfigError(f"{path}: [diloco] must be a table")
    merged = {**table, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    try:
        return DiLoCoConfig.model_validate(merged)
    except ValidationError as exc:
        raise DiLoCoConfigError(f"{path}: invalid diloco config: {exc}") from exc
