"""Build the engine a config names."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import assert_never

import torch

from swarmrl.configs.engine import EngineConfig, PagedEngineConfig, TorchEngineConfig
from swarmrl.inference import llama_layers
from swarmrl.inference.engine import LiveEngine
from swarmrl.inference.paged.engine import PagedEngine
from swarmrl.models.native import load_native

log = logging.getLogger(__name__)


def build_engine(
    config: EngineConfig,
    model: torch.nn.Module,
    *,
    eos_token_id: int | Sequence[int] | None = None,
    policy_step: int = 0,
) -> LiveEngine:
    """The engine for `config.kind`, serving `model` (a HF causal LM) at `policy_step`.

    The paged engine runs Llama-family layers itself; any other architecture is served by the padded engine,
    which calls the model's own forward.
    """
    if isinstance(config, PagedEngineConfig) and not llama_layers.supports(model):
        log.warning("%s is not a Llama-family model: generating with the padded engine", type(model).__name__)
        config = TorchEngineConfig(
            max_batch_size=config.max_num_seqs,
            capture_prompt_hidden_states=config.capture_prompt_hidden_states,
        )
    match config:
        case PagedEngineConfig():
            return PagedEngine(model, config, eos_token_id=eos_token_id, policy_step=policy_step)
        case TorchEngineConfig():
            # Imported only when used: it runs transformers' own forward, whose import costs a paged worker
            # seconds.
            from swarmrl.inference.torch_engine import TorchEngine

            return TorchEngine(model, config, eos_token_id=eos_token_id, policy_step=policy_step)
        case _:
            assert_never(config)


def engine_model(
    config: EngineConfig, path: Path, dtype: str = "float32", device: str | torch.device = "cpu"
) -> torch.nn.Module:
    """The model an engine of `config` serves from the checkpoint at `path`. The paged engine gets a
    Llama-family checkpoint built without transformers (`models.native`: the same weights and hidden states,
    and a worker skips seconds of imports); other architectures, and the padded engine, transformers' own."""
    model: torch.nn.Module | None = (
        load_native(path, dtype, device) if isinstance(config, PagedEngineConfig) else None
    )
    if model is None:
        from swarmrl.models import load_model  # transformers' model classes, imported only when needed

        model = load_model(path, dtype, device=str(device))
    return model
