"""Settings of a multi-turn environment run: which environment, its limits, the tool's sandbox."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from swarmrl.configs.tasks import CodeRewardConfig


class EnvConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["python_tool", "feedback"] = Field(
        description="'python_tool': the model runs Python in the code sandbox and reads its output; "
        "'feedback': a wrong answer comes back as a turn and the model tries again."
    )
    max_turns: int = Field(4, ge=1, description="Model turns per rollout.")
    max_tokens: int = Field(512, ge=1, description="Completion tokens per rollout, model and environment.")
    max_seconds: float = Field(60.0, gt=0, description="Wall-clock limit per rollout (the worker's own).")
    max_concurrent_steps: int = Field(
        1,
        ge=1,
        description="Environment steps (tool runs) in flight at once in one process: the rows of a worker's "
        "round of turns, and of a trainer's or validator's replay. Raise it where cores are free: each tool "
        "run starts a sandbox, which costs CPU and kernel time (on 2 cores shared by a trainer and two "
        "workers, 4 made the tool demo's steps slower).",
    )
    max_tool_calls: int = Field(3, ge=0, description="python_tool: code runs per rollout (0: no tool).")
    max_output_chars: int = Field(1000, ge=16, description="python_tool: a tool turn's output is cut here.")
    max_attempts: int = Field(3, ge=1, description="feedback: answers per rollout.")
    retry_discount: float = Field(0.5, ge=0, le=1, description="feedback: reward factor per earlier miss.")
    sandbox: CodeRewardConfig = Field(
        default_factory=lambda: CodeRewardConfig(timeout_seconds=5, cpu_seconds=5),
        description="python_tool: limits and isolation of the tool's sandbox (fails closed without bwrap).",
    )
