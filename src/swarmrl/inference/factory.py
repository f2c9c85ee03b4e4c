"""Build the engine a config names."""

from __future__ import annotations

import torch

from swarmrl.inference.config import EngineConfig
from swarmrl.inference.engine import InferenceEngine
from swarmrl.inference.torch_engine import TorchEngine


def build_engine(
    config: EngineConfig, model: torch.nn.Module, *, eos_token_id: int | None = None, policy_step: int = 0
) -> InferenceEngine:
    """The engine for `config.kind`, serving `model` (a HF causal LM) at `policy_step`."""
    if config.kind == "torch":
        return TorchEngine(model, config, eos_token_id=eos_token_id, policy_step=policy_step)
    raise ValueError(f"unknown engine kind {config.kind!r}")
