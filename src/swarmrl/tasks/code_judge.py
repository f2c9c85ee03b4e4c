"""The trusted judge: runs a solution's tests against one sandbox session and decides the verdict itself.

The judge runs in a worker process of the code verifier's pool (its own deadline: a test that hangs costs
that worker, never the validator). It starts one sandbox session per solution and asks it only for plain
data — "run the program with this stdin", "call F with these arguments" — then compares on this side:
stdout token by token, function results against the expected values, and assert-style tests by running the
dataset's test code here with `candidate` a proxy whose calls go into the sandbox and come back as fresh
builtin values. Nothing the verdict depends on (expected outputs, test code, a nonce) enters the sandbox, and
nothing from it is trusted but decoded plain data. Stops at the first failing case: one failure decides.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

from swarmrl.tasks.code_tests import CodeTests, call_result_matches, stdout_matches
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


def judge(tests: CodeTests, code: str, plan: SandboxPlan, limits: SandboxLimits) -> CodeTestReport:
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
                if not stdout_matches(outcome.stdout, case.output):
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
            exec(compile(tests.setup, "<task setup>", "exec"), namespace)
        if tests.entry_point is not None:
            candidate = Candidate(session, tests.entry_point, broken)
            namespace[tests.entry_point] = candidate
            exec(compile(tests.check, "<task tests>", "exec"), namespace)
            check = namespace.get("check")
            if not callable(check):
                return "the task's test code defines no check(candidate)"
            check(candidate)
        else:
            for name in session.names():
                namespace.setdefault(name, Candidate(session, name, broken))
            exec(compile(tests.check, "<task tests>", "exec"), namespace)
    except SessionBroken as exc:
        return f"sandbox: {exc}"
    except BaseException as exc:  # noqa: BLE001 — an assert or anything else the tests raise is a failure
        return f"check failed: {type(exc).__name__}: {str(exc)[:300]}"
    if broken:  # the test code caught a broken call (a bare `except:`): the session failed all the same
        return f"sandbox: {broken[0]}"
    return None
