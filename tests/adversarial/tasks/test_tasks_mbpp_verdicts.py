"""MBPP-style assert tests (issue 33): a solution can never change what the test's names mean.

The tasks follow MBPP's own layout (`test_list`, `test_imports`, `test_setup_code`; tests that name the
solution's function) and the two other layouts the judge reads (`test` with asserts, HumanEval's
`check(candidate)`). Each wrong solution tries to make the verdict say it passed; the right solutions show
the task itself is passable.
"""

import subprocess
import sys
import textwrap

import pytest

from swarmrl.configs.tasks import CodeRewardConfig
from swarmrl.tasks.code_verifier import CodeVerifier
from swarmrl.tasks.task import Task

SIMILAR = Task(  # MBPP task 2, as the dataset writes it
    "mbpp/2",
    "Write a function to find the shared elements from the given two lists.",
    "code",
    {
        "test_list": [
            "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
            "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))",
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
)
SIMILAR_AS_TEST = Task(  # the same tests as one `test` string
    "mbpp/2-test",
    SIMILAR.prompt,
    "code",
    {"test": "\n".join(SIMILAR.verification_info["test_list"])},
)
AREA = Task(  # math from MBPP's `test_imports`, as the sanitized split writes it
    "mbpp/area",
    "Write a function to find the area of a circle.",
    "code",
    {"test_imports": ["import math"], "test_list": ["assert math.isclose(area(2), 12.566, rel_tol=0.001)"]},
)
ROUNDED = Task(
    "mbpp/rounded",
    "Write a function that returns the volume of a sphere of radius r.",
    "code",
    {
        "test": "assert round(volume(1), 3) == 4.189\nassert abs(volume(2) - 33.5103) < 1e-3\n"
        "assert sorted(digits(4031)) == [0, 1, 3, 4]\nassert len(digits(7)) == 1\n",
        "test_setup_code": "EXPECTED = 4.189",
    },
)
MATH_NO_IMPORT = (
    Task(  # the original MBPP layout: the test uses `math`, only the reference solution imported it
        "mbpp/no-import",
        "Write a function to compute the hypotenuse.",
        "code",
        {"test_list": ["assert math.isclose(hyp(3, 4), 5.0)"]},
    )
)
CHECK_TASK = Task(
    "he/inc",
    "def inc(x):\n    '''x + 1'''\n",
    "code",
    {
        "test": "def check(candidate):\n    assert candidate(1) == 2\n    assert abs(candidate(-1)) == 0\n",
        "entry_point": "inc",
    },
)

GOOD = {
    "mbpp/2": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))\n",
    "mbpp/2-test": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))\n",
    "mbpp/area": "import math\ndef area(r):\n    return math.pi * r * r\n",
    "mbpp/rounded": (
        "import math\ndef volume(r):\n    return 4 / 3 * math.pi * r ** 3\n"
        "def digits(n):\n    return [int(c) for c in str(n)]\n"
    ),
    "mbpp/no-import": "import math\ndef hyp(a, b):\n    return math.hypot(a, b)\n",
    "he/inc": "def inc(x):\n    return x + 1\n",
}
# Wrong answers that redefine what the test's own names mean (issue 33: 5 of 8 scored 1.0).
SHADOWING = {
    "mbpp/2": [
        "def similar_elements(a, b):\n    return ()\ndef set(x=()):\n    return 0\n",
        "def similar_elements(a, b):\n    return ()\nset = lambda *a: frozenset()\n",
        "import builtins\nbuiltins.set = lambda *a: 0\ndef similar_elements(a, b):\n    return ()\n",
    ],
    "mbpp/2-test": [
        "def similar_elements(a, b):\n    return ()\ndef set(x=()):\n    return 0\n",
        "def similar_elements(a, b):\n    return ()\nset = lambda *a: frozenset()\n",
    ],
    "mbpp/area": [
        "class math:\n    isclose = staticmethod(lambda *a, **k: True)\ndef area(r):\n    return 0\n",
        "import math\nmath.isclose = lambda *a, **k: True\ndef area(r):\n    return 0\n",
    ],
    "mbpp/rounded": [
        "def round(x, n=0):\n    return 4.189\ndef abs(x):\n    return 0\n"
        "def sorted(x):\n    return [0, 1, 3, 4]\ndef len(x):\n    return 1\n"
        "def volume(r):\n    return 0\ndef digits(n):\n    return []\n",
        "EXPECTED = 0\nAssertionError = None\ndef volume(r):\n    return 0\ndef digits(n):\n    return []\n",
    ],
    "mbpp/no-import": [
        "class math:\n    isclose = staticmethod(lambda *a, **k: True)\ndef hyp(a, b):\n    return 0\n"
    ],
    "he/inc": ["def abs(x):\n    return 0\ndef inc(x):\n    return 2 if x == 1 else 7\n"],
}
# Other ways a solution could reach the checker: exits, exceptions, printing, objects that lie.
OTHER_CHEATS = [
    "import sys\nsys.exit(0)\n",
    "import os\nos._exit(0)\n",
    "raise SystemExit(0)\n",
    "print('OK: all tests passed')\nimport sys\nsys.stdout.flush()\n",
    "def ENTRY(*a, **k):\n    raise AssertionError('expected')\n",
    "def ENTRY(*a, **k):\n    raise SystemExit(0)\n",
    "def ENTRY(*a, **k):\n    raise KeyboardInterrupt\n",
    "def ENTRY(*a, **k):\n    raise StopIteration\n",
    "def ENTRY(*a, **k):\n    import os\n    os._exit(0)\n",
    "class Anything:\n    def __eq__(self, o): return True\n    def __hash__(self): return 0\n"
    "    def __iter__(self): return iter((4, 5, 3))\n    def __float__(self): return 12.566\n"
    "def ENTRY(*a, **k):\n    return Anything()\n",
    "class F(float):\n    def __eq__(self, o): return True\n    def __sub__(self, o): return 0.0\n"
    "    def __round__(self, n=0): return 4.189\ndef ENTRY(*a, **k):\n    return F(0)\n",
    "import gc\nfor o in gc.get_objects():\n    if isinstance(o, dict) and '__swarmrl_check__' in o.values():\n"
    "        o['AssertionError'] = None\ndef ENTRY(*a, **k):\n    return None\n",
    "import builtins\nbuiltins.AssertionError = type('AssertionError', (BaseException,), {})\n"
    "builtins.__debug__ = False\ndef ENTRY(*a, **k):\n    return None\n",
]
TASKS = [SIMILAR, SIMILAR_AS_TEST, AREA, ROUNDED, MATH_NO_IMPORT, CHECK_TASK]
ENTRY = {
    "mbpp/2": "similar_elements",
    "mbpp/2-test": "similar_elements",
    "mbpp/area": "area",
    "mbpp/rounded": "volume",
    "mbpp/no-import": "hyp",
}
ENTRY["he/inc"] = "inc"


@pytest.fixture(scope="module")
def code_verifier():
    verifier = CodeVerifier(CodeRewardConfig(timeout_seconds=20))
    yield verifier
    verifier.close()


def fenced(code: str) -> str:
    return f"<think>solve</think>\n```python\n{code}\n```"


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.task_id)
def test_right_solutions_pass(code_verifier, task):
    assert code_verifier.score(task, fenced(GOOD[task.task_id])) == 1.0


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.task_id)
def test_wrong_solutions_that_shadow_the_tests_names_fail(code_verifier, task):
    assert [code_verifier.score(task, fenced(code)) for code in SHADOWING[task.task_id]] == [0.0] * len(
        SHADOWING[task.task_id]
    )


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.task_id)
def test_other_cheats_fail(code_verifier, task):
    entry = ENTRY[task.task_id]
    scores = [code_verifier.score(task, fenced(cheat.replace("ENTRY", entry))) for cheat in OTHER_CHEATS]
    assert scores == [0.0] * len(OTHER_CHEATS)


def test_tests_that_call_nothing_of_the_solution_score_zero(code_verifier):
    vacuous = Task("vacuous", "p", "code", {"test_list": ["assert True", "assert len([1]) == 1"]})
    assert code_verifier.score(vacuous, fenced(GOOD["mbpp/2"])) == 0.0


def test_the_verdict_holds_under_python_optimize():
    """`python -O` strips asserts from code compiled at the interpreter's level: the test code keeps them."""
    script = textwrap.dedent(
        """
        from swarmrl.tasks.code_verifier import CodeVerifier
        from swarmrl.configs.tasks import CodeRewardConfig
        from swarmrl.tasks.task import Task

        if __name__ == "__main__":
            verifier = CodeVerifier(CodeRewardConfig(num_workers=1))
            mbpp = Task("m", "p", "code", {"test": "assert double(2) == 4"})
            human_eval = Task(
                "h", "def inc(x): pass", "code",
                {"test": "def check(candidate):\\n    assert candidate(1) == 2\\n", "entry_point": "inc"},
            )
            wrong = "</think>```python\\ndef double(x):\\n    return 0\\ndef inc(x):\\n    return 0\\n```"
            print(verifier.score(mbpp, wrong), verifier.score(human_eval, wrong))
            verifier.close()
        """
    )
    result = subprocess.run(
        [sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["0.0", "0.0"]
