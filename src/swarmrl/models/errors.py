"""The model family's user-facing failure, importable without transformers (the workers' native loader)."""

from __future__ import annotations

from swarmrl.errors import UserError


class ModelLoadError(UserError):
    """A model directory is missing, incomplete or not a causal LM."""
