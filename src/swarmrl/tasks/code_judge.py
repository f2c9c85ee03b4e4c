"""The trusted judge: runs a solution's tests against one sandbox session and decides the verdict itself.

The judge runs in a worker process of the code verifier's pool (its own deadline: a test that hangs costs
that worker, never the validator). It starts one sandbox session per solution and asks it only for what a
harness would observe: "run the program with this stdin", "call f with these arguments", "call this method of
the object you made". It compares on this side: stdout token by token (`output_compare`), function results
against the expected values (`result_compare`), a task's own checker function, and test code
(`check_programs`: HumanEval checks, MBPP asserts, pytest and unittest tests) run here against stand-ins whose
every use is a request to the sandbox (`solution_proxy`), its checks counted where the solution cannot reach
(`check_ledger`). Nothing the verdict depends on (expected outputs, test code, counts) enters the sandbox, and
nothing from it is trusted but decoded plain data. Stops at the first failing case: one failure decides.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, replace
from typing import Any

from swarmrl.tasks.check_ledger import Ledger
from swarmrl.tasks.check_programs import run_test_program
from swarmrl.tasks.code_tests import CallCase, CodeTests, StdioCase
from swarmrl.tasks.output_compare import OutputRule, stdout_matches
from swarmrl.tasks.program_source import parse_python
from swarmrl.tasks.result_compare import result_mismatch
from swarmrl.tasks.sandbox import SandboxLimits, SandboxPlan, SandboxSession, SessionBroken
from swarmrl.tasks.solution_proxy import Remote


@dataclass(frozen=True)
class CodeTestReport:
    passed: int
    total: int
    detail: str = ""

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


def judge(
    tests: CodeTests, code: str, plan: SandboxPlan, limits: SandboxLimits, rule: OutputRule
) -> CodeTestReport:
    """Pass/fail of `code` on `tests`, decided here. Raises SandboxError only when the sandbox cannot start."""
    rule = _task_rule(tests, rule)
    checker = _checker(tests.settings.checker)
    source = code if tests.solution_prefix is None else f"{tests.solution_prefix}\n{code}"
    passed = 0
    with SandboxSession(plan, limits, source) as session:
        try:
            if tests.check is not None:
                failure = _program_failure(tests, session)
                if failure:
                    return CodeTestReport(passed, tests.total, failure)
                passed += 1
            for index, case in enumerate(tests.stdio):
                failure = _stdio_failure(session, case, rule, checker)
                if failure:
                    return CodeTestReport(passed, tests.total, f"stdin case {index}: {failure}")
                passed += 1
            for index, call in enumerate(tests.calls):
                failure = _call_failure(session, call, rule, checker)
                if failure:
                    return CodeTestReport(passed, tests.total, f"{call.fn_name} case {index}: {failure}")
                passed += 1
        except SessionBroken as exc:
            return CodeTestReport(passed, tests.total, f"sandbox: {exc}")
    return CodeTestReport(passed, tests.total, "all passed")


def _task_rule(tests: CodeTests, rule: OutputRule) -> OutputRule:
    settings = tests.settings
    tolerance = rule.float_tolerance if settings.float_tolerance is None else settings.float_tolerance
    return replace(rule, float_tolerance=tolerance, case_sensitive=settings.case_sensitive)


def _checker(source: str | None) -> Any:
    """The task's `check(input, output, expected)`, defined by its trusted code; None when it has none."""
    if source is None:
        return None
    namespace: dict[str, Any] = {"__name__": "__swarmrl_checker__", "__builtins__": builtins}
    exec(compile(parse_python(source), "<task checker>", "exec", dont_inherit=True, optimize=0), namespace)
    return namespace["check"]


def _program_failure(tests: CodeTests, session: SandboxSession) -> str | None:
    ledger = Ledger()
    return run_test_program(tests, Remote(session, ledger, []), ledger)


def _stdio_failure(session: SandboxSession, case: StdioCase, rule: OutputRule, checker: Any) -> str | None:
    outcome = session.run(case.input)
    if not outcome.succeeded:
        truncated = ", output over the limit" if outcome.stdout_truncated else ""
        return f"exit status {outcome.exit_status}{truncated}: {outcome.stderr[-300:]}"
    if checker is not None:
        return _checked(checker, case.input, outcome.stdout, case.output)
    return None if stdout_matches(outcome.stdout, case.output, rule) else "wrong output"


def _call_failure(session: SandboxSession, call: CallCase, rule: OutputRule, checker: Any) -> str | None:
    reply = session.invoke("call", call.fn_name, None, tuple(call.args))
    if reply.raised is not None:
        return f"raised {reply.raised.type_name}: {reply.raised.message[:300]}"
    if reply.ref is not None:
        return f"returned a {reply.ref.type_name} object, which is not plain data"
    result = reply.value
    if checker is not None:
        return _checked(checker, call.args, result, call.expected)
    return result_mismatch(result, call.expected, rule.float_tolerance, rule.case_sensitive)


def _checked(checker: Any, given: Any, output: Any, expected: Any) -> str | None:
    try:
        verdict = checker(given, output, expected)
    except Exception as exc:  # noqa: BLE001 — the checker refusing an output is a wrong answer
        return f"the task's checker raised {type(exc).__name__}: {str(exc)[:200]}"
    return None if verdict is True or (type(verdict) is not bool and bool(verdict)) else "the checker said no"
