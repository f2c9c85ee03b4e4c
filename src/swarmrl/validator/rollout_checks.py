"""Every check on one untrusted rollout file, cheapest first; the first failure rejects the file.

    schema_and_signature → node → duplicate → async_window → assigned_prompts → sampling_params →
    termination_format → prefill (one forward with the policy of the file's step) → toploc → logprobs →
    seeded_sampling (or, for unseeded engines, the EOS-probability termination heuristic) → env_replay →
    rewards

Nothing the worker claims is used: prompts and seeds are recomputed from (run, node, step, batch index),
the hidden states, token choices and logprobs from the policy checkpoint, and the rewards from the task.

The environment replay of multi-turn rows comes after the checks on the model's tokens because it is the
dearest: it runs every tool call of every row in the validator's own sandbox (seconds each), where one
prefill checks all model tokens of the file at once. A forged file is thus turned away by its proofs before
any tool runs. Whatever a file makes the validator do, it gets `max_file_seconds` of it: a file still being
judged then is rejected by `time_budget` (a replay already running finishes its row first).
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from swarmrl.configs import RunConfig
from swarmrl.configs.validator import ValidatorConfig
from swarmrl.inference.errors import InferenceError
from swarmrl.inference.prefill import PrefillResult, prefill
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts import RolloutError, RolloutHeader, RolloutLimits, RolloutRow, ScoredRow, read_rollouts
from swarmrl.rollouts.checks import (
    CheckFailed,
    batch_spec,
    check_assigned_prompts,
    check_async_window,
    check_sampling_params,
    check_termination_format,
)
from swarmrl.rollouts.scoring import score_rows
from swarmrl.tasks.packs.in_run import JudgedFile
from swarmrl.tasks.reward_functions import RunSchedule
from swarmrl.tasks.task import TaskSource
from swarmrl.toploc import ProofError, verify_proofs_batch

CHECKS = (
    "schema_and_signature",
    "node",
    "duplicate",
    "async_window",
    "assigned_prompts",
    "sampling_params",
    "termination_format",
    "prefill",
    "toploc",
    "logprobs",
    "seeded_sampling",
    "termination",
    "env_replay",
    "rewards",
)
# Not a stage of its own: any stage may end a file whose judgement has spent the per-file budget.
TIME_BUDGET = "time_budget"


@dataclass
class Verdict:
    accepted: bool
    failed_check: str | None
    reason: str
    header: RolloutHeader | None = None
    scored_rows: list[ScoredRow] | None = None
    passed: list[str] = field(default_factory=list)
    pack_scores: JudgedFile | None = None  # a community pack's unit: its verifier's scores of the rows


class SeenFiles:
    """Files already judged (by content hash and by node/step/batch): survives restarts in a SQLite file."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS seen (sha256 TEXT PRIMARY KEY, slot TEXT UNIQUE)")
        self._db.commit()

    def check(self, sha256: str, slot: str) -> str | None:
        row = self._db.execute(
            "SELECT sha256, slot FROM seen WHERE sha256 = ? OR slot = ?", (sha256, slot)
        ).fetchone()
        if row is None:
            return None
        return (
            "the same file was submitted before" if row[0] == sha256 else f"batch {slot} was submitted before"
        )

    def add(self, sha256: str, slot: str) -> None:
        self._db.execute("INSERT OR IGNORE INTO seen VALUES (?, ?)", (sha256, slot))
        self._db.commit()

    def forget(self, sha256: str) -> None:
        """Undo `add` for a file whose judgement was cut short (the judge died before recording a verdict)."""
        self._db.execute("DELETE FROM seen WHERE sha256 = ?", (sha256,))
        self._db.commit()


@dataclass
class ValidationContext:
    """What the validator trusts: the run config, the tasks, the policy checkpoints and the seed source."""

    config: RunConfig
    settings: ValidatorConfig
    tasks: TaskSource
    tokenizer: PreTrainedTokenizerBase
    policy: Callable[[int], torch.nn.Module]  # policy step → model (the checkpoint of that step)
    task_seed: Callable[[str, int, int], int]  # (node id, step, batch index) → the seed the node had to use
    seen: SeenFiles
    limits: RolloutLimits
    # Multi-turn runs: the trusted reward of a row from replaying its environment in this validator's own
    # sandbox (raises swarmrl.envs.ReplayMismatch); None for single-turn runs.
    env_replay: Callable[[RolloutRow], float] | None = None
    # A community pack's unit: the rows' rewards from the pack's verifier in the sandbox (`tasks` is then the
    # pack's rows); None for a unit of the run's own tasks.
    pack_scores: Callable[[list[RolloutRow]], JudgedFile] | None = None


@dataclass
class _File:
    """One file under judgement: what the stages have read and computed so far."""

    path: Path
    step: int
    node_id: str | None
    header: RolloutHeader | None = None
    rows: list[RolloutRow] = field(default_factory=list)
    digest: str = ""
    results: list[PrefillResult] = field(default_factory=list)
    env_rewards: list[float | None] = field(default_factory=list)
    scored: list[ScoredRow] | None = None
    pack_scores: JudgedFile | None = None

    @property
    def signed(self) -> RolloutHeader:
        assert self.header is not None, "the schema stage reads the header first"
        return self.header


class _Budget:
    """The validator seconds one file may take (`ValidatorConfig.max_file_seconds`)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.monotonic()

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def check(self, before: str) -> None:
        if self.left() < 0:
            raise CheckFailed(
                TIME_BUDGET,
                f"{time.monotonic() - self.started:.1f} s spent before {before}; "
                f"the budget is {self.seconds:g} s per file",
            )


Stage = Callable[[_File, ValidationContext, _Budget], None]


def validate_file(
    path: Path, step: int, context: ValidationContext, *, node_id: str | None = None
) -> Verdict:
    """Judge a rollout file submitted for training step `step` (by `node_id` when the submitter is known)."""
    passed: list[str] = []
    judged = _File(path, step, node_id)
    budget = _Budget(context.settings.max_file_seconds)
    try:
        for name, stage in _stages(context.settings.seeded_replay):
            if passed:
                budget.check(before=name)
            stage(judged, context, budget)
            passed.append(name)
    except CheckFailed as failure:
        return Verdict(False, failure.check, failure.reason, judged.header, None, passed)
    return Verdict(True, None, "all checks passed", judged.header, judged.scored, passed, judged.pack_scores)


def _stages(seeded: bool) -> list[tuple[str, Stage]]:
    """The checks in the order they run (`CHECKS`), cheapest first."""

    def on_results(check: Callable[[list[RolloutRow], list[PrefillResult], ValidatorConfig], None]) -> Stage:
        return lambda f, context, _: check(f.rows, f.results, context.settings)

    # The seeded replay verifies every choice, EOS included; without it only the heuristic is left.
    sampling = (
        ("seeded_sampling", on_results(_seeded_sampling))
        if seeded
        else ("termination", on_results(_termination))
    )
    return [
        ("schema_and_signature", _schema_and_signature),
        ("node", _node),
        ("duplicate", _duplicate),
        ("async_window", lambda f, c, _: check_async_window(f.signed, f.step, c.config.contract.async_level)),
        ("assigned_prompts", _assigned_prompts),
        (
            "sampling_params",
            lambda f, c, _: check_sampling_params(
                f.rows, c.config.contract.temperature, c.settings.temperature_tolerance
            ),
        ),
        ("termination_format", _termination_format_stage),
        ("prefill", _prefill),
        ("toploc", on_results(_toploc)),
        ("logprobs", on_results(_logprobs)),
        sampling,
        ("env_replay", _env_replay),
        ("rewards", _rewards),
    ]


def _schema_and_signature(f: _File, context: ValidationContext, _: _Budget) -> None:
    data = f.path.read_bytes()
    try:
        f.header, f.rows = read_rollouts(f.path, context.limits)
    except RolloutError as exc:
        raise CheckFailed("schema_and_signature", str(exc)) from exc
    f.digest = hashlib.sha256(data).hexdigest()


def _node(f: _File, context: ValidationContext, _: _Budget) -> None:
    header = f.signed
    if header.run_id != context.config.run.id:
        raise CheckFailed("node", f"signed for run {header.run_id[:64]!r}, not {context.config.run.id!r}")
    if f.node_id is not None and header.node_id != f.node_id:
        raise CheckFailed("node", f"signed by {header.node_id[:16]}…, submitted by {f.node_id[:16]}…")


def _duplicate(f: _File, context: ValidationContext, _: _Budget) -> None:
    slot = f"{f.signed.node_id}/{f.step}/{f.signed.batch_index}"
    seen = context.seen.check(f.digest, slot)
    if seen is not None:
        raise CheckFailed("duplicate", seen)
    context.seen.add(f.digest, slot)


def _assigned_prompts(f: _File, context: ValidationContext, _: _Budget) -> None:
    """The rows answer exactly the prompts the node was assigned, with the seeds it had to use."""
    header, config = f.signed, context.config
    spec = batch_spec(header, f.step, config, context.task_seed(header.node_id, f.step, header.batch_index))
    prompts = prompt_format(context.tokenizer, config.prompt)
    check_assigned_prompts(f.rows, spec, config, context.tasks, prompts)


def _termination_format_stage(f: _File, context: ValidationContext, _: _Budget) -> None:
    stops = set(prompt_format(context.tokenizer, context.config.prompt).stop_token_ids)
    check_termination_format(f.rows, stops, context.config.contract.max_new_tokens)


def _prefill(f: _File, context: ValidationContext, _: _Budget) -> None:
    """One forward of the policy of the file's step over every model turn."""
    try:
        prompts, completions, seeds, owners = _model_turns(f.rows)
        f.results = _per_row(
            prefill(
                context.policy(f.signed.policy_step),
                prompts,
                completions,
                temperature=context.config.contract.temperature,
                top_p=context.config.contract.top_p,
                seeds=seeds if context.settings.seeded_replay else None,
                batch_size=context.settings.prefill_batch_size,
            ),
            owners,
            len(f.rows),
        )
    except InferenceError as exc:
        raise CheckFailed("prefill", f"the policy cannot score these tokens: {exc}") from exc


def _model_positions(row: RolloutRow) -> torch.Tensor:
    """Which completion positions the model sampled: proofs, logprobs and replays cover only those."""
    return torch.tensor(row.model_mask, dtype=torch.bool)


def _model_turns(rows: list[RolloutRow]) -> tuple[list[list[int]], list[list[int]], list[int], list[int]]:
    """The (prefix, turn, seed) pairs the model sampled, and the row each belongs to.

    A single-turn row is one pair. A multi-turn row is one pair per model turn: everything before the turn
    (prompt, earlier turns, environment turns) is its prefix, and its seed is the one the worker's engine
    sampled that turn with, so the seeded replay checks every choice at the position the engine made it.
    The model's causal outputs at a turn's tokens do not depend on how the sequence is cut.
    """
    from swarmrl.envs.engine_rollout import turn_seed

    prompts, completions, seeds, owners = [], [], [], []
    for i, row in enumerate(rows):
        if not row.completion_mask:
            prompts.append(row.prompt_ids)
            completions.append(row.completion_ids)
            seeds.append(row.sample_seed)
            owners.append(i)
            continue
        mask, turn, start = row.completion_mask, 0, None
        for position in range(len(mask) + 1):
            inside = position < len(mask) and mask[position] == 1
            if inside and start is None:
                start = position
            elif not inside and start is not None:
                prompts.append(row.prompt_ids + row.completion_ids[:start])
                completions.append(row.completion_ids[start:position])
                seeds.append(turn_seed(row.sample_seed, turn))
                owners.append(i)
                turn, start = turn + 1, None
    return prompts, completions, seeds, owners


def _per_row(results: list[PrefillResult], owners: list[int], count: int) -> list[PrefillResult]:
    """One result per row over its model tokens: the turns' results joined in order."""
    parts: list[list[PrefillResult]] = [[] for _ in range(count)]
    for owner, result in zip(owners, results, strict=True):
        parts[owner].append(result)
    joined = []
    for turns in parts:
        if len(turns) == 1:
            joined.append(turns[0])
            continue
        values: dict[str, Any] = {}
        for f in fields(PrefillResult):
            pieces = [getattr(turn, f.name) for turn in turns]
            values[f.name] = None if pieces[0] is None else torch.cat(pieces)
        joined.append(PrefillResult(**values))
    return joined


def _env_replay(f: _File, context: ValidationContext, budget: _Budget) -> None:
    """Replay every multi-turn row's environment, within what is left of the file's budget; the trusted
    rewards (None for single-turn rows)."""
    if context.env_replay is None:
        if any(row.completion_mask for row in f.rows):
            raise CheckFailed("env_replay", "multi-turn rows, but this run has no environment to replay them")
        f.env_rewards = [None] * len(f.rows)
        return
    # The environment layer is only needed by multi-turn runs.
    from swarmrl.envs.build import replay_rows
    from swarmrl.envs.errors import ReplayBudgetSpent, RowReplayFailed

    concurrency = context.config.env.max_concurrent_steps if context.config.env is not None else 1
    try:
        f.env_rewards = list(replay_rows(context.env_replay, f.rows, concurrency, seconds=budget.left()))
    except RowReplayFailed as failed:  # a ReplayMismatch cause names the check that failed
        raise CheckFailed("env_replay", str(failed)) from failed.cause
    except ReplayBudgetSpent as spent:
        raise CheckFailed(TIME_BUDGET, f"{spent}; the budget is {budget.seconds:g} s per file") from spent


def _toploc(rows: list[RolloutRow], results: list[PrefillResult], settings: ValidatorConfig) -> None:
    try:
        reports = verify_proofs_batch(
            [row.proofs for row in rows],
            [result.hidden_states for result in results],
            thresholds=settings.toploc,
        )
    except ProofError as exc:
        raise CheckFailed("toploc", f"malformed proof ({exc})") from exc
    for i, report in enumerate(reports):
        if not report.ok:
            raise CheckFailed("toploc", f"row {i}: {report.reason}")


def _seeded_sampling(rows: list[RolloutRow], results: list[PrefillResult], settings: ValidatorConfig) -> None:
    mismatches = 0
    for i, result in enumerate(results):
        assert result.choice_margins is not None
        margins = result.choice_margins
        bad = int((margins < -settings.choice_margin_tolerance).sum())
        mismatches += bad
        if mismatches > settings.max_replay_mismatches:
            worst = float(margins.min())
            raise CheckFailed(
                "seeded_sampling",
                f"row {i}: {bad} token(s) are not what the seeded sampler picks (margin {worst:.3g})",
            )


def _logprobs(rows: list[RolloutRow], results: list[PrefillResult], settings: ValidatorConfig) -> None:
    for i, (row, result) in enumerate(zip(rows, results, strict=True)):
        gap = (torch.tensor(row.logprobs)[_model_positions(row)] - result.logprobs).abs().max().item()
        if not math.isfinite(gap) or gap > settings.logprob_tolerance:
            raise CheckFailed("logprobs", f"row {i}: reported logprobs differ from the policy's by {gap:.3g}")


def _termination(rows: list[RolloutRow], results: list[PrefillResult], settings: ValidatorConfig) -> None:
    for i, (row, result) in enumerate(zip(rows, results, strict=True)):
        if row.finish_reason == "eos":
            # The last token is the stop token the worker emitted (termination_format checked it).
            p = float(result.token_probs[-1])
            if p <= settings.min_eos_probability:
                raise CheckFailed("termination", f"row {i}: stops where the model gives EOS only p={p:.3g}")


def _rewards(f: _File, context: ValidationContext, _: _Budget) -> None:
    rows, env_rewards = f.rows, f.env_rewards
    if context.pack_scores is not None:  # a pack's verifier failing is the pack's fault, never the worker's
        f.pack_scores = context.pack_scores(rows)
        env_rewards = list(f.pack_scores.rewards)
    try:
        scored = score_rows(
            rows,
            tasks=context.tasks,
            tokenizer=context.tokenizer,
            tasks_config=context.config.tasks,
            group_size=context.config.contract.group_size,
            advantage=context.config.trainer.advantage,
            env_rewards=env_rewards,
            schedule=RunSchedule.of(context.config, len(context.tasks)),
        )
    except RolloutError as exc:
        raise CheckFailed("rewards", str(exc)) from exc
    lo, hi = context.settings.reward_bounds
    for i, row in enumerate(scored):
        if not lo <= row.reward <= hi or not math.isfinite(row.advantage):
            raise CheckFailed("rewards", f"row {i}: trusted reward {row.reward} outside [{lo}, {hi}]")
    f.scored = scored
