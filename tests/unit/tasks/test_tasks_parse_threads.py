"""Rewards are computed on a thread pool, and the code reward parses each task's tests. CPython 3.11's AST builder
keeps one recursion count per interpreter: a thread switch inside it (here forced by finalizers the garbage
collector runs) let two parses move the same count, and the suite saw `SystemError: AST constructor recursion
depth mismatch` fail a HumanEval task's reward."""

import ast
import gc
import sys
from concurrent.futures import ThreadPoolExecutor

from swarmrl.tasks.code_tests import parse_python

TESTS = "def check(candidate):\n" + "".join(
    f"    assert candidate([{i}.0, 2.2, [3, (4, {{5: [6]}})]], 1.0) == True\n" for i in range(60)
)


class _Cycle:
    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        sum(range(50))  # Python code run by the collector: a chance to switch threads


def _parse_on_threads(parse) -> list[BaseException]:
    errors: list[BaseException] = []

    def work(_: int) -> None:
        for _ in range(30):
            for _ in range(20):
                _Cycle()
            try:
                parse(TESTS)
            except SystemError as exc:
                errors.append(exc)
                return

    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50)
    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(work, range(4)))
    finally:
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)
    return errors


def test_parsing_on_many_threads_never_fails_spuriously():
    assert _parse_on_threads(parse_python) == []
    assert isinstance(parse_python(TESTS), ast.Module)
