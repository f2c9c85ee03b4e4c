"""A task's test program run on the trusted side as its own harness would run it, against the sandboxed solution.

- "check" (HumanEval): the test code is executed, then `check(candidate)` is called with the entry point's
  stand-in (`f`, or LeetCode's `Solution().method`).
- "script" (MBPP): the test code runs as `__main__`, with the names it uses but does not define bound to the
  solution's stand-ins.
- "unit" (pytest / unittest): pytest collects and runs it (`unit_programs`).

Test code and setup run in a namespace of their own holding the real builtins and the stand-ins, never the
solution's objects, so a solution that defines `set`, `sorted` or `abs` cannot change what the test's names
mean; the module `solution` (or the task's `solution_module`) is importable while it runs. Asserts are counted
(`check_ledger`); the verdict is the program's own (it ran to the end, pytest reported no failure) and the
ledger's (no failed check, at least one check that reached the solution).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import sys
import types
from typing import Any

from swarmrl.tasks.check_ledger import Ledger, counting
from swarmrl.tasks.code_tests import CodeTests
from swarmrl.tasks.program_source import CHECK_NAME, ENTRY_POINT, parse_python, prepared, unbound_names
from swarmrl.tasks.sandbox import SessionBroken
from swarmrl.tasks.solution_proxy import Remote

JUDGE_MODULE = "__swarmrl_judge__"


def run_test_program(tests: CodeTests, remote: Remote, ledger: Ledger) -> str | None:
    """Why the program does not pass (a failure or a refusal); None when it does."""
    check = tests.check
    assert check is not None
    runner = {"unit": _run_unit, "check": _run_check, "script": _run_script}[tests.program_kind]
    saved = sys.modules.get(tests.solution_module)
    sys.modules[tests.solution_module] = remote.module(tests.solution_module)
    try:
        with counting(ledger):
            failure = runner(tests, check, remote, ledger)
    except SessionBroken as exc:
        return f"sandbox: {exc}"
    except BaseException as exc:  # noqa: BLE001 — an assert or anything else the tests raise is a failure
        return f"check failed: {type(exc).__name__}: {str(exc)[:300]}"
    finally:
        if saved is None:
            sys.modules.pop(tests.solution_module, None)
        else:
            sys.modules[tests.solution_module] = saved
    if failure:
        return failure
    if (
        remote.broken
    ):  # the test code caught a broken call (a bare `except:`): the session failed all the same
        return f"sandbox: {remote.broken[0]}"
    return ledger.refusal()


def entry_point_stand_in(remote: Remote, entry_point: str) -> Any:
    """`f`, `Solution().method` or `Class.method`, as the trusted side can call it."""
    match = ENTRY_POINT.fullmatch(entry_point)
    if match is None:
        raise ValueError(f"entry point {entry_point!r} is not `name`, `Class().method` or `Class.method`")
    name, instantiate, attribute = match.groups()
    target = remote.global_stand_in(name) if name in remote.names() else remote.function(name)
    if instantiate:
        target = target()
    return getattr(target, attribute) if attribute else target


def _namespace(tests: CodeTests, remote: Remote, ledger: Ledger, name: str) -> dict[str, Any]:
    """The test code's namespace, after the task's setup ran in it. The classes the setup defines (LeetCode's
    `ListNode`, `TreeNode`) travel by value to and from the solution, which has its own of those names."""
    namespace: dict[str, Any] = {"__name__": name, "__builtins__": builtins, CHECK_NAME: ledger.check}
    if tests.setup is not None:
        exec(_compiled(parse_python(tests.setup), "<task setup>"), namespace)
        remote.use_records(
            {
                key: value
                for key, value in namespace.items()
                if isinstance(value, type) and value.__module__ == name and not key.startswith("_")
            }
        )
    return namespace


def _run_check(tests: CodeTests, check: str, remote: Remote, ledger: Ledger) -> str | None:
    namespace = _namespace(tests, remote, ledger, "__swarmrl_tests__")
    assert tests.entry_point is not None
    candidate = entry_point_stand_in(remote, tests.entry_point)
    if tests.entry_point.isidentifier():
        namespace[tests.entry_point] = candidate
    exec(_compiled(prepared(check, "check", "<task tests>"), "<task tests>"), namespace)
    namespace["check"](candidate)
    return None


def _run_script(tests: CodeTests, check: str, remote: Remote, ledger: Ledger) -> str | None:
    namespace = _namespace(tests, remote, ledger, "__main__")
    solution_names, modules = unbound_names(check)
    for module in modules:
        if module not in namespace:
            namespace[module] = importlib.import_module(module)
    for name in solution_names:
        if name not in namespace:
            namespace[name] = _stand_in(remote, name)
    exec(_compiled(prepared(check, "script", "<task tests>"), "<task tests>"), namespace)
    return None


def _run_unit(tests: CodeTests, check: str, remote: Remote, ledger: Ledger) -> str | None:
    from swarmrl.tasks.unit_programs import run_unit_program

    source = check if tests.setup is None else f"{tests.setup}\n{check}"
    solution_names, modules = unbound_names(source)
    judge = types.ModuleType(JUDGE_MODULE)
    setattr(judge, CHECK_NAME, ledger.check)
    for name in solution_names:
        setattr(judge, name, _stand_in(remote, name))
    tree = prepared(check, "unit", "<task tests>")
    prelude = [f"import {module}" for module in modules]
    prelude.append(f"from {JUDGE_MODULE} import {', '.join([CHECK_NAME, *solution_names])}")
    setup = parse_python(tests.setup).body if tests.setup is not None else []
    body = [*parse_python("\n".join(prelude)).body, *setup]
    at = _after_future_imports(tree)
    tree.body[at:at] = body
    outcome = run_unit_program(ast.unparse(ast.fix_missing_locations(tree)), {JUDGE_MODULE: judge})
    if outcome.failure:
        return outcome.failure
    if outcome.exit_code != 0:
        return f"pytest ended with exit code {outcome.exit_code} ({outcome.collected} tests collected)"
    if outcome.passed == 0:
        return f"the task's tests ran no test ({outcome.collected} collected, {outcome.skipped} skipped)"
    return None


def _stand_in(remote: Remote, name: str) -> Any:
    return remote.global_stand_in(name) if name in remote.names() else remote.function(name)


def _after_future_imports(tree: ast.Module) -> int:
    index = 0
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        index = 1  # the module docstring
    while (
        index < len(body) and isinstance(node := body[index], ast.ImportFrom) and node.module == "__future__"
    ):
        index += 1
    return index


def _compiled(tree: ast.Module, filename: str) -> types.CodeType:
    # optimize=0 keeps the setup's asserts under `python -O`; dont_inherit keeps this module's __future__ flags.
    return compile(tree, filename, "exec", dont_inherit=True, optimize=0)
