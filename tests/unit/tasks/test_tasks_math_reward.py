import threading
import time

import pytest

from swarmrl.configs.tasks import AnswerExtractionConfig, MathRewardConfig
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.math_verifier import MathVerifier, gold_text, math_ground_truths
from swarmrl.tasks.task import Task


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(MathRewardConfig(timeout_seconds=4.0, num_workers=1))
    yield v
    v.close()


def task(truth):
    return Task("m", "q", "math", {"ground_truth": truth})


@pytest.mark.parametrize(
    ("completion", "truth", "expected"),
    [
        (r"<think>half</think> \boxed{\frac{1}{2}}", "0.5", 1.0),
        (r"\boxed{\dfrac{3}{4}}", "3/4", 1.0),
        (r"so \boxed{\sqrt{2}/2}", r"\frac{\sqrt{2}}{2}", 1.0),
        (r"\boxed{[1, 3)}", "[1,3)", 1.0),
        (r"\boxed{(1, 3]}", "[1,3)", 0.0),
        (r"\boxed{\{2, 1, 3\}}", r"\{1,2,3\}", 1.0),
        (r"\boxed{5\text{ cm}}", "5", 1.0),
        (r"\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
        ("Answer: 12", "12", 1.0),
        (r"\boxed{13}", "12", 0.0),
        ("nothing useful here", "12", 0.0),
        (r"<think>\boxed{12}</think> \boxed{11}", "12", 0.0),
        # math-verify, not a hand-written last-line rule, reads the answer region:
        ("<think>" + "let me try 7. " * 2000 + "</think>\nThe answer is \\[\n 9 \n\\]", "9", 1.0),
        (r"<think>\boxed{5}</think> <answer>$x \geq 5$</answer>", r"x \geq 5", 1.0),
        (r"<think>r</think> so $x \leq 5$", r"x \geq 5", 0.0),
        (r"\boxed{2}, \boxed{1}", r"\{1, 2\}", 1.0),
        (r"\boxed{2}, \boxed{1}", "2", 0.0),
        ("Final Answer: The largest $n$ is 34.", "34", 1.0),
        ("The price is 1 000 and then 2,74 $.", "2.74", 1.0),
        (r"<answer> [\sqrt{2}] </answer>", r"\sqrt{2}", 1.0),  # its inline-bracket form needs the spaces
        (r"\boxed{3}", r"3\sqrt{2}", 0.0),  # a bare LaTeX gold is read whole, not as its leading "3"
    ],
)
def test_math_answers(verifier, completion, truth, expected):
    assert verifier.score(task(truth), completion) == expected


@pytest.mark.parametrize(
    ("truth", "read_as"),
    [
        ("$x \\geq 5$", "$x \\geq 5$"),  # delimited (math-verify's suite style): as written
        (r"\boxed{1}, \boxed{2}", r"\boxed{1}, \boxed{2}"),
        ("1,22", "1,22"),  # bare numbers: math-verify's number reader (1.22, not the set {1, 22})
        ("7 425 000", "7 425 000"),
        ("-0,5 %", "-0,5 %"),
        (r"3\sqrt{2}", r"$3\sqrt{2}$"),  # bare LaTeX: wrapped
        (" (1,3] ", "$(1,3]$"),
        ("1, 2", "$1, 2$"),
        ("%", "$%$"),
    ],
)
def test_gold_text(truth, read_as):
    assert gold_text(truth) == read_as


def test_unclosed_reasoning_scores_zero_when_required():
    v = MathVerifier(MathRewardConfig(num_workers=1), AnswerExtractionConfig(require_think_end=True))
    try:
        assert v.score(task("3"), r"<think>so \boxed{3}") == 0.0
        assert v.score(task("3"), r"<think>so</think> \boxed{3}") == 1.0
    finally:
        v.close()


def test_any_of_several_ground_truths(verifier):
    assert verifier.score(Task("m", "q", "math", {"ground_truth": ["2", "-2"]}), r"\boxed{-2}") == 1.0


def test_called_from_a_thread(verifier):
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(verifier.score(task("1/2"), r"\boxed{0.5}")))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == [1.0, 1.0, 1.0]


@pytest.mark.slow
def test_pathological_expression_times_out_and_scores_zero():
    v = MathVerifier(MathRewardConfig(timeout_seconds=2.0, num_workers=1))
    try:
        assert v.score(task("1"), r"\boxed{1}") == 1.0  # warm the worker so the limit measures the call
        started = time.monotonic()
        assert v.score(task("1"), r"\boxed{(10^{10^{10^{10}}})!}") == 0.0
        assert time.monotonic() - started < 6.0
        assert v.score(task("1"), r"\boxed{1}") == 1.0  # the replaced worker still answers
        # math-verify's own patterns go quadratic on thousands of unclosed display brackets (~20 s here)
        started = time.monotonic()
        assert v.score(task("1"), "\\[" * 20_000) == 0.0
        assert time.monotonic() - started < 6.0
    finally:
        v.close()


def test_missing_ground_truth_is_a_task_error():
    with pytest.raises(TaskError):
        math_ground_truths(Task("m", "q", "math", {}))
    with pytest.raises(TaskError):
        math_ground_truths(Task("m", "q", "math", {"ground_truth": [True]}))
