"""The run config's [contract] section: the settings every role of a run must agree on.

Workers sample with them, validators judge a file by them, the trainer reads and bounds its rows by them, and
the coordinator sizes units and the policy window by them. A swarm keeps one copy: the coordinator stores the
contract of the config its run was created with (`swarmrl admin create-run --config`), and every trainer,
validator, worker and relay presents the sha256 of its own at join; a node whose contract differs is refused
with the field and both values named, before it spends any work the others would reject.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field, model_validator

from swarmrl.configs.base import ConfigError, Section

MAX_UNIT_ROWS = 2**31 - 1  # completions in one unit's file: the coordinator stores it as a 32-bit integer


class ContractSection(Section):
    """A config that still sets one of these fields in its old section (`[worker]`, or `seed` in `[run]`) is
    refused, naming the field's new place."""

    seed: int = Field(
        0,
        description="seed for every random choice of the run: the prompts each unit of work is assigned (worker "
        "and validator derive them alike), the starting policy, the trainer's initialisation",
    )
    async_level: int = Field(
        2,
        ge=0,
        le=1000,
        description="a batch for step k may come from a policy no older than k - async_level (0: synchronous)",
    )
    prompts_per_batch: int = Field(
        16,
        ge=1,
        description="prompts per rollout file (a swarm's unit of work); a local run without proofs writes a "
        "step's last file smaller, with only the prompts the trainer expects that step to still need",
    )
    group_size: int = Field(8, ge=2, description="completions per prompt (G)")
    max_new_tokens: int = Field(16, ge=1, le=2**31 - 1, description="longest completion")
    temperature: float = Field(1.0, gt=0, description="sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    local_proofs: bool = Field(
        False,
        description="local runs (`swarmrl rl`, `demo`, islands) build TOPLOC proofs although no validator reads "
        "their files. Off (default): single-turn files are written without proofs and their header says so "
        "(`proofs: false`), and every validator refuses such a file. On: every file is a whole batch "
        "(`prompts_per_batch`), as a validator judges a swarm unit. Swarm workers always build proofs",
    )

    @model_validator(mode="after")
    def _unit_fits(self) -> ContractSection:
        if self.rows_per_batch > MAX_UNIT_ROWS:
            raise ValueError(
                f"prompts_per_batch × group_size = {self.rows_per_batch} rows in one file; at most {MAX_UNIT_ROWS}"
            )
        return self

    @property
    def rows_per_batch(self) -> int:
        """Completions in one whole rollout file: prompts per batch × group size."""
        return self.prompts_per_batch * self.group_size

    def sha256(self) -> str:
        """The digest every role presents at join: of the fields and values, in one canonical JSON form."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def differences(self, run: ContractSection) -> str:
        """`field: mine here, the run's there` for every field where this contract differs from `run`'s."""
        mine, theirs = self.model_dump(), run.model_dump()
        return "; ".join(
            f"contract.{name} is {mine[name]!r} here, {theirs[name]!r} in the run"
            for name in type(self).model_fields
            if mine[name] != theirs[name]
        )


class ContractMismatch(ConfigError):
    """This role's [contract] differs from the one its run was created with (the coordinator's copy)."""

    def __init__(self, run_id: str, mine: ContractSection, run: ContractSection) -> None:
        differences = (
            mine.differences(run) or f"sha256 {mine.sha256()[:12]} here, {run.sha256()[:12]} in the run"
        )
        super().__init__(
            f"run {run_id!r} was created with another contract: {differences} "
            "(give every role the run's config, or create a new run)"
        )


# Where the contract's fields were before they had a section of their own: a config that still sets one there
# is refused with its new place, not read from the old one.
MOVED_FIELDS = {
    "run": ("seed",),
    "worker": (
        "prompts_per_batch",
        "group_size",
        "temperature",
        "top_p",
        "max_new_tokens",
        "async_level",
        "local_proofs",
    ),
}


def refuse_moved_fields(data: Any) -> None:
    """Raise a ConfigError naming the new place of every contract field a raw config sets in its old section."""
    if not isinstance(data, dict):
        return
    moved = [
        f"{section}.{name} moved to contract.{name}"
        for section, names in MOVED_FIELDS.items()
        if isinstance(data.get(section), dict)
        for name in names
        if name in data[section]
    ]
    if moved:
        raise ConfigError(
            "; ".join(moved) + " (the [contract] section holds what every role of a run must agree on)"
        )
