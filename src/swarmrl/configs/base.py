"""What every configuration section shares: unknown fields are refused, and one error type for a bad config."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(Exception):
    """A config file or override is unreadable, names an unknown field, or holds an invalid value."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
