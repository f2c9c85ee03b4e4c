"""Configuration of the inference engine, selected by `kind` (one implementation file per kind)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class TorchEngineConfig(BaseModel):
    """The padded engine: left-padded batches over a preallocated KV cache; serves any HF causal LM."""

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


class PagedEngineConfig(BaseModel):
    """The paged engine: paged KV cache, continuous batching, shared group prefill, CUDA graphs on GPUs.

    Serves Llama-family models (Llama, Qwen2, Qwen3 and their shapes); others fall back to the padded engine.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["paged"] = Field("paged", description="engine implementation")
    max_num_seqs: int = Field(256, ge=1, description="sequences decoded together (rows of a decoding step)")
    max_num_batched_tokens: int = Field(
        8192, ge=1, description="prompt tokens per prefill step (a longer prompt runs alone)"
    )
    block_size: int | None = Field(
        None,
        ge=1,
        description="positions per KV block; default 128 with flex attention (FlexAttention's KV tile), else 16",
    )
    gpu_memory_fraction: float = Field(
        0.9,
        gt=0,
        le=1,
        description="CUDA: share of the GPU's memory this engine may fill (weights, activations, KV cache); "
        "the KV cache gets what is left after the weights and a measured activation peak",
    )
    cpu_kv_cache_gib: float = Field(
        1.0, gt=0, description="CPU: memory for the KV cache and captured hidden states, in GiB"
    )
    kv_blocks: int | None = Field(
        None,
        ge=1,
        description="a fixed number of KV blocks instead of sizing the cache from the memory grant (engines with "
        "equal pools share compiled kernels)",
    )
    share_prompts: bool = Field(
        True,
        description="requests with the same prompt prefill it once and share its KV blocks (GRPO groups)",
    )
    attention: Literal["auto", "flex", "gather"] = Field(
        "auto",
        description="decode attention: 'flex' (compiled FlexAttention over the paged pool; CUDA), 'gather' "
        "(SDPA over each row's gathered blocks); 'auto' picks flex on CUDA and gather on CPU",
    )
    cuda_graphs: bool = Field(
        True, description="CUDA: replay decoding steps from graphs captured per batch-size bucket (flex only)"
    )
    compile_sampler: bool = Field(
        True, description="CUDA: fuse the seeded sampler with torch.compile (falls back to eager on failure)"
    )
    capture_prompt_hidden_states: bool = Field(
        False,
        description="also return the final hidden states of every prompt position (a TOPLOC prompt chunk)",
    )
    hidden_states_device: Literal["cpu", "engine"] = Field(
        "cpu",
        description="where returned hidden states live: 'cpu', or 'engine' (the model's device: TOPLOC's "
        "top-k then runs there, without moving every state to the host first)",
    )


EngineConfig = Annotated[TorchEngineConfig | PagedEngineConfig, Field(discriminator="kind")]
