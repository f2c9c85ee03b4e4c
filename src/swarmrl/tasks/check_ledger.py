"""What a task's test code checked, counted on the trusted side while it runs.

The test code runs here and the solution in the sandbox, so nothing the solution does reaches these counts.
Every `assert` of the test code is rewritten into `Ledger.check` (`program_source`), and unittest's `assert*`
methods, `pytest.raises` and numpy.testing's `assert_*` functions are wrapped for the run (`counting`), so:

- a failed check is counted even when the test code catches its AssertionError (a script's `try: assert ...
  except AssertionError: print(...)` still fails);
- a passed check "reaches the solution" when a call into the sandbox returned since the previous check (the
  assert read something the solution gave: `r = f(3); assert r == 9` or `assert f(3) == 9`), or, for an
  expected-exception check, when a call into the sandbox raised inside it.

A test program passes only with no failed check and at least one passed check that reaches the solution:
tests that run nothing, or assert nothing about the solution, are refused rather than passed.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import unittest
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any
from unittest import mock

# unittest's methods that return a context manager when given no callable.
_CONTEXT_CHECKS = frozenset(
    {"assertRaises", "assertRaisesRegex", "assertWarns", "assertWarnsRegex", "assertLogs", "assertNoLogs"}
)


@dataclass
class Ledger:
    returned_calls: int = 0  # requests to the sandbox that returned
    raised_calls: int = 0  # requests whose solution code raised
    passed: int = 0
    reaching: int = 0  # passed checks that read something the solution gave
    failed: int = 0
    first_failure: str = ""
    mark: int = 0  # returned_calls at the previous check
    depth: int = 0  # > 0 inside a counted check (its nested checks are not counted again)

    def check(self, value: Any, message: Callable[[], Any] | None = None) -> None:
        """An `assert value, message()`: counted, then AssertionError when `value` is false."""
        if value:
            self.note_pass(reached=self.returned_calls > self.mark)
            return
        text = "" if message is None else str(message())
        self.note_failure(f"assertion failed{': ' + text if text else ''}")
        raise AssertionError(text) if message is not None else AssertionError

    def note_pass(self, reached: bool) -> None:
        self.passed += 1
        self.reaching += reached
        self.mark = self.returned_calls

    def note_failure(self, text: str) -> None:
        self.failed += 1
        self.mark = self.returned_calls
        if not self.first_failure:
            self.first_failure = text[:300]

    def refusal(self) -> str | None:
        """Why the checks do not make a pass (None when they do)."""
        if self.failed:
            return f"a check failed: {self.first_failure or 'AssertionError'}"
        if not self.passed:
            return "the task's tests ran no check (no assert, no assert method, no pytest.raises)"
        if not self.reaching:
            return "no check of the task's tests read anything the solution returned or raised"
        return None


class CountedContext:
    """An expected-exception context (`pytest.raises`, `self.assertRaises`) whose outcome is counted."""

    def __init__(self, inner: Any, ledger: Ledger) -> None:
        self._inner = inner
        self._ledger = ledger
        self._raised = ledger.raised_calls

    def __enter__(self) -> Any:
        self._raised = self._ledger.raised_calls
        return self._inner.__enter__()

    def __exit__(self, *exc_info: Any) -> Any:
        try:
            suppressed = self._inner.__exit__(*exc_info)
        except AssertionError as exc:
            self._ledger.note_failure(f"{type(exc).__name__}: {exc}")
            raise
        if exc_info[0] is None or suppressed:
            self._ledger.note_pass(reached=self._ledger.raised_calls > self._raised)
        return suppressed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def counted(original: Callable, ledger: Ledger, context_form: bool = False) -> Callable:
    """`original` (a check that raises AssertionError on failure), counting its outcome in `ledger`."""

    @functools.wraps(original)
    def check(*args: Any, **kwargs: Any) -> Any:
        if ledger.depth:
            return original(*args, **kwargs)
        raised_before = ledger.raised_calls
        ledger.depth += 1
        try:
            result = original(*args, **kwargs)
        except AssertionError as exc:
            ledger.note_failure(f"{getattr(original, '__name__', 'check')}: {str(exc)[:280]}")
            raise
        finally:
            ledger.depth -= 1
        if context_form and hasattr(result, "__exit__"):
            return CountedContext(result, ledger)
        if context_form:
            ledger.note_pass(reached=ledger.raised_calls > raised_before)
        else:
            ledger.note_pass(reached=ledger.returned_calls > ledger.mark)
        return result

    return check


@contextlib.contextmanager
def counting(ledger: Ledger) -> Iterator[None]:
    """For the run: unittest's assert methods, pytest.raises and numpy.testing's assert functions counted.
    Patches process-wide; a judge worker runs one judge at a time."""
    with contextlib.ExitStack() as stack:
        for name, member in vars(unittest.TestCase).items():
            if name.startswith(("assert", "fail")) and inspect.isfunction(member):
                form = name in _CONTEXT_CHECKS
                stack.enter_context(mock.patch.object(unittest.TestCase, name, counted(member, ledger, form)))
        if find_spec("pytest") is not None:
            import pytest

            stack.enter_context(mock.patch.object(pytest, "raises", counted(pytest.raises, ledger, True)))
        if find_spec("numpy") is not None:
            import numpy.testing

            for name in dir(numpy.testing):
                member = getattr(numpy.testing, name)
                if name.startswith("assert_") and callable(member) and not isinstance(member, type):
                    stack.enter_context(mock.patch.object(numpy.testing, name, counted(member, ledger)))
        yield
