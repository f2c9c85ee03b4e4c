"""The run config's [trainer] section (with [trainer.lora]) and [sft]."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from swarmrl.configs.base import Section
from swarmrl.configs.devices import DEVICE_HELP, check_device


class SFTSection(Section):
    steps: int = Field(500, ge=0, description="supervised steps on task demonstrations (0 skips SFT)")
    batch_size: int = Field(64, ge=1, description="sequences per step")
    lr: float = Field(3e-3, gt=0, description="AdamW learning rate")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay")
    warmup_steps: int = Field(20, ge=0, description="linear warmup")
    num_examples: int = Field(20000, ge=1, description="training tasks drawn for SFT")
    cache: bool = Field(True, description="reuse the SFT model of an identical earlier config")


class LoraSection(Section):
    """Low-rank adapters (peft LoRA): the trainer updates only A and B of `W + (alpha/r)·B·A`; each new
    checkpoint carries the adapter alone and workers merge it onto the base model of step 0."""

    enabled: bool = Field(False, description="train LoRA adapters instead of every weight")
    r: int = Field(8, ge=1, description="rank of each adapter")
    alpha: float = Field(16.0, gt=0, description="scale numerator: the update is (alpha / r)·B·A")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapter's input while training")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
        description="names (last path component) of the linear layers that get an adapter",
    )

    @model_validator(mode="after")
    def _body_layers_only(self) -> LoraSection:
        # The fused log-prob head reads lm_head.weight directly, and an embedding adapter is not a linear one.
        refused = sorted({"lm_head", "embed_tokens"} & set(self.target_modules))
        if refused:
            raise ValueError(f"trainer.lora.target_modules may not name {refused}")
        return self


class TrainerSection(Section):
    steps: int = Field(40, ge=1, description="policy steps (one checkpoint each)")
    prompts_per_step: int = Field(32, ge=1, description="informative groups per policy step")
    optimizer_steps_per_policy_step: int = Field(
        2, ge=1, description="minibatches per policy step (INTELLECT-2: 8)"
    )
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate (INTELLECT-2: 3e-7 on a 32B model)")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay")
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas")
    warmup_steps: int = Field(5, ge=0, description="linear warmup in optimizer steps")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient-norm clip (INTELLECT-2: 0.1)")
    advantage: Literal["grpo", "dr_grpo"] = Field(
        "grpo", description="group advantage: (r-mean)/std or r-mean"
    )
    max_files_per_step: int = Field(256, ge=1, description="give up on a step that needs more rollout files")
    max_wait_seconds: float = Field(
        600.0, gt=0, description="give up when no usable rollouts arrive this long"
    )
    keep_checkpoints: int = Field(
        0, ge=0, description="newest model checkpoints kept on disk besides step_0 (0 keeps all)"
    )
    colocate: bool = Field(
        False,
        description="one GPU, both roles: the trainer's process also holds one inference engine on its "
        "device (no worker processes; worker.num_workers is ignored). Generation and training alternate and "
        "each new policy is copied into the engine in place, never read back from a checkpoint; give the "
        "engine a share of the GPU with engine.gpu_memory_fraction that leaves the trainer room",
    )
    generate_while_waiting: bool | Literal["auto"] = Field(
        "auto",
        description="local runs with worker processes: the trainer's process also holds an inference engine "
        "and, whenever it has read every rollout file of a step and still needs groups, generates a batch "
        "itself with its newest policy (copied in place, as with colocate) instead of waiting for a worker. "
        "'auto': on when the trainer and the workers run on the CPU (not with LoRA or under torchrun); "
        "never in a swarm",
    )
    borrow_idle_cores: bool | Literal["auto"] = Field(
        "auto",
        description="local CPU runs with worker processes: while the workers hold every rollout file the "
        "trainer asked for (and so wait), the trainer trains on every core of the run, and on its own "
        "threads again as soon as they have work. 'auto': on when the trainer and the workers run on the CPU and "
        "not under torchrun; never in a swarm. The thread count then follows the workers' timing, and with "
        "it the last bits of a step's float sums: false keeps one count, for runs that must repeat bit for bit",
    )
    micro_batch_tokens: int = Field(
        16384,
        ge=2,
        description="tokens per forward/backward pass (packed rows x pack_length); gradients accumulate "
        "over the micro-batches of a minibatch, normalised by the minibatch's global counts",
    )
    pack_length: int = Field(
        0,
        ge=0,
        description="row length sequences are packed into (first-fit decreasing); 0: micro_batch_tokens "
        "with flex attention, else twice the step's longest sequence (dense masks grow with its square)",
    )
    attention: Literal["auto", "sdpa", "eager", "flex"] = Field(
        "auto",
        description="attention over packed rows with per-document masks: flex (FlexAttention block mask, "
        "CUDA only), sdpa or eager (dense block-diagonal mask); auto = flex on CUDA, else sdpa",
    )
    precision: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="bf16: mixed precision, bf16 compute with fp32 master weights and optimizer state",
    )
    activation_checkpointing: bool = Field(
        False, description="recompute each transformer block in backward instead of storing activations"
    )
    logprob_chunk_tokens: int = Field(
        1024,
        ge=1,
        description="tokens per chunk of the fused LM head + log-softmax (memory: chunk x vocab x 4 bytes)",
    )
    device: str = Field(
        "auto",
        description=f"where the trainer's model lives: {DEVICE_HELP}; under torchrun 'cuda' and 'auto' take "
        "each rank's LOCAL_RANK GPU",
    )

    _device = field_validator("device")(check_device)
    lora: LoraSection = Field(default_factory=LoraSection, description="[trainer.lora]: train adapters only")

    @model_validator(mode="after")
    def _pack_fits_micro_batch(self) -> TrainerSection:
        if self.pack_length > self.micro_batch_tokens:
            raise ValueError(
                f"pack_length {self.pack_length} exceeds micro_batch_tokens {self.micro_batch_tokens}"
            )
        return self
