import threading
import time

import pytest

from swarmrl.tasks.config import MathRewardConfig
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.math_verifier import MathVerifier, math_ground_truths
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
    ],
)
def test_math_answers(verifier, completion, truth, expected):
    assert verifier.score(task(truth), completion) == expected


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


def test_pathological_expression_times_out_and_scores_zero():
    v = MathVerifier(MathRewardConfig(timeout_seconds=2.0, num_workers=1))
    try:
        assert v.score(task("1"), r"\boxed{1}") == 1.0  # warm the worker so the limit measures the call
        started = time.monotonic()
        assert v.score(task("1"), r"\boxed{(10^{10^{10^{10}}})!}") == 0.0
        assert time.monotonic() - started < 6.0
        assert v.score(task("1"), r"\boxed{1}") == 1.0  # the replaced worker still answers
    finally:
        v.close()


def test_missing_ground_truth_is_a_task_error():
    with pytest.raises(TaskError):
        math_ground_truths(Task("m", "q", "math", {}))
    with pytest.raises(TaskError):
        math_ground_truths(Task("m", "q", "math", {"ground_truth": [True]}))
