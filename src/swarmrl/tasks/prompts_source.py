"""Datasets in TRL's layout: a `prompt` column (a string, or chat messages) and any other columns.

Every column but `prompt` travels with the task (`Task.verification_info`) and reaches the run's reward
functions as a keyword argument, as TRL hands a dataset's extra columns to its reward functions. Local JSONL
and parquet files are read with the standard library and pyarrow; a directory written by `save_to_disk` and hub
names go through `datasets` (the `hub` extra), imported only then.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from pathlib import Path
from typing import Any

from swarmrl.configs.tasks import PromptsSourceConfig
from swarmrl.tasks.dataset_source import read_rows
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.reward_functions import RESERVED_COLUMNS
from swarmrl.tasks.task import ListTaskSource, Task, TaskSource

TASK_TYPE = "prompts"  # scored by the run's reward functions, never by a built-in verifier


def prompts_source(config: PromptsSourceConfig) -> TaskSource:
    rows, origin = _rows(config)
    tasks = _tasks(rows, config, origin, config.limit)
    if not tasks:
        raise TaskError(f"{origin}: the dataset has no rows")
    return ListTaskSource(config.name, tasks)


def first_prompt_rows(
    config: PromptsSourceConfig, count: int
) -> tuple[list[dict[str, Any]], list[Task], str]:
    """(rows, tasks, origin) of the first `count` rows of a local dataset (a file or a `save_to_disk`
    directory), read lazily; TaskError naming the row and column that do not fit. A hub dataset is not read."""
    if config.path is None:
        raise ValueError("a hub dataset is read only by a run")
    rows, origin = _rows(config)
    first = list(islice(rows, count))
    if not first:
        raise TaskError(f"{origin}: the dataset has no rows")
    return first, _tasks(first, config, origin, count), origin


def _tasks(rows: Iterable[Any], config: PromptsSourceConfig, origin: str, limit: int | None) -> list[Task]:
    tasks = []
    for index, row in enumerate(rows):
        if limit is not None and index >= limit:
            break
        tasks.append(prompt_task(row, config, index, f"{origin} row {index}"))
    return tasks


def prompt_task(row: Any, config: PromptsSourceConfig, index: int, where: str) -> Task:
    """One row as a Task; TaskError naming `where` and the column when it does not fit."""
    if not isinstance(row, dict):
        raise TaskError(f"{where}: row is not an object")
    reserved = sorted(RESERVED_COLUMNS & set(row) - {"prompt"})
    if reserved:
        raise TaskError(
            f"{where}: column {reserved[0]!r} is a reward-function argument of its own; rename it"
        )
    prompt, messages = _prompt(row.get("prompt"), where)
    task_id = row.get(config.id_column) if config.id_column else f"{config.name}/{index}"
    if task_id is None or isinstance(task_id, dict | list):
        raise TaskError(f"{where}: column {config.id_column!r} must hold a task id")
    demonstration = row.get(config.demonstration_column) if config.demonstration_column else None
    if demonstration is not None and not isinstance(demonstration, str):
        raise TaskError(f"{where}: column {config.demonstration_column!r} must hold a string")
    columns = {name: value for name, value in row.items() if name != "prompt"}
    try:
        return Task(str(task_id), prompt, TASK_TYPE, columns, None, demonstration, messages)
    except TaskError as exc:
        raise TaskError(f"{where}: {exc}") from exc


def _prompt(value: Any, where: str) -> tuple[str, tuple[dict[str, str], ...] | None]:
    """(task prompt text, chat messages or None) of a `prompt` cell."""
    if isinstance(value, str) and value:
        return value, None
    if not isinstance(value, list) or not value:
        raise TaskError(f"{where}: column 'prompt' must be a non-empty string or a list of chat messages")
    messages = tuple(_message(message, where) for message in value)
    if messages[-1]["role"] != "user":
        raise TaskError(f"{where}: a chat prompt must end on a user turn, not {messages[-1]['role']!r}")
    return messages[-1]["content"], messages


def _message(message: Any, where: str) -> dict[str, str]:
    # datasets fills struct fields a message lacks (tool_calls, ...) with None: only role and content may hold values.
    if not isinstance(message, dict) or any(
        value is not None for key, value in message.items() if key not in ("role", "content")
    ):
        raise TaskError(f"{where}: a prompt message must be {{role, content}}, got {str(message)[:80]}")
    role, content = message.get("role"), message.get("content")
    if not isinstance(role, str) or not isinstance(content, str):
        raise TaskError(f"{where}: a prompt message needs string 'role' and 'content'")
    return {"role": role, "content": content}


def _rows(config: PromptsSourceConfig) -> tuple[Iterable[dict[str, Any]], str]:
    if config.path is not None and not Path(config.path).is_dir():
        return read_rows(Path(config.path)), config.path
    datasets = _datasets()
    if config.path is not None:
        try:
            loaded = datasets.load_from_disk(config.path)
        except (FileNotFoundError, ValueError) as exc:
            raise TaskError(f"{config.path}: not a dataset written by save_to_disk ({exc})") from exc
        if isinstance(loaded, datasets.DatasetDict):
            if config.hf_split not in loaded:
                raise TaskError(f"{config.path}: no split {config.hf_split!r} (it has {sorted(loaded)})")
            loaded = loaded[config.hf_split]
        return iter(loaded), config.path
    split = config.hf_split if config.limit is None else f"{config.hf_split}[:{config.limit}]"
    return iter(datasets.load_dataset(config.hf_dataset, split=split)), f"hf://{config.hf_dataset}"


def _datasets():
    try:
        import datasets
    except ImportError as exc:
        raise TaskError(
            "a saved dataset directory or a hub dataset needs the `datasets` package: pip install 'swarmrl[hub]'"
        ) from exc
    return datasets
