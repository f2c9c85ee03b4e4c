"""Reading the published code datasets' rows, test fields and test programs (issue 58), without a sandbox."""

import importlib.util
import json
from pathlib import Path

import pytest

from swarmrl.tasks.code_layouts import published_row
from swarmrl.tasks.code_tests import parse_code_tests
from swarmrl.tasks.dataset_source import row_to_task
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.program_source import prepared, program_kind, unbound_names
from swarmrl.tasks.sandbox_invoke import MalformedReply, parse_reply
from swarmrl.tasks.task import Task


def _cases_module():
    """The hand-labelled rows beside the adversarial tests (tests/adversarial/tasks/code_format_cases.py)."""
    path = Path(__file__).resolve().parents[2] / "adversarial" / "tasks" / "code_format_cases.py"
    spec = importlib.util.spec_from_file_location("code_format_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_CASES = _cases_module()
APPS_CALL, CODE_CONTESTS, HUMANEVAL_ROW = _CASES.APPS_CALL, _CASES.CODE_CONTESTS, _CASES.HUMANEVAL_ROW
KODCODE_PALINDROME, LCB_FUNCTIONAL, LCB_STDIN = (
    _CASES.KODCODE_PALINDROME,
    _CASES.LCB_FUNCTIONAL,
    _CASES.LCB_STDIN,
)
LEETCODE_DATASET, MBPP_FULL, MBPP_SANITIZED = _CASES.LEETCODE_DATASET, _CASES.MBPP_FULL, _CASES.MBPP_SANITIZED
TACO_ROW = _CASES.TACO_ROW


def load(row):
    return row_to_task(row, where="row 0", default_id="t/0", default_task_type=None)


def test_mbpp_rows_carry_their_tests_into_the_prompt_and_the_checks():
    task = load(MBPP_FULL)
    assert task.task_id == "901" and task.task_type == "code" and task.demonstration == MBPP_FULL["code"]
    assert task.prompt.startswith(MBPP_FULL["text"]) and MBPP_FULL["test_list"][0] in task.prompt
    tests = parse_code_tests(task)
    assert tests.program_kind == "script" and tests.check.count("assert") == 3
    sanitized = parse_code_tests(load(MBPP_SANITIZED))
    assert sanitized.setup == "import math"


def test_apps_call_outputs_are_unwrapped_and_taco_lines_joined():
    tests = parse_code_tests(load(APPS_CALL))
    assert [(c.fn_name, c.args, c.expected) for c in tests.calls][:2] == [
        ("positive_sum", [[1, -4, 7, 12]], 20),
        ("positive_sum", [[]], 0),
    ]
    taco = parse_code_tests(load(TACO_ROW))
    assert [(c.input, c.output) for c in taco.stdio] == [("3", "1\n2\n3"), ("1", "1")]


def test_code_contests_runs_public_private_and_generated_tests():
    task = load(CODE_CONTESTS)
    assert task.task_id == "9999_A. Max of three" and task.demonstration.startswith("print(max(")
    assert len(parse_code_tests(task).stdio) == 4


def test_live_code_bench_private_cases_are_decoded_and_functional_cases_call_the_function():
    stdin = parse_code_tests(load(LCB_STDIN))
    assert [c.output for c in stdin.stdio] == ["6\n", "0\n"]
    functional = load(LCB_FUNCTIONAL)
    assert "class Solution" in functional.prompt
    calls = parse_code_tests(functional).calls
    assert [(c.fn_name, c.args, c.expected) for c in calls] == [
        ("maximumGap", [[3, 6, 9, 1]], 3),
        ("maximumGap", [[10]], 0),
    ]
    assert "from typing import *" in parse_code_tests(functional).solution_prefix


def test_a_pickle_naming_anything_is_refused():
    import base64
    import os
    import pickle
    import zlib

    evil = base64.b64encode(zlib.compress(pickle.dumps(os.getcwd))).decode()
    with pytest.raises(TaskError, match="only plain values are read"):
        published_row({**LCB_STDIN, "private_test_cases": evil}, "row 7")


def test_leetcode_dataset_and_kodcode_and_humaneval_rows():
    leetcode = parse_code_tests(load(LEETCODE_DATASET))
    assert (leetcode.entry_point, leetcode.program_kind) == ("Solution().isValid", "check")
    assert leetcode.solution_prefix == leetcode.setup == LEETCODE_DATASET["prompt"]
    kodcode = load(KODCODE_PALINDROME)
    assert "def is_palindrome(s):" in kodcode.prompt and parse_code_tests(kodcode).program_kind == "unit"
    human_eval = load(HUMANEVAL_ROW)
    assert human_eval.demonstration == HUMANEVAL_ROW["prompt"] + HUMANEVAL_ROW["canonical_solution"]
    assert parse_code_tests(human_eval).setup == HUMANEVAL_ROW["prompt"]


def test_a_row_in_no_known_layout_is_still_refused_for_its_missing_columns():
    with pytest.raises(TaskError, match="no 'prompt', 'verification_info', 'task_type' column"):
        load({"question": "q", "answer": "a"})


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("assert f(1) == 2", "script"),
        ("def test_a():\n    assert f(1) == 2\n", "unit"),
        ("import unittest\nclass Checks(unittest.TestCase):\n    def test_a(self):\n        pass\n", "unit"),
        ("class TestThings:\n    def test_a(self):\n        pass\n", "unit"),
        ("def test_helper(x):\n    return x\nassert f(1) == test_helper(1)\n", "script"),
    ],
)
def test_program_kinds(source, kind):
    from swarmrl.tasks.program_source import parse_python

    assert program_kind(parse_python(source), has_entry_point=False) == kind


def test_runner_exits_are_dropped_and_asserts_counted():
    import ast

    source = (
        "import unittest\nfrom unittest import main as run\n"
        "class T(unittest.TestCase):\n    def test_a(self):\n        assert 1, 'msg'\n"
        "unittest.main()\nrun(exit=False)\nimport sys\nsys.exit(unittest.main())\n"
    )
    text = ast.unparse(prepared(source, "unit", "<t>"))
    assert "main(" not in text and "assert" not in text and "__swarmrl_check__(1, lambda: 'msg')" in text


def test_unbound_names_are_the_solutions_and_bare_stdlib_modules():
    assert unbound_names("assert math.isclose(area(2), 12.566)\nassert sorted(xs(1)) == []\n") == (
        ["area", "xs"],
        ["math"],
    )


@pytest.mark.parametrize(
    "reply",
    [
        ("value", 1, "printed"),
        ("value", 1, 3, []),
        ("object", [0, "Stack"], "", []),
        ("object", [-1, "Stack", []], "", []),
        ("raised", ["", "m", []], "", []),
        ("raised", ["E", "m", [1]], "", []),
        ("value", 1, "", [[0, 5]]),
        ("items", 5, "", []),
        ("nonsense", 1, "", []),
    ],
)
def test_malformed_invoke_replies_are_refused(reply):
    with pytest.raises(MalformedReply):
        parse_reply(reply)


def test_settings_are_checked_at_parse():
    def tests(**info):
        return parse_code_tests(Task("t", "p", "code", {"test_cases": [], "test": "assert f(1)", **info}))

    assert tests(float_tolerance=1e-4, case_sensitive=False).settings.case_sensitive is False
    for bad in ({"float_tolerance": -1}, {"float_tolerance": True}, {"case_sensitive": "no"}):
        with pytest.raises(TaskError):
            tests(**bad)
    with pytest.raises(TaskError, match="a checker judges input/output cases"):
        tests(checker="def check(i, o, e):\n    return True\n")
    cases = {"test_cases": [{"type": "stdin_stdout", "input": "", "output": ""}]}
    with pytest.raises(TaskError, match="must define check"):
        parse_code_tests(Task("t", "p", "code", {**cases, "checker": "def judge(i, o, e):\n    return 1\n"}))
    assert json.dumps(cases)


def test_dry_run_names_the_row_and_field_of_a_test_format_it_cannot_run(tmp_path):
    from swarmrl.configs.run import load_config
    from swarmrl.launch.preflight import preflight

    rows = [
        MBPP_FULL,
        {
            **LCB_STDIN,
            "public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "interactive"}]),
        },
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = load_config(None, [f"tasks.sources=[{{type='dataset', name='mine', path='{path}'}}]"])
    report = preflight(config)
    failed = [check for check in report.checks if not check.ok and check.name == "tasks mine"]
    assert len(failed) == 1 and "row 1: unknown testtype interactive" in failed[0].detail
