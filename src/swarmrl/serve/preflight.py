"""What `swarmrl serve` checks before it loads any weights, so that a wrong directory is one line at once, not
a traceback after the model stack has loaded: the model directory holds a readable config.json of a
Llama-family model (the paged engine runs no other), weights, and a tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from swarmrl.models.adapter import ADAPTER_WEIGHTS, AdapterError, base_checkpoint, is_adapter_checkpoint
from swarmrl.serve.errors import ServeError

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def check_model_dir(path: Path) -> None:
    """ServeError naming what `path` lacks to be served; nothing is loaded."""
    if not path.is_dir():
        raise ServeError(f"{path}: no such model directory")
    weights_dir = path
    if is_adapter_checkpoint(path):
        if not (path / ADAPTER_WEIGHTS).is_file():
            raise ServeError(f"{path}: a LoRA adapter checkpoint without {ADAPTER_WEIGHTS}")
        try:
            weights_dir = base_checkpoint(path)
        except AdapterError as exc:
            raise ServeError(str(exc)) from exc
    settings = _settings(weights_dir / "config.json")
    from swarmrl.models.native import plain_llama_layers

    if not plain_llama_layers(SimpleNamespace(**settings)):
        raise ServeError(
            f"{weights_dir}: model_type {settings.get('model_type')!r} is not a plain Llama-family model, "
            "the only kind the paged engine serves"
        )
    if not any(any(weights_dir.glob(pattern)) for pattern in WEIGHT_PATTERNS):
        raise ServeError(f"{weights_dir}: no weights (no *.safetensors or pytorch_model*.bin)")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ServeError(f"{path}: no tokenizer (none of {', '.join(TOKENIZER_FILES)})")


def _settings(file: Path) -> dict:
    if not file.is_file():
        raise ServeError(f"{file.parent} is not a model directory (no config.json)")
    try:
        settings = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ServeError(f"{file}: unreadable ({exc})") from exc
    if not isinstance(settings, dict):
        raise ServeError(f"{file}: not a JSON object")
    return settings
