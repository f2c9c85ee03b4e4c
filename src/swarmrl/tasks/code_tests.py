"""A code task's tests, read from `verification_info`: every field known, or a TaskError naming it.

Cases (`code_cases`): `test_cases`, APPS/TACO's `input_output`, CodeContests' `public_tests` /
`private_tests` / `generated_tests`. Test code (`program_source`): `test` (HumanEval's `def check(candidate)`
with `entry_point`, pytest- or unittest-style tests, or asserts) or MBPP's `test_list` (asserts, one a line),
with MBPP's `test_imports` and `test_setup_code` (or `test_setup`) run before it; MBPP's
`challenge_test_list` is accepted and not run, as in the MBPP paper's evaluation. For HumanEval-layout tasks
(an `entry_point`, no setup) the task's prompt is the setup when it is Python: its helpers (`poly` in
HumanEval/32) are trusted, the completion's copies are not. Test code is trusted dataset code and runs on the
trusted side; the solution only in the sandbox.

The task's checker settings: `float_tolerance` (absolute or relative, for decimal stdout tokens and float
results; default the config's), `case_sensitive` (default true), `checker` (Python source defining
`check(input, output, expected) -> bool`, run on the trusted side for every case instead of the built-in
comparison: for problems with many valid answers). `solution_prefix` is code put before the solution in the
sandbox (LeetCode's imports and `ListNode`), `solution_module` the module name tests import the solution as
(default `solution`). `language` must be Python; `starter_code` is informational.
"""

from __future__ import annotations

import ast
import math
import sys
from dataclasses import dataclass, field
from importlib.util import find_spec
from typing import Any

from swarmrl.tasks.code_cases import CONTEST_FIELDS, CallCase, StdioCase, read_cases
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.program_source import ENTRY_POINT, ProgramKind, parse_python, program_kind
from swarmrl.tasks.task import Task

__all__ = ["CallCase", "CheckerSettings", "CodeTests", "StdioCase", "parse_code_tests", "parse_python"]

KNOWN_FIELDS = frozenset(
    {
        "test_cases",
        "input_output",
        *CONTEST_FIELDS,
        "test",
        "entry_point",
        "test_list",
        "test_imports",
        "test_setup",
        "test_setup_code",
        "challenge_test_list",
        "float_tolerance",
        "case_sensitive",
        "checker",
        "solution_prefix",
        "solution_module",
        "language",
        "starter_code",
        "accept_unclosed_think",
    }
)
_PYTHON = ("python", "python3", "py")
_ENTRY_POINT_SHAPES = "`name`, `Class().method` or `Class.method`"


@dataclass(frozen=True)
class CheckerSettings:
    float_tolerance: float | None = None  # None: the config's stdout_float_tolerance
    case_sensitive: bool = True
    checker: str | None = None


@dataclass(frozen=True)
class CodeTests:
    stdio: list[StdioCase] = field(default_factory=list)
    calls: list[CallCase] = field(default_factory=list)
    check: str | None = None  # the test code
    entry_point: str | None = None
    setup: str | None = None
    program_kind: ProgramKind = "script"
    solution_prefix: str | None = None
    solution_module: str = "solution"
    settings: CheckerSettings = field(default_factory=CheckerSettings)

    @property
    def total(self) -> int:
        return len(self.stdio) + len(self.calls) + (1 if self.check is not None else 0)


def parse_code_tests(task: Task) -> CodeTests:
    """The task's tests; TaskError naming the task and the bad field when they are malformed."""
    info, task_id = task.verification_info, task.task_id
    unknown = sorted(set(info) - KNOWN_FIELDS)
    if unknown:
        raise TaskError(
            f"task {task_id}: field 'verification_info.{unknown[0]}' is not known to the code reward "
            "(docs/datasets.md lists the fields)"
        )
    language = info.get("language", "python")
    if not isinstance(language, str) or language.lower() not in _PYTHON:
        raise TaskError(f"task {task_id}: language {language!r} is not run by the code reward (Python only)")
    stdio, calls = read_cases(info, task_id)
    check = _test_code(info, task_id)
    entry_point = _entry_point(info, task_id)
    setup = _setup_code(info, task_id)
    if setup is None and check is not None and entry_point is not None and _is_python(task.prompt):
        setup = task.prompt
    module = info.get("solution_module", "solution")
    if not isinstance(module, str) or not module.isidentifier():
        raise TaskError(f"task {task_id}: solution_module must be a python identifier")
    kind = _program_kind(check, setup, entry_point, module, task_id)
    settings = _settings(info, task_id, has_cases=bool(stdio or calls))
    prefix = _optional_code(info, "solution_prefix", task_id)
    tests = CodeTests(stdio, calls, check, entry_point, setup, kind, prefix, module, settings)
    if tests.total == 0:
        raise TaskError(f"task {task_id}: verification_info has no test_cases, input_output or test")
    return tests


def _test_code(info: dict[str, Any], task_id: str) -> str | None:
    """`test` (one string) or MBPP's `test_list` (asserts, one a line); None when the task has neither."""
    check, listed = info.get("test"), info.get("test_list")
    if check is not None and listed is not None:
        raise TaskError(f"task {task_id}: give test or test_list, not both")
    if listed is not None:
        check = "\n".join(_strings(listed, "test_list", task_id))
    if "challenge_test_list" in info:
        _strings(info["challenge_test_list"], "challenge_test_list", task_id)
    if check is not None and not isinstance(check, str):
        raise TaskError(f"task {task_id}: test must be a string of python code")
    if check is not None and not _is_python(check):
        raise TaskError(f"task {task_id}: the test code is not valid python")
    return check


def _entry_point(info: dict[str, Any], task_id: str) -> str | None:
    entry_point = info.get("entry_point")
    if entry_point is not None and (
        not isinstance(entry_point, str) or not ENTRY_POINT.fullmatch(entry_point)
    ):
        raise TaskError(f"task {task_id}: entry_point must be {_ENTRY_POINT_SHAPES}")
    return entry_point


def _setup_code(info: dict[str, Any], task_id: str) -> str | None:
    """MBPP's `test_imports`, then `test_setup` (or MBPP's `test_setup_code`); None when there is none."""
    if "test_setup" in info and "test_setup_code" in info:
        raise TaskError(f"task {task_id}: give test_setup or test_setup_code, not both")
    setup = info.get("test_setup", info.get("test_setup_code"))
    if setup is not None and not isinstance(setup, str):
        raise TaskError(f"task {task_id}: test_setup must be a string of python code")
    imports = _strings(info.get("test_imports", []), "test_imports", task_id)
    parts = [*imports, *([setup] if setup and setup.strip() else [])]
    code = "\n".join(parts) if parts else None
    if code is not None and not _is_python(code):
        raise TaskError(f"task {task_id}: the test setup code is not valid python")
    return code


def _program_kind(
    check: str | None, setup: str | None, entry_point: str | None, module: str, task_id: str
) -> ProgramKind:
    if check is None:
        if entry_point is not None:
            raise TaskError(f"task {task_id}: entry_point without test code to call it")
        return "script"
    tree = parse_python(check)
    kind = program_kind(tree, entry_point is not None)
    defines_check = any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in tree.body)
    if defines_check and entry_point is None:
        raise TaskError(f"task {task_id}: the test defines check(candidate) but the task has no entry_point")
    if kind == "unit" and find_spec("pytest") is None:
        raise TaskError(
            f"task {task_id}: its pytest/unittest-style tests are run by pytest, which is not installed "
            "here: pip install 'swarmrl[tasks]'"
        )
    for code in (setup, check):
        if code is not None:
            _check_imports(parse_python(code), module, task_id)
    return kind


def _check_imports(tree: ast.Module, module: str, task_id: str) -> None:
    """Every module the test code imports is the solution or importable here: named, not silently failing."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top == module or top in sys.stdlib_module_names or find_spec(top) is not None:
                continue
            raise TaskError(
                f"task {task_id}: the tests import {name!r}, which is neither installed here nor the "
                "solution (tests import the solution as `solution`, or as the task's solution_module)"
            )


def _settings(info: dict[str, Any], task_id: str, has_cases: bool) -> CheckerSettings:
    tolerance = info.get("float_tolerance")
    if tolerance is not None and (
        isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not 0 <= tolerance < math.inf
    ):
        raise TaskError(f"task {task_id}: float_tolerance must be a number >= 0, got {tolerance!r}")
    case_sensitive = info.get("case_sensitive", True)
    for name in ("case_sensitive", "accept_unclosed_think"):
        if not isinstance(info.get(name, True), bool):
            raise TaskError(f"task {task_id}: {name} must be true or false")
    checker = _optional_code(info, "checker", task_id)
    if checker is not None:
        if not has_cases:
            raise TaskError(f"task {task_id}: a checker judges input/output cases, and the task has none")
        if not _defines_checker(parse_python(checker)):
            raise TaskError(
                f"task {task_id}: the checker must define check(input, output, expected) at module level"
            )
    return CheckerSettings(None if tolerance is None else float(tolerance), case_sensitive, checker)


def _defines_checker(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.FunctionDef)
        and node.name == "check"
        and len(node.args.posonlyargs) + len(node.args.args) >= 3
        for node in tree.body
    )


def _optional_code(info: dict[str, Any], name: str, task_id: str) -> str | None:
    code = info.get(name)
    if code is None:
        return None
    if not isinstance(code, str) or not _is_python(code):
        raise TaskError(f"task {task_id}: {name} must be a string of valid python code")
    return code


def _strings(value: Any, field_name: str, task_id: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TaskError(f"task {task_id}: {field_name} must be a list of strings of python code")
    return value


def _is_python(text: str) -> bool:
    try:
        parse_python(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
