"""The trusted judge: runs a solution's tests against one sandbox session and decides the verdict itself.

The judge runs in a worker process of the code verifier's pool (its own deadline: a test that hangs costs
that worker, never the validator). It starts one sandbox session per solution and asks it only for plain
data — "run the program with this stdin", "call F with these arguments" — then compares on this side:
stdout token by token (`output_compare`), function results against the expected values, and assert-style
tests by running the dataset's test code here with `candidate` a proxy whose calls go into the sandbox and
come back as fresh builtin values. Nothing the verdict depends on (expected outputs, test code, a nonce)
enters the sandbox, and nothing from it is trusted but decoded plain data. Stops at the first failing case:
one failure decides.

The test code runs in a namespace of its own holding the real builtins, what the task's setup defines, and
one proxy for each name the tests call but nothing trusted defines (MBPP's `assert f(x) == y` names `f`).
The solution's other names never reach it, so a solution defining `set`, `sorted` or `abs` cannot change
what the test's `set`, `sorted` or `abs` mean. Test code is compiled with asserts on whatever `-O` the
judge runs under.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import symtable
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any

from swarmrl.tasks.code_tests import CodeTests, call_result_matches, parse_python
from swarmrl.tasks.output_compare import OutputRule, stdout_matches
from swarmrl.tasks.sandbox import SandboxLimits, SandboxPlan, SandboxSession, SessionBroken

# Exceptions a candidate's raise is re-raised as on this side; the iteration protocol's are left out, or a
# candidate raising StopIteration would quietly end `all(map(candidate, xs))` as a pass.
_PASS_THROUGH = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type)
    and issubclass(value, Exception)
    and not issubclass(value, StopIteration | StopAsyncIteration)
)


@dataclass(frozen=True)
class CodeTestReport:
    passed: int
    total: int
    detail: str = ""

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


class CandidateError(Exception):
    """The solution raised an exception that is not a builtin one (or one not passed through)."""


class Candidate:
    """Stands for a function of the solution on the trusted side: each call is a request to the sandbox."""

    def __init__(self, session: SandboxSession, name: str, broken: list[str]) -> None:
        self.__name__ = name
        self._session = session
        self._broken = broken

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            reply = self._session.call(self.__name__, args, kwargs)
        except SessionBroken as exc:
            self._broken.append(str(exc))
            raise
        if reply[0] == "returned":
            return reply[1]
        raise _exception(reply[1], reply[2])

    def __repr__(self) -> str:
        return f"<sandboxed {self.__name__}>"


def _exception(name: str, message: str) -> Exception:
    if name in _PASS_THROUGH:
        try:
            return getattr(builtins, name)(message)
        except TypeError:  # e.g. UnicodeDecodeError wants five arguments
            pass
    return CandidateError(f"{name}: {message}")


def judge(
    tests: CodeTests, code: str, plan: SandboxPlan, limits: SandboxLimits, rule: OutputRule
) -> CodeTestReport:
    """Pass/fail of `code` on `tests`, decided here. Raises SandboxError only when the sandbox cannot start."""
    passed = 0
    with SandboxSession(plan, limits, code) as session:
        try:
            if tests.check is not None:
                failure = _check_failure(tests, session)
                if failure:
                    return CodeTestReport(passed, tests.total, failure)
                passed += 1
            for index, case in enumerate(tests.stdio):
                outcome = session.run(case.input)
                if not outcome.succeeded:
                    return CodeTestReport(
                        passed,
                        tests.total,
                        f"stdin case {index}: exit status {outcome.exit_status}"
                        + (", output over the limit" if outcome.stdout_truncated else "")
                        + f": {outcome.stderr[-300:]}",
                    )
                if not stdout_matches(outcome.stdout, case.output, rule):
                    return CodeTestReport(passed, tests.total, f"stdin case {index}: wrong output")
                passed += 1
            for index, case in enumerate(tests.calls):
                reply = session.call(case.fn_name, tuple(case.args), {})
                if reply[0] != "returned":
                    return CodeTestReport(
                        passed,
                        tests.total,
                        f"{case.fn_name} case {index} raised {reply[1]}: {reply[2][:300]}",
                    )
                if not call_result_matches(reply[1], case.expected):
                    return CodeTestReport(passed, tests.total, f"{case.fn_name} case {index}: wrong result")
                passed += 1
        except SessionBroken as exc:
            return CodeTestReport(passed, tests.total, f"sandbox: {exc}")
    return CodeTestReport(passed, tests.total, "all passed")


def _check_failure(tests: CodeTests, session: SandboxSession) -> str | None:
    """Run the dataset's assert-style test code here; None when it passes."""
    broken: list[str] = []
    namespace: dict[str, Any] = {"__name__": "__swarmrl_check__", "__builtins__": builtins}
    try:
        if tests.setup is not None:
            exec(_compiled(tests.setup, "<task setup>"), namespace)
        test_code = _compiled(tests.check, "<task tests>")
        if tests.entry_point is not None and _defines_check(tests.check):
            candidate = Candidate(session, tests.entry_point, broken)
            namespace[tests.entry_point] = candidate
            exec(test_code, namespace)
            namespace["check"](candidate)
        else:
            entry_points = _bind_test_names(tests.check, namespace, session, broken)
            if not entry_points:
                return "the task's tests call no function of the solution"
            exec(test_code, namespace)
    except SessionBroken as exc:
        return f"sandbox: {exc}"
    except BaseException as exc:  # noqa: BLE001 — an assert or anything else the tests raise is a failure
        return f"check failed: {type(exc).__name__}: {str(exc)[:300]}"
    if broken:  # the test code caught a broken call (a bare `except:`): the session failed all the same
        return f"sandbox: {broken[0]}"
    return None


def _compiled(source: str, filename: str) -> CodeType:
    # optimize=0 keeps asserts under `python -O`; dont_inherit keeps this module's __future__ flags out.
    return compile(source, filename, "exec", dont_inherit=True, optimize=0)


def _defines_check(source: str) -> bool:
    return any(
        isinstance(node, ast.FunctionDef) and node.name == "check" for node in parse_python(source).body
    )


def _bind_test_names(
    source: str, namespace: dict[str, Any], session: SandboxSession, broken: list[str]
) -> list[str]:
    """Give each global name the tests use but neither they, the setup nor the builtins define a meaning:
    a standard-library module used only as `module.attr` is imported (the original MBPP harness had it from
    the solution's own `import math`), any other name is a function of the solution. Returns the latter."""
    used, attribute_bases, called = _global_uses(source)
    entry_points = []
    for name in sorted(used - namespace.keys() - vars(builtins).keys()):
        if name in sys.stdlib_module_names and name in attribute_bases and name not in called:
            namespace[name] = importlib.import_module(name)
        else:
            namespace[name] = Candidate(session, name, broken)
            entry_points.append(name)
    return entry_points


def _global_uses(source: str) -> tuple[set[str], set[str], set[str]]:
    """Global names the code reads and does not bind at module level; the names used as `name.attr`; the
    names called as `name(...)`."""
    module = symtable.symtable(source, "<task tests>", "exec")
    bound = {
        symbol.get_name() for symbol in module.get_symbols() if symbol.is_assigned() or symbol.is_imported()
    }
    used: set[str] = set()
    tables = [module]
    while tables:
        table = tables.pop()
        for symbol in table.get_symbols():
            if symbol.is_referenced() and (table is module or symbol.is_global()):
                used.add(symbol.get_name())
        tables.extend(table.get_children())
    tree = parse_python(source)
    attribute_bases = {
        node.value.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
    }
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    return used - bound, attribute_bases, called
