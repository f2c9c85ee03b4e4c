"""Typed configuration of a DiLoCo / Streaming DiLoCo / DDP run (the `[diloco]` section of a run TOML)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

CodecName = Literal["fp32", "fp16", "bf16", "int8"]


class TinyModelConfig(BaseModel):
    """Shape of the tiny Qwen2-style causal LM trained by the workers."""

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = Field(64, ge=8, description="Width of the residual stream.")
    intermediate_size: int = Field(128, ge=8, description="Width of the MLP hidden layer.")
    num_hidden_layers: int = Field(2, ge=1, description="Number of transformer blocks.")
    num_attention_heads: int = Field(4, ge=1, description="Query heads per block.")
    num_key_value_heads: int = Field(
        2, ge=1, description="Key/value heads per block (grouped-query attention)."
    )
    max_position_embeddings: int = Field(512, ge=8, description="Longest sequence the rotary cache covers.")
    seed: int = Field(
        0, description="Seed of the weight initialisation; every worker starts from the same weights."
    )


class ByteCorpusConfig(BaseModel):
    """Byte-level corpus made of the Python standard library's source files (available offline)."""

    model_config = ConfigDict(extra="forbid")

    root: Path | None = Field(
        None, description="Directory of .py files to read; None means the running interpreter's stdlib."
    )
    max_bytes: int = Field(
        4_000_000, ge=10_000, description="Stop reading files after this many bytes in total."
    )
    eval_fraction: float = Field(
        0.05, gt=0.0, lt=0.5, description="Share of files (chosen by a hash of their path) held out for eval."
    )
    seq_len: int = Field(64, ge=4, description="Tokens per training sequence.")
    batch_size: int = Field(4, ge=1, description="Sequences per inner step on each worker.")
    eval_batches: int = Field(8, ge=1, description="Batches of `batch_size` sequences in the fixed eval set.")
    seed: int = Field(1234, description="Seed of the batch sampler (each worker adds its rank).")


class InnerOptimizerConfig(BaseModel):
    """AdamW run by every worker between synchronisations (SPEC §7)."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(4e-4, gt=0.0, description="AdamW learning rate.")
    weight_decay: float = Field(0.1, ge=0.0, description="Decoupled weight decay.")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="First-moment decay.")
    beta2: float = Field(0.95, ge=0.0, lt=1.0, description="Second-moment decay.")
    grad_clip: float = Field(1.0, gt=0.0, description="Max global gradient L2 norm before each step.")
    warmup_steps: int = Field(0, ge=0, description="Linear warmup of the rate over the first inner steps.")
    schedule: Literal["constant", "cosine"] = Field(
        "constant", description="After warmup: constant, or cosine decay to min_lr_ratio at the last step."
    )
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0, description="Cosine floor as a fraction of `lr`.")


class OuterOptimizerConfig(BaseModel):
    """SGD with Nesterov momentum applied to the averaged pseudo-gradient on the fp32 global copy."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(0.7, gt=0.0, description="Outer learning rate.")
    momentum: float = Field(0.9, ge=0.0, lt=1.0, description="Nesterov momentum.")


class ThrottleConfig(BaseModel):
    """Simulated wide-area link per worker: every collective waits latency + bytes / bandwidth."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="Slow every collective down to the link below.")
    bandwidth_mbit: float = Field(100.0, gt=0.0, description="Link bandwidth in Mbit/s.")
    latency_ms: float = Field(50.0, ge=0.0, description="Fixed latency added to every collective, in ms.")


class DiLoCoConfig(BaseModel):
    """One local multi-process run: DiLoCo (fragments=1), Streaming DiLoCo (fragments>1) or the DDP baseline."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["diloco", "ddp"] = Field(
        "diloco", description="Low-communication DiLoCo or the DDP baseline."
    )
    workers: int = Field(4, ge=1, le=64, description="Worker processes (data-parallel replicas).")
    total_steps: int = Field(500, ge=1, description="Inner steps each worker runs.")
    inner_steps: int = Field(50, ge=1, description="H: inner steps between two syncs of the same parameters.")
    fragments: int = Field(
        1, ge=1, description="F: parameter fragments synced at staggered offsets (streaming)."
    )
    overlap_steps: int = Field(
        0, ge=0, description="Inner steps a fragment's all-reduce overlaps before its outer step is applied."
    )
    codec: CodecName = Field("fp32", description="Wire format of pseudo-gradients; sums are always fp32.")
    int8_clip_sigmas: float = Field(
        6.0, gt=0.0, description="int8 codec: clip outliers beyond this many standard deviations."
    )
    backend: Literal["gloo", "nccl"] = Field("gloo", description="torch.distributed backend.")
    eval_every: int = Field(
        0, ge=0, description="Evaluate every this many inner steps on rank 0 (0 = end only)."
    )
    threads_per_worker: int = Field(1, ge=1, description="torch intra-op threads per worker process.")
    model: TinyModelConfig = Field(default_factory=TinyModelConfig, description="Tiny causal LM shape.")
    data: ByteCorpusConfig = Field(default_factory=ByteCorpusConfig, description="Corpus and batching.")
    inner: InnerOptimizerConfig = Field(default_factory=InnerOptimizerConfig, description="Inner AdamW.")
    outer: OuterOptimizerConfig = Field(
        default_factory=OuterOptimizerConfig, description="Outer Nesterov SGD."
    )
    throttle: ThrottleConfig = Field(default_factory=ThrottleConfig, description="Simulated WAN link.")

    @model_validator(mode="after")
    def _fragments_fit_the_window(self) -> DiLoCoConfig:
        if self.fragments > self.inner_steps:
            raise ValueError(f"fragments ({self.fragments}) must not exceed inner_steps ({self.inner_steps})")
        if self.overlap_steps >= self.inner_steps:
            raise ValueError(
                f"overlap_steps ({self.overlap_steps}) must be < inner_steps ({self.inner_steps})"
            )
        return self
