"""The configuration floor: one pydantic model per section of a run's TOML, and the loaders.

Every module here imports pydantic and the standard library only, so any role reads a config without loading
torch or another role's code, and nothing in this package imports from above it.
"""

from swarmrl.configs.base import ConfigError
from swarmrl.configs.run import RunConfig, apply_overrides, load_config, load_run_config

__all__ = ["ConfigError", "RunConfig", "apply_overrides", "load_config", "load_run_config"]
