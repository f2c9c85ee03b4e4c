import gzip
import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swarmrl.configs.tasks import DatasetSourceConfig, ReasoningGymSourceConfig, TasksConfig
from swarmrl.tasks.dataset_source import load_dataset_tasks, read_rows, row_to_task, write_tasks_jsonl
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.registry import MixedTaskSource, build_tasks, filter_by_solve_rate, heldout_sources
from swarmrl.tasks.task import ListTaskSource, Task

ROWS = [
    {
        "prompt": "1+1?",
        "verification_info": json.dumps({"ground_truth": "2"}),
        "task_type": "verifiable_math",
        "solve_rate": 0.5,
    },
    {
        "prompt": "sum",
        "verification_info": json.dumps(
            {"test_cases": [{"type": "stdin_stdout", "input": "1 2", "output": "3"}]}
        ),
        "task_type": "verifiable_code",
        "solve_rate": 0.05,
        "gold_standard_solution": "print(3)",
    },
    {"prompt": "2+2?", "verification_info": {"ground_truth": "4"}, "task_type": "math", "solve_rate": None},
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_gzip_and_parquet_load_the_same_tasks(tmp_path):
    plain = load_dataset_tasks(
        DatasetSourceConfig(name="d", path=str(write_jsonl(tmp_path / "d.jsonl", ROWS)))
    )
    with gzip.open(tmp_path / "d.jsonl.gz", "wt") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in ROWS))
    zipped = load_dataset_tasks(DatasetSourceConfig(name="d", path=str(tmp_path / "d.jsonl.gz")))
    table_rows = [
        {
            "gold_standard_solution": None,
            **r,
            "verification_info": json.dumps(r["verification_info"])
            if isinstance(r["verification_info"], dict)
            else r["verification_info"],
        }
        for r in ROWS
    ]
    pq.write_table(pa.Table.from_pylist(table_rows), tmp_path / "d.parquet")
    parquet = load_dataset_tasks(DatasetSourceConfig(name="d", path=str(tmp_path / "d.parquet")))
    assert plain == zipped == parquet
    assert [t.task_type for t in plain] == ["math", "code", "math"]
    assert plain[1].demonstration == "print(3)" and plain[0].task_id == "d/0"
    assert plain[0].verification_info == {"ground_truth": "2"}


def test_roundtrip_through_writer(tmp_path):
    tasks = load_dataset_tasks(
        DatasetSourceConfig(name="d", path=str(write_jsonl(tmp_path / "d.jsonl", ROWS)))
    )
    write_tasks_jsonl([t.with_solve_rate(0.3) for t in tasks], tmp_path / "out.jsonl")
    again = load_dataset_tasks(DatasetSourceConfig(name="d", path=str(tmp_path / "out.jsonl")))
    assert [t.solve_rate for t in again] == [0.3, 0.3, 0.3]
    assert [t.verification_info for t in again] == [t.verification_info for t in tasks]


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"verification_info": "{}", "task_type": "math"}, "prompt"),
        ({"prompt": "p", "verification_info": "{not json", "task_type": "math"}, "verification_info"),
        ({"prompt": "p", "verification_info": "[1]", "task_type": "math"}, "verification_info"),
        ({"prompt": "p", "verification_info": '{"x": 1}', "task_type": "math"}, "verification_info"),
        ({"prompt": "p", "verification_info": '{"ground_truth": "1"}'}, "task_type"),
        (
            {
                "prompt": "p",
                "verification_info": '{"ground_truth": "1"}',
                "task_type": "math",
                "solve_rate": 2,
            },
            "solve_rate",
        ),
        (
            {
                "prompt": "p",
                "verification_info": '{"ground_truth": "1"}',
                "task_type": "math",
                "solve_rate": "high",
            },
            "solve_rate",
        ),
    ],
)
def test_malformed_rows_name_row_and_field(tmp_path, row, field):
    path = write_jsonl(tmp_path / "bad.jsonl", [ROWS[0], row])
    with pytest.raises(
        TaskError, match=rf"row 1: (task \S+: )?(field '{field}(\.\w+)?'|no '{field}' column)"
    ):
        load_dataset_tasks(DatasetSourceConfig(name="d", path=str(path)))


def test_unreadable_files(tmp_path):
    with pytest.raises(TaskError, match="does not exist"):
        list(read_rows(tmp_path / "missing.jsonl"))
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(TaskError, match="unsupported"):
        list(read_rows(tmp_path / "x.csv"))
    (tmp_path / "x.parquet").write_bytes(b"not parquet")
    with pytest.raises(TaskError, match="parquet"):
        list(read_rows(tmp_path / "x.parquet"))
    (tmp_path / "x.jsonl").write_text('{"prompt": 1}\n{broken\n')
    with pytest.raises(TaskError, match="line 2: not valid JSON"):
        list(read_rows(tmp_path / "x.jsonl"))
    with pytest.raises(TaskError, match="row 0"):
        row_to_task("not a dict", where="row 0", default_id="x", default_task_type=None)  # type: ignore[arg-type]


def test_solve_rate_band_filter():
    tasks = [
        Task(f"t{i}", "p", "math", {"ground_truth": "1"}, rate)
        for i, rate in enumerate([0.0, 0.1, 0.5, 0.8, 0.81, None])
    ]
    kept = filter_by_solve_rate(ListTaskSource("s", tasks), 0.1, 0.8)
    assert [kept[i].task_id for i in range(len(kept))] == ["t1", "t2", "t3"]
    assert len(filter_by_solve_rate(ListTaskSource("s", tasks), 0.1, 0.8, keep_unmeasured=True)) == 4
    with pytest.raises(TaskError):
        filter_by_solve_rate(ListTaskSource("s", tasks), 0.9, 0.1)


def test_mixing_is_deterministic_and_follows_weights():
    a = ListTaskSource("a", [Task(f"a{i}", "p", "math", {"ground_truth": "1"}) for i in range(50)])
    b = ListTaskSource("b", [Task(f"b{i}", "p", "math", {"ground_truth": "1"}) for i in range(50)])
    mix = MixedTaskSource([a, b], [3.0, 1.0], seed=11, length=4000)
    again = MixedTaskSource([a, b], [3.0, 1.0], seed=11, length=4000)
    ids = [mix[i].task_id for i in range(len(mix))]
    assert ids == [again[i].task_id for i in range(len(again))]
    share = Counter(i[0] for i in ids)["a"] / len(ids)
    assert 0.72 < share < 0.78
    other_seed = MixedTaskSource([a, b], [3.0, 1.0], seed=12, length=4000)
    assert ids != [other_seed[i].task_id for i in range(4000)]
    # each source is walked as a permutation: its first 50 draws are 50 distinct tasks
    assert len({i for i in ids if i.startswith("b")}) == 50
    with pytest.raises(IndexError):
        mix[4000]


def test_build_tasks_mixes_configured_sources(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    config = TasksConfig(
        sources=[
            ReasoningGymSourceConfig(generator="spell_backward", size=40, eval_size=10, weight=1.0),
            DatasetSourceConfig(name="d", path=str(path), weight=1.0),
        ],
        mix_seed=3,
    )
    tasks = build_tasks(config)
    assert len(tasks) == 40 - (40 - len(build_tasks(TasksConfig(sources=[config.sources[0]])))) + 3
    assert {tasks[i].task_type for i in range(len(tasks))} == {"reasoning_gym", "math", "code"}
    assert [h.name for h in heldout_sources(config)] == ["spell_backward"]
    banded = TasksConfig(sources=[DatasetSourceConfig(name="d", path=str(path))], solve_rate_band=(0.1, 0.8))
    assert len(build_tasks(banded)) == 1
