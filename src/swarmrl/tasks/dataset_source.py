"""Datasets in the INTELLECT-2 layout: prompt, verification_info (JSON), task_type, solve_rate.

Local JSONL (optionally gzipped) and parquet files are read with the standard library and pyarrow; the HF
hub is reached through `datasets`, imported only when asked for (it needs the network).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from swarmrl.tasks.config import DatasetSourceConfig
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.task import ListTaskSource, Task, TaskSource


def row_to_task(row: dict[str, Any], *, where: str, default_id: str, default_task_type: str | None) -> Task:
    """One dataset row as a Task; TaskError naming `where` (file and row) and the field when malformed."""
    if not isinstance(row, dict):
        raise TaskError(f"{where}: row is not an object")
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
    if not any(key in info for key in ("ground_truth", "ground_truths", "test_cases", "test", "generator")):
        raise TaskError(f"{where}: field 'verification_info' has no ground_truth, test_cases or test")
    task_type = row.get("task_type") or default_task_type
    if not isinstance(task_type, str) or not task_type:
        raise TaskError(f"{where}: field 'task_type' is missing")
    task_type = {"verifiable_math": "math", "verifiable_code": "code"}.get(task_type, task_type)
    solve_rate = row.get("solve_rate")
    if solve_rate is not None:
        if (
            isinstance(solve_rate, bool)
            or not isinstance(solve_rate, int | float)
            or not 0 <= solve_rate <= 1
        ):
            raise TaskError(f"{where}: field 'solve_rate' must be a number in [0, 1], got {solve_rate!r}")
        solve_rate = float(solve_rate)
    task_id = row.get("task_id") or row.get("problem_id") or default_id
    demonstration = row.get("demonstration") or row.get("gold_standard_solution")
    if demonstration is not None and not isinstance(demonstration, str):
        raise TaskError(f"{where}: field 'demonstration' must be a string")
    try:
        return Task(str(task_id), prompt, task_type, info, solve_rate, demonstration)
    except TaskError as exc:
        raise TaskError(f"{where}: {exc}") from exc


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
        for line_number, line in enumerate(handle):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskError(f"{path} row {line_number}: not valid JSON: {exc}") from exc


def tasks_from_rows(
    rows: Iterable[dict[str, Any]],
    *,
    name: str,
    origin: str,
    default_task_type: str | None = None,
    limit: int | None = None,
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
        )
    try:
        import datasets
    except ImportError as exc:
        raise TaskError("loading from the HF hub needs the `datasets` package") from exc
    split = config.hf_split if config.limit is None else f"{config.hf_split}[:{config.limit}]"
    hub = datasets.load_dataset(config.hf_dataset, split=split)
    return tasks_from_rows(
        iter(hub),
        name=config.name,
        origin=f"hf://{config.hf_dataset}",
        default_task_type=config.default_task_type,
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
