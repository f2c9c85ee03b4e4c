"""Settings of a multi-turn environment run: one model per environment kind, chosen by `kind` (a discriminated
union, like task sources), each with the limits every episode shares."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swarmrl.configs.plugins import check_plugin_entry
from swarmrl.configs.tasks import CodeRewardConfig

# The entry-point group an installed package declares its environments in (`entry = "name"` finds them).
ENV_ENTRY_POINT_GROUP = "swarmrl.envs"


class _EpisodeLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(4, ge=1, description="Model turns per rollout.")
    max_tokens: int = Field(512, ge=1, description="Completion tokens per rollout, model and environment.")
    max_seconds: float = Field(60.0, gt=0, description="Wall-clock limit per rollout (the worker's own).")
    max_concurrent_steps: int = Field(
        1,
        ge=1,
        description="Environment steps (tool runs) in flight at once in one process: the rows of a worker's "
        "round of turns, and of a trainer's or validator's replay. Raise it where cores are free: each tool "
        "run starts a sandbox, which costs CPU and kernel time, so where every core is busy more runs at once "
        "make steps slower (benchmarks/RESULTS.md, the tool-use demo).",
    )


class PythonToolEnvConfig(_EpisodeLimits):
    kind: Literal["python_tool"] = Field(
        description="The model runs Python in the code sandbox and reads its output."
    )
    max_tool_calls: int = Field(3, ge=0, description="Code runs per rollout (0: no tool).")
    max_output_chars: int = Field(1000, ge=16, description="A tool turn's output is cut here.")
    sandbox: CodeRewardConfig = Field(
        default_factory=lambda: CodeRewardConfig(timeout_seconds=5, cpu_seconds=5),
        description="Limits and isolation of the tool's sandbox (fails closed without bwrap).",
    )


class FeedbackEnvConfig(_EpisodeLimits):
    kind: Literal["feedback"] = Field(
        description="A wrong answer comes back as a turn and the model tries again."
    )
    max_attempts: int = Field(3, ge=1, description="Answers per rollout.")
    retry_discount: float = Field(0.5, ge=0, le=1, description="Reward factor per earlier miss.")


class PluginEnvConfig(_EpisodeLimits):
    kind: Literal["plugin"] = Field(
        description="An environment class from your own package, implementing swarmrl.envs.base.Environment "
        "(reset(task, seed) -> first turn, step(model turn) -> EnvStep), deterministic given (task, seed, "
        "model turns): workers play it, and the trainer and validators replay it as they do the built-in ones."
    )
    entry: str = Field(
        description="'package.module:Class', or the name of an entry point your package declares in the "
        f"{ENV_ENTRY_POINT_GROUP!r} group."
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments of the class (JSON values), the same on every node.",
    )
    source_hash: str | None = Field(
        None,
        description="sha256 of the class's module source, recorded when the run is prepared: a node whose "
        "module differs refuses to play or replay it. Leave it out of a TOML you write.",
    )

    @model_validator(mode="after")
    def _entry_form(self) -> PluginEnvConfig:
        check_plugin_entry(self.entry, self.source_hash, "package.module:Class")
        return self


EnvConfig = Annotated[PythonToolEnvConfig | FeedbackEnvConfig | PluginEnvConfig, Field(discriminator="kind")]
