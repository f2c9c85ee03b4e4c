"""Code reward: the last fenced python block, run against the task's tests in the sandbox; 1 iff all pass.

Test formats read from `verification_info`:
- `{"test_cases": [{"type": "stdin_stdout", "input": str, "output": str}, ...]}` (INTELLECT-2 / SYNTHETIC-1),
- `{"test_cases": [{"type": "function_call", "fn_name": str, "input": [args] | JSON str, "output": value}]}`,
- `{"test": "def check(candidate): ...", "entry_point": "name"}` (HumanEval) or `{"test": "assert ..."}`.
Cases run batched in one sandbox; when the batch errors (crash, exit, forged or missing report, timeout) each
case is re-run alone, stopping at the first failure since one failure already decides the reward.
"""

from __future__ import annotations

import ast
import json
import math
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmrl.tasks.config import AnswerExtractionConfig, CodeRewardConfig
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.extraction import answer_region, last_python_block
from swarmrl.tasks.sandbox import SandboxLimits, SandboxResult, run_python
from swarmrl.tasks.task import Task

_HARNESS_SOURCE = Path(__file__).with_name("code_harness.py").read_text(encoding="utf-8")
_MARKER = "\n@@swarmrl-harness-results@@\n"


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

    @property
    def total(self) -> int:
        return len(self.stdio) + len(self.calls) + (1 if self.check is not None else 0)


@dataclass(frozen=True)
class CodeTestReport:
    passed: int
    total: int
    detail: str = ""

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


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
    check = info.get("test")
    entry_point = info.get("entry_point")
    if check is not None and not isinstance(check, str):
        raise TaskError(f"task {task.task_id}: test must be a string of python code")
    if entry_point is not None and (not isinstance(entry_point, str) or not entry_point.isidentifier()):
        raise TaskError(f"task {task.task_id}: entry_point must be a python identifier")
    tests = CodeTests(stdio, calls, check, entry_point)
    if tests.total == 0:
        raise TaskError(f"task {task.task_id}: verification_info has no test_cases and no test")
    return tests


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


def stdout_matches(actual: str, expected: str) -> bool:
    """Whitespace-insensitive line/token comparison; numeric tokens compare with a 1e-6 tolerance."""
    actual_tokens = [line.split() for line in actual.strip().splitlines() if line.strip()]
    expected_tokens = [line.split() for line in expected.strip().splitlines() if line.strip()]
    if len(actual_tokens) != len(expected_tokens):
        return False
    for got_line, want_line in zip(actual_tokens, expected_tokens, strict=True):
        if len(got_line) != len(want_line):
            return False
        for got, want in zip(got_line, want_line, strict=True):
            if got != want and not _close_numbers(got, want):
                return False
    return True


def _close_numbers(got: str, want: str) -> bool:
    try:
        return math.isclose(float(got), float(want), rel_tol=1e-6, abs_tol=1e-6)
    except ValueError:
        return False


def call_result_matches(result: Any, expected: Any) -> bool:
    """Function results match directly or as the single element of an APPS/TACO-style output list."""
    return result == expected or (isinstance(expected, list) and len(expected) == 1 and result == expected[0])


class CodeVerifier:
    """Scores code completions 1/0 by running their last python block against the task's tests."""

    task_type = "code"

    def __init__(
        self, config: CodeRewardConfig | None = None, extraction: AnswerExtractionConfig | None = None
    ) -> None:
        self.config = config or CodeRewardConfig()
        self.extraction = extraction or AnswerExtractionConfig(mode="think")
        self.limits = SandboxLimits.from_config(self.config)

    def score(self, task: Task, completion: str) -> float:
        tests = parse_code_tests(task)
        region = answer_region(completion, self.extraction)
        code = last_python_block(region) if region is not None else None
        if code is None:
            return 0.0
        return 1.0 if self.run_tests(tests, code).all_passed else 0.0

    def run_tests(self, tests: CodeTests, code: str) -> CodeTestReport:
        passed = 0
        if tests.check is not None:
            if not self._check_passes(tests, code):
                return CodeTestReport(passed, tests.total, "check failed")
            passed += 1
        if tests.stdio:
            ok, detail = self._stdio_passes(tests.stdio, code)
            passed += ok
            if ok < len(tests.stdio):
                return CodeTestReport(passed, tests.total, detail)
        by_name: dict[str, list[CallCase]] = {}
        for case in tests.calls:
            by_name.setdefault(case.fn_name, []).append(case)
        for cases in by_name.values():
            ok, detail = self._calls_pass(cases, code)
            passed += ok
            if ok < len(cases):
                return CodeTestReport(passed, tests.total, detail)
        return CodeTestReport(passed, tests.total, "all passed")

    def _harness(self, code: str, spec: dict[str, Any], nonce: str = "") -> SandboxResult:
        files = {"main.py": _HARNESS_SOURCE, "solution.py": code}
        return run_python(
            files,
            limits=self.limits,
            isolation=self.config.isolation,
            main_globals={"SPEC": spec, "NONCE": nonce},
        )

    def _check_passes(self, tests: CodeTests, code: str) -> bool:
        nonce = secrets.token_hex(16)
        result = self._harness(
            code, {"kind": "check", "test": tests.check, "entry_point": tests.entry_point}, nonce
        )
        report = _harness_report(result)
        return isinstance(report, dict) and report.get("nonce") == nonce and report.get("passed") is True

    def _stdio_passes(self, cases: list[StdioCase], code: str) -> tuple[int, str]:
        report = _harness_report(
            self._harness(code, {"kind": "stdin_stdout", "inputs": [c.input for c in cases]})
        )
        if (
            isinstance(report, list)
            and len(report) == len(cases)
            and all(isinstance(o, dict) for o in report)
        ):
            for index, (case, outcome) in enumerate(zip(cases, report, strict=True)):
                if outcome.get("error") is not None or not isinstance(outcome.get("output"), str):
                    break  # an error inside the shared interpreter may be batching's fault: re-run alone
                if not stdout_matches(outcome["output"], case.output):
                    return index, f"stdin case {index}: wrong output"
            else:
                return len(cases), "all passed"
        for index, case in enumerate(cases):
            alone = run_python(
                {"main.py": code}, stdin=case.input, limits=self.limits, isolation=self.config.isolation
            )
            if not alone.succeeded or not stdout_matches(alone.stdout, case.output):
                return (
                    index,
                    f"stdin case {index} failed alone (rc={alone.returncode}, timeout={alone.timed_out})",
                )
        return len(cases), "all passed after per-case fallback"

    def _calls_pass(self, cases: list[CallCase], code: str) -> tuple[int, str]:
        spec = {"kind": "function_call", "fn_name": cases[0].fn_name, "inputs": [c.args for c in cases]}
        report = _harness_report(self._harness(code, spec))
        if (
            isinstance(report, list)
            and len(report) == len(cases)
            and all(isinstance(o, dict) and o.get("error") is None for o in report)
        ):
            for index, (case, outcome) in enumerate(zip(cases, report, strict=True)):
                if not call_result_matches(outcome.get("output"), case.expected):
                    return index, f"{case.fn_name} case {index}: wrong result"
            return len(cases), "all passed"
        for index, case in enumerate(cases):
            spec = {"kind": "function_call", "fn_name": case.fn_name, "inputs": [case.args]}
            alone = _harness_report(self._harness(code, spec))
            if not (
                isinstance(alone, list)
                and len(alone) == 1
                and isinstance(alone[0], dict)
                and alone[0].get("error") is None
                and call_result_matches(alone[0].get("output"), case.expected)
            ):
                return index, f"{case.fn_name} case {index} failed alone"
        return len(cases), "all passed after per-case fallback"


def _harness_report(result: SandboxResult) -> Any:
    """The literal after the last marker of a finished run, or None when the run or its report is broken."""
    if result.timed_out or result.output_limited or result.returncode != 0:
        return None
    _, found, tail = result.stdout.rpartition(_MARKER)
    if not found:
        return None
    try:
        return ast.literal_eval(tail)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
