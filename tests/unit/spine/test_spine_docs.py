"""The newcomer's pages say what the code does: the dataset page's example row and source load, the model
page's config resolves, and the README explains every column the console prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

from swarmrl.configs import load_config
from swarmrl.launch.report import metrics_table
from swarmrl.tasks.dataset_source import row_to_task

REPO = Path(__file__).resolve().parents[3]


def fenced(page: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (REPO / page).read_text(), flags=re.S)


def test_the_dataset_pages_example_row_is_a_task(tmp_path):
    (rows_text,) = fenced("docs/datasets.md", "json")
    tasks = [
        row_to_task(json.loads(line), where=f"example line {number}", default_id="x", default_task_type=None)
        for number, line in enumerate(rows_text.splitlines(), start=1)
    ]
    assert [(task.task_id, task.task_type) for task in tasks] == [
        ("add-1", "math"), ("pair-1", "code"), ("sqrt-1", "code"), ("stack-1", "code"),
    ]  # fmt: skip
    assert tasks[0].verification_info == {"ground_truth": "42"}
    (source,) = [block for block in fenced("docs/datasets.md", "toml") if "[[tasks.sources]]" in block]
    (tmp_path / "run.toml").write_text(source)
    (configured,) = load_config(tmp_path / "run.toml").tasks.sources
    assert (configured.type, configured.path) == ("dataset", "data/tasks.jsonl")


def test_the_model_pages_config_resolves(tmp_path):
    (config,) = fenced("docs/bring-your-own-model.md", "toml")
    (tmp_path / "byo.toml").write_text(config)
    resolved = load_config(tmp_path / "byo.toml")
    assert str(resolved.model.path) == "models/qwen3-0.6b" and resolved.prompt.format == "chat"


def test_the_readme_explains_every_column_of_the_console():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("**What the console shows.**") :]
    for column in metrics_table([]).columns:
        assert f"| `{column.header}` |" in section, column.header
