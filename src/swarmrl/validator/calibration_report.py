"""`swarmrl validator calibrate`: run the calibration on a run's starting policy and print what it found."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from swarmrl.configs import RunConfig
from swarmrl.errors import UserError
from swarmrl.inference.engine import SamplingParams
from swarmrl.models import load_tokenizer
from swarmrl.models.prompting import prompt_format
from swarmrl.rundir import RunDir
from swarmrl.steps import checkpoint_dir
from swarmrl.tasks.registry import build_tasks
from swarmrl.validator.calibrate import Calibration, calibrate


def run_calibration(
    config: RunConfig, completions: int, safety: float, output: Path | None, console: Console
) -> Calibration:
    policy = starting_policy(config)
    params = SamplingParams(
        max_new_tokens=config.contract.max_new_tokens,
        temperature=config.contract.temperature,
        top_p=config.contract.top_p,
    )
    result = calibrate(
        policy,
        build_tasks(config.tasks),
        prompt_format(load_tokenizer(policy), config.prompt),
        params=params,
        completions=completions,
        safety=safety,
        settings=config.validator,
        progress=lambda what: console.print(f"[dim]{what}[/dim]"),
    )
    rates = result.rates()
    table = Table(title=f"fraction of completions passing each check ({completions} per setting)")
    for column in ("source", "toploc", "logprobs", "seeded_sampling", "all checks"):
        table.add_column(column, justify="right")
    for source, row in rates.items():
        cells = [f"{row[c]:.3f}" for c in ("toploc", "logprobs", "seeded_sampling", "all")]
        table.add_row(
            source + ("  (1 − false-reject rate)" if source == "honest" else "  (miss rate)"), *cells
        )
    console.print(table)
    configured = config.validator
    stats = Table(title="what the validator sees: median (and worst) per source")
    for column in ("source", "exponent match", "mantissa mean", "logprob gap", "choice margin"):
        stats.add_column(column, justify="right")
    for source, members in _groups(result).items():
        stats.add_row(
            source,
            _spread([m.exponent_match for m in members], worst=min),
            _spread([m.mantissa_mean for m in members], worst=max),
            _spread([m.logprob_gap for m in members], worst=max),
            _spread([m.choice_margin for m in members], worst=min),
        )
    console.print(stats)
    thresholds = configured.toploc
    console.print(
        f"TOPLOC rule: exponent match ≥ {thresholds.min_exponent_match_fraction:.3f}, mantissa mean ≤ "
        f"{thresholds.max_mantissa_diff_mean}, median ≤ {thresholds.max_mantissa_diff_median}"
    )
    console.print(
        f"chosen: logprob_tolerance {result.logprob_tolerance:.2e} ([validator] now {configured.logprob_tolerance:.0e}), "
        f"choice_margin_tolerance {result.choice_margin_tolerance:.2e} ([validator] now {configured.choice_margin_tolerance:.0e})"
    )
    if output is not None:
        output.write_text(
            json.dumps(
                {
                    "rates": rates,
                    "logprob_tolerance": result.logprob_tolerance,
                    "choice_margin_tolerance": result.choice_margin_tolerance,
                    "measured": [dataclasses.asdict(m) for m in result.measured],
                },
                indent=1,
            )
        )
    return result


def starting_policy(config: RunConfig) -> Path:
    """The run's step 0, which `swarmrl sft` (or `rl`, `demo`) writes; the validator never trains one itself."""
    policy = checkpoint_dir(RunDir(config.run.directory).checkpoints, 0)
    if not (policy / "config.json").is_file():
        raise UserError(
            f"no starting policy at {policy}: write it first with `swarmrl sft` on the same config and overrides"
        )
    return policy


def _groups(result: Calibration) -> dict[str, list]:
    groups: dict[str, list] = {}
    for m in result.measured:
        groups.setdefault("honest" if m.source.startswith("honest:") else m.source, []).append(m)
    return groups


def _spread(values: list[float], worst) -> str:
    ordered = sorted(values)
    return f"{ordered[len(ordered) // 2]:.3g} ({worst(values):.3g})"
