"""Gold answers written as the datasets write them (issue 33), and near-miss answers that must never pass.

Golds follow MATH (escaped dollars, `\\text{}` units, `^\\circ`, `\\%`, `,\\!` thousands, lettered choices),
NuminaMath / DeepScaleR (bare LaTeX, intervals, several answers) and GSM8K (plain integers); the wider corpus
and the references' verdicts on it are in benchmarks/data/math_gold_corpus.jsonl.
"""

import pytest

from swarmrl.configs.tasks import MathRewardConfig
from swarmrl.tasks.math_verifier import MathVerifier
from swarmrl.tasks.task import Task


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(MathRewardConfig(timeout_seconds=20.0, num_workers=1))
    yield v
    v.close()


def score(verifier, completion: str, truth) -> float:
    return verifier.score(Task("m", "q", "math", {"ground_truth": truth}), completion)


RIGHT = [
    # Issue 33: every completion scored 0 against an escaped-dollar gold.
    (r"\boxed{\$32}", r"\$32"),
    (r"\boxed{32}", r"\$32"),
    (r"The answer is $\boxed{18.90}$.", r"\$18.90"),
    (r"\boxed{\$18.9}", r"\$18.90"),
    (r"so she pays \boxed{1.17} dollars", r"\$1.17"),
    ("The total is \\$1.17.", r"\$1.17"),
    (r"\boxed{-5}", r"-\$5"),
    (r"\boxed{\$10,\!000}", r"\$10,\!000"),
    # Thousands separators as LaTeX writes them; math-verify alone reads "1\,000" as 1*0.
    (r"\boxed{1000}", r"1\,000"),
    (r"\boxed{1\,000}", r"1\,000"),
    (r"\boxed{2\,016}", "2016"),
    (r"\boxed{1,000,000}", r"1{,}000{,}000"),
    (r"\boxed{12000}", r"12,\!000"),
    # Plain-text money and units.
    (r"\boxed{18.90}", "$18.90"),
    (r"\boxed{18.90}", "18.90 dollars"),
    (r"\boxed{5}", r"5\text{ cm}"),
    (r"\boxed{90}", r"90^\circ"),
    (r"\boxed{90^{\circ}}", r"90^\circ"),
    (r"\boxed{10\%}", r"10\%"),
    (r"\boxed{12.5}", r"12.5\%"),  # the number of percent; math-verify alone takes 10 for 10% but not this
    (r"\boxed{12.5\%}", r"12.5\%"),
    # Lettered choices (AMC in MATH / NuminaMath): the letter or the value.
    (r"\boxed{B}", r"\textbf{(B)}\ 12"),
    (r"\boxed{12}", r"\textbf{(B)}\ 12"),
    (r"\boxed{\textbf{(B)}\ 12}", r"\textbf{(B)}\ 12"),
    (r"\boxed{\text{(C)}}", r"\text{(C)}"),
    # MATH's \boxed{} gold, fractions, intervals, several answers in any order.
    (r"\boxed{\frac{3}{4}}", r"\boxed{\frac34}"),
    (r"\boxed{0.75}", r"\dfrac{3}{4}"),
    (r"\boxed{(-\infty, 2) \cup (3, \infty)}", r"(-\infty,2)\cup(3,\infty)"),
    (r"\boxed{3, -2}", "-2, 3"),
    (r"\boxed{x = -2 \text{ or } x = 3}", r"x=3 \text{ or } x=-2"),
    ("#### 72", "72"),  # GSM8K's own answer line
]
WRONG = [
    (r"\boxed{\$33}", r"\$32"),
    (r"\boxed{18.91}", r"\$18.90"),
    (r"\boxed{0}", r"1\,000"),
    (r"\boxed{1\,000}", "0"),  # math-verify alone reads the completion as 1*0
    (r"\boxed{12.6}", r"12.5\%"),
    (r"\boxed{5}", "5 million"),
    (r"\boxed{C}", r"\textbf{(B)}\ 12"),
    (r"\boxed{13}", r"\textbf{(B)}\ 12"),
    (r"\boxed{3}", "-2, 3"),
    (r"\boxed{(-\infty, 2] \cup (3, \infty)}", r"(-\infty,2)\cup(3,\infty)"),
    (r"\boxed{(2, 3]}", "[2,3)"),
]
# Near-miss integers: modular answers and long counts, however either side writes them.
NEAR_MISSES = [
    (r"\boxed{1000000008}", "1000000007"),
    (r"\boxed{1000000008}", 1000000007),
    (r"\boxed{1000000006}", r"\$1,000,000,007"),
    (r"\boxed{1{,}000{,}000{,}008}", "1000000007"),
    (r"\boxed{1\,000\,000\,008}", r"1\,000\,000\,007"),
    (r"\boxed{1000000008.0}", "1000000007"),
    (r"\boxed{1.000000008 \times 10^9}", "1000000007"),
    (r"\boxed{1000000008}", r"10^9 + 7"),
    (r"\boxed{10^9+8}", "1000000007"),
    (r"\boxed{123456790}", "123456789"),
    (r"\boxed{999999999}", "999999937"),
    (r"\boxed{12345678901234567891}", "12345678901234567890"),
    (r"\boxed{1.2345678901234567891 \times 10^{19}}", "12345678901234567890"),
    ("The answer is 1000000008.", "1000000007"),
    ("#### 1000000008", "#### 1000000007"),
]


@pytest.mark.parametrize(("completion", "truth"), RIGHT)
def test_right_answers_against_dataset_golds(verifier, completion, truth):
    assert score(verifier, completion, truth) == 1.0


@pytest.mark.parametrize(("completion", "truth"), WRONG + NEAR_MISSES)
def test_wrong_answers_against_dataset_golds(verifier, completion, truth):
    assert score(verifier, completion, truth) == 0.0


def test_several_answers_need_all_unless_the_config_says_any(verifier):
    assert score(verifier, r"\boxed{3}", r"\pm 3") == 0.0
    assert score(verifier, r"\boxed{\pm 3}", r"\pm 3") == 1.0
    assert score(verifier, r"\boxed{3}", ["3", "-3"]) == 1.0  # a list of ground truths: alternatives
    any_one = MathVerifier(MathRewardConfig(multiple_answers="any", num_workers=1))
    try:
        assert score(any_one, r"\boxed{3}", r"\pm 3") == 1.0
        assert score(any_one, r"\boxed{-2}", "-2, 3") == 1.0
        assert score(any_one, r"\boxed{4}", "-2, 3") == 0.0
    finally:
        any_one.close()
