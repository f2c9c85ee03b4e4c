"""`build_source` builds every kind of task source a `[[tasks.sources]]` entry may name (a kind added to the
union and missed by its `match` ends in its `assert_never` here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from config_unions import member_id, sample_of, union_members

from swarmrl.configs.tasks import (
    ArithmeticSourceConfig,
    DatasetSourceConfig,
    PromptsSourceConfig,
    ReasoningGymSourceConfig,
    SourceConfig,
)
from swarmrl.tasks.registry import build_source


def write_rows(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def samples(directory: Path) -> dict:
    """Each kind's smallest config, and the task type of its first task."""
    dataset = [
        {
            "task_id": "add-1",
            "prompt": "17 + 25?",
            "task_type": "math",
            "verification_info": {"ground_truth": "42"},
        }
    ]
    return {
        ReasoningGymSourceConfig: (
            ReasoningGymSourceConfig(generator="basic_arithmetic", size=2),
            "reasoning_gym",
        ),
        ArithmeticSourceConfig: (ArithmeticSourceConfig(size=2), "math"),
        PromptsSourceConfig: (
            PromptsSourceConfig(
                name="mine", path=write_rows(directory / "prompts.jsonl", [{"prompt": "hi"}])
            ),
            "prompts",
        ),
        DatasetSourceConfig: (
            DatasetSourceConfig(name="ds", path=write_rows(directory / "dataset.jsonl", dataset)),
            "math",
        ),
    }


@pytest.mark.parametrize("kind", union_members(SourceConfig), ids=member_id)
def test_every_source_kind_builds(kind, tmp_path):
    config, task_type = sample_of(samples(tmp_path), kind)
    source = build_source(config)
    assert len(source) >= 1 and source[0].task_type == task_type
