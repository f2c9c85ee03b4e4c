"""A task's test code, read and made ready to run on the trusted side.

`program_kind` says which harness the code is written for:
- "check": HumanEval's `def check(candidate)`, called with the entry point (`entry_point`);
- "unit": pytest-style `test*` functions / `Test*` classes or unittest `TestCase` classes, collected and run by
  pytest (which runs TestCases as unittest does), however `unittest.main()` is written;
- "script": code that runs its asserts as it goes (MBPP's `test_list`), run as `__main__` like `python file`.

`prepared` rewrites every `assert` into a counted check (`check_ledger`) and, for unit programs, drops the
module-level `unittest.main()` / `pytest.main()` calls that would exit or re-enter the runner while it imports
the file (an `if __name__ == "__main__":` block does not run there anyway). `unbound_names` lists the global
names the code uses that neither it nor the builtins define: the solution's names (MBPP's `assert f(1) == 2`)
and standard-library modules used as `module.attr` without an import (the original MBPP harness had those from
the solution's own imports).
"""

from __future__ import annotations

import ast
import builtins
import re
import symtable
import sys
import threading
from typing import Literal

CHECK_NAME = "__swarmrl_check__"
# What a HumanEval-layout entry point may be: `f`, LeetCode's `Solution().method`, or `Class.method`.
ENTRY_POINT = re.compile(r"([A-Za-z_]\w*)(\(\))?(?:\.([A-Za-z_]\w*))?")
ProgramKind = Literal["check", "unit", "script"]
_RUNNER_MODULES = ("unittest", "pytest")
_AST_BUILDER = threading.RLock()


def parse_python(source: str) -> ast.Module:
    """`ast.parse`, one thread at a time. CPython 3.11 counts the AST builder's recursion depth once per
    interpreter, so a thread switch inside it (a finalizer run by the garbage collector) lets another thread's
    parse move the count, and one of them fails with a spurious `SystemError: AST constructor recursion depth
    mismatch` (python/cpython#106905): rewards are computed on a thread pool."""
    with _AST_BUILDER:
        return ast.parse(source)


def program_kind(tree: ast.Module, has_entry_point: bool) -> ProgramKind:
    defines = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    if has_entry_point and "check" in defines:
        return "check"
    module_asserts = any(isinstance(node, ast.Assert) for node in tree.body)
    if not module_asserts and any(_is_test_definition(node) for node in tree.body):
        return "unit"
    return "script"


def _is_test_definition(node: ast.stmt) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name.startswith("test")
    if isinstance(node, ast.ClassDef):
        return node.name.startswith("Test") or any(_names_test_case(base) for base in node.bases)
    return False


def _names_test_case(base: ast.expr) -> bool:
    name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""
    return name.endswith("TestCase")


def prepared(source: str, kind: ProgramKind, filename: str) -> ast.Module:
    """The code as it runs: asserts counted; for unit programs the runner-exiting calls dropped."""
    tree = parse_python(source)
    if kind == "unit":
        main_names = _imported_mains(tree)
        tree.body = [node for node in tree.body if not _calls_a_main(node, main_names)]
    tree = _AssertRewriter().visit(tree)
    return ast.fix_missing_locations(tree)


def _imported_mains(tree: ast.Module) -> set[str]:
    """Local names of `from unittest import main` / `from pytest import main`."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in _RUNNER_MODULES
        for alias in node.names
        if alias.name == "main"
    }


def _calls_a_main(node: ast.stmt, main_names: set[str]) -> bool:
    if not isinstance(node, ast.Expr):
        return False
    for inner in ast.walk(node):
        if not isinstance(inner, ast.Call):
            continue
        function = inner.func
        if isinstance(function, ast.Attribute) and function.attr == "main":
            if isinstance(function.value, ast.Name) and function.value.id in _RUNNER_MODULES:
                return True
        if isinstance(function, ast.Name) and function.id in main_names:
            return True
    return False


class _AssertRewriter(ast.NodeTransformer):
    def visit_Assert(self, node: ast.Assert) -> ast.stmt:  # noqa: N802 — NodeTransformer's naming
        args: list[ast.expr] = [self.visit(node.test)]
        if node.msg is not None:
            no_args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
            args.append(ast.Lambda(args=no_args, body=self.visit(node.msg)))
        call = ast.Call(func=ast.Name(id=CHECK_NAME, ctx=ast.Load()), args=args, keywords=[])
        return ast.copy_location(ast.Expr(value=call), node)


def unbound_names(source: str) -> tuple[list[str], list[str]]:
    """(the solution's names, standard-library modules to import) that the code uses without binding."""
    used, attribute_bases, called = _global_uses(source)
    solution, modules = [], []
    for name in sorted(used - vars(builtins).keys() - {CHECK_NAME}):
        if name in sys.stdlib_module_names and name in attribute_bases and name not in called:
            modules.append(name)
        else:
            solution.append(name)
    return solution, modules


def _global_uses(source: str) -> tuple[set[str], set[str], set[str]]:
    """Global names the code reads and does not bind at module level; the names used as `name.attr`; the
    names called as `name(...)`."""
    with _AST_BUILDER:
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
