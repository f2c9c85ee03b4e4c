"""What every `kind = "plugin"` section shares: the form of the code it names and of the hash a run pins it by."""

from __future__ import annotations

import re

from swarmrl.configs.tasks import ENTRY_PATTERN, SHA256_PATTERN

# The name of an entry point an installed package declares ("guess", "my-pkg.dual_clip").
ENTRY_POINT_NAME = r"[\w.-]+"


def check_plugin_entry(entry: str, source_hash: str | None, form: str) -> None:
    """ValueError unless `entry` is "package.module:attribute" (`form` names what the attribute must be) or an
    entry-point name, and `source_hash` is absent or a sha256 hex digest."""
    if not re.fullmatch(ENTRY_PATTERN, entry) and not re.fullmatch(ENTRY_POINT_NAME, entry):
        raise ValueError(f"entry must be {form!r} or an entry-point name")
    if source_hash is not None and not re.fullmatch(SHA256_PATTERN, source_hash):
        raise ValueError("source_hash must be a sha256 hex digest")
