"""What every configuration section shares: unknown fields are refused, and one error type for a bad config."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class ConfigError(Exception):
    """A config file or override is unreadable, names an unknown field, or holds an invalid value."""


def validation_problems(exc: ValidationError, model: type[BaseModel]) -> str:
    """A pydantic error as one line: `section.field: problem (got value)`, with the nearest field name for
    one that does not exist (`trainer.step: no such field; did you mean trainer.steps?`)."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ()))
        if error.get("type") == "extra_forbidden":
            problems.append(f"{where}: no such field{_nearest(model, error['loc'])}")
        else:
            got = error.get("input")
            shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
            problems.append(f"{where or 'config'}: {error.get('msg', 'invalid')}{shown}")
    return "; ".join(problems)


def _nearest(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """`; did you mean a.b?` for the field of the same section spelt most like the last part of `loc`."""
    section: Any = model
    for part in loc[:-1]:
        field = getattr(section, "model_fields", {}).get(part)
        section = getattr(field, "annotation", None)
        if not (isinstance(section, type) and issubclass(section, BaseModel)):
            return ""
    close = difflib.get_close_matches(str(loc[-1]), list(section.model_fields), n=1)
    return f"; did you mean {'.'.join([*map(str, loc[:-1]), close[0]])}?" if close else ""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
