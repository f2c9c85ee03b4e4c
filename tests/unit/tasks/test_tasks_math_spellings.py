"""Math answers as they are written (issue 58): numbers math-verify misread, boxes that hold no answer, and the
defaults for decimal approximations and unclosed reasoning, each with its opt-in."""

import pytest

from swarmrl.configs.tasks import MathRewardConfig
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.math_spellings import is_scientific, last_box, plain_spellings
from swarmrl.tasks.math_verifier import MathVerifier, math_ground_truths
from swarmrl.tasks.task import Task


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(MathRewardConfig(timeout_seconds=20.0, num_workers=1))
    yield v
    v.close()


def score(verifier, completion: str, truth, **settings) -> float:
    return verifier.score(Task("m", "q", "math", {"ground_truth": truth, **settings}), completion)


def test_spellings_made_plain():
    assert plain_spellings("1e-07") == "1\\times10^{-7}"
    assert plain_spellings("x = 2.5E+5 m") == "x = 2.5\\times10^{5} m"
    assert plain_spellings("e - 7, 2e, x^2e^{3}, 0x1e5, v1e2") == "e - 7, 2e, x^2e^{3}, 0x1e5, v1e2"
    assert plain_spellings("\\fbox{3}") == "\\boxed{3}"
    assert plain_spellings("½ and 3¼") == "\\frac{1}{2} and 3\\frac{1}{4}"
    assert plain_spellings("−3") == "-3"
    assert plain_spellings("\\boxed{42.}") == "\\boxed{42}"
    assert is_scientific("1e-07") and is_scientific("-3.5E2") and not is_scientific("e-7")


def test_last_box():
    assert last_box("no box") is None
    assert last_box("\\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_box("\\boxed{}") == "" and last_box("\\boxed{12") == ""


RIGHT = [
    (r"\boxed{1e-07}", "1e-07"),
    (r"\boxed{10^{-7}}", "1e-07"),
    (r"\boxed{1 \times 10^{-7}}", 1e-07),  # a JSON float gold, as str() writes it
    (r"\boxed{250000}", "2.5e5"),
    (r"\fbox{0.5}", "0.5"),
    ("The answer is ½.", r"\frac{1}{2}"),
    (r"\boxed{3\frac{1}{4}}", "3¼"),
    ("The answer is −3", "-3"),
    (r"\boxed{42.}", "42"),
    (r"\boxed{0.25}", r"\frac{1}{4}"),  # a terminating decimal is exact
    (r"\boxed{0.0833333333333333}", r"\frac{1}{12}"),  # every digit a double holds
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}"),
]
WRONG = [
    (r"\boxed{e - 7}", "1e-07"),
    (r"\boxed{2 \times 10^{-7}}", "1e-07"),
    (r"\boxed{0}", "1e-07"),
    (r"I tried 12. \boxed{?}", "12"),
    (r"I tried 12. \boxed{}", "12"),
    (r"12 apples. \boxed{\text{}}", "12"),
    (r"\boxed{0.8660254}", r"\frac{\sqrt{3}}{2}"),
    (r"\boxed{0.333333}", r"\frac{1}{3}"),
    (r"\boxed{3.14159}", r"\pi"),
    (r"\boxed{0.083333}", r"\frac{1}{12}"),
    ("<think>so it is 42", "42"),
]


@pytest.mark.parametrize(("completion", "truth"), RIGHT)
def test_right_answers_however_spelled(verifier, completion, truth):
    assert score(verifier, completion, truth) == 1.0


@pytest.mark.parametrize(("completion", "truth"), WRONG)
def test_no_answer_and_default_refusals(verifier, completion, truth):
    assert score(verifier, completion, truth) == 0.0


def test_a_task_may_opt_in_to_approximations_and_unclosed_reasoning(verifier):
    assert (
        score(verifier, r"\boxed{0.8660254}", r"\frac{\sqrt{3}}{2}", accept_decimal_approximation=True) == 1.0
    )
    assert score(verifier, r"\boxed{0.87}", r"\frac{\sqrt{3}}{2}", accept_decimal_approximation=True) == 0.0
    assert score(verifier, r"<think>so \boxed{42}", "42", accept_unclosed_think=True) == 1.0
    assert score(verifier, r"no tags at all: \boxed{42}", "42") == 1.0


@pytest.mark.parametrize(
    "info",
    [
        {"ground_truth": "1", "tolerance": 0.1},
        {"ground_truth": "1", "accept_decimal_approximation": "yes"},
        {"ground_truth": "1", "accept_unclosed_think": 1},
    ],
)
def test_unknown_math_fields_and_bad_settings_are_refused(info):
    with pytest.raises(TaskError, match="tolerance|must be true or false"):
        math_ground_truths(Task("m", "q", "math", info))
