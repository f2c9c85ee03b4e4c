"""The run configuration: one TOML file, typed sections, dotted CLI overrides, and a resolved copy per run.

Each role owns the model of its own section (``swarmrl.<role>.config``); this module only composes them,
loads TOML and applies ``section.field=value`` overrides. Those config modules import pydantic and each
other only (their packages export lazily), so reading a config never loads torch or a role's code.
"""

from __future__ import annotations

import json
import tomllib
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from swarmrl.coordinator.config import CoordinatorConfig
from swarmrl.devices import DEVICE_HELP, check_device, resolve_device
from swarmrl.envs.config import EnvConfig
from swarmrl.inference.config import EngineConfig, PagedEngineConfig
from swarmrl.islands.config import IslandsConfig
from swarmrl.models.tiny import TinyModelSpec
from swarmrl.shardcast.config import ShardcastConfig
from swarmrl.tasks.config import TasksConfig
from swarmrl.trainer.loss_config import LossConfig
from swarmrl.validator.config import ValidatorConfig
from swarmrl.wan.config import WanConfig

if TYPE_CHECKING:
    from swarmrl.rollouts import RolloutLimits


class ConfigError(Exception):
    """A config file or override is unreadable, names an unknown field, or holds an invalid value."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunSection(Section):
    name: str = Field("demo", description="run name; the run directory is <root>/<name>")
    root: Path = Field(Path("runs"), description="directory that holds run directories")
    seed: int = Field(0, description="seed for every random choice of the run")
    run_id: str = Field("", description="identifier bound into seeds and signatures; defaults to the name")

    @property
    def directory(self) -> Path:
        return self.root / self.name

    @property
    def id(self) -> str:
        return self.run_id or self.name


class ModelSection(Section):
    path: Path | None = Field(None, description="local HF model directory; when unset a tiny model is built")
    tiny: TinyModelSpec = Field(default_factory=TinyModelSpec, description="shape of the tiny model")
    tokenizer_vocab_size: int = Field(
        384, ge=260, description="vocabulary of the tokenizer trained on task text"
    )
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="training and inference dtype")
    attn_implementation: Literal["sdpa", "eager"] = Field("sdpa", description="attention kernel")
    chat_template: Literal["none", "chatml"] = Field(
        "none",
        description="chat template of the tokenizer trained for a tiny model: 'chatml' is Qwen-style ChatML "
        "with <think> reasoning (use with prompt.format 'chat' or 'auto'); ignored with `path`",
    )


class PromptSection(Section):
    """How a task's text becomes the model's input; see `swarmrl.models.prompting`."""

    format: Literal["auto", "chat", "plain"] = Field(
        "auto",
        description="'chat': the tokenizer's chat template (instruct and reasoning models); 'plain': "
        "`template` as text (base models); 'auto': chat when the tokenizer has a chat template, else plain",
    )
    template: str = Field(
        "{question}\nAnswer:", description="plain format: the whole prompt, {question} is the task's prompt"
    )
    add_bos: bool = Field(
        True, description="plain format: prefix the tokenizer's BOS token (a chat template places its own)"
    )
    user_template: str = Field(
        "{question}", description="chat format: the user turn, {question} is the task's prompt"
    )
    system: str | None = Field(
        None, description="chat format: the system prompt; unset leaves the template's default (if any)"
    )
    enable_thinking: bool | None = Field(
        None,
        description="chat format: the template's thinking switch (Qwen3: false pre-fills an empty "
        "<think></think>); unset leaves the template's default",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="chat format: further variables the chat template reads"
    )
    stop_tokens: list[str] = Field(
        default_factory=list,
        description="more tokens that end a completion, besides EOS and the chat template's end-of-turn token",
    )

    @model_validator(mode="after")
    def _check(self) -> PromptSection:
        for name in ("template", "user_template"):
            if "{question}" not in getattr(self, name):
                raise ValueError(f"prompt.{name} must contain {{question}}")
        reserved = {"enable_thinking", "messages", "add_generation_prompt", "tokenize"} & set(
            self.chat_template_kwargs
        )
        if reserved:
            raise ValueError(f"prompt.chat_template_kwargs may not set {sorted(reserved)}")
        return self


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


class WorkerSection(Section):
    num_workers: int = Field(2, ge=1, description="local inference workers")
    prompts_per_batch: int = Field(16, ge=1, description="prompts per rollout file")
    group_size: int = Field(8, ge=2, description="completions per prompt (G)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    max_new_tokens: int = Field(16, ge=1, description="longest completion")
    async_level: int = Field(
        2, ge=0, description="a batch for step k may come from a policy no older than k - async_level"
    )
    torch_threads: int = Field(1, ge=1, description="CPU threads per worker")
    device: str = Field(
        "cpu",
        description=f"where a worker generates (local workers and swarm nodes; `swarmrl worker --device` "
        f"overrides it): {DEVICE_HELP}",
    )

    _device = field_validator("device")(check_device)

    def rollout_limits(self, vocab_size: int) -> RolloutLimits:
        """Bounds a rollout file of this run must respect; `vocab_size` is the policy model's, not the tokenizer's."""
        from swarmrl.rollouts import RolloutLimits

        return RolloutLimits(
            max_rows=self.prompts_per_batch * self.group_size,
            max_completion_tokens=self.max_new_tokens,
            vocab_size=vocab_size,
        )


class EvalSection(Section):
    num_tasks: int = Field(200, ge=1, description="held-out tasks evaluated before and after RL")
    temperature: float = Field(1.0, ge=0, description="sampling temperature of the evaluation (0 = greedy)")
    samples_per_task: int = Field(
        1, ge=1, description="completions per held-out task: the k of the reported avg@k and pass@k"
    )
    every_steps: int = Field(
        0,
        ge=0,
        description="online evals: the trainer evaluates the policy of every step that is a multiple of this "
        "(step 0 included) on held-out tasks, into metrics.jsonl and the metric sinks; 0: off",
    )
    online_num_tasks: int = Field(
        32, ge=1, description="held-out tasks of each online eval (the first ones of the held-out split)"
    )


class MetricsSection(Section):
    wandb_project: str | None = Field(None, description="log to this Weights & Biases project when set")
    tensorboard: bool = Field(False, description="also write TensorBoard event files")
    prometheus_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="trainer, workers and validators serve Prometheus metrics on this port (0: the OS picks; "
        "the URL goes to metrics.url in the run or node directory); unset: not served",
    )
    prometheus_host: str = Field("127.0.0.1", description="address the metrics port binds")

    def check_installed(self) -> None:
        """Refuse, before any work, a sink whose package is missing (not an exit mid-run when the trainer
        starts); checked by whatever starts a trainer, since other roles never load the sinks."""
        needed = {"wandb": self.wandb_project, "tensorboard": self.tensorboard}
        missing = [package for package, wanted in needed.items() if wanted and find_spec(package) is None]
        if missing:
            raise ConfigError(
                f"[metrics] asks for {' and '.join(missing)}, which is not installed: "
                f"pip install 'swarmrl[metrics]' or turn it off"
            )


class SwarmSection(Section):
    honest_workers: int = Field(3, ge=1, description="honest worker nodes `demo --swarm` starts")
    cheating_workers: int = Field(
        1, ge=0, description="cheating worker nodes (they generate with half the model's layers)"
    )
    relays: int = Field(1, ge=1, description="shardcast relays between the trainer's origin and the nodes")
    validators: int = Field(1, ge=1, description="validators judging side by side (validation leases)")
    slow_workers: int = Field(0, ge=0, description="how many of the honest workers run on a slower machine")
    slowdown: float = Field(3.0, ge=1.0, description="how many times longer a slow worker takes per unit")
    poll_seconds: float = Field(0.5, gt=0, description="how often nodes poll the coordinator when idle")


class RunConfig(Section):
    run: RunSection = Field(default_factory=RunSection)
    model: ModelSection = Field(default_factory=ModelSection)
    prompt: PromptSection = Field(default_factory=PromptSection)
    sft: SFTSection = Field(default_factory=SFTSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    worker: WorkerSection = Field(default_factory=WorkerSection)
    eval: EvalSection = Field(default_factory=EvalSection)
    metrics: MetricsSection = Field(default_factory=MetricsSection)
    swarm: SwarmSection = Field(default_factory=SwarmSection)
    engine: EngineConfig = Field(
        default_factory=PagedEngineConfig, description="the workers' inference engine"
    )
    tasks: TasksConfig = Field(default_factory=TasksConfig, description="task sources and rewards")
    loss: LossConfig = Field(default_factory=LossConfig, description="the policy objective")
    coordinator: CoordinatorConfig = Field(
        default_factory=CoordinatorConfig, description="the coordinator service of a swarm run"
    )
    islands: IslandsConfig = Field(default_factory=IslandsConfig, description="trainer islands")
    validator: ValidatorConfig = Field(
        default_factory=ValidatorConfig, description="thresholds of the validator's checks"
    )
    shardcast: ShardcastConfig = Field(
        default_factory=ShardcastConfig, description="the trainer's origin and the nodes' checkpoint fetching"
    )
    env: EnvConfig | None = Field(
        None, description="a multi-turn environment ([env], swarmrl.envs); none: single-turn"
    )
    wan: WanConfig = Field(default_factory=WanConfig, description="the emulated internet of `demo --wan`")

    @model_validator(mode="after")
    def _check_across_sections(self) -> RunConfig:
        # A multi-turn row's completion (model and environment tokens) is bounded like a single-turn one.
        if self.env is not None and self.env.max_tokens > self.worker.max_new_tokens:
            raise ConfigError(
                f"env.max_tokens {self.env.max_tokens} exceeds worker.max_new_tokens "
                f"{self.worker.max_new_tokens}, the longest completion a rollout file may hold"
            )
        if self.trainer.pack_length and self.trainer.pack_length <= self.worker.max_new_tokens:
            raise ConfigError(
                f"trainer.pack_length {self.trainer.pack_length} cannot hold a prompt and a completion of "
                f"worker.max_new_tokens {self.worker.max_new_tokens} tokens"
            )
        self._check_online_eval()
        if self.loss.max_tokens is None:
            # Dr.GRPO's constant is the longest completion a worker may produce, never the padded width.
            self.loss.max_tokens = self.worker.max_new_tokens
        return self

    def _check_online_eval(self) -> None:
        from swarmrl.tasks.config import ArithmeticSourceConfig, ReasoningGymSourceConfig

        every = self.eval.every_steps
        if not every:
            return
        if every > self.trainer.steps:
            raise ConfigError(
                f"eval.every_steps {every} exceeds trainer.steps {self.trainer.steps}: only the starting "
                "policy would be evaluated"
            )
        if self.env is not None:
            raise ConfigError(
                "eval.every_steps scores single-turn completions; a run with [env] is multi-turn, which "
                "online evals do not run"
            )
        generated = (ReasoningGymSourceConfig, ArithmeticSourceConfig)
        if not any(isinstance(source, generated) for source in self.tasks.sources):
            raise ConfigError(
                "eval.every_steps needs held-out tasks, i.e. a reasoning-gym or arithmetic source in "
                "tasks.sources (a dataset source has no held-out split)"
            )

    def check_devices(self) -> None:
        """Refuse, before any work (SFT included), a trainer or worker device this machine lacks
        (`DeviceUnavailable`); called by what starts both roles on one machine (`rl`, `demo`)."""
        resolve_device(self.trainer.device)
        resolve_device(self.worker.device)

    def dump_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True)


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `section.field=value` overrides (values parsed as TOML, else taken as strings)."""
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {override!r} is not of the form section.field=value")
        *parents, leaf = key.strip().lstrip("-").split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {override!r}: {part} is not a section")
        node[leaf] = _parse_value(value.strip())
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(str(path).lstrip("@"))
        try:
            # A run directory's resolved config.json is valid input too (what swarm nodes are handed).
            text = path.read_text()
            data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: invalid JSON ({exc})") from exc
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror})") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML ({exc})") from exc
    apply_overrides(data, overrides or [])
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(str(exc)) from exc


def load_run_config(run_dir: Path) -> RunConfig:
    """The resolved config a run directory was prepared with (what its processes all read)."""
    return RunConfig.model_validate(json.loads((run_dir / "config.json").read_text()))
