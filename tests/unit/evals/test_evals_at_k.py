"""pass@k (Chen et al. 2021's unbiased estimator) and avg@k against hand-computed values, and the metrics line
an eval becomes."""

import math

import pytest

from swarmrl.eval_metrics import EvalResult, at_k_scores, avg_at_k, eval_record, is_eval_record, pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 0, 1, 0.0),  # nothing correct
        (5, 5, 3, 1.0),  # everything correct
        (5, 2, 1, 2 / 5),  # pass@1 is the sample accuracy c/n
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5) = 11/12
        (4, 1, 4, 1.0),  # k = n: solved iff one sample is right
        (4, 0, 4, 0.0),
        (8, 1, 3, 1 - 35 / 56),  # 1 - C(7,3)/C(8,3) = 3/8, i.e. k/n when c = 1
    ],
)
def test_pass_at_k_matches_hand_computed_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_equals_the_papers_numerically_stable_product():
    # Chen et al.'s reference code: 1 - prod_{i=n-c+1}^{n} (1 - k / i)
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                stable = 1.0 if n - c < k else 1.0 - math.prod(1 - k / i for i in range(n - c + 1, n + 1))
                assert pass_at_k(n, c, k) == pytest.approx(stable, abs=1e-12), (n, c, k)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (3, 4, 1), (3, -1, 1), (3, 1, 0), (0, 0, 1)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)


def test_avg_at_k_is_the_mean_accuracy_over_k_samples():
    assert avg_at_k([2, 0, 1], 2) == pytest.approx(0.5)  # 3 right of 6
    assert avg_at_k([4], 4) == 1.0
    assert avg_at_k([0, 0], 3) == 0.0
    assert avg_at_k([1, 3, 0, 2], 4) == pytest.approx(6 / 16)


@pytest.mark.parametrize(("correct", "k"), [([], 2), ([3], 2), ([-1], 2), ([1], 0)])
def test_avg_at_k_refuses_impossible_counts(correct, k):
    with pytest.raises(ValueError, match="avg@k needs"):
        avg_at_k(correct, k)


def test_an_eval_result_and_its_metrics_line():
    result = EvalResult.from_counts([2, 0, 1, 0], 2, mean_reward=0.4, mean_completion_tokens=6.0)
    assert result.accuracy == pytest.approx(3 / 8)
    assert result.pass_at_k == pytest.approx(2 / 4)  # two of four tasks have a right sample
    assert result.completions == 8 and result.samples_per_task == 2
    record = eval_record(6, result, seconds=1.5)
    assert record["step"] == 6 and record["eval/avg@2"] == result.accuracy
    assert record["eval/pass@2"] == result.pass_at_k and record["eval/seconds"] == 1.5
    assert is_eval_record(record) and not is_eval_record({"step": 6, "reward": 0.5})
    assert at_k_scores(record) == {"avg@2": 3 / 8, "pass@2": 0.5}
    assert at_k_scores({"step": 6, "reward": 0.5}) == {}
