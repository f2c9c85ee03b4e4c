"""The run config's [worker] section: how rollouts are sampled and how stale a policy may be."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from swarmrl.configs.base import Section
from swarmrl.configs.devices import DEVICE_HELP, check_device


class WorkerSection(Section):
    num_workers: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        "auto",
        description="local worker processes (`swarmrl rl`, `demo`); 'auto': one per CPU core this run may use "
        "but the trainer's (at least one; every process runs one torch thread), one when workers generate on "
        "a GPU",
    )
    prompts_per_batch: int = Field(
        16,
        ge=1,
        description="prompts per rollout file; a local run without proofs writes a step's last file smaller, "
        "with only the prompts the trainer expects that step to still need",
    )
    group_size: int = Field(8, ge=2, description="completions per prompt (G)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    max_new_tokens: int = Field(16, ge=1, description="longest completion")
    async_level: int = Field(
        2, ge=0, description="a batch for step k may come from a policy no older than k - async_level"
    )
    torch_threads: int = Field(1, ge=1, description="CPU threads per worker")
    local_proofs: bool = Field(
        False,
        description="local runs (`swarmrl rl`, `demo`, islands) build TOPLOC proofs although no validator reads "
        "their files. Off (default): single-turn files are written without proofs and their header says so "
        "(`proofs: false`), and every validator refuses such a file. On: every file is a whole batch "
        "(`prompts_per_batch`), as a validator judges a swarm unit. Swarm workers always build proofs",
    )
    device: str = Field(
        "cpu",
        description=f"where a worker generates (local workers and swarm nodes; `swarmrl worker --device` "
        f"overrides it): {DEVICE_HELP}",
    )

    _device = field_validator("device")(check_device)
