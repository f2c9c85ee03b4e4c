"""The run config's [worker] section: how many workers a local run starts, and where and on how many threads
each generates (what every role agrees on, the sampling included, is the [contract] section)."""

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
    torch_threads: int = Field(1, ge=1, description="CPU threads per worker")
    device: str = Field(
        "cpu",
        description=f"where a worker generates (local workers and swarm nodes; `swarmrl worker --device` "
        f"overrides it): {DEVICE_HELP}",
    )

    _device = field_validator("device")(check_device)
