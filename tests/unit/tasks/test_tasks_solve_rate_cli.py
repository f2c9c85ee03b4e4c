import json

import pytest
import typer
from typer.testing import CliRunner

from swarmrl.configs.tasks import TasksConfig
from swarmrl.tasks.cli import filter_band, preview_generator
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.reward import RewardComputer
from swarmrl.tasks.solve_rate import annotate_solve_rates, solve_rate
from swarmrl.tasks.task import Task

RG = Task(
    "r",
    "Calculate 5 - 3.",
    "reasoning_gym",
    {"generator": "basic_arithmetic", "seed": 1, "size": 3, "kwargs": {}, "index": 0},
)


def app() -> typer.Typer:
    application = typer.Typer()
    application.command()(filter_band)
    application.command()(preview_generator)
    return application


def test_solve_rate_counts_correct_completions():
    computer = RewardComputer(TasksConfig())
    assert solve_rate(RG, ["-4", "4", "</think>-4", "x"], computer) == 0.5
    annotated = annotate_solve_rates([RG], lambda task, k: ["-4"] * k, 4, computer)
    assert annotated[0].solve_rate == 1.0 and annotated[0].prompt == RG.prompt
    with pytest.raises(TaskError):
        solve_rate(RG, [], computer)
    with pytest.raises(TaskError):
        annotate_solve_rates([RG], lambda task, k: [], 0, computer)


def test_filter_band_command(tmp_path):
    rows = [
        {
            "prompt": f"q{i}",
            "verification_info": json.dumps({"ground_truth": "1"}),
            "task_type": "math",
            "solve_rate": rate,
        }
        for i, rate in enumerate([0.0, 0.2, 0.9, 0.5])
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(app(), ["filter-band", str(source), str(tmp_path / "out.jsonl")])
    assert result.exit_code == 0, result.output
    kept = [json.loads(line)["prompt"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert kept == ["q1", "q3"]
    bad = CliRunner().invoke(
        app(), ["filter-band", str(tmp_path / "missing.jsonl"), str(tmp_path / "o.jsonl")]
    )
    assert bad.exit_code != 0


def test_preview_command():
    result = CliRunner().invoke(
        app(), ["preview-generator", "spell_backward", "--count", "2", "--template", "reverse {word}"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("reverse ") == 2
