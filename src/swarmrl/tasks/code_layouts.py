"""Rows of the public code datasets, read as each dataset publishes them (no `verification_info` column).

A row is recognised by the columns that only its dataset has, and becomes the INTELLECT-2 layout
(`prompt`, `verification_info`, `task_type` "code", `task_id`, `demonstration`):

| dataset | recognised by | prompt | tests |
|---|---|---|---|
| MBPP (full / sanitized) | `test_list` | `text` / `prompt`, then the tests, as MBPP's paper prompts | `test_list`, `test_setup_code`, `test_imports`, `challenge_test_list` (not run) |
| HumanEval | `canonical_solution`, `entry_point` | `prompt` | `test`, `entry_point` |
| APPS, TACO | `question`, `input_output` | `question` (and `starter_code`) | `input_output` |
| CodeContests | `description`, `public_tests` | `description` | public, private and generated tests |
| LiveCodeBench | `question_content`, `public_test_cases` | `question_content` (and `starter_code`) | public and private test cases (`testtype` stdin or functional) |
| LeetCodeDataset | `query`, `entry_point`, `test` | `query` | `test`, `entry_point`; its `prompt` (imports, ListNode) before the solution and the tests |
| KodCode | `question`, `test`, `test_info` or `solution` | `question` (and the functions `test_info` names) | `test` (pytest) |

What a row lacks or holds that cannot be run is a one-line TaskError naming the row and the column.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib
from collections.abc import Callable
from typing import Any

from swarmrl.tasks.code_cases import json_value
from swarmrl.tasks.errors import TaskError

# LiveCodeBench runs every solution after these imports (the names LeetCode's own judge provides).
LEETCODE_IMPORTS = (
    "from typing import *\nfrom collections import *\nfrom itertools import *\nfrom functools import *\n"
    "from heapq import *\nfrom bisect import *\nfrom math import inf, gcd, sqrt, ceil, floor, comb, isqrt\n"
    "import collections, itertools, functools, heapq, bisect, math, string, re, sys\n"
    "sys.setrecursionlimit(50000)\n"
)
_MAX_PRIVATE_TESTS_BYTES = 1 << 30
_PYTHON3 = 3  # CodeContests' language code of Python 3


def published_row(row: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The row in the INTELLECT-2 layout, when it is a published code dataset's; None when it is none."""
    for recognised, reader in _READERS:
        if recognised <= set(row):
            return reader(row, where)
    return None


def _mbpp(row: dict[str, Any], where: str) -> dict[str, Any]:
    text = row.get("text", row.get("prompt"))
    tests = row["test_list"]
    if not isinstance(text, str) or not text:
        raise TaskError(f"{where}: an MBPP row needs its task text in 'text' (or 'prompt')")
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise TaskError(f"{where}: column 'test_list' must be a non-empty list of asserts")
    info = {"test_list": tests}
    for name in ("test_setup_code", "test_imports", "challenge_test_list"):
        if row.get(name) not in (None, "", []):
            info[name] = row[name]
    prompt = f"{text}\nYour code should pass these tests:\n\n" + "\n".join(tests)
    return _task(row, prompt, info, row.get("code"), "task_id")


def _human_eval(row: dict[str, Any], where: str) -> dict[str, Any]:
    prompt = _text(row, "prompt", where)
    info = {"test": _text(row, "test", where), "entry_point": _text(row, "entry_point", where)}
    canonical = row.get("canonical_solution")
    demonstration = prompt + canonical if isinstance(canonical, str) else None
    return _task(row, prompt, info, demonstration, "task_id")


def _apps(row: dict[str, Any], where: str) -> dict[str, Any]:
    question = _text(row, "question", where)
    tests = row["input_output"]
    if tests in (None, "", {}):
        raise TaskError(f"{where}: column 'input_output' is empty: the row has no tests to run")
    solutions = _json(row.get("solutions"), "solutions", where) if row.get("solutions") else []
    demonstration = solutions[0] if isinstance(solutions, list) and solutions else None
    return _task(
        row, _with_starter(question, row), {"input_output": tests}, demonstration, "problem_id", "name"
    )


def _code_contests(row: dict[str, Any], where: str) -> dict[str, Any]:
    description = _text(row, "description", where)
    for name in ("input_file", "output_file"):
        if row.get(name):
            raise TaskError(
                f"{where}: the problem reads and writes files ({name} {row[name]!r}), not stdin/stdout"
            )
    info = {name: row[name] for name in ("public_tests", "private_tests", "generated_tests") if row.get(name)}
    solutions = row.get("solutions") or {}
    python = [
        code
        for language, code in zip(solutions.get("language", []), solutions.get("solution", []), strict=False)
        if language == _PYTHON3
    ]
    return _task(row, description, info, python[0] if python else None, "name")


def _live_code_bench(row: dict[str, Any], where: str) -> dict[str, Any]:
    question = _text(row, "question_content", where)
    metadata = _json(row.get("metadata") or "{}", "metadata", where)
    cases = [
        *_json(row["public_test_cases"], "public_test_cases", where),
        *_private_test_cases(row.get("private_test_cases"), where),
    ]
    kinds = {case.get("testtype") if isinstance(case, dict) else None for case in cases}
    if not kinds <= {"stdin", "functional"}:
        unknown = sorted(str(kind) for kind in kinds - {"stdin", "functional"})
        raise TaskError(f"{where}: unknown testtype {unknown[0]} (LiveCodeBench has stdin and functional)")
    if len(kinds) != 1:
        raise TaskError(f"{where}: the test cases mix stdin and functional tests")
    info: dict[str, Any] = {"solution_prefix": LEETCODE_IMPORTS}
    if kinds == {"functional"}:
        function = metadata.get("func_name") if isinstance(metadata, dict) else None
        if not isinstance(function, str) or not function.isidentifier():
            raise TaskError(f"{where}: functional tests need the function's name in metadata's func_name")
        cases = [{**case, "fn_name": function} for case in cases]
    info["test_cases"] = cases
    return _task(row, _with_starter(question, row), info, None, "question_id")


def _leetcode(row: dict[str, Any], where: str) -> dict[str, Any]:
    query = _text(row, "query", where)
    info: dict[str, Any] = {
        "test": _text(row, "test", where),
        "entry_point": _text(row, "entry_point", where),
    }
    prefix = row.get("prompt")
    if isinstance(prefix, str) and prefix.strip():
        info["solution_prefix"] = prefix  # imports and ListNode / TreeNode, for the solution ...
        info["test_setup"] = prefix  # ... and the same helpers (list_node, is_same_tree) for the tests
    return _task(row, query, info, row.get("response"), "task_id")


def _kodcode(row: dict[str, Any], where: str) -> dict[str, Any]:
    question = _text(row, "question", where)
    declarations = [
        entry["function_declaration"].strip()
        for entry in row.get("test_info") or []
        if isinstance(entry, dict) and isinstance(entry.get("function_declaration"), str)
    ]
    prompt = question
    if declarations:
        prompt += "\n\nThe tests import these from the module `solution`:\n" + "\n".join(declarations)
    return _task(row, prompt, {"test": _text(row, "test", where)}, row.get("solution"), "question_id")


_READERS: list[tuple[frozenset[str], Callable[[dict[str, Any], str], dict[str, Any]]]] = [
    (frozenset({"test_list"}), _mbpp),
    (frozenset({"canonical_solution", "entry_point", "test"}), _human_eval),
    (frozenset({"question", "input_output"}), _apps),
    (frozenset({"description", "public_tests"}), _code_contests),
    (frozenset({"question_content", "public_test_cases"}), _live_code_bench),
    (frozenset({"query", "entry_point", "test"}), _leetcode),
    (frozenset({"question", "test", "test_info"}), _kodcode),
    (frozenset({"question", "test", "solution"}), _kodcode),
]


def _task(
    row: dict[str, Any], prompt: str, info: dict[str, Any], demonstration: Any, *ids: str
) -> dict[str, Any]:
    task_id = next((row[name] for name in ids if row.get(name) not in (None, "")), None)
    task = {"prompt": prompt, "verification_info": info, "task_type": "code"}
    if task_id is not None:
        task["task_id"] = str(task_id)
    if isinstance(demonstration, str) and demonstration.strip():
        task["demonstration"] = demonstration
    for name in ("solve_rate", "solve_rate_qwen_r1_distill_7b"):
        if name in row:
            task[name] = row[name]
    return task


def _text(row: dict[str, Any], name: str, where: str) -> str:
    value = row.get(name)
    if not isinstance(value, str) or not value.strip():
        raise TaskError(f"{where}: column {name!r} must be a non-empty string")
    return value


def _with_starter(question: str, row: dict[str, Any]) -> str:
    starter = row.get("starter_code")
    return f"{question}\n\n{starter}" if isinstance(starter, str) and starter.strip() else question


def _json(value: Any, name: str, where: str) -> Any:
    return json_value(value, f"{where}: column {name!r}")


def _private_test_cases(value: Any, where: str) -> list:
    """LiveCodeBench's private cases: JSON, or (code_generation_lite) base64 of zlib of a pickled JSON string,
    unpickled with every global refused, so the pickle can only hold plain values."""
    if value in (None, "", []):
        return []
    if isinstance(value, list):
        return value
    if not isinstance(value, str):
        raise TaskError(
            f"{where}: column 'private_test_cases' must be JSON or LiveCodeBench's compressed text"
        )
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(base64.b64decode(value, validate=True), _MAX_PRIVATE_TESTS_BYTES)
        if inflater.unconsumed_tail:
            raise TaskError(
                f"{where}: column 'private_test_cases' inflates past {_MAX_PRIVATE_TESTS_BYTES} bytes"
            )
        text = _NoGlobals(io.BytesIO(raw)).load()
        if not isinstance(text, str):
            raise TaskError(f"{where}: column 'private_test_cases' does not hold JSON text")
        cases = json.loads(text)
    except (binascii.Error, zlib.error, pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise TaskError(
            f"{where}: column 'private_test_cases' is neither JSON nor compressed JSON: {exc}"
        ) from exc
    if not isinstance(cases, list):
        raise TaskError(f"{where}: column 'private_test_cases' must hold a list")
    return cases


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"the pickle names {module}.{name}; only plain values are read")
