"""Configuration of the inference engine, selected by `kind` (one implementation file per kind)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TorchEngineConfig(BaseModel):
    """The pure-PyTorch engine: batched decoding with a KV cache on whatever device the model lives on."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["torch"] = Field("torch", description="engine implementation")
    max_batch_size: int = Field(128, ge=1, description="requests decoded together; larger batches are split")
    decode_path: Literal["lean", "hf"] = Field(
        "lean",
        description="decoding steps: 'lean' runs Llama/Qwen2/Qwen3 layers without HF's per-call overhead (other "
        "architectures fall back to 'hf'); 'hf' always calls the model's own forward",
    )
    capture_prompt_hidden_states: bool = Field(
        False,
        description="also return the final hidden states of every prompt position (a TOPLOC prompt chunk)",
    )


# A discriminated union on `kind` once a second engine exists; today the torch engine is the only real one.
EngineConfig = TorchEngineConfig
