"""`swarmrl validator`: judge every rollout file of a directory, write verdicts, hand accepted rows on.

<submissions>/step_k/NAME.parquet      untrusted files, as workers wrote them
<submissions>/step_k/NAME.verdict.json  the verdict (check, reason), written once: a file is never re-judged
<run>/accepted/step_k/NAME.parquet      accepted rows with the validator's rewards and advantages
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch

from swarmrl.configs import load_run_config
from swarmrl.configs.validator import ValidatorConfig
from swarmrl.devices import resolve_device
from swarmrl.envs.build import env_replay
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.lm_types import CausalLM
from swarmrl.rollouts import RolloutLimits, write_rollouts
from swarmrl.rollouts.assignment import batch_seed
from swarmrl.rundir import write_json_atomic
from swarmrl.steps import checkpoint_dir, parse_step_dir_name
from swarmrl.tasks.registry import build_tasks
from swarmrl.tasks.reward_check import check_reward_functions
from swarmrl.validator.rollout_checks import SeenFiles, ValidationContext, Verdict, validate_file

log = logging.getLogger(__name__)


class PolicyCache:
    """The checkpoints of the last few policy steps, loaded once each (workers lag by up to async_level)."""

    def __init__(self, checkpoints: Path, dtype: str, keep: int, device: torch.device | None = None) -> None:
        self.checkpoints, self.dtype, self.keep = checkpoints, dtype, keep
        # The prefill runs where the policy lives: the validator's device decides where it is recomputed.
        self.device = device or torch.device("cpu")
        self._models: OrderedDict[int, torch.nn.Module] = OrderedDict()

    def path(self, step: int) -> Path:
        return checkpoint_dir(self.checkpoints, step)

    def __call__(self, step: int) -> CausalLM:
        if step not in self._models:
            self._models[step] = load_model(self.path(step), self.dtype, device=str(self.device)).eval()
            while len(self._models) > self.keep:
                self._models.popitem(last=False)
        self._models.move_to_end(step)
        return self._models[step]


def local_context(
    run_dir: Path, settings: ValidatorConfig | None = None, device: torch.device | None = None
) -> ValidationContext:
    """Everything the validator trusts about a local run, read from its run directory; `settings` default to
    the run config's [validator] section."""
    config = load_run_config(run_dir)
    checkpoints = run_dir / "checkpoints"
    tokenizer = load_tokenizer(checkpoint_dir(checkpoints, 0))
    policy = PolicyCache(checkpoints, config.model.dtype, keep=config.contract.async_level + 1, device=device)
    tasks = build_tasks(config.tasks)
    # Reward functions other than the run pinned, or that cannot score its rows, are refused before any judging.
    check_reward_functions(config, tasks)
    return ValidationContext(
        config=config,
        settings=settings or config.validator,
        tasks=tasks,
        tokenizer=tokenizer,
        policy=policy,
        task_seed=lambda node, step, batch: batch_seed(config.run.id, node, step, batch),
        seen=SeenFiles(run_dir / "validator" / "seen.sqlite"),
        limits=RolloutLimits.for_contract(config.contract, policy(0).config.vocab_size),
        env_replay=env_replay(config, tasks, tokenizer),
    )


@dataclass(frozen=True)
class Judged:
    path: Path
    verdict: Verdict


def judge_pending(submissions: Path, accepted_root: Path, context: ValidationContext) -> list[Judged]:
    """Judge every file that has no verdict yet; returns what was judged this pass."""
    judged = []
    steps = (
        sorted((step, p) for p in submissions.iterdir() if (step := parse_step_dir_name(p.name)) is not None)
        if submissions.is_dir()
        else []
    )
    for step, step_dir in steps:
        for path in sorted(step_dir.glob("*.parquet")):
            verdict_path = path.with_suffix(".verdict.json")
            if verdict_path.exists():
                continue
            verdict = validate_file(path, step, context)
            if verdict.accepted:
                assert verdict.header is not None and verdict.scored_rows is not None
                write_rollouts(accepted_root / step_dir.name / path.name, verdict.header, verdict.scored_rows)
            write_json_atomic(
                verdict_path,
                {
                    "accepted": verdict.accepted,
                    "check": verdict.failed_check,
                    "reason": verdict.reason,
                    "passed": verdict.passed,
                    "time": time.time(),
                },
            )
            log.info(
                "%s/%s: %s",
                step_dir.name,
                path.name,
                "accepted" if verdict.accepted else f"rejected by {verdict.failed_check}: {verdict.reason}",
            )
            judged.append(Judged(path, verdict))
    return judged


def run_validator(
    run_dir: Path, submissions: Path | None, *, once: bool, poll_seconds: float = 0.5, device: str = "cpu"
) -> int:
    """Judge until the run stops (or one pass with `once`); returns the number of files judged. `device`
    (auto, cpu, cuda, cuda:N) is resolved first: a missing GPU is refused before any file is read."""
    context = local_context(run_dir, device=resolve_device(device))
    submissions = submissions or run_dir / "rollouts"
    total = 0
    while True:
        total += len(judge_pending(submissions, run_dir / "accepted", context))
        if once or (run_dir / "STOP").exists():
            return total
        time.sleep(poll_seconds)


def verdict_of(path: Path) -> dict:
    return json.loads(path.with_suffix(".verdict.json").read_text())
