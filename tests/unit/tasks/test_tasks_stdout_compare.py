"""stdin/stdout verdicts as testlib's checkers give them (issue 33): exact integers and words, a tolerance
only for non-integer decimals, no Python-only numerals."""

import pytest

from swarmrl.configs.tasks import CodeRewardConfig
from swarmrl.tasks.code_verifier import CodeVerifier
from swarmrl.tasks.task import Task

# (printed, expected, accepted)
CASES = [
    # Issue 33: every one of these scored 1.0 under a 1e-6 relative tolerance on every numeric token.
    ("1000000008", "1000000007", False),
    ("123456790", "123456789", False),
    ("999999999", "999999937", False),
    ("0", "0.0000009", False),
    ("1_000", "1000", False),
    ("inf", "1e400", False),
    # Integers and words are exact tokens; so are Python's other spellings of a number.
    ("+5", "5", False),
    ("05", "5", False),
    ("5.0", "5", False),
    ("0x10", "16", False),
    ("\u0663", "3", False),  # an Arabic-Indic three: float() reads it, no judge does
    ("NaN", "nan", False),
    ("Infinity", "inf", False),
    ("yes", "YES", False),
    ("1e401", "1e400", False),
    # Non-integer decimals: absolute or relative 1e-6, exact Decimal arithmetic.
    ("0.3333333", "0.33333333", True),
    ("0.500001", "0.5", True),
    ("0.5000011", "0.5", False),
    ("1000000.9", "1000000.5", True),  # relative: 1e-6 of 1e6
    ("1000001.6", "1000000.5", False),
    ("0.0", "0.0000009", True),
    ("1", "1.000000", True),  # an integer printed for a decimal must equal it exactly
    ("2", "2.0000001", False),
    ("-0.0", "0.0", True),
    ("2.5E-7", "2.5e-7", True),
    ("1e400", "1e400", True),
    # Whitespace: spaces, tabs, CRLF and blank lines are layout, other characters are not.
    ("1 2  \n3\n\n", "1 2\n3", True),
    ("1 2\r\n3\r\n", "1 2\n3\n", True),
    ("\t1\t2 \n\n\n3", "1 2\n3", True),
    ("1 2\n3", "1 2\r\n\r\n3\r\n", True),
    ("1\x1e2", "1 2", False),
    ("1\u00a02", "1 2", False),
    ("1\n2 3", "1 2\n3", False),
    ("1 2", "1 2 3", False),
    ("", "0", False),
    ("0", "", False),
    ("", "\n \n", True),
]


@pytest.fixture(scope="module")
def verifiers():
    """The default rule, and one-token-sequence matching with a coarser tolerance."""
    made = {
        "default": CodeVerifier(CodeRewardConfig(timeout_seconds=20)),
        "tokens": CodeVerifier(
            CodeRewardConfig(stdout_compare="tokens", stdout_float_tolerance=1e-3, timeout_seconds=20)
        ),
    }
    yield made
    for verifier in made.values():
        verifier.close()


def printing(text: str) -> str:
    return f"</think>\n```python\nimport sys\nsys.stdout.write({text!r})\n```"


def test_each_case_through_the_code_reward(verifiers):
    task = Task(
        "stdio",
        "print the answer",
        "code",
        {"test_cases": [{"type": "stdin_stdout", "input": "", "output": want} for _, want, _ in CASES]},
    )
    tests_of = {
        index: Task("one", "p", "code", {"test_cases": [task.verification_info["test_cases"][index]]})
        for index in range(len(CASES))
    }
    wrong = [
        (got, want)
        for index, (got, want, accepted) in enumerate(CASES)
        if verifiers["default"].score(tests_of[index], printing(got)) != (1.0 if accepted else 0.0)
    ]
    assert wrong == []


def test_line_breaks_are_spaces_in_tokens_mode_and_the_tolerance_is_the_configs(verifiers):
    task = Task("t", "p", "code", {"test_cases": [{"input": "", "output": "1 2\n3 0.5"}]})
    assert verifiers["tokens"].score(task, printing("1\n2 3\n0.5004")) == 1.0
    assert verifiers["tokens"].score(task, printing("1 2 3 0.502")) == 0.0
    assert verifiers["default"].score(task, printing("1\n2 3\n0.5004")) == 0.0


def test_a_correct_program_with_windows_line_ends_and_trailing_spaces_passes(verifiers):
    task = Task(
        "sum",
        "sum of each pair",
        "code",
        {"test_cases": [{"input": "1 2\r\n3 4\r\n", "output": "3\r\n7\r\n"}]},
    )
    solution = (
        "</think>```python\nimport sys\n"
        "for line in sys.stdin.read().splitlines():\n"
        "    if line.strip():\n"
        "        a, b = map(int, line.split())\n"
        "        print(a + b, end=' \\r\\n')\n```"
    )
    assert verifiers["default"].score(task, solution) == 1.0
