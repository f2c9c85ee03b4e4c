"""A code task's tests, read from `verification_info`, and the comparisons the trusted judge makes.

Formats:
- `{"test_cases": [{"type": "stdin_stdout", "input": str, "output": str}, ...]}` (INTELLECT-2 / SYNTHETIC-1),
- `{"test_cases": [{"type": "function_call", "fn_name": str, "input": [args] | JSON str, "output": value}]}`,
- `{"test": "def check(candidate): ...", "entry_point": "name"}` (HumanEval) or `{"test": "assert f(1) == 2"}`
  / `{"test_list": ["assert f(1) == 2", ...]}` (MBPP style: the test calls the solution's functions by name;
  MBPP's `test_imports` and `test_setup_code` are read too, its `challenge_test_list` is not run, as in the
  MBPP paper's own evaluation). Test code is trusted dataset code and runs on the trusted side; what it needs
  besides the solution comes from `test_imports` and `test_setup` / `test_setup_code` (code run before it)
  or, for HumanEval-layout tasks (an `entry_point` and no setup), from the task's prompt when that is Python
  source — the prompt's helpers (`poly` in HumanEval/32, `encode_cyclic` in /38) are trusted, the
  completion's copies of them are not.
"""

from __future__ import annotations

import ast
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.task import Task


@dataclass(frozen=True)
class StdioCase:
    input: str
    output: str


@dataclass(frozen=True)
class CallCase:
    fn_name: str
    args: list[Any]
    expected: Any


@dataclass(frozen=True)
class CodeTests:
    stdio: list[StdioCase] = field(default_factory=list)
    calls: list[CallCase] = field(default_factory=list)
    check: str | None = None
    entry_point: str | None = None
    setup: str | None = None

    @property
    def total(self) -> int:
        return len(self.stdio) + len(self.calls) + (1 if self.check is not None else 0)


def parse_code_tests(task: Task) -> CodeTests:
    """The task's tests; TaskError naming the task and the bad field when they are malformed."""
    info = task.verification_info
    stdio: list[StdioCase] = []
    calls: list[CallCase] = []
    raw_cases = info.get("test_cases", [])
    if isinstance(raw_cases, str):
        try:
            raw_cases = json.loads(raw_cases)
        except json.JSONDecodeError as exc:
            raise TaskError(f"task {task.task_id}: test_cases is not valid JSON: {exc}") from exc
    if not isinstance(raw_cases, list):
        raise TaskError(f"task {task.task_id}: test_cases must be a list")
    for index, case in enumerate(raw_cases):
        where = f"task {task.task_id}: test_cases[{index}]"
        if not isinstance(case, dict) or "input" not in case or "output" not in case:
            raise TaskError(f"{where} must be an object with input and output")
        kind = case.get("type") or ("function_call" if case.get("fn_name") else "stdin_stdout")
        if kind == "stdin_stdout":
            if not isinstance(case["input"], str) or not isinstance(case["output"], str):
                raise TaskError(f"{where}: stdin_stdout input and output must be strings")
            stdio.append(StdioCase(case["input"], case["output"]))
        elif kind == "function_call":
            calls.append(_call_case(case, where))
        else:
            raise TaskError(f"{where}: unknown test type {kind!r}")
    check = _test_code(info, task.task_id)
    entry_point = info.get("entry_point")
    if entry_point is not None and (not isinstance(entry_point, str) or not entry_point.isidentifier()):
        raise TaskError(f"task {task.task_id}: entry_point must be a python identifier")
    setup = _setup_code(info, task.task_id)
    if setup is None and check is not None and entry_point is not None and _is_python(task.prompt):
        setup = task.prompt
    for code, what in ((setup, "test setup"), (check, "test")):
        if code is not None and not _is_python(code):
            raise TaskError(f"task {task.task_id}: the {what} code is not valid python")
    tests = CodeTests(stdio, calls, check, entry_point, setup)
    if tests.total == 0:
        raise TaskError(f"task {task.task_id}: verification_info has no test_cases and no test")
    return tests


def _test_code(info: dict[str, Any], task_id: str) -> str | None:
    """`test` (one string) or MBPP's `test_list` (asserts, one a line); None when the task has neither."""
    check, listed = info.get("test"), info.get("test_list")
    if check is not None and listed is not None:
        raise TaskError(f"task {task_id}: give test or test_list, not both")
    if listed is not None:
        check = "\n".join(_strings(listed, "test_list", task_id))
    if check is not None and not isinstance(check, str):
        raise TaskError(f"task {task_id}: test must be a string of python code")
    return check


def _setup_code(info: dict[str, Any], task_id: str) -> str | None:
    """MBPP's `test_imports`, then `test_setup` (or MBPP's `test_setup_code`); None when there is none."""
    if "test_setup" in info and "test_setup_code" in info:
        raise TaskError(f"task {task_id}: give test_setup or test_setup_code, not both")
    setup = info.get("test_setup", info.get("test_setup_code"))
    if setup is not None and not isinstance(setup, str):
        raise TaskError(f"task {task_id}: test_setup must be a string of python code")
    imports = _strings(info.get("test_imports", []), "test_imports", task_id)
    parts = [*imports, *([setup] if setup and setup.strip() else [])]
    return "\n".join(parts) if parts else None


def _strings(value: Any, field_name: str, task_id: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TaskError(f"task {task_id}: {field_name} must be a list of strings of python code")
    return value


_AST_BUILDER = threading.RLock()


def parse_python(source: str) -> ast.Module:
    """`ast.parse`, one thread at a time. CPython 3.11 counts the AST builder's recursion depth once per
    interpreter, so a thread switch inside it (a finalizer run by the garbage collector) lets another thread's
    parse move the count, and one of them fails with a spurious `SystemError: AST constructor recursion depth
    mismatch` (python/cpython#106905): rewards are computed on a thread pool."""
    with _AST_BUILDER:
        return ast.parse(source)


def _is_python(text: str) -> bool:
    try:
        parse_python(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _call_case(case: dict[str, Any], where: str) -> CallCase:
    fn_name = case.get("fn_name")
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise TaskError(f"{where}: function_call needs an identifier fn_name")
    args = case["input"]
    expected = case["output"]
    try:
        if isinstance(args, str):
            args = json.loads(args)
        if isinstance(expected, str) and expected.strip()[:1] in ("[", "{"):
            expected = json.loads(expected)
    except json.JSONDecodeError as exc:
        raise TaskError(f"{where}: function_call input/output is not valid JSON: {exc}") from exc
    if not isinstance(args, list):
        raise TaskError(f"{where}: function_call input must be a list of arguments")
    return CallCase(fn_name, args, expected)


def call_result_matches(result: Any, expected: Any) -> bool:
    """Function results match directly or as the single element of an APPS/TACO-style output list.

    Expected values come from JSON, so tuples in the result compare as the lists JSON has (APPS/TACO do the
    same); `result` is a decoded wire value, i.e. exact builtin types."""
    result = _json_like(result)
    return result == expected or (isinstance(expected, list) and len(expected) == 1 and result == expected[0])


def _json_like(value: Any) -> Any:
    if type(value) in (list, tuple):
        return [_json_like(item) for item in value]
    if type(value) is dict:
        return {key: _json_like(item) for key, item in value.items()}
    return value
