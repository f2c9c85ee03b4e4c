"""prompts.jsonl and references.jsonl: a pack's rows and the reference solutions of some of them.

A row is one JSON object a line, in the `prompts` dataset layout (docs/datasets.md): `prompt` (a string, or
chat messages [{role, content}, ...] ending on a user turn), an `id` (unique in the pack) and exactly the
columns the manifest hands its verifier — a column it does not declare is refused, so nothing travels unseen.
A reference is `{"id": row id, "completion": text}`, the answer a model would write; a row may have several.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from swarmrl.configs.task_packs import PackLimitsConfig
from swarmrl.configs.tasks import PromptsSourceConfig
from swarmrl.tasks.code_tests import CodeTests, parse_code_tests
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.packs.errors import PackError
from swarmrl.tasks.packs.manifest import CODE_TESTS_COLUMN, ROW_ID_COLUMN, Manifest
from swarmrl.tasks.prompts_source import prompt_task
from swarmrl.tasks.task import Task

PACK_TASK_TYPE = "task_pack"
MAX_ID_CHARS = 128
# The test formats the trusted judge runs as plain data; the others (`test`, `test_list`, setup code) are code
# the judge would run on the trusted side, which no stranger's pack may do.
CODE_TEST_KEYS = frozenset({"test_cases"})


@dataclass(frozen=True)
class PackRow:
    """One row: its task (prompt, chat messages, the verifier's columns) and, for code_tests, its tests."""

    row_id: str
    task: Task
    tests: CodeTests | None = None

    @property
    def prompt_text(self) -> str:
        return prompt_text(self.task)


def prompt_text(task: Task) -> str:
    """Everything the model is shown: every message's content, or the prompt string."""
    if task.messages is None:
        return task.prompt
    return "\n".join(message["content"] for message in task.messages)


def parse_rows(data: bytes, manifest: Manifest, limits: PackLimitsConfig, where: str) -> list[PackRow]:
    config = PromptsSourceConfig(name=manifest.name, path=where, id_column=ROW_ID_COLUMN)
    rows: list[PackRow] = []
    seen: set[str] = set()
    for line_number, value in _json_lines(data, limits, where):
        here = f"{where} line {line_number}"
        if len(rows) == limits.max_rows:
            raise PackError(f"{here}: more than {limits.max_rows} rows")
        row = _row(value, manifest, config, len(rows), here, limits)
        if row.row_id in seen:
            raise PackError(f"{here}: id {row.row_id!r} appears twice")
        seen.add(row.row_id)
        rows.append(row)
    if not rows:
        raise PackError(f"{where}: the pack has no rows")
    return rows


def _row(
    value: Any,
    manifest: Manifest,
    config: PromptsSourceConfig,
    index: int,
    where: str,
    limits: PackLimitsConfig,
) -> PackRow:
    if not isinstance(value, dict):
        raise PackError(f"{where}: a row must be a JSON object")
    row_id = _row_id(value.get(ROW_ID_COLUMN), where)
    expected = {ROW_ID_COLUMN, "prompt", *manifest.verifier.columns}
    missing, extra = sorted(expected - value.keys()), sorted(value.keys() - expected)
    if missing:
        raise PackError(f"{where}: column {missing[0]!r} is missing")
    if extra:
        raise PackError(f"{where}: column {extra[0]!r} is not among the verifier's columns in the manifest")
    try:
        task = prompt_task(value, config, index, where)
    except TaskError as exc:
        raise PackError(str(exc)) from None
    columns = {name: value[name] for name in manifest.verifier.columns}
    row = PackRow(row_id, Task(row_id, task.prompt, PACK_TASK_TYPE, columns, messages=task.messages))
    if len(row.prompt_text) > limits.max_prompt_chars:
        raise PackError(
            f"{where}: a prompt of {len(row.prompt_text)} characters, over {limits.max_prompt_chars}"
        )
    if manifest.verifier.kind == "code_tests":
        return PackRow(row_id, row.task, _code_tests(row, columns[CODE_TESTS_COLUMN], where))
    return row


def _row_id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS or not value.isprintable():
        raise PackError(f"{where}: 'id' must be a printable string of 1 to {MAX_ID_CHARS} characters")
    return value


def _code_tests(row: PackRow, info: Any, where: str) -> CodeTests:
    if isinstance(info, str):
        try:
            info = json.loads(info)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise PackError(f"{where}: verification_info is not valid JSON ({exc})") from None
    if not isinstance(info, dict):
        raise PackError(f"{where}: verification_info must be an object with test_cases")
    stray = sorted(info.keys() - CODE_TEST_KEYS)
    if stray:
        raise PackError(
            f"{where}: verification_info key {stray[0]!r} is refused: a pack's tests are test_cases "
            "(stdin_stdout or function_call), never code run on the trusted side"
        )
    try:
        return parse_code_tests(Task(row.row_id, row.task.prompt, "code", info))
    except TaskError as exc:
        raise PackError(f"{where}: {exc}") from None


def parse_references(
    data: bytes, rows: list[PackRow], limits: PackLimitsConfig, where: str
) -> dict[str, tuple[str, ...]]:
    """The reference completions of each row that has some, by row id."""
    known = {row.row_id for row in rows}
    references: dict[str, list[str]] = {}
    for line_number, value in _json_lines(data, limits, where):
        here = f"{where} line {line_number}"
        if not isinstance(value, dict) or sorted(value) != ["completion", "id"]:
            raise PackError(f"{here}: a reference must be an object with exactly id and completion")
        row_id, completion = value["id"], value["completion"]
        if not isinstance(row_id, str) or row_id not in known:
            raise PackError(f"{here}: id {str(row_id)[:40]!r} is not a row of the pack")
        if not isinstance(completion, str) or len(completion) > limits.max_reference_chars:
            raise PackError(
                f"{here}: completion must be a string of at most {limits.max_reference_chars} characters"
            )
        listed = references.setdefault(row_id, [])
        if len(listed) == limits.max_references_per_row:
            raise PackError(
                f"{here}: more than {limits.max_references_per_row} references for row {row_id!r}"
            )
        listed.append(completion)
    return {row_id: tuple(completions) for row_id, completions in references.items()}


def _json_lines(data: bytes, limits: PackLimitsConfig, where: str) -> Iterator[tuple[int, Any]]:
    for line_number, line in enumerate(data.split(b"\n"), start=1):
        if len(line) > limits.max_row_bytes:
            raise PackError(
                f"{where} line {line_number}: {len(line)} bytes, over the cap of {limits.max_row_bytes}"
            )
        if not line.strip():
            continue
        try:
            value = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise PackError(f"{where} line {line_number}: not UTF-8 text") from None
        except (RecursionError, ValueError) as exc:  # JSONDecodeError, and ints past the digit limit
            raise PackError(f"{where} line {line_number}: not valid JSON ({str(exc)[:200]})") from None
        yield line_number, value
