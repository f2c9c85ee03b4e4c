"""PrimeIntellect/INTELLECT-2-RL-Dataset as published: its solve rate lives in `solve_rate_qwen_r1_distill_7b`,
so INTELLECT-2's band [0.1, 0.8] must keep the tasks in the band, not remove every task."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swarmrl.configs.tasks import DatasetSourceConfig, ReasoningGymSourceConfig, TasksConfig
from swarmrl.tasks.dataset_source import load_dataset_tasks, write_tasks_jsonl
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.registry import build_tasks

# The published columns and their types (string ids, JSON-encoded verification_info, float64 solve rate).
SCHEMA = pa.schema(
    [
        ("problem_id", pa.string()),
        ("task_type", pa.string()),
        ("prompt", pa.string()),
        ("verification_info", pa.string()),
        ("solve_rate_qwen_r1_distill_7b", pa.float64()),
    ]
)
RATES = {"p0": 0.0, "p1": 0.0625, "p2": 0.1, "p3": 0.4375, "p4": 0.8, "p5": 0.875, "p6": 1.0, "p7": None}
IN_BAND = ["p2", "p3", "p4"]


def published_rows():
    rows = []
    for i, (problem_id, rate) in enumerate(RATES.items()):
        if i % 2:
            info = {
                "language": "python",
                "test_cases": [{"type": "stdin_stdout", "input": f"{i}\n", "output": f"{i + 1}\n"}],
            }
            task_type, prompt = "verifiable_code", f"Read n and print n + 1. (#{i})"
        else:
            info, task_type, prompt = {"ground_truth": str(i * i)}, "verifiable_math", f"What is {i} * {i}?"
        rows.append(
            {
                "problem_id": problem_id,
                "task_type": task_type,
                "prompt": prompt,
                "verification_info": json.dumps(info),
                "solve_rate_qwen_r1_distill_7b": rate,
            }
        )
    return rows


@pytest.fixture()
def published(tmp_path):
    path = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(published_rows(), schema=SCHEMA), path)
    return path


def band_config(path, **source):
    return TasksConfig(
        sources=[DatasetSourceConfig(name="intellect2", path=str(path), **source)], solve_rate_band=(0.1, 0.8)
    )


def test_intellect2_band_keeps_the_tasks_inside_it(published):
    tasks = build_tasks(band_config(published))
    assert [tasks[i].task_id for i in range(len(tasks))] == IN_BAND
    assert [tasks[i].solve_rate for i in range(len(tasks))] == [RATES[p] for p in IN_BAND]
    assert {tasks[i].task_type for i in range(len(tasks))} == {"math", "code"}


def test_every_published_rate_is_read(published):
    tasks = load_dataset_tasks(DatasetSourceConfig(name="intellect2", path=str(published)))
    assert {t.task_id: t.solve_rate for t in tasks} == RATES


def test_no_known_field_is_a_clear_error(published):
    with pytest.raises(TaskError, match=r"no solve rates.*\['solve_rate'\].*solve_rate_fields"):
        build_tasks(band_config(published, solve_rate_fields=["solve_rate"]))


def test_a_configured_field_name_is_read(tmp_path):
    rows = [{**row, "avg@8_qwen3_4b": row.pop("solve_rate_qwen_r1_distill_7b")} for row in published_rows()]
    path = tmp_path / "renamed.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    tasks = build_tasks(band_config(path, solve_rate_fields=["avg@8_qwen3_4b"]))
    assert [tasks[i].task_id for i in range(len(tasks))] == IN_BAND


def test_the_first_listed_field_wins_and_nulls_fall_through(tmp_path):
    rows = published_rows()
    rows[0]["solve_rate"] = 0.5  # a rate measured by `swarmrl filter` overrides the published one
    rows[1]["solve_rate"] = None
    path = tmp_path / "both.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tasks = load_dataset_tasks(DatasetSourceConfig(name="d", path=str(path)))
    assert (tasks[0].solve_rate, tasks[1].solve_rate) == (0.5, RATES["p1"])


@pytest.mark.parametrize("value", [1.5, -0.1, float("nan"), "0.5", True])
def test_bad_published_values_name_the_field(tmp_path, value):
    rows = published_rows()
    rows[3]["solve_rate_qwen_r1_distill_7b"] = value
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(TaskError, match=r"row 3: field 'solve_rate_qwen_r1_distill_7b' must be a number"):
        load_dataset_tasks(DatasetSourceConfig(name="d", path=str(path)))


def test_rates_written_back_by_the_filter_load_again(published, tmp_path):
    written = tmp_path / "rated.jsonl"
    write_tasks_jsonl(load_dataset_tasks(DatasetSourceConfig(name="d", path=str(published))), written)
    tasks = build_tasks(band_config(written))
    assert [tasks[i].task_id for i in range(len(tasks))] == IN_BAND


def test_band_on_a_source_without_rates_says_how_to_measure_them():
    config = TasksConfig(
        sources=[ReasoningGymSourceConfig(generator="spell_backward", size=20, eval_size=5)],
        solve_rate_band=(0.1, 0.8),
    )
    with pytest.raises(TaskError, match="swarmrl filter"):
        build_tasks(config)


def test_band_that_keeps_nothing_names_the_band(published):
    config = band_config(published).model_copy(update={"solve_rate_band": (0.9, 0.95)})
    with pytest.raises(TaskError, match=r"band \[0.9, 0.95\] removed every task of source 'intellect2'"):
        build_tasks(config)


def test_empty_field_names_are_refused():
    with pytest.raises(ValueError, match="empty name"):
        DatasetSourceConfig(name="d", path="x.parquet", solve_rate_fields=[""])
