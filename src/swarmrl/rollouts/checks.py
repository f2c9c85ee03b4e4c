"""The checks of an untrusted rollout file that need no model: which node and unit it is for, its policy age, its
prompts and seeds, its sampling settings and how each completion ends.

Both trusted roles run them: the validator before its prefill and proofs, the trainer on every file before it
trains on it (a file the spot-check draw left unjudged included). A failure names its check, as the
coordinator's reject severities are keyed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from swarmrl.rollouts.assignment import BatchSpec, assigned_prompts, sample_seed
from swarmrl.rollouts.schema import RolloutHeader, RolloutRow

if TYPE_CHECKING:
    from swarmrl.configs import RunConfig
    from swarmrl.models.prompting import PromptFormat
    from swarmrl.tasks.task import TaskSource


class CheckFailed(Exception):
    def __init__(self, check: str, reason: str) -> None:
        super().__init__(f"{check}: {reason}")
        self.check, self.reason = check, reason


def completion_tokens(rows: Sequence[RolloutRow]) -> int:
    """The tokens a file's credit counts: every completion token of every row."""
    return sum(len(row.completion_ids) for row in rows)


@dataclass(frozen=True)
class FileOrigin:
    """Who a file must come from and which unit it fills, as the coordinator recorded its submission."""

    run_id: str
    node_id: str
    step: int
    batch_index: int
    seed: int  # the coordinator's task seed of (run, node, step, batch index)


def check_origin(header: RolloutHeader, origin: FileOrigin) -> None:
    if header.run_id != origin.run_id:
        raise CheckFailed("node", f"signed for run {header.run_id[:64]!r}, not {origin.run_id!r}")
    if header.node_id != origin.node_id:
        raise CheckFailed("node", f"signed by {header.node_id[:16]}…, submitted by {origin.node_id[:16]}…")
    if header.batch_index != origin.batch_index:
        raise CheckFailed(
            "assigned_prompts",
            f"the file claims batch {header.batch_index}; the unit leased for it is batch {origin.batch_index}",
        )


def check_async_window(header: RolloutHeader, step: int, async_level: int) -> None:
    if not step - async_level <= header.policy_step <= step:
        raise CheckFailed(
            "async_window",
            f"policy step {header.policy_step} outside [{step - async_level}, {step}] for training step {step}",
        )


def check_assigned_prompts(
    rows: list[RolloutRow], spec: BatchSpec, config: RunConfig, tasks: TaskSource, prompts: PromptFormat
) -> None:
    """The prompts, target lengths and sampling seeds the unit's seed fixes, one group of `group_size` each."""
    group_size = config.contract.group_size
    assigned = assigned_prompts(spec, tasks, prompts, config.tasks)
    if len(rows) != len(assigned) * group_size:
        raise CheckFailed(
            "assigned_prompts", f"{len(rows)} rows, expected {len(assigned)} prompts × {group_size}"
        )
    seeds_by_group: dict[int, set[int]] = {}
    for i, row in enumerate(rows):
        if not 0 <= row.group_id < len(assigned):
            raise CheckFailed(
                "assigned_prompts", f"row {i}: group {row.group_id} is not an assigned prompt slot"
            )
        expected = assigned[row.group_id]
        if (row.prompt_index, row.task_id) != (expected.task_index, expected.task.task_id):
            raise CheckFailed(
                "assigned_prompts",
                f"row {i}: task {row.task_id} is not the one assigned to slot {row.group_id}",
            )
        if row.prompt_ids != expected.prompt_ids:
            raise CheckFailed("assigned_prompts", f"row {i}: prompt tokens differ from the assigned prompt")
        if row.target_length != expected.target_length:
            raise CheckFailed(
                "assigned_prompts", f"row {i}: target length {row.target_length} is not the assigned one"
            )
        seeds_by_group.setdefault(row.group_id, set()).add(row.sample_seed)
    for group_id, seeds in seeds_by_group.items():
        if seeds != {sample_seed(spec.seed, group_id, g) for g in range(group_size)}:
            raise CheckFailed(
                "assigned_prompts", f"group {group_id}: sampling seeds are not the assigned ones"
            )


def check_sampling_params(rows: list[RolloutRow], temperature: float, tolerance: float) -> None:
    for i, row in enumerate(rows):
        if abs(row.temperature - temperature) > tolerance:
            raise CheckFailed(
                "sampling_params",
                f"row {i}: temperature {row.temperature:g}, the run samples at {temperature:g}",
            )


def check_termination_format(rows: list[RolloutRow], stops: set[int], max_new_tokens: int) -> None:
    """'eos' rows end with their only stop token (EOS, end of turn, ...); 'length' rows are full and hold none.

    In a multi-turn row that holds for its last model turn; every earlier model turn ends with its stop token
    (the environment answers only finished turns), which `env_replay` checks turn by turn.
    """
    for i, row in enumerate(rows):
        last_turn = _last_model_turn(row)
        early = not stops.isdisjoint(last_turn[:-1])
        if row.finish_reason == "eos" and (row.completion_ids[-1] not in stops or early):
            raise CheckFailed("termination_format", f"row {i}: 'eos' completion must end with its only EOS")
        if row.finish_reason == "length" and (
            len(row.completion_ids) != max_new_tokens or not stops.isdisjoint(last_turn)
        ):
            raise CheckFailed(
                "termination_format",
                f"row {i}: 'length' completion must hold {max_new_tokens} tokens, no EOS",
            )


def _last_model_turn(row: RolloutRow) -> list[int]:
    mask = row.model_mask
    start = len(mask)
    while start > 0 and mask[start - 1]:
        start -= 1
    return row.completion_ids[start:]


def batch_spec(header: RolloutHeader, step: int, config: RunConfig, seed: int) -> BatchSpec:
    """The batch a file for training step `step` had to answer, from its header and its unit's seed."""
    contract = config.contract
    return BatchSpec(
        config.run.id,
        header.node_id,
        step,
        header.batch_index,
        contract.prompts_per_batch,
        contract.group_size,
        contract.seed,
        seed,
    )


def structural_checks(
    header: RolloutHeader,
    rows: list[RolloutRow],
    origin: FileOrigin,
    config: RunConfig,
    tasks: TaskSource,
    prompts: PromptFormat,
) -> None:
    """Every check above, cheapest first, for a file submitted as `origin`'s unit (the trainer's checks)."""
    check_origin(header, origin)
    check_async_window(header, origin.step, config.contract.async_level)
    check_assigned_prompts(rows, batch_spec(header, origin.step, config, origin.seed), config, tasks, prompts)
    check_sampling_params(rows, config.contract.temperature, config.validator.temperature_tolerance)
    check_termination_format(rows, set(prompts.stop_token_ids), config.contract.max_new_tokens)
