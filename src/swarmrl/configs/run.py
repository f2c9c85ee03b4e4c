"""The run configuration: one TOML file of typed sections, dotted CLI overrides, and a resolved copy per run.

Each section is a model of its own in this package (`swarmrl.configs.<section>`), which imports pydantic and the
standard library only, so every role can read a config without loading torch or another role's code.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from swarmrl.configs.base import ConfigError, Section, validation_problems
from swarmrl.configs.contract import ContractSection, refuse_moved_fields
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.configs.engine import EngineConfig, PagedEngineConfig
from swarmrl.configs.envs import EnvConfig
from swarmrl.configs.evals import EvalSection
from swarmrl.configs.islands import IslandsConfig
from swarmrl.configs.loss import LossConfig
from swarmrl.configs.metrics import MetricsSection
from swarmrl.configs.model import ModelSection, PromptSection
from swarmrl.configs.shardcast import ShardcastConfig
from swarmrl.configs.swarm import SwarmSection
from swarmrl.configs.tasks import (
    ArithmeticSourceConfig,
    PromptsSourceConfig,
    ReasoningGymSourceConfig,
    TasksConfig,
)
from swarmrl.configs.trainer import SFTSection, TrainerSection
from swarmrl.configs.validator import ValidatorConfig
from swarmrl.configs.wan import WanConfig
from swarmrl.configs.worker import WorkerSection


class RunSection(Section):
    name: str = Field("demo", description="run name; the run directory is <root>/<name>")
    root: Path = Field(Path("runs"), description="directory that holds run directories")
    run_id: str = Field("", description="identifier bound into seeds and signatures; defaults to the name")

    @property
    def directory(self) -> Path:
        return self.root / self.name

    @property
    def id(self) -> str:
        return self.run_id or self.name


class RunConfig(Section):
    run: RunSection = Field(
        default_factory=RunSection, description="the run's name, id and where its directory lives"
    )
    contract: ContractSection = Field(
        default_factory=ContractSection,
        description="what every role of the run must agree on (seed, async window, unit size, sampling): the "
        "coordinator stores it at create-run and every trainer, validator, worker and relay presents its sha256 "
        "at join; a role with another contract is refused, naming each field that differs and both values",
    )
    model: ModelSection = Field(
        default_factory=ModelSection,
        description="the policy: a local HF model directory, or a tiny model built from a few numbers",
    )
    prompt: PromptSection = Field(
        default_factory=PromptSection,
        description="how a task becomes the model's input (chat template or text)",
    )
    sft: SFTSection = Field(
        default_factory=SFTSection, description="the supervised warm start (`swarmrl sft`)"
    )
    trainer: TrainerSection = Field(
        default_factory=TrainerSection,
        description="the trainer: steps, optimizer, packing, precision, device",
    )
    worker: WorkerSection = Field(
        default_factory=WorkerSection, description="local worker processes, their threads and device"
    )
    eval: EvalSection = Field(
        default_factory=EvalSection, description="held-out evals before and after RL, and online during it"
    )
    metrics: MetricsSection = Field(
        default_factory=MetricsSection, description="TensorBoard, W&B and Prometheus metrics"
    )
    swarm: SwarmSection = Field(
        default_factory=SwarmSection,
        description="the local swarm `demo --swarm` starts, and how every swarm node polls and retries",
    )
    engine: EngineConfig = Field(
        default_factory=PagedEngineConfig,
        description="the workers' inference engine: the paged engine (default) or the padded one, and their sizes",
    )
    tasks: TasksConfig = Field(
        default_factory=TasksConfig,
        description="task sources mixed by weight (reasoning-gym, datasets, TRL-layout prompts), the rewards (math, "
        "code, length, your own reward functions) and the admission of community task packs",
    )
    loss: LossConfig = Field(
        default_factory=LossConfig,
        description="the policy loss: a published recipe to start from, the objective (yours as a plugin), the "
        "behaviour correction, normalisation, entropy and KL terms",
    )
    coordinator: CoordinatorConfig = Field(
        default_factory=CoordinatorConfig,
        description="the coordinator service of a swarm run: heartbeats, rate limits, uploads and storage, work "
        "leases, spot checks, credit, penalties and connection limits",
    )
    islands: IslandsConfig = Field(
        default_factory=IslandsConfig,
        description="trainer islands merged by DiLoCo (`demo --islands`): merge interval, fragments, codec, outer "
        "step, timeouts and the checks on hostile peers",
    )
    validator: ValidatorConfig = Field(
        default_factory=ValidatorConfig,
        description="thresholds of the validator's checks (`swarmrl validator calibrate` measures them)",
    )
    shardcast: ShardcastConfig = Field(
        default_factory=ShardcastConfig, description="the trainer's origin and the nodes' checkpoint fetching"
    )
    env: EnvConfig | None = Field(
        None,
        description="a multi-turn environment, one kind each (a Python tool, feedback, or yours as a plugin); "
        "unset: single-turn tasks",
    )

    wan: WanConfig = Field(
        default_factory=WanConfig,
        description="the emulated internet of `demo --wan`: regions, the paths between them, churn",
    )

    @model_validator(mode="before")
    @classmethod
    def _refuse_moved_fields(cls, data: Any) -> Any:
        refuse_moved_fields(data)
        return data

    @model_validator(mode="after")
    def _check_across_sections(self) -> RunConfig:
        # A multi-turn row's completion (model and environment tokens) is bounded like a single-turn one.
        if self.env is not None and self.env.max_tokens > self.contract.max_new_tokens:
            raise ConfigError(
                f"env.max_tokens {self.env.max_tokens} exceeds contract.max_new_tokens "
                f"{self.contract.max_new_tokens}, the longest completion a rollout file may hold"
            )
        if self.trainer.pack_length and self.trainer.pack_length <= self.contract.max_new_tokens:
            raise ConfigError(
                f"trainer.pack_length {self.trainer.pack_length} cannot hold a prompt and a completion of "
                f"contract.max_new_tokens {self.contract.max_new_tokens} tokens"
            )
        give_up = self.trainer.max_wait_seconds
        deadline_set = "lease_max_deadline_s" in self.coordinator.model_fields_set
        if not deadline_set and self.coordinator.lease_max_deadline_s >= give_up:
            # The default cap would outlast this shorter give-up: half of it leaves the step time to re-issue a
            # lapsed unit before the trainer ends the run.
            self.coordinator.lease_max_deadline_s = give_up / 2
        if self.coordinator.lease_max_deadline_s >= give_up:
            raise ConfigError(
                f"coordinator.lease_max_deadline_s {self.coordinator.lease_max_deadline_s} must be below "
                f"trainer.max_wait_seconds {self.trainer.max_wait_seconds}: a step waiting on one node's unit "
                "would outlast the trainer's give-up"
            )
        self._check_online_eval()
        prompts = any(isinstance(source, PromptsSourceConfig) for source in self.tasks.sources)
        if prompts and self.env is None and not self.tasks.reward_functions:
            raise ConfigError(
                "a 'prompts' source is scored by your own reward functions: set tasks.reward_functions "
                "(or play it in an [env] that gives the rewards)"
            )
        if self.tasks.community.accept and self.env is not None:
            raise ConfigError(
                "tasks.community.accept takes single-turn task packs; a run with an [env] plays its episodes "
                "in its environment, which a pack's rows have none of"
            )
        if self.loss.max_tokens is None:
            # Dr.GRPO's constant is the longest completion a worker may produce, never the padded width.
            self.loss.max_tokens = self.contract.max_new_tokens
        return self

    def _check_online_eval(self) -> None:
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
        raise ConfigError(validation_problems(exc, RunConfig)) from exc


def load_run_config(run_dir: Path) -> RunConfig:
    """The resolved config a run directory was prepared with (what its processes all read)."""
    path = Path(run_dir) / "config.json"
    try:
        return RunConfig.model_validate(json.loads(path.read_text()))
    except OSError as exc:
        raise ConfigError(
            f"{run_dir} is not a prepared run directory ({path}: {exc.strerror}); `swarmrl sft` or `rl` makes one"
        ) from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    except ValidationError as exc:
        raise ConfigError(f"{path}: {validation_problems(exc, RunConfig)}") from exc
