"""Datasets in the INTELLECT-2 layout: prompt, verification_info (JSON), task_type and a solve rate; and the
public code datasets in their own layouts (`code_layouts`).

The solve rate is read from the first of `solve_rate_fields` a row has: `solve_rate` as `swarmrl filter` writes
it, or the published INTELLECT-2-RL-Dataset's `solve_rate_qwen_r1_distill_7b`.

Local JSONL (optionally gzipped) and parquet files are read with the standard library and pyarrow; the HF
hub is reached through `datasets`, imported only when asked for (it needs the network).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from swarmrl.configs.tasks import SOLVE_RATE_FIELDS, DatasetSourceConfig
from swarmrl.tasks.code_layouts import published_row
from swarmrl.tasks.code_tests import parse_code_tests
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.math_verifier import math_ground_truths
from swarmrl.tasks.task import ListTaskSource, Task, TaskSource

# Columns every row must have (task_type may come from the source's default_task_type); docs/datasets.md.
REQUIRED_COLUMNS = ("prompt", "verification_info", "task_type")
# Task types whose verification_info is read in full when the row is loaded (and by `--dry-run`).
_CHECKS: dict[str, Callable[[Task], Any]] = {"code": parse_code_tests, "math": math_ground_truths}


def row_to_task(
    row: dict[str, Any],
    *,
    where: str,
    default_id: str,
    default_task_type: str | None,
    solve_rate_fields: Sequence[str] = SOLVE_RATE_FIELDS,
) -> Task:
    """One dataset row as a Task; TaskError naming `where` (file and row) and the field when malformed. A row of
    a published code dataset (MBPP, HumanEval, APPS, ...: `code_layouts`) is read in its own layout. Code and
    math tasks are checked in full here: a test field or setting the reward does not know is refused now,
    not at scoring."""
    if not isinstance(row, dict):
        raise TaskError(f"{where}: row is not an object")
    if "verification_info" not in row:
        row = published_row(row, where) or row
    missing = [column for column in REQUIRED_COLUMNS if column not in row]
    if missing and not (missing == ["task_type"] and default_task_type):
        raise TaskError(
            f"{where}: no {', '.join(repr(c) for c in missing)} column (the row has {', '.join(map(repr, row))}); "
            f"a task row needs {', '.join(REQUIRED_COLUMNS)}: see docs/datasets.md"
        )
    prompt = row.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise TaskError(f"{where}: field 'prompt' must be a non-empty string")
    info = row.get("verification_info")
    if isinstance(info, str):
        try:
            info = json.loads(info)
        except json.JSONDecodeError as exc:
            raise TaskError(f"{where}: field 'verification_info' is not valid JSON: {exc}") from exc
    if not isinstance(info, dict):
        raise TaskError(f"{where}: field 'verification_info' must be a JSON object")
    task_type = row.get("task_type") or default_task_type
    if not isinstance(task_type, str) or not task_type:
        raise TaskError(f"{where}: field 'task_type' is missing")
    task_type = {"verifiable_math": "math", "verifiable_code": "code"}.get(task_type, task_type)
    if task_type not in _CHECKS and not any(
        key in info for key in ("ground_truth", "ground_truths", "test_cases", "test", "generator")
    ):
        raise TaskError(f"{where}: field 'verification_info' has no ground_truth, test_cases or test")
    solve_rate = _solve_rate(row, solve_rate_fields, where)
    task_id = row.get("task_id") or row.get("problem_id") or default_id
    demonstration = row.get("demonstration") or row.get("gold_standard_solution")
    if demonstration is not None and not isinstance(demonstration, str):
        raise TaskError(f"{where}: field 'demonstration' must be a string")
    try:
        task = Task(str(task_id), prompt, task_type, info, solve_rate, demonstration)
        if task_type in _CHECKS:
            _CHECKS[task_type](task)
    except TaskError as exc:
        raise TaskError(f"{where}: {exc}") from exc
    return task


def _solve_rate(row: dict[str, Any], fields: Sequence[str], where: str) -> float | None:
    """The value of the first of `fields` the row holds (None when it has none, or only nulls)."""
    for field in fields:
        value = row.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise TaskError(f"{where}: field {field!r} must be a number in [0, 1], got {value!r}")
        return float(value)
    return None


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a .jsonl / .jsonl.gz / .parquet file."""
    if not path.is_file():
        raise TaskError(f"dataset file {path} does not exist")
    name = path.name.lower()
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as exc:  # noqa: BLE001 — pyarrow raises several unrelated types for bad files
            raise TaskError(f"{path}: not a readable parquet file: {exc}") from exc
        yield from table.to_pylist()
        return
    if not name.endswith((".jsonl", ".jsonl.gz", ".json")):
        raise TaskError(f"{path}: unsupported dataset format (want .jsonl, .jsonl.gz or .parquet)")
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskError(
                    f"{path} line {line_number}: not valid JSON ({exc}); one JSON object per line"
                ) from exc


def tasks_from_rows(
    rows: Iterable[dict[str, Any]],
    *,
    name: str,
    origin: str,
    default_task_type: str | None = None,
    limit: int | None = None,
    solve_rate_fields: Sequence[str] = SOLVE_RATE_FIELDS,
) -> list[Task]:
    tasks = []
    for index, row in enumerate(rows):
        if limit is not None and index >= limit:
            break
        tasks.append(
            row_to_task(
                row,
                where=f"{origin} row {index}",
                default_id=f"{name}/{index}",
                default_task_type=default_task_type,
                solve_rate_fields=solve_rate_fields,
            )
        )
    return tasks


def load_dataset_tasks(config: DatasetSourceConfig) -> list[Task]:
    """All tasks of a configured dataset (local file, or the HF hub when `hf_dataset` is set)."""
    if config.path is not None:
        path = Path(config.path)
        return tasks_from_rows(
            read_rows(path),
            name=config.name,
            origin=str(path),
            default_task_type=config.default_task_type,
            limit=config.limit,
            solve_rate_fields=config.solve_rate_fields,
        )
    try:
        import datasets
    except ImportError as exc:
        raise TaskError(
            "loading from the HF hub needs the `datasets` package: pip install 'swarmrl[hub]'"
        ) from exc
    split = config.hf_split if config.limit is None else f"{config.hf_split}[:{config.limit}]"
    hub = datasets.load_dataset(config.hf_dataset, split=split)
    return tasks_from_rows(
        iter(hub),
        name=config.name,
        origin=f"hf://{config.hf_dataset}",
        default_task_type=config.default_task_type,
        solve_rate_fields=config.solve_rate_fields,
    )


def write_tasks_jsonl(tasks: Iterable[Task], path: Path) -> None:
    """Write tasks in the same layout (verification_info as a JSON string), e.g. with solve rates."""
    with open(path, "w", encoding="utf-8") as handle:
        for task in tasks:
            handle.write(
                json.dumps(
                    {
                        "task_id": task.task_id,
                        "prompt": task.prompt,
                        "task_type": task.task_type,
                        "verification_info": json.dumps(task.verification_info),
                        "solve_rate": task.solve_rate,
                        "demonstration": task.demonstration,
                    }
                )
                + "\n"
            )


def dataset_source(config: DatasetSourceConfig) -> TaskSource:
    return ListTaskSource(config.name, load_dataset_tasks(config))
