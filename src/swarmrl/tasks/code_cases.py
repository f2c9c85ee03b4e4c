"""A code task's input/output cases, read from `verification_info` in each layout the datasets publish them.

- `test_cases`: [{"type": "stdin_stdout", "input": str, "output": str} | {"type": "function_call", "fn_name":
  str, "input": [args] | JSON text of the list, "output": value}] (INTELLECT-2 / SYNTHETIC-1), and
  LiveCodeBench's {"testtype": "stdin" | "functional", "input", "output"} (functional: one JSON value per line
  of `input`, the arguments; `output` JSON text; the function named by `fn_name`).
- `input_output` (APPS, TACO): {"inputs": [...], "outputs": [...], "fn_name"?: str} (JSON or JSON text). With
  `fn_name` each input is the argument list and each output the one-element list APPS wraps the answer in;
  without it inputs and outputs are stdin and stdout texts (or lists of their lines).
- `public_tests`, `private_tests`, `generated_tests` (CodeContests): {"input": [str], "output": [str]}, all run.

An expected function result is the value as JSON gives it: a string stays a string (never decoded as JSON), a
list is a list (never its single element). Anything else (an unknown type or field, a wrapped output that is
not a one-element list) is a TaskError naming the task and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from swarmrl.tasks.errors import TaskError

CASE_FIELDS = {
    "stdin_stdout": {"type", "testtype", "input", "output"},
    "function_call": {"type", "testtype", "fn_name", "input", "output"},
}
_TESTTYPES = {"stdin": "stdin_stdout", "functional": "function_call"}
CONTEST_FIELDS = ("public_tests", "private_tests", "generated_tests")


@dataclass(frozen=True)
class StdioCase:
    input: str
    output: str


@dataclass(frozen=True)
class CallCase:
    fn_name: str
    args: list[Any]
    expected: Any


def read_cases(info: dict[str, Any], task_id: str) -> tuple[list[StdioCase], list[CallCase]]:
    stdio: list[StdioCase] = []
    calls: list[CallCase] = []
    for index, case in enumerate(_json_list(info.get("test_cases", []), f"task {task_id}: test_cases")):
        where = f"task {task_id}: test_cases[{index}]"
        kind = _case_kind(case, where)
        if kind == "stdin_stdout":
            stdio.append(_stdio_case(case, where))
        else:
            calls.append(_call_case(case, where))
    if "input_output" in info:
        more_stdio, more_calls = _input_output(info["input_output"], f"task {task_id}: input_output")
        stdio += more_stdio
        calls += more_calls
    for name in CONTEST_FIELDS:
        if name in info:
            stdio += _contest_tests(info[name], f"task {task_id}: {name}")
    return stdio, calls


def json_value(value: Any, where: str) -> Any:
    """`value`, or the JSON value a string holds (datasets store nested fields both ways)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise TaskError(f"{where} is not valid JSON: {exc}") from exc


def _json_list(value: Any, where: str) -> list:
    value = json_value(value, where)
    if not isinstance(value, list):
        raise TaskError(f"{where} must be a list")
    return value


def _case_kind(case: Any, where: str) -> str:
    if not isinstance(case, dict) or "input" not in case or "output" not in case:
        raise TaskError(f"{where} must be an object with input and output")
    if "type" in case and "testtype" in case:
        raise TaskError(f"{where}: give type or testtype, not both")
    if "testtype" in case:
        kind = _TESTTYPES.get(case["testtype"])
        if kind is None:
            raise TaskError(f"{where}: unknown testtype {case['testtype']!r} (known: stdin, functional)")
    else:
        kind = case.get("type") or ("function_call" if case.get("fn_name") else "stdin_stdout")
    if kind not in CASE_FIELDS:
        raise TaskError(f"{where}: unknown test type {kind!r} (known: stdin_stdout, function_call)")
    unknown = sorted(set(case) - CASE_FIELDS[kind])
    if unknown:
        raise TaskError(f"{where}: unknown field {unknown[0]!r} for a {kind} case")
    return kind


def _stdio_case(case: dict[str, Any], where: str) -> StdioCase:
    if not isinstance(case["input"], str) or not isinstance(case["output"], str):
        raise TaskError(f"{where}: stdin_stdout input and output must be strings")
    return StdioCase(case["input"], case["output"])


def _call_case(case: dict[str, Any], where: str) -> CallCase:
    fn_name = case.get("fn_name")
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise TaskError(f"{where}: a function_call case needs an identifier fn_name")
    args, expected = case["input"], case["output"]
    try:
        if "testtype" in case:  # LiveCodeBench: one JSON value a line, and JSON text for the result
            if not isinstance(args, str) or not isinstance(expected, str):
                raise TaskError(f"{where}: a functional case's input and output must be JSON text")
            args = [json.loads(line) for line in args.split("\n") if line.strip()]
            expected = json.loads(expected)
        elif isinstance(args, str):
            args = json.loads(args)
    except json.JSONDecodeError as exc:
        raise TaskError(f"{where}: the function_call input is not valid JSON: {exc}") from exc
    if not isinstance(args, list):
        raise TaskError(f"{where}: a function_call input must be a list of arguments")
    return CallCase(fn_name, args, expected)


def _input_output(value: Any, where: str) -> tuple[list[StdioCase], list[CallCase]]:
    value = json_value(value, where)
    if not isinstance(value, dict) or not {"inputs", "outputs"} <= set(value):
        raise TaskError(f"{where} must be an object with inputs and outputs")
    unknown = sorted(set(value) - {"inputs", "outputs", "fn_name"})
    if unknown:
        raise TaskError(f"{where}: unknown field {unknown[0]!r}")
    inputs, outputs = value["inputs"], value["outputs"]
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise TaskError(f"{where}: inputs and outputs must be lists of the same length")
    fn_name = value.get("fn_name")
    if fn_name is None:
        pairs = enumerate(zip(inputs, outputs, strict=True))
        return [_apps_stdio(given, wanted, f"{where} case {n}") for n, (given, wanted) in pairs], []
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise TaskError(f"{where}: fn_name must be a python identifier")
    calls = []
    for number, (args, wrapped) in enumerate(zip(inputs, outputs, strict=True)):
        if not isinstance(args, list):
            raise TaskError(f"{where}: inputs[{number}] must be the list of arguments")
        if not isinstance(wrapped, list) or len(wrapped) != 1:
            raise TaskError(
                f"{where}: outputs[{number}] must be the one-element list APPS wraps a result in, "
                f"got {str(wrapped)[:60]}"
            )
        calls.append(CallCase(fn_name, args, wrapped[0]))
    return [], calls


def _apps_stdio(given: Any, wanted: Any, where: str) -> StdioCase:
    texts = []
    for value in (given, wanted):
        if isinstance(value, list) and all(isinstance(line, str) for line in value):
            value = "\n".join(value)
        if not isinstance(value, str):
            raise TaskError(f"{where}: a stdin/stdout input and output must be text or lists of lines")
        texts.append(value)
    return StdioCase(texts[0], texts[1])


def _contest_tests(value: Any, where: str) -> list[StdioCase]:
    if not isinstance(value, dict) or set(value) != {"input", "output"}:
        raise TaskError(f"{where} must be an object with exactly input and output lists")
    inputs, outputs = value["input"], value["output"]
    if (
        not isinstance(inputs, list)
        or not isinstance(outputs, list)
        or len(inputs) != len(outputs)
        or not all(isinstance(text, str) for text in inputs + outputs)
    ):
        raise TaskError(f"{where}: input and output must be lists of strings of the same length")
    return [StdioCase(i, o) for i, o in zip(inputs, outputs, strict=True)]
